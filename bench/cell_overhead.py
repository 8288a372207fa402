"""Cell overhead: where a cell's wall time goes beyond its schedule (warm-up + measured seconds).

Starts Kafka, Redis and DynamoDB Local (the event store) on 127.0.0.1 in a temporary folder, runs a
small spec's cells one after another through `worker.run_cell` (what RunCellOnLambda does), and splits
each cell's wall time into phases from the worker's own moments (`worker.cell.Phases`, logged at DEBUG
when a cell ends; its processes report when their interpreter was up): CellStarted written, driver made,
broker check, topic created, processes spawned (interpreter start and imports), processes ready (client
connected, payload pool), readiness probe, codec floor, the lead before sending, warm-up, measurement,
the producers' flush, the drain, the cell's end (final intervals, the broker's counts, verdict,
CellCompleted), stopping the processes, deleting the topic. The event store's writes are timed apart
(every append, wherever it falls).

    .venv/bin/python bench/cell_overhead.py --label before --out bench/results/cell_overhead.json

The result file keeps one entry per label, so a "before" and an "after" sit side by side.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "functions"))

from brokerbench.worker import cell as cell_module  # noqa: E402

# The rest is imported in main(): a cell's processes run this module again (multiprocessing's main module), and
# the CLI's processes import no event store either.

SPEC = {
    "name": "cell-overhead", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000],
    "formats": ["raw"], "modes": ["batch"], "duration_s": 2, "warmup_s": 1, "repeats": 4, "drain_timeout_s": 10,
}
# --targets latency-truth: the cells of tests/integration/test_latency_truth.py (every broker it measures, reached
# directly, at its lower rate and cell length), whose fixed cost per cell is paid with the test workers waiting.
LATENCY_TRUTH = {
    "name": "cell-overhead-latency-truth", "sizes": [1024], "rates": [100], "formats": ["raw"], "modes": ["batch"],
    "duration_s": 1.5, "warmup_s": 0.5, "warmup_until_steady": False, "repeats": 2, "drain_timeout_s": 5,
}
LATENCY_TRUTH_SERVICES = ["kafka", "redis", "dynamodb", "pulsar", "nats", "rabbitmq"]
RABBITMQ_KEYS = ("host", "amqp_port", "stream_port", "management_url", "stats_interval_ms", "vhost", "username")


def latency_truth_targets(stack) -> dict:
    endpoints = stack.endpoints(required=["kafka", "redis", "dynamodb"])
    rabbit = {k: v for k, v in stack.endpoint("rabbitmq").items() if k in RABBITMQ_KEYS}
    redis = endpoints["redis-streams"]
    return {"redis-direct": {"driver": "redis", "host": redis["host"], "port": int(redis["port"])},
            "kafka-direct": {"driver": "kafka", "bootstrap_servers": endpoints["kafka"]["bootstrap_servers"]},
            "pulsar-direct": {"driver": "pulsar", **{k: v for k, v in endpoints["pulsar"].items() if k != "version"}},
            "nats-direct": {"driver": "nats", "url": endpoints["nats-jetstream"]["url"]},
            "rabbitmq-amqp-direct": {"driver": "rabbitmq-amqp", **rabbit},
            "rabbitmq-stream-direct": {"driver": "rabbitmq-stream", **rabbit}}


# The phases that are the schedule, not overhead: sending from t_start to the end of measurement.
SCHEDULED = ("measure_start", "t_end")


class TimedStore:
    """The event store, with every append timed (the writes are part of a cell's overhead)."""

    def __init__(self, store) -> None:
        self.store = store
        self.appends: list[tuple[float, int]] = []  # (seconds, events)
        self.warmup: dict | None = None  # the cell's warm-up record (CellCompleted)

    def append(self, events):
        self.warmup = next((e["data"].get("warmup") for e in events if e["type"] == "CellCompleted"), self.warmup)
        started = time.perf_counter()
        try:
            return self.store.append(events)
        finally:
            self.appends.append((time.perf_counter() - started, len(events)))

    def __getattr__(self, name):
        return getattr(self.store, name)


class PhaseLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.cells: dict[str, dict] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "cell phases":
            self.cells[record.cell_id] = record.phases


def run(spec: dict, store, endpoints: dict) -> list[dict]:
    from brokerbench.events import new_run_id
    from brokerbench.spec import expand, validate

    handler = PhaseLog()
    logger = logging.getLogger(cell_module.__name__)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    run_id = new_run_id()
    cells = []
    try:
        for cell in expand(validate(spec)):
            timed = TimedStore(store)
            started = time.perf_counter()
            outcome = cell_module.run_cell(run_id, cell, endpoints[cell["broker"]], timed)
            wall = time.perf_counter() - started
            scheduled = cell["warmup_s"] + cell["duration_s"]
            phases = handler.cells[cell["cell_id"]]
            cells.append({"cell_id": cell["cell_id"], "broker": cell["broker"], "status": outcome.status,
                          "reason": outcome.reason, "wall_s": round(wall, 3), "scheduled_s": scheduled,
                          "overhead_s": round(wall - scheduled, 3),
                          "event_writes_s": round(sum(s for s, _ in timed.appends), 4),
                          "event_appends": len(timed.appends), "warmup": timed.warmup, "phases_s": phases})
            print(f"{cell['cell_id']}: {outcome.status} wall {wall:.2f} s, overhead {wall - scheduled:.2f} s",
                  flush=True)
    finally:
        logger.removeHandler(handler)
    return cells


def summarize(cells: list[dict]) -> dict:
    """Per broker: the median of each phase and of the overhead over its cells."""
    out = {}
    for broker in sorted({c["broker"] for c in cells}):
        mine = [c for c in cells if c["broker"] == broker and c["status"] == "completed"]
        if not mine:
            continue
        names = list(dict.fromkeys(name for c in mine for name in c["phases_s"]))
        out[broker] = {
            "cells": len(mine),
            "overhead_s_median": round(statistics.median(c["overhead_s"] for c in mine), 3),
            "overhead_s_max": round(max(c["overhead_s"] for c in mine), 3),
            # Past the warm-up the cell used (an adaptive warm-up waits for steady latency: a rule, not overhead):
            # wall - (warm-up used + measured seconds), the measured seconds being the t_end phase.
            "overhead_beyond_warmup_used_s_median": round(statistics.median(
                c["wall_s"] - c["warmup"]["used_s"] - c["phases_s"]["t_end"] for c in mine), 3),
            "warmup_used_s_median": round(statistics.median(c["warmup"]["used_s"] for c in mine), 3),
            "event_writes_s_median": round(statistics.median(c["event_writes_s"] for c in mine), 4),
            "phases_s_median": {n: round(statistics.median(c["phases_s"].get(n, 0.0) for c in mine), 4)
                                for n in names},
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="the entry of the result file to write (e.g. before, after)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "cell_overhead.json"))
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--targets", choices=["default", "latency-truth"], default="default",
                        help="latency-truth: the brokers and cells of tests/integration/test_latency_truth.py")
    args = parser.parse_args()
    spec = SPEC if args.targets == "default" else LATENCY_TRUTH
    spec = {**spec, "repeats": args.repeats or spec["repeats"]}
    from brokerbench.events.dynamodb import DynamoEventStore
    from brokerbench.local.stack import LocalStack

    with tempfile.TemporaryDirectory() as tmp:
        stack = LocalStack(Path(tmp) / "local", startup_timeout_s=300, redis_aof=True)  # a loaded machine starts slowly
        services = ["kafka", "redis", "dynamodb"] if args.targets == "default" else LATENCY_TRUTH_SERVICES
        endpoints = stack.up(services, log=lambda m: None)
        try:
            if args.targets == "latency-truth":
                targets = latency_truth_targets(stack)
                spec = {**spec, "brokers": list(targets), "targets": targets}
                endpoints = {**stack.endpoints(required=["kafka", "redis", "dynamodb"]), **targets}
            db = endpoints["dynamodb"]
            store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
            store.ensure_table()
            with open("/proc/loadavg") as f:
                load_before = f.read().split()[:3]
            cells = run(spec, store, endpoints)
            with open("/proc/loadavg") as f:
                load_after = f.read().split()[:3]
        finally:
            stack.down(services, log=lambda m: None)
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    results[args.label] = {"spec": spec, "load_average_before": load_before, "load_average_after": load_after,
                           "summary": summarize(cells), "cells": cells}
    out.write_text(json.dumps(results, indent=2) + "\n")
    for broker, s in results[args.label]["summary"].items():
        print(f"{broker}: overhead median {s['overhead_s_median']} s (max {s['overhead_s_max']} s) over {s['cells']} cells, "
              f"{s['overhead_beyond_warmup_used_s_median']} s past the warm-up used ({s['warmup_used_s_median']} s)")
        for name, seconds in s["phases_s_median"].items():
            print(f"  {name:22s} {seconds:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
