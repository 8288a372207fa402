"""What the guard of a real-time cell (worker/priority.py `guard`) reads in the quick suite, and whether it puts any
cell back: the margin between the suite's own cells and the guard's thresholds.

The quick suite (functions/brokerbench/suites/quick.json) is run --runs times as `make run` runs it, at the default
priority, on a stack this bench starts in --home (a fresh one: the first Kafka cells meet a cold JVM, as a newcomer's
first run does) and stops. For every cell, from its stored events: what it ran at (CellCompleted `priority`, with
every drop and why), and over its intervals (IntervalMeasured) the two figures the guard tests after each one: the
cell's processes with the broker, in % of the host's CPU ((workers + broker cpu_pct) / cpus), and the host's CPUs
busy (host cpu_pct: anyone's work). The figures are the cell's own stored ones, the same the guard read.

    PYTHONPATH=functions .venv/bin/python bench/realtime_guard.py [--runs 2] [--home /tmp/bb-rtg]
        [--out bench/results/realtime_guard.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "realtime_guard.json"
BIN = Path(sys.executable).parent / "brokerbench"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cell_figures(events: list[dict]) -> list[dict]:
    """Per cell, in the order the run made them: its priority record and, over its intervals, the cell's share of the
    host and the host's CPUs busy (each interval's, and their maxima)."""
    cells: dict[str, dict] = {}
    for event in events:
        data = event["data"]
        if event["type"] == "IntervalMeasured":
            cell = cells.setdefault(data["cell_id"], {"cell": data["cell_id"], "share_pct": [], "host_busy_pct": []})
            used, host = data.get("resources") or {}, data.get("host") or {}
            workers, broker = (used.get("workers") or {}).get("cpu_pct"), (used.get("broker") or {}).get("cpu_pct")
            if workers is not None and host.get("cpus"):
                cell["share_pct"].append(round((workers + (broker or 0.0)) / host["cpus"], 1))
            if host.get("cpu_pct") is not None:
                cell["host_busy_pct"].append(host["cpu_pct"])
        elif event["type"] == "CellCompleted":
            cells.setdefault(data["cell_id"], {"cell": data["cell_id"], "share_pct": [], "host_busy_pct": []})[
                "priority"] = data.get("priority")
    for cell in cells.values():
        cell["share_max_pct"] = max(cell["share_pct"], default=None)
        cell["host_busy_max_pct"] = max(cell["host_busy_pct"], default=None)
    return list(cells.values())


def summary(runs: list[dict]) -> dict:
    cells = [c for r in runs for c in r["cells"]]
    drops = [d for c in cells for d in (c.get("priority") or {}).get("dropped") or []]
    first = [c for c in runs[0]["cells"] if c["cell"].startswith("kafka.") and c["cell"].endswith(".r0")] if runs else []
    later = [c for c in cells if c not in first]

    def top(kept: list[dict], key: str) -> float | None:
        return max((c[key] for c in kept if c[key] is not None), default=None)

    return {"cells": len(cells), "realtime_cells": sum((c.get("priority") or {}).get("workers") == "realtime"
                                                       for c in cells),
            "cells_dropped": sum(bool((c.get("priority") or {}).get("dropped")) for c in cells),
            "drops_by_why": {why: sum(d["why"] == why for d in drops) for why in sorted({d["why"] for d in drops})},
            "share_max_pct": top(cells, "share_max_pct"), "host_busy_max_pct": top(cells, "host_busy_max_pct"),
            "first_kafka_cells_share_max_pct": top(first, "share_max_pct"),
            "other_cells_share_max_pct": top(later, "share_max_pct"),
            "other_cells_host_busy_max_pct": top(later, "host_busy_max_pct")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--home", default="/tmp/bb-rtg", help="the bench's own stack and reports (started fresh)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    home = Path(args.home)
    os.environ["BROKERBENCH_HOME"] = str(home)
    os.environ.pop("BROKERBENCH_REALTIME", None)  # the default, as `make run` runs
    from brokerbench.cli.common import open_store
    from brokerbench.local.stack import LocalStack
    from brokerbench.worker import priority

    stack = LocalStack()
    if stack.is_up():
        raise SystemExit(f"a stack is already up in {home}: give a fresh --home (the first cells must meet a cold JVM)")
    started = time.monotonic()
    loads = [os.getloadavg()[0]]
    runs = []
    endpoints = stack.up(["kafka", "redis", "dynamodb"], log=log)
    try:
        store = open_store(endpoints)
        out_dir = home / "reports"
        out_dir.mkdir(parents=True, exist_ok=True)
        for n in range(args.runs):
            before = {p.name for p in out_dir.iterdir()}
            began = time.monotonic()
            done = subprocess.run([str(BIN), "run", "--suite", "quick", "--out", str(out_dir), "--no-open"],
                                  capture_output=True, text=True)
            made = sorted({p.name for p in out_dir.iterdir()} - before)
            log(f"run {n + 1}/{args.runs}: {made} exit {done.returncode} in {time.monotonic() - began:.0f} s")
            if len(made) != 1:
                raise SystemExit(f"the run did not store one run: {(done.stdout + done.stderr)[-2000:]}")
            events = store.read(made[0], interval_histograms=False)
            runs.append({"run_id": made[0], "exit_code": done.returncode, "wall_s": round(time.monotonic() - began, 1),
                         "cells": cell_figures(events)})
            loads.append(os.getloadavg()[0])
    finally:
        stack.down(log=log)
    code = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    result = {"bench": "bench/realtime_guard.py", "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "code": code.stdout.strip(), "host": f"{os.cpu_count()} cores, Linux {platform.release()}",
              "load_average_1": loads, "wall_s": round(time.monotonic() - started, 1),
              "thresholds": {"cell_share_pct": priority.CELL_SHARE_PCT, "host_busy_pct": priority.HOST_BUSY_PCT,
                             "run_limit_ms": priority.RUN_LIMIT_US / 1000},
              "summary": summary(runs), "runs": runs}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    log(f"written {args.out}: {result['summary']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
