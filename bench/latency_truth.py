"""Publish and end-to-end latency p50 on a direct Redis, batch mode, at 100 and 1,000 msgs/s (raw 1 KB).

A publish (XADD → reply) cannot take longer than the same message's trip to a consumer: the two p50s
side by side show whether the producer stamps its replies when they arrive. Starts its own Redis and
DynamoDB Local; writes bench/results/latency_truth.json.

    PYTHONPATH=functions python bench/latency_truth.py [--seconds 3] [--rates 100,1000] [--repeats 3] [--out FILE]
    [--code REV]

bench/results/latency_truth_before.json holds the same cells measured with the code before replies were
stamped on arrival (bb374c2, whose loops slept until the next send).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import brokerbench
from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.stack import LocalStack
from brokerbench.reports.results import build_results
from brokerbench.events.run import run_requested_events
from brokerbench.spec import expand, validate
from brokerbench.worker.cell import run_cell

RESULTS = Path(__file__).parent / "results" / "latency_truth.json"


def cell_figures(endpoints, store, rate: int, seconds: float, mode: str) -> dict:
    spec = validate({"brokers": ["redis-streams"], "sizes": [1024], "rates": [rate], "formats": ["raw"],
                     "duration_s": seconds, "warmup_s": 1, "drain_timeout_s": 5, "modes": [mode]})
    cell = expand(spec)[0]
    run_id = new_run_id()
    store.append(run_requested_events(run_id, spec, [cell], "latency-truth"))
    run_cell(run_id, cell, endpoints["redis-streams"], store)
    result = build_results(store.read(run_id, interval_histograms=False))["cells"][0]
    return {"rate": rate, "mode": mode, "status": result["status"], "sent": result["sent"],
            "publish_p50_us": result["publish_latency_us"]["p50"],
            "end_to_end_p50_us": result["end_to_end_latency_us"]["p50"],
            "publish_delay_p50_us": result["publish_delay_us"]["p50"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--rates", default="100,1000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--code", help="the measured code's commit, where its tree is not a git checkout")
    args = parser.parse_args()
    stack = LocalStack(Path(tempfile.mkdtemp(prefix="latency-truth-")))
    stack.up(services=["redis", "dynamodb"], log=lambda m: None)
    try:
        endpoints = stack.endpoints(required=["redis", "dynamodb"])
        db = endpoints["dynamodb"]
        store = DynamoEventStore(f"bb-latency-{new_run_id()[-8:]}", endpoint_url=db["endpoint_url"])
        store.ensure_table()
        rows = [{"repeat": repeat, **cell_figures(endpoints, store, int(rate), args.seconds, "batch"),
                 "load_average_per_core": round(os.getloadavg()[0] / (os.cpu_count() or 1), 2)}
                for repeat in range(args.repeats) for rate in args.rates.split(",")]
    finally:
        stack.down(log=lambda m: None)
    for row in rows:
        print(f"{row['rate']:>6} msgs/s {row['mode']} (load {row['load_average_per_core']}/core): publish p50 {row['publish_p50_us']:>8.1f} µs, "
              f"end-to-end p50 {row['end_to_end_p50_us']:>8.1f} µs, "
              f"publish delay p50 {row['publish_delay_p50_us']:.1f} µs")
    commit = args.code or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                         cwd=Path(brokerbench.__file__).parent).stdout.strip()
    args.out.write_text(json.dumps({"measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                    "host": platform.node(), "code": commit, "cells": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
