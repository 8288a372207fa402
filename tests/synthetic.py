"""Synthetic runs (events shaped exactly like a real run's) for the tests and the report benchmarks (bench/ puts this
folder on its path): nothing of the package uses them, so they live beside their users, not in it."""

from __future__ import annotations

import numpy as np

from brokerbench import histogram, verdict
from brokerbench.events import make_event, new_run_id
from brokerbench.events.run import run_requested_events
from brokerbench.reports.model import METRICS
from brokerbench.series import interval_digest, verdict_basis
from brokerbench.spec import expand, validate

METRICS_US = ("publish_latency_us", "publish_delay_us", "end_to_end_latency_us")


POOL = 32  # distinct intervals drawn per run: each interval of each cell is one of them, picked at random


def _interval_pool(rng, latency_scale: float) -> list[tuple[dict, dict, dict]]:
    """Intervals' histograms (as recorded, encoded, summarized), made once and drawn from for every cell:
    encoding a histogram per interval would make a 2,000-cell run take minutes to generate."""
    pool = []
    for _ in range(POOL):
        values = {m: rng.lognormal(np.log(800 * latency_scale), 0.5, 200).astype(np.int64) for m in METRICS_US}
        values["encode_ns"] = rng.lognormal(np.log(3000), 0.2, 200).astype(np.int64)
        values["decode_ns"] = rng.lognormal(np.log(4000), 0.2, 200).astype(np.int64)
        hists = {metric: histogram.from_values(v) for metric, v in values.items()}
        summaries = {}
        for metric, hist in hists.items():
            figures = histogram.summary(hist)
            summaries[metric] = {k: figures[k] for k in ("count", "p50", "p99", "max")}
        pool.append((hists, {m: histogram.encode(h) for m, h in hists.items()}, summaries))
    return pool


def synthetic_run(spec_doc: dict, *, intervals: int = 10, rate_scale: float = 1.0, latency_scale: float = 1.0,
                  seed: int = 0, run_id: str | None = None) -> list[dict]:
    """A completed run's events: every cell gets `intervals` seconds of noisy traffic at its target rate. The same
    arguments give the same figures: the cells' order is seeded with `seed` too (where the spec sets no
    order_seed), so each cell draws the same noise."""
    spec = validate({"order_seed": seed, **spec_doc, "duration_s": intervals})
    cells = expand(spec)
    run_id = run_id or new_run_id()
    rng = np.random.default_rng(seed)
    events = [*run_requested_events(run_id, spec, cells, spec.get("name")),
              make_event(run_id, "TargetsReady", {"targets": {b: {"broker": b, "broker_version": "synthetic",
                                                                  "client_library": "synthetic", "client_version": "0"}
                                                              for b in spec["brokers"]}})]
    pool = _interval_pool(rng, latency_scale)
    for cell in cells:
        rate = 5000 if cell["rate"] in ("max", "sustainable") else cell["rate"]  # a search: as if at its rate found
        events.append(make_event(run_id, "CellStarted", {"cell_id": cell["cell_id"], "cell": cell, "topic": "t",
                                                         "attempt": 0}, cell_index=cell["index"]))
        cumulative = {m: histogram.new() for m in (*METRICS_US, "encode_ns", "decode_ns")}
        sent_total = 0
        measured = []
        for i in range(intervals):
            sent = int(rate * rate_scale * rng.lognormal(0, 0.02))
            hists, encoded, summaries = pool[int(rng.integers(len(pool)))]
            for metric, hist in hists.items():
                cumulative[metric].add(hist)
            counters = {"sent": sent, "bytes_sent": sent * cell["size_bytes"], "acked": sent, "send_errors": 0,
                        "received": sent, "bytes_received": sent * cell["size_bytes"]}
            sent_total += sent
            events.append(make_event(run_id, "IntervalMeasured", {
                "cell_id": cell["cell_id"], "attempt": 0, "interval": i, "counters": counters, "histograms": encoded,
                "summary": summaries}, cell_index=cell["index"], interval=i))
            measured.append(events[-1]["data"])
        # What the worker adds: its verdict, and the digest of its intervals with what the verdict was judged on.
        basis = verdict_basis(cell["rate"], float(intervals), False)
        judged = verdict.sustainability(basis["target"], verdict.interval_inputs(measured, float(intervals)))
        events.append(make_event(run_id, "CellCompleted", {
            "cell_id": cell["cell_id"], "attempt": 0, "measured_s": float(intervals),
            "encoded_bytes": float(cell["size_bytes"]), "intervals": intervals,
            "totals": {"sent": sent_total, "received": sent_total, "lost": 0, "duplicated": 0, "out_of_order": 0,
                       "send_errors": 0, "unacked": 0, "acked": sent_total, "bytes_sent": sent_total * cell["size_bytes"],
                       "bytes_received": sent_total * cell["size_bytes"]},
            "verdict": {"verdict": judged["verdict"], "reasons": judged["reasons"]},
            **({"digest": digest} if (digest := interval_digest(measured, basis)) else {}),
            "histograms": {m: histogram.encode(h) for m, h in cumulative.items()}}, cell_index=cell["index"]))
    events.append(make_event(run_id, "RunCompleted", {"status": "completed", "cells_completed": len(cells),
                                                      "cells_failed": 0}))
    return events


def claim_configuration(broker: str, fmt: str, values: dict[str, list], *, verdict_name: str = "sustainable",
                        has_loss: bool = False, status: str = "completed", client_bound: int = 0) -> dict:
    """A configuration as the report's claims read it (model.claims), from per-repeat figures by metric: what
    the false-claim benchmark and the claim tests simulate reports with, without histograms. `client_bound`: how
    many of its repeats the load generator limited (brokerbench.limit)."""
    repeats = max(len(v) for v in values.values())
    by_repeat = {name: list(values.get(name, [None] * repeats)) for name in METRICS}
    present = lambda vs: [v for v in vs if v is not None]  # noqa: E731
    return {"broker": broker, "format": fmt, "key": f"{broker}|{fmt}", "status": status, "has_loss": has_loss,
            "sustainability": {"verdict": verdict_name}, "repeat_numbers": list(range(1, repeats + 1)),
            "completed_repeats": repeats, "values_by_repeat": by_repeat, "limit": {"client_bound": client_bound},
            "host": {"busy_repeats": [], "reasons": []},
            "metrics": {name: {"median": float(np.median(present(vs))) if present(vs) else None}
                        for name, vs in by_repeat.items()}}
