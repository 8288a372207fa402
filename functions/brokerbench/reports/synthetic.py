"""Synthetic runs (events shaped exactly like a real run's) for report benchmarks and tests."""

from __future__ import annotations

import numpy as np

from .. import histogram
from ..events import make_event, new_run_id
from ..runner import run_requested_event
from ..spec import expand, validate

METRICS_US = ("publish_latency_us", "publish_delay_us", "end_to_end_latency_us")


def synthetic_run(spec_doc: dict, *, intervals: int = 10, rate_scale: float = 1.0, latency_scale: float = 1.0,
                  seed: int = 0, run_id: str | None = None) -> list[dict]:
    """A completed run's events: every cell gets `intervals` seconds of noisy traffic at its target rate."""
    spec = validate({**spec_doc, "duration_s": intervals})
    cells = expand(spec)
    run_id = run_id or new_run_id()
    rng = np.random.default_rng(seed)
    events = [run_requested_event(run_id, spec, cells, spec.get("name")),
              make_event(run_id, "TargetsReady", {"targets": {b: {"broker": b, "broker_version": "synthetic",
                                                                  "client_library": "synthetic", "client_version": "0"}
                                                              for b in spec["brokers"]}})]
    for cell in cells:
        rate = 5000 if cell["rate"] == "max" else cell["rate"]
        events.append(make_event(run_id, "CellStarted", {"cell_id": cell["cell_id"], "cell": cell, "topic": "t",
                                                         "attempt": 0}, cell_index=cell["index"]))
        cumulative = {m: histogram.new() for m in (*METRICS_US, "encode_ns", "decode_ns")}
        sent_total = 0
        for i in range(intervals):
            sent = int(rate * rate_scale * rng.lognormal(0, 0.02))
            values = {m: rng.lognormal(np.log(800 * latency_scale), 0.5, 200).astype(np.int64) for m in METRICS_US}
            values["encode_ns"] = rng.lognormal(np.log(3000), 0.2, 200).astype(np.int64)
            values["decode_ns"] = rng.lognormal(np.log(4000), 0.2, 200).astype(np.int64)
            hists, summaries = {}, {}
            for metric, v in values.items():
                hist = histogram.from_values(v)
                cumulative[metric].add(hist)
                hists[metric] = histogram.encode(hist)
                figures = histogram.summary(hist)
                summaries[metric] = {k: figures[k] for k in ("count", "p50", "p99", "max")}
            counters = {"sent": sent, "bytes_sent": sent * cell["size_bytes"], "acked": sent, "send_errors": 0,
                        "received": sent, "bytes_received": sent * cell["size_bytes"]}
            sent_total += sent
            events.append(make_event(run_id, "IntervalMeasured", {
                "cell_id": cell["cell_id"], "attempt": 0, "interval": i, "counters": counters, "histograms": hists,
                "summary": summaries}, cell_index=cell["index"], interval=i))
        events.append(make_event(run_id, "CellCompleted", {
            "cell_id": cell["cell_id"], "attempt": 0, "measured_s": float(intervals),
            "encoded_bytes": float(cell["size_bytes"]), "intervals": intervals,
            "totals": {"sent": sent_total, "received": sent_total, "lost": 0, "duplicated": 0, "out_of_order": 0,
                       "send_errors": 0, "unacked": 0, "acked": sent_total, "bytes_sent": sent_total * cell["size_bytes"],
                       "bytes_received": sent_total * cell["size_bytes"]},
            "histograms": {m: histogram.encode(h) for m, h in cumulative.items()}}, cell_index=cell["index"]))
    events.append(make_event(run_id, "RunCompleted", {"status": "completed", "cells_completed": len(cells),
                                                      "cells_failed": 0}))
    return events
