"""Run overhead: a suite's wall time against its scheduled time (warm-up + duration per cell).

Runs the quick suite and a multi-consumer spec through the CLI (the real workflow, the local stack),
and reports per run: wall time, scheduled time, the ratio, and per cell the time from CellStarted to
its end against the cell's own schedule. What is left between cells is process start-up, the
readiness probe, the drain, topic creation and deletion, and the workflow's steps.

    .venv/bin/python bench/run_overhead.py --out bench/results/run_overhead.json
    .venv/bin/python bench/run_overhead.py --runs quick --label after --out bench/results/quick_overhead.json

With --label the figures go under that key of the result file, beside the others already there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).parent / "brokerbench"  # the CLI of the environment running this script
MULTI_CONSUMER = {
    "name": "overhead-multi-consumer", "brokers": ["kafka", "redis-streams"], "sizes": [1024],
    "rates": [2000], "formats": ["raw", "json"], "consumers": 2, "partitions": 2, "duration_s": 5,
    "warmup_s": 1, "drain_timeout_s": 10,
}


def _at(event: dict) -> float:
    return datetime.fromisoformat(event["at"]).timestamp()


def measure(args: list[str], home: Path, out: Path) -> dict:
    # DEBUG: each cell's phases (brokerbench.worker.cell.Phases) go to the local functions.log with the rest.
    env = {**os.environ, "BROKERBENCH_HOME": str(home), "POWERTOOLS_LOG_LEVEL": "DEBUG"}
    started = time.monotonic()
    done = subprocess.run([str(CLI), "run", *args, "--out", str(out)], env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    run_dir = max(out.iterdir(), key=lambda p: p.stat().st_mtime)
    results = json.loads((run_dir / "results.json").read_text())
    scheduled = sum(c["warmup_s"] + c["duration_s"] for c in _cells(home, results["run_id"]))
    return {"args": args, "exit_code": done.returncode, "run_id": results["run_id"], "cells": len(results["cells"]),
            "wall_s": round(wall, 1), "scheduled_s": scheduled, "ratio": round(wall / scheduled, 2),
            "per_cell": _per_cell(home, results["run_id"]), "phases_s_median": _phases(home)}


def _phases(home: Path) -> dict:
    """The median of each cell phase over the run's cells, from the local functions.log."""
    logged = []
    log = home / "local" / "functions.log"
    for line in (log.read_text().splitlines() if log.exists() else []):
        if '"cell phases"' in line:
            logged.append(json.loads(line)["phases"])
    names = list(dict.fromkeys(name for phases in logged for name in phases))
    return {name: round(statistics.median(p.get(name, 0.0) for p in logged), 4) for name in names}


def _events(home: Path, run_id: str) -> list[dict]:
    sys.path.insert(0, str(REPO / "functions"))
    from brokerbench.events.dynamodb import DynamoEventStore
    from brokerbench.local.stack import LocalStack

    stack = LocalStack(home / "local")
    endpoints = stack.up(["dynamodb"], log=lambda m: None)
    try:
        return DynamoEventStore(endpoints["dynamodb"]["table"], endpoint_url=endpoints["dynamodb"]["endpoint_url"]).read(
            run_id, interval_histograms=False)
    finally:
        stack.down(["dynamodb"], log=lambda m: None)


def _cells(home: Path, run_id: str) -> list[dict]:
    return next(e for e in _events(home, run_id) if e["type"] == "RunRequested")["data"]["cells"]


def _per_cell(home: Path, run_id: str) -> dict:
    events = _events(home, run_id)
    cells = {c["cell_id"]: c for c in next(e for e in events if e["type"] == "RunRequested")["data"]["cells"]}
    starts = {e["data"]["cell_id"]: _at(e) for e in events if e["type"] == "CellStarted"}
    ratios = []
    for event in events:
        if event["type"] in ("CellCompleted", "CellFailed"):
            cell = cells[event["data"]["cell_id"]]
            ratios.append((_at(event) - starts[cell["cell_id"]]) / (cell["warmup_s"] + cell["duration_s"]))
    ratios.sort()
    # From one cell's end event to the next one's CellStarted: the workflow's steps between cells.
    ends = sorted(_at(e) for e in events if e["type"] in ("CellCompleted", "CellFailed"))
    gaps = sorted(b - a for a, b in zip(ends, sorted(starts.values())[1:]))
    first_start, last_end = min(starts.values()), max(ends)
    run_start = next(_at(e) for e in events if e["type"] == "RunRequested")
    return {"cell_time_over_schedule_median": round(ratios[len(ratios) // 2], 2),
            "cell_time_over_schedule_max": round(ratios[-1], 2),
            "cell_overhead_s_median": round(statistics.median(
                _at(e) - starts[e["data"]["cell_id"]] - cells[e["data"]["cell_id"]]["warmup_s"]
                - cells[e["data"]["cell_id"]]["duration_s"] for e in events if e["type"] in ("CellCompleted", "CellFailed")), 3),
            "between_cells_s_median": round(statistics.median(gaps), 3) if gaps else None,
            "run_requested_to_first_cell_s": round(first_start - run_start, 2),
            "last_cell_to_run_end_s": round(max(_at(e) for e in events) - last_end, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "run_overhead.json"))
    parser.add_argument("--runs", nargs="+", choices=["quick", "multi_consumer"], default=["quick", "multi_consumer"])
    parser.add_argument("--label", help="store the figures under this key of --out, keeping the other keys")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home, out = Path(tmp) / "home", Path(tmp) / "reports"
        spec = Path(tmp) / "multi.json"
        spec.write_text(json.dumps(MULTI_CONSUMER))
        runs = {"quick": ["--suite", "quick", "--no-open"], "multi_consumer": ["--spec", str(spec), "--no-open"]}
        with open("/proc/loadavg") as f:
            load = f.read().split()[:3]
        figures = {name: {**measure(runs[name], home, out / name), "load_average_before": load} for name in args.runs}
    path = Path(args.out)
    if args.label:
        stored = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**stored, args.label: figures}, indent=2) + "\n")
    else:
        path.write_text(json.dumps(figures, indent=2) + "\n")
    for name, f in figures.items():
        print(f"{name}: {f['cells']} cells, wall {f['wall_s']} s for {f['scheduled_s']} s scheduled "
              f"(×{f['ratio']}); per cell median ×{f['per_cell']['cell_time_over_schedule_median']}, "
              f"max ×{f['per_cell']['cell_time_over_schedule_max']}; exit {f['exit_code']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
