"""Does the interval close cost coded formats more than raw? Per-second tails of raw and coded cells side by side.

Runs Kafka cells at one rate with raw and coded formats on the local stack and reports, per cell, the
cumulative p99 / p99.9 / max of end-to-end and delivery latency and publish delay, and the median over
the measured intervals of each interval's maximum. A once-a-second stall that only coded formats pay (a
thread holding the GIL while their encode or decode waits for it) shows as interval maxima far above
raw's; delivery latency is stamped before any decode, so a stall in the consumer's decoding shows in
end-to-end only, one in the producer in publish delay and both latencies.

    .venv/bin/python bench/interval_close.py --out bench/results/interval_close.json [--rate 5000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "functions"))

from brokerbench import histogram  # noqa: E402
from brokerbench.events import new_run_id  # noqa: E402
from brokerbench.local.stack import LocalStack  # noqa: E402
from brokerbench.spec import expand, validate  # noqa: E402
from brokerbench.worker.cell import run_cell  # noqa: E402

FIELDS = ("end_to_end_latency_us", "delivery_latency_us", "publish_delay_us")


class MemoryStore:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def append(self, events: list[dict]) -> None:
        self.events += events

    def read(self, run_id: str, prefix: str | None = None, **_) -> list[dict]:
        return [e for e in self.events if e["run_id"] == run_id and (prefix is None or e["sk"].startswith(prefix))]


def figures(store: MemoryStore, cell: dict) -> dict:
    mine = [e["data"] for e in store.events if e["data"].get("cell_id") == cell["cell_id"]]
    end = next(d for d in mine if "histograms" in d and "totals" in d)
    intervals = [d for d in mine if "interval" in d and "summary" in d]
    out = {"format": cell["format"], "sent": end["totals"]["sent"], "received": end["totals"]["received"]}
    for field in FIELDS:
        summary = histogram.summary(histogram.decode(end["histograms"][field]))
        maxima = [d["summary"][field]["max"] for d in intervals if field in d["summary"]]
        out[field] = {"p99": summary["p99"], "p999": summary["p999"], "max": summary["max"],
                      "interval_max_median": statistics.median(maxima) if maxima else None}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--formats", default="raw,json,msgpack,raw,json,msgpack")
    args = parser.parse_args()
    formats = args.formats.split(",")
    spec = validate({"name": "interval-close", "brokers": ["kafka"], "sizes": [1024], "rates": [args.rate],
                     "formats": sorted(set(formats)), "duration_s": args.seconds, "warmup_s": 2,
                     "warmup_until_steady": False})
    by_format = {c["format"]: c for c in expand(spec)}
    load_before = os.getloadavg()  # a shared machine: its load says how far the tails can be read
    with tempfile.TemporaryDirectory() as home:
        stack = LocalStack(Path(home))
        endpoints = stack.up(["kafka"], log=lambda m: None)
        rows = []
        try:
            for i, name in enumerate(formats):  # alternating, so a drift in the machine's load hits each alike
                store, run_id = MemoryStore(), new_run_id()
                cell = {**by_format[name], "index": i}
                outcome = run_cell(run_id, cell, endpoints["kafka"], store)
                rows.append({"status": outcome.status, "reason": outcome.reason, **figures(store, cell)})
                print(json.dumps(rows[-1]))
        finally:
            stack.down(["kafka"], log=lambda m: None)
    result = {"rate": args.rate, "seconds": args.seconds, "size": 1024, "cores": os.cpu_count(),
              "load_average_1_5_15": {"before": load_before, "after": os.getloadavg()}, "cells": rows}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
