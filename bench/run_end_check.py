"""What a cell's watch of its run's end costs (worker/run_end.py): one check, against one interval's write.

A cell reads its run's end key once a second and before each of its writes. This starts DynamoDB Local on
127.0.0.1 in a temporary folder, stores a run that has not ended with a cell of 60 measured intervals (what the
watched partition holds mid-cell), and times RunEndWatch.check() (one Query on the run's end key, nothing found)
beside the append of one IntervalMeasured event (the write it guards), alternating the two, `--samples` times.

    .venv/bin/python bench/run_end_check.py --out bench/results/run_end_check.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "functions"))
sys.path.insert(0, str(REPO / "tests"))  # tests/synthetic.py, shared with the tests

SPEC = {"name": "run-end-check", "brokers": ["redis-streams"], "sizes": [1024], "rates": [1000], "formats": ["raw"]}
INTERVALS = 60


def mid_cell_run() -> tuple[list[dict], dict]:
    """A synthetic run's events up to its cell's 60th interval (no cell end, no run end), and one more interval."""
    from synthetic import synthetic_run

    events = synthetic_run(SPEC, intervals=INTERVALS + 1)
    kept = [e for e in events if e["type"] not in ("CellCompleted", "CellFailed", "RunCompleted", "RunFailed",
                                                   "ReportBuilt")]
    return kept[:-1], kept[-1]


def renumbered(event: dict, number: int) -> dict:
    from brokerbench.events import make_event

    data = {**event["data"], "interval": number}
    return make_event(event["run_id"], "IntervalMeasured", data, cell_index=0, interval=number)


def percentiles(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"median_ms": round(statistics.median(ordered), 2), "p90_ms": round(ordered[int(0.9 * len(ordered))], 2),
            "max_ms": round(ordered[-1], 2)}


def measure(store, samples: int) -> dict:
    from brokerbench.worker.run_end import RunEndWatch

    stored, last = mid_cell_run()
    assert last["type"] == "IntervalMeasured"
    store.append(stored)
    watch = RunEndWatch(store, last["run_id"])
    checks, writes = [], []
    for number in range(INTERVALS, INTERVALS + samples):
        began = time.perf_counter()
        assert not watch.check()
        checks.append((time.perf_counter() - began) * 1000)
        event = renumbered(last, number)
        began = time.perf_counter()
        store.append([event])
        writes.append((time.perf_counter() - began) * 1000)
    return {"check": percentiles(checks), "interval_write": percentiles(writes), "samples": samples,
            "interval_event_bytes": len(json.dumps(last))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="write the results as JSON")
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    from brokerbench.events.dynamodb import DynamoEventStore
    from brokerbench.local.stack import LocalStack

    when, load_before = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        stack = LocalStack(Path(tmp) / "local", startup_timeout_s=300)
        db = stack.up(["dynamodb"], log=lambda m: None)["dynamodb"]
        try:
            store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
            store.ensure_table()
            result = measure(store, args.samples)
        finally:
            stack.down(["dynamodb"], log=lambda m: None)
    result["conditions"] = {"when": when, "load_average_1min": {"before": round(load_before, 2),
                                                                "after": round(os.getloadavg()[0], 2)},
                            "store": "DynamoDB Local on 127.0.0.1"}
    text = json.dumps(result, indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
