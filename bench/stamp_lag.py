"""How late the Python send loops stamp an acknowledgement, against the native loop's stamp on arrival.

The native loop stamps each acknowledgement where it arrives (it waits on the socket, or in the C client's callback),
and tests/integration/test_latency_truth.py checks that against Toxiproxy's known delay; the Python loops stamp in
their client's thread (Kafka's delivery reports on a thread waiting in librdkafka's poll; Pulsar's callbacks; rstream's
where a RabbitMQ stream producer follows a failover) or as the socket's read returns (Redis; NATS and RabbitMQ, whose
drivers speak the protocol themselves). Toxiproxy's check resolves about a millisecond on a shared
machine; this bench resolves the rest. The same cell (raw 1 KB, batch mode, a direct broker, 100 msgs/s: the sender
is idle between messages, so an acknowledgement never waits behind a send) runs on each loop in interleaved trials,
and the difference of the publish p50s (Python − native) bounds how late the Python loop stamps: it also holds the
Python client's own cost of handing a message to its socket, which publish latency counts from the send stamp.

    PYTHONPATH=functions .venv/bin/python bench/stamp_lag.py [--brokers redis-streams,kafka,pulsar,nats-jetstream,
        rabbitmq-quorum,rabbitmq-streams] [--trials 3] [--seconds 3] [--rate 100] [--mode batch|single]
        [--out bench/results/stamp_lag.json] [--merge]

--merge keeps the rows of --out for the brokers not measured; every row carries its own date, code and load.

Starts its own brokers and DynamoDB Local (a state folder of its own) and stops them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import brokerbench
from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.events.run import run_requested_events
from brokerbench.local.stack import LocalStack
from brokerbench.reports.results import build_results
from brokerbench.spec import expand, validate
from brokerbench.worker.cell import run_cell

RESULTS = Path(__file__).parent / "results" / "stamp_lag.json"
BROKERS = ("redis-streams", "kafka", "pulsar", "nats-jetstream", "rabbitmq-quorum", "rabbitmq-streams")
SERVICE = {"redis-streams": "redis", "kafka": "kafka", "pulsar": "pulsar", "nats-jetstream": "nats",
           "rabbitmq-quorum": "rabbitmq", "rabbitmq-streams": "rabbitmq"}
LOOPS = ("native", "python")
GOAL_US = 50  # issue: the Python loops measure within 50 µs of arrival


def cell_publish_p50(endpoint: dict, store, broker: str, rate: int, seconds: float, loop: str,
                     mode: str = "batch") -> dict:
    """One cell on `loop`: its publish p50 and what it sent (the loop is chosen per process, at its start)."""
    os.environ["BROKERBENCH_SEND_LOOP"] = loop
    spec = validate({"brokers": [broker], "sizes": [1024], "rates": [rate], "formats": ["raw"], "consumers": 0,
                     "modes": [mode],
                     "duration_s": seconds, "warmup_s": 1, "warmup_until_steady": False, "drain_timeout_s": 5})
    cell = expand(spec)[0]
    run_id = new_run_id()
    store.append(run_requested_events(run_id, spec, [cell], "stamp-lag"))
    run_cell(run_id, cell, endpoint, store)
    result = build_results(store.read(run_id, interval_histograms=False))["cells"][0]
    assert result["send_loop"] == loop, (broker, loop, result["send_loop"])
    return {"status": result["status"], "sent": result["sent"], "publish_p50_us": result["publish_latency_us"]["p50"],
            "load_average_per_core": round(os.getloadavg()[0] / (os.cpu_count() or 1), 2)}


def measure(broker: str, endpoint: dict, store, trials: int, rate: int, seconds: float, mode: str = "batch") -> dict:
    rows = []
    for trial in range(trials):
        for loop in (LOOPS if trial % 2 == 0 else LOOPS[::-1]):  # alternate which loop goes first
            rows.append({"trial": trial, "loop": loop, **cell_publish_p50(endpoint, store, broker, rate, seconds,
                                                                           loop, mode)})
            print(f"{broker:>17} {loop:>6} trial {trial}: publish p50 {rows[-1]['publish_p50_us']:,.0f} µs "
                  f"(load {rows[-1]['load_average_per_core']}/core)", flush=True)
    medians = {loop: statistics.median(r["publish_p50_us"] for r in rows if r["loop"] == loop) for loop in LOOPS}
    lags = [p["publish_p50_us"] - n["publish_p50_us"] for n, p in
            zip(*([r for r in rows if r["loop"] == loop] for loop in LOOPS))]
    return {"broker": broker, "mode": mode, "trials": rows, "native_p50_us": medians["native"], "python_p50_us": medians["python"],
            "lag_median_us": statistics.median(lags), "lag_per_trial_us": lags}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", default=",".join(BROKERS))
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--mode", choices=("batch", "single"), default="batch",
                        help="single: one message in flight, no batch delay (Pulsar's batch timer left out)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--merge", action="store_true",
                        help="keep the rows of --out for the brokers not measured (each row says when it was)")
    args = parser.parse_args(argv)
    brokers = args.brokers.split(",")
    unknown = [b for b in brokers if b not in BROKERS]
    if unknown:
        parser.error(f"--brokers: {', '.join(unknown)} not among {', '.join(BROKERS)}")
    stack = LocalStack(Path(tempfile.mkdtemp(prefix="stamp-lag-")))
    services = sorted({SERVICE[b] for b in brokers})
    stack.up(services=[*services, "dynamodb"], log=print)
    try:
        endpoints = stack.endpoints(required=["dynamodb"])
        db = endpoints["dynamodb"]
        store = DynamoEventStore(f"bb-stamp-{new_run_id()[-8:]}", endpoint_url=db["endpoint_url"])
        store.ensure_table()
        loads = os.getloadavg()
        # a RabbitMQ node serves both of its rows: its endpoint is the service's
        found = [measure(b, endpoints.get(b) or stack.endpoint(SERVICE[b]), store, args.trials, args.rate,
                         args.seconds, args.mode) for b in brokers]
    finally:
        stack.down(log=print)
    for row in found:
        print(f"{row['broker']:>17}: native {row['native_p50_us']:,.0f} µs, Python {row['python_p50_us']:,.0f} µs, "
              f"lag median {row['lag_median_us']:+,.0f} µs (per trial {row['lag_per_trial_us']})")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(brokerbench.__file__).parent).stdout.strip()
    measured_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load = {"before": [round(x, 2) for x in loads], "after": [round(x, 2) for x in os.getloadavg()]}
    for row in found:
        row.update(measured_at=measured_at, code=commit, load_average_1_5_15=load)
    if args.merge and args.out.exists():  # the other brokers' rows as they were, each with its own run's date
        kept = json.loads(args.out.read_text())
        run = {"mode": "batch", **{k: kept[k] for k in ("measured_at", "code", "load_average_1_5_15")}}
        new = {row["broker"]: row for row in found}
        found = [new.pop(old["broker"], None) or {**run, **old} for old in kept["brokers"]] + list(new.values())
    args.out.write_text(json.dumps({
        "measured_at": measured_at, "host": platform.node(), "code": commit,
        "rate": args.rate, "seconds": args.seconds, "goal_us": GOAL_US, "load_average_1_5_15": load,
        "brokers": found}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
