"""How long a coded format's send thread waits for the GIL when an interval closes: the producer's per-interval
figures derived in the producer process (as before producer_figures) against forwarded raw to the parent (now).

No broker: in this process a send thread encodes 1 KB json records back to back with the cell's codec and stamps
each encode's end; once a second it hands an interval's raw records (`--rate` messages: send times, handed times,
acknowledged sequence numbers and times, as the native loop's `take` gives them) to a second thread, which either
derives the figures itself (`ProducerFigures.add`, the numpy work the producer's second thread used to do) or forwards
the buffers to a second process over a pipe (`send_records`), which derives them there. Per interval the longest
gap between two encodes in the 200 ms after the close is the send thread's stall, and the longest gap in a 200 ms
window mid-interval (the control) is what the machine's own scheduling costs it without any close; the median gap
is its ordinary pace. The switch interval is 0.1 ms, as the producer sets it.

    .venv/bin/python bench/gil_stall.py --out bench/results/gil_stall.json [--rate 20000] [--intervals 10]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import queue
import statistics
import sys
import threading
import time
from array import array
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "functions"))

from brokerbench.codecs import get_codec  # noqa: E402
from brokerbench.worker.payloads import payload_pool  # noqa: E402
from brokerbench.worker.producer_figures import RECORDS, ProducerFigures, recv_records, send_records  # noqa: E402

SECOND_NS = 1_000_000_000
AFTER_CLOSE_NS = 200_000_000
POOL = 64


def figures(rate: int) -> ProducerFigures:
    return ProducerFigures(np.full(POOL, 1024, dtype=np.int64), POOL, None)


def records(interval: int, rate: int) -> tuple:
    """One interval of `rate` messages, every one acknowledged 1 ms after it was handed over."""
    first = interval * rate
    started = np.arange(rate, dtype=np.int64) * 50_000 + interval * SECOND_NS
    handed = started + 3_000
    seqs = np.arange(first, first + rate, dtype=np.int64)
    return (interval, first, started.tobytes(), handed.tobytes(), seqs.tobytes(), (handed + 1_000_000).tobytes(),
            b"", 0)


def parent(conn, intervals: int, rate: int) -> None:
    """The cell's parent's side: read each interval's records and derive its figures."""
    derived = figures(rate)
    conn.send("ready")
    for _ in range(intervals):
        kind, interval, meta = conn.recv()
        assert kind == RECORDS
        derived.add(recv_records(conn, interval, meta))
    conn.send("done")


def second_thread(reports: queue.Queue, mode: str, conn, rate: int) -> None:
    derived = figures(rate)
    while (item := reports.get()) is not None:
        if mode == "in-process":
            interval, first, started, handed, acked, acked_ns, failed, first_measured = item
            derived.add({"interval": interval, "first_seq": first, "first_measured_seq": first_measured,
                         "headers": False, "started": started, "handed": handed, "acked": acked,
                         "acked_ns": acked_ns, "failed": failed})
        else:
            send_records(conn, *item)


def run(mode: str, intervals: int, rate: int) -> dict:
    codec = get_codec("json")
    pool = payload_pool("json", "record", 1024, POOL).objects
    prepared = [records(i, rate) for i in range(intervals)]
    ours, theirs = multiprocessing.get_context("spawn").Pipe()
    reader = None
    if mode == "forwarded":
        reader = multiprocessing.get_context("spawn").Process(target=parent, args=(theirs, intervals, rate))
        reader.start()
        assert ours.recv() == "ready"
    reports: queue.Queue = queue.Queue()
    thread = threading.Thread(target=second_thread, args=(reports, mode, ours, rate))
    thread.start()
    time.sleep(0.5)
    stamps = array("q")
    closes = []
    encode, clock = codec.encode, time.monotonic_ns
    start = clock()
    n = 0
    for interval in range(intervals):
        boundary = start + (interval + 1) * SECOND_NS
        while clock() < boundary:
            encode(pool[n % POOL])
            n += 1
            stamps.append(clock())
        closes.append(clock())
        reports.put(prepared[interval])
    end = clock() + AFTER_CLOSE_NS
    while clock() < end:
        encode(pool[n % POOL])
        n += 1
        stamps.append(clock())
    reports.put(None)
    thread.join()
    if reader is not None:
        assert ours.recv() == "done"
        reader.join()
    at = np.frombuffer(stamps, dtype=np.int64)
    gaps = np.diff(at)
    after = [longest(at, gaps, c) for c in closes]
    away = [longest(at, gaps, c - SECOND_NS // 2 - AFTER_CLOSE_NS) for c in closes]  # mid-interval: the control
    return {"mode": mode, "encodes": n, "median_gap_us": float(np.median(gaps)) / 1000,
            "stall_us_per_interval": [round(g / 1000, 1) for g in after],
            "stall_us_median": statistics.median(after) / 1000, "stall_us_max": max(after) / 1000,
            "control_us_per_interval": [round(g / 1000, 1) for g in away],
            "control_us_median": statistics.median(away) / 1000, "control_us_max": max(away) / 1000}


def longest(at: np.ndarray, gaps: np.ndarray, start: int) -> int:
    """The longest gap between two encodes ending in [start, start + AFTER_CLOSE_NS)."""
    window = gaps[(at[1:] >= start) & (at[1:] < start + AFTER_CLOSE_NS)]
    return int(window.max()) if window.size else 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--intervals", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    sys.setswitchinterval(1e-4)  # as the producer sets it
    load_before = os.getloadavg()
    rows = []
    for _ in range(args.repeats):  # alternating, so a drift in the machine's load hits each alike
        for mode in ("in-process", "forwarded"):
            rows.append(run(mode, args.intervals, args.rate))
            print(json.dumps({k: v for k, v in rows[-1].items() if not k.endswith("per_interval")}))
    result = {"rate": args.rate, "intervals": args.intervals, "cores": os.cpu_count(),
              "load_average_1_5_15": {"before": load_before, "after": os.getloadavg()}, "runs": rows}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
