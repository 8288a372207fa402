"""What fresh memory costs on this host: the first write to each page of a new mapping, against writing it again.

A virtual machine's memory is backed by its host only when the guest first writes it, and a guest whose balloon
reports free pages (virtio-balloon's free page reporting, on here: feature bit 5) gives the pages it frees back, so
they cost that first write again later. A broker that grows into memory it never used (a JVM's heap regions, Redis's
stream, the page cache of new log segments) pays it inside the cells; on a machine just made, all memory is fresh.
This bench measures the cost per 4 KB page: a new anonymous mapping of --mb MB written one byte per page (the first
touch), then written again (the re-touch), in trials after pauses of --pauses seconds (how soon freed memory is
fresh again), and how long a JVM with the brokers' heap takes to start with and without -XX:+AlwaysPreTouch (which
writes the whole heap at start, so a broker pays it before its cells rather than in them). With --kafka N it also
starts a fresh local Kafka N times in each of three ways, in turn: as the product starts it, then the cells; with
-XX:+AlwaysPreTouch; and as the product starts it followed by the warm-up a run gives a broker it started
(brokerbench.local.warmup). On each it runs --cells cells back to back (raw 1 KB at --rate msgs/s, --seconds
measured, no warm-up of the cell's own): the broker's CPU and the end-to-end p99 of each cell, the first against the
later ones.

    PYTHONPATH=functions .venv/bin/python bench/first_touch.py [--mb 512] [--trials 3] [--pauses 0,5]
        [--kafka 2 --cells 4 --rate 5000 --seconds 4] [--out bench/results/first_touch.json]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.events.run import run_requested_events
from brokerbench.brokers.kafka import local as kafka_local
from brokerbench.local.warmup import warm_up
from brokerbench.local.stack import LocalStack
from brokerbench.reports.results import build_results
from brokerbench.spec import expand, validate
from brokerbench.worker.cell import run_cell

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_suite import commit_of  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "results" / "first_touch.json"
PAGE = mmap.PAGESIZE
HEAP = "512m"  # the local Kafka's and Pulsar's pinned heap (brokers/kafka/local.py, brokers/pulsar/local.py)


def touch_us_per_page(mb: int) -> dict:
    """A new private anonymous mapping of `mb` MB, each page written once (first touch) and again (re-touch): µs a
    page for each."""
    size = mb * 2**20
    area = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        view = np.frombuffer(area, dtype=np.uint8)
        pages = size // PAGE
        figures = {}
        for name, value in (("first_touch_us", 1), ("retouch_us", 2)):
            began = time.perf_counter_ns()
            view[::PAGE] = value
            figures[name] = round((time.perf_counter_ns() - began) / 1000 / pages, 3)
        del view
        return figures
    finally:
        area.close()


def jvm_start_s(pretouch: bool) -> float:
    """Wall seconds of `java -version` with the brokers' pinned heap (G1), with or without AlwaysPreTouch."""
    flags = [f"-Xms{HEAP}", f"-Xmx{HEAP}", "-XX:+UseG1GC"] + (["-XX:+AlwaysPreTouch"] if pretouch else [])
    began = time.perf_counter()
    subprocess.run(["java", *flags, "-version"], check=True, capture_output=True)
    return round(time.perf_counter() - began, 3)


def balloon_reports_free_pages() -> bool | None:
    """Whether a virtio balloon on this machine reports free pages to its host (feature bit 5); None without one."""
    for device in Path("/sys/bus/virtio/devices").glob("*"):
        try:
            if (device / "device").read_text().strip() == "0x0005":
                return (device / "features").read_text().strip()[5:6] == "1"
        except OSError:
            continue
    return None


ARMS = ("cold", "pre_touch", "warmed")  # the Kafka arms: as started, with AlwaysPreTouch, with the run's warm-up


def kafka_cells(store, arm: str, cells: int, rate: int, seconds: float) -> list[dict]:
    """A fresh local Kafka started the `arm` way, then `cells` cells back to back on it."""
    pinned = kafka_local.pinned_heap
    if arm == "pre_touch":  # the start's own JVM flags, with the heap written at start
        kafka_local.pinned_heap = lambda *a: [*pinned(*a), "-XX:+AlwaysPreTouch"]
    stack = LocalStack(Path(tempfile.mkdtemp(prefix="first-touch-")))
    began = time.monotonic()
    stack.up(services=["kafka"], log=lambda *_: None)
    kafka_local.pinned_heap = pinned
    started_s = time.monotonic() - began
    rows = []
    try:
        endpoint = stack.endpoint("kafka")
        warmed_s = None
        if arm == "warmed":
            began = time.monotonic()
            warm_up("kafka", endpoint)
            warmed_s = round(time.monotonic() - began, 2)
        spec = validate({"brokers": ["kafka"], "sizes": [1024], "rates": [rate], "formats": ["raw"],
                         "duration_s": seconds, "warmup_s": 0, "warmup_until_steady": False, "drain_timeout_s": 10})
        for index in range(cells):
            cell = expand(spec)[0]
            run_id = new_run_id()
            store.append(run_requested_events(run_id, spec, [cell], "first-touch"))
            run_cell(run_id, cell, endpoint, store)
            result = build_results(store.read(run_id, interval_histograms=False))["cells"][0]
            broker = (result.get("resources") or {}).get("broker") or {}
            rows.append({"arm": arm, "cell": index, "status": result["status"],
                         "started_s": round(started_s, 2), "warm_up_s": warmed_s, "received": result["received"],
                         "broker_cpu_pct": broker.get("cpu_pct_mean"), "broker_rss_mb": broker.get("rss_mb_max"),
                         "e2e_p99_us": result["end_to_end_latency_us"]["p99"],
                         "e2e_p50_us": result["end_to_end_latency_us"]["p50"]})
            print(rows[-1], flush=True)
    finally:
        stack.down(log=lambda *_: None)
    return rows


def kafka_trials(trials: int, cells: int, rate: int, seconds: float) -> list[dict]:
    """`trials` fresh Kafkas each way, the arms in turn (rotated by trial); DynamoDB Local of its own for the events."""
    stack = LocalStack(Path(tempfile.mkdtemp(prefix="first-touch-db-")))
    stack.up(services=["dynamodb"], log=lambda *_: None)
    try:
        db = stack.endpoints(required=["dynamodb"])["dynamodb"]
        store = DynamoEventStore(f"bb-first-touch-{new_run_id()[-8:]}", endpoint_url=db["endpoint_url"])
        store.ensure_table()
        rows = []
        for trial in range(trials):
            for arm in ARMS[trial % 3:] + ARMS[:trial % 3]:
                rows += [{"trial": trial, **r} for r in kafka_cells(store, arm, cells, rate, seconds)]
        return rows
    finally:
        stack.down(log=lambda *_: None)


KEYS = ("broker_cpu_pct", "e2e_p50_us", "e2e_p99_us")  # a cell's figures the summary gives the median of per arm


def median_of(rows: list[dict], arm: str, cell: int, key: str) -> float | None:
    """The median of `key` over the trials' `cell`-th cell of `arm` (a figure not measured, None, left out)."""
    values = [r[key] for r in rows if r["arm"] == arm and r["cell"] == cell and r[key] is not None]
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=512, help="the mapping's size (MB)")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--pauses", default="0,5", help="seconds slept before a trial, comma-separated")
    parser.add_argument("--kafka", type=int, default=0, help="fresh Kafkas in each of the three ways (0: none)")
    parser.add_argument("--cells", type=int, default=4, help="cells back to back on each Kafka")
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    pauses = [float(p) for p in args.pauses.split(",")]
    load_before = os.getloadavg()[0]
    trials = []
    for trial in range(args.trials):
        for pause in pauses:
            time.sleep(pause)
            trials.append({"trial": trial, "pause_s": pause, **touch_us_per_page(args.mb)})
            print(trials[-1], flush=True)
    jvm = []
    for trial in range(args.trials):
        for pretouch in (False, True):
            jvm.append({"trial": trial, "always_pre_touch": pretouch, "start_s": jvm_start_s(pretouch)})
            print(jvm[-1], flush=True)
    kafka = kafka_trials(args.kafka, args.cells, args.rate, args.seconds) if args.kafka else []
    summary = {
        "first_touch_us_median": statistics.median(t["first_touch_us"] for t in trials),
        "retouch_us_median": statistics.median(t["retouch_us"] for t in trials),
        "jvm_start_s_median": {str(p): statistics.median(j["start_s"] for j in jvm if j["always_pre_touch"] is p)
                               for p in (False, True)},
        **({"kafka_by_cell": {arm: [{"cell": c, **{key: median_of(kafka, arm, c, key) for key in KEYS}}
                                    for c in range(args.cells)] for arm in ARMS}} if kafka else {}),
    }
    row = {"when": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "host": platform.node(),
           "commit": commit_of(REPO), "mb": args.mb, "page_bytes": PAGE, "heap": HEAP,
           "balloon_reports_free_pages": balloon_reports_free_pages(),
           "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
           "trials": trials, "jvm": jvm,
           **({"kafka": {"rate": args.rate, "seconds": args.seconds, "cells": kafka}} if kafka else {}),
           "summary": summary}
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {"rows": []}
    results["rows"].append(row)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
