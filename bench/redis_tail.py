"""How much of the spread of the Redis Streams cell's end-to-end p99 between identical repeats comes from Redis's
automatic AOF rewrite, and whether compacting the AOF between cells (the local stack's default) removes it; with
`--compare priority`, how much the cell's scheduling priority (worker/priority.py) changes it.

The quick suite's Redis cell (raw, 1,024 B, 1,000 msgs/s, batch, 8 s after a 1 s warm-up) is run again and again on
one local Redis (AOF on, appendfsync everysec), in blocks of `--cells` cells per way, the two ways alternating which
goes first:
- auto: Redis rewrites its AOF on its own (auto-aof-rewrite-percentage 100, its default: at 64 MB, then each time
  the file doubles), whenever a cell pushes it over, as the local stack did before;
- between: no automatic rewrite; the AOF is compacted before a cell once it is over 16 MB (driver.py compact_aof).
A block is several cells because an automatic rewrite comes once the AOF has grown by about 64 MB (six or seven of
these cells): cell by cell, the compaction of the other way would keep it from ever coming.
With `--compare priority` (out: bench/results/redis_priority.json) the ways are:
- normal: BROKERBENCH_REALTIME=0, every process at normal priority (the send thread at nice -10, as rated cells had);
- realtime: the default, the cell's processes and Redis under SCHED_FIFO for the cell;
both with the AOF compacted between cells, and the cell given Redis's pids as a run on the local stack gives them. Each cell records its
p99, the host's CPU pressure and the CPU of other processes over its measured seconds (brokerbench.host), and the
AOF rewrites Redis made during it (INFO persistence aof_rewrites). The spread is the standard deviation of the log
p99, over every cell and over the cells measured on a quiet host (no other process above 5% of the host's CPU).

    PYTHONPATH=functions .venv/bin/python bench/redis_tail.py [--compare aof|priority] [--blocks 2] [--cells 7]
        [--seconds 8] [--out bench/results/redis_tail.json]

Starts its own Redis, an idle Kafka (as a quick run has one) and DynamoDB Local (a state folder of its own), and stops
them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import redis

import brokerbench
from brokerbench.brokers.redis_streams.driver import compact_aof
from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.events.run import run_requested_events
from brokerbench.figures import priority_text
from brokerbench.local.stack import LocalStack
from brokerbench.reports.results import build_results
from brokerbench.spec import expand, validate
from brokerbench.worker import priority
from brokerbench.worker.cell import run_cell

RESULTS = {"aof": Path(__file__).parent / "results" / "redis_tail.json",
           "priority": Path(__file__).parent / "results" / "redis_priority.json"}
WAYS = {"aof": ("auto", "between"), "priority": ("normal", "realtime")}
QUIET_OTHERS_PCT = 5.0  # a cell is on a quiet host when no other process used more than this share of its CPU


def set_way(way: str, endpoint: dict, client: redis.Redis) -> dict:
    """The endpoint the cells of `way` run with, and Redis (and the worker's priority switch) set for it."""
    client.config_set("auto-aof-rewrite-percentage", 100 if way == "auto" else 0)
    os.environ[priority.SWITCH] = "1" if way == "realtime" else "0"
    if way == "auto":
        return {k: v for k, v in endpoint.items() if k != "aof_rewrite"}
    return {**endpoint, "aof_rewrite": "between_cells"}


def one_cell(endpoint: dict, store, client: redis.Redis, seconds: float, way: str) -> dict:
    spec = validate({"brokers": ["redis-streams"], "sizes": [1024], "rates": [1000], "formats": ["raw"],
                     "modes": ["batch"], "duration_s": seconds, "warmup_s": 1, "drain_timeout_s": 10})
    cell = expand(spec)[0]
    run_id = new_run_id()
    store.append(run_requested_events(run_id, spec, [cell], "redis-tail"))
    compacted = compact_aof(client) if way != "auto" else False  # as create_topic would: before the cell
    before = int(client.info("persistence")["aof_rewrites"])
    run_cell(run_id, cell, endpoint, store)
    rewrites = int(client.info("persistence")["aof_rewrites"]) - before
    result = build_results(store.read(run_id, interval_histograms=False))["cells"][0]
    e2e, machine = result["end_to_end_latency_us"], result.get("host") or {}
    return {"way": way, "status": result["status"], "priority": priority_text(result.get("priority")),
            "publish_delay_p99_us": (result.get("publish_delay_us") or {}).get("p99"), "p50_us": e2e["p50"], "p99_us": e2e["p99"], "p999_us": e2e["p999"],
            "max_us": e2e["max"], "rewrites_during_cell": rewrites, "compacted_before": compacted,
            "cpu_pressure_pct": machine.get("cpu_pressure_pct"), "others_cpu_pct": machine.get("others_cpu_pct"),
            "load_average_1": round(os.getloadavg()[0], 2)}


def spread(rows: list[dict]) -> dict:
    p99 = [r["p99_us"] for r in rows]
    logs = [math.log(p) for p in p99]
    middle = statistics.median(logs) if logs else None
    # the median absolute deviation of the logs, scaled to a normal's sd: the bulk's spread, whatever one stall does
    robust = 1.4826 * statistics.median(abs(x - middle) for x in logs) if len(logs) > 2 else None
    return {"n": len(p99), "sd_log_p99": round(statistics.stdev(logs), 3) if len(logs) > 1 else None,
            "robust_sd_log_p99": None if robust is None else round(robust, 3),
            "median_p99_us": statistics.median(p99) if p99 else None,
            "geomean_p99_us": round(math.exp(statistics.fmean(logs)), 1) if logs else None,
            "min_p99_us": min(p99, default=None), "max_p99_us": max(p99, default=None)}


def summary(rows: list[dict], ways: tuple[str, str]) -> dict:
    out = {}
    for way in ways:
        mine = [r for r in rows if r["way"] == way]
        quiet = [r for r in mine if (r["others_cpu_pct"] or 0) <= QUIET_OTHERS_PCT]
        out[way] = {"all": spread(mine), "quiet_host": spread(quiet),
                    "cells_with_a_rewrite": sum(r["rewrites_during_cell"] > 0 for r in mine),
                    "p99_us_of_cells_with_a_rewrite": [r["p99_us"] for r in mine if r["rewrites_during_cell"]]}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", choices=sorted(WAYS), default="aof",
                        help="the two ways: Redis's AOF rewrite (aof) or the cell's scheduling priority (priority)")
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--cells", type=int, default=7, help="cells per way in a block")
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    ways, out = WAYS[args.compare], args.out or RESULTS[args.compare]
    stack = LocalStack(Path(tempfile.mkdtemp(prefix="redis-tail-")))
    stack.up(services=["redis", "kafka", "dynamodb"], log=print)
    loads = os.getloadavg()
    rows: list[dict] = []
    try:
        endpoints = stack.endpoints(required=["dynamodb", "redis"])
        endpoint = {**endpoints["redis-streams"], "pids": stack.endpoint("redis")["pids"]}  # as a run gives it
        client = redis.Redis(host=endpoint["host"], port=endpoint["port"])
        store = DynamoEventStore(f"bb-rtail-{new_run_id()[-8:]}", endpoint_url=endpoints["dynamodb"]["endpoint_url"])
        store.ensure_table()
        for block in range(args.blocks):
            for way in (ways if block % 2 == 0 else ways[::-1]):
                used = set_way(way, endpoint, client)
                for _ in range(args.cells):
                    rows.append({"block": block, **one_cell(used, store, client, args.seconds, way)})
                    r = rows[-1]
                    print(f"block {block} {way:>7}: p99 {r['p99_us']:,.0f} µs, rewrites {r['rewrites_during_cell']}, "
                          f"others {r['others_cpu_pct']}% (load {r['load_average_1']})", flush=True)
    finally:
        stack.down(log=print)
    found = summary(rows, ways)
    for way, s in found.items():
        print(f"{way:>7}: sd log p99 {s['all']['sd_log_p99']} (n {s['all']['n']}), quiet host "
              f"{s['quiet_host']['sd_log_p99']} (n {s['quiet_host']['n']}); cells with a rewrite "
              f"{s['cells_with_a_rewrite']}: p99 {s['p99_us_of_cells_with_a_rewrite']}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(brokerbench.__file__).parent).stdout.strip()
    out.write_text(json.dumps({
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(), "code": commit,
        "cell": "redis-streams raw, 1,024 B, 1,000 msgs/s, batch, "
                f"{args.seconds:g} s after a 1 s warm-up", "quiet_others_cpu_pct": QUIET_OTHERS_PCT,
        "load_average_1_5_15": {"before": [round(x, 2) for x in loads], "after": [round(x, 2) for x in os.getloadavg()]},
        "compare": args.compare, "summary": found, "cells": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
