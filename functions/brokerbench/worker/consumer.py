"""One consumer process: receive, decode (timed), account for every (producer, sequence)."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass

from ..codecs import get_codec
from ..drivers import get_driver
from .framing import HEADER
from .recorder import IntervalRecorder

SECOND_NS = 1_000_000_000
POLL_TIMEOUT_S = 0.05


@dataclass
class ConsumerTask:
    cell: dict
    endpoint: dict
    topic: str
    group: str
    consumer_id: int
    partitions: list[int]


class Accounting:
    """Distinct, duplicate and out-of-order deliveries per producer, from the sequence numbers."""

    def __init__(self) -> None:
        self.seen: dict[int, bytearray] = {}
        self.last_seq: dict[tuple[int, int], int] = {}
        self.duplicated = 0
        self.out_of_order = 0

    def add(self, producer: int, seq: int, partition: int) -> bool:
        """Record one delivery; False when it is a duplicate."""
        seen = self.seen.get(producer)
        if seen is None:
            seen = self.seen[producer] = bytearray(1024)
        if seq >= len(seen):
            seen.extend(bytes(max(seq + 1 - len(seen), len(seen))))
        key = (producer, partition)
        if seq < self.last_seq.get(key, -1):
            self.out_of_order += 1
        else:
            self.last_seq[key] = seq
        if seen[seq]:
            self.duplicated += 1
            return False
        seen[seq] = 1
        return True

    def received_from(self, producer: int, first_seq: int = 0, end_seq: int | None = None) -> int:
        seen = self.seen.get(producer)
        return 0 if seen is None else seen[first_seq:end_seq].count(1)


def consumer_main(conn, task: ConsumerTask) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _run(conn, task)
    except BaseException as exc:
        conn.send(("error", f"consumer {task.consumer_id}: {type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _run(conn, task: ConsumerTask) -> None:
    cell = task.cell
    decode = get_codec(cell["format"]).decode
    driver = get_driver(cell["broker"], task.endpoint, cell["client"])
    consumer = driver.consumer(task.topic, task.group, task.partitions)
    clock = time.monotonic_ns
    unpack = HEADER.unpack
    accounting = Accounting()
    add = accounting.add
    recorder = IntervalRecorder(("end_to_end_latency_us", "decode_ns"), ("received", "bytes"))
    e2e_values = recorder.values["end_to_end_latency_us"]
    decode_values = recorder.values["decode_ns"]
    counters = recorder.counters

    conn.send(("ready", {}))
    command, timing = conn.recv()
    if command != "go":
        return
    measure_start = timing["measure_start"]
    interval = -1
    next_boundary = measure_start
    expected: dict[int, dict] | None = None  # per producer, once all producers are done
    drain_deadline = None

    def close_interval() -> None:
        nonlocal interval, next_boundary
        snapshot = recorder.snapshot()
        if interval >= 0:
            conn.send(("interval", interval, snapshot))
        interval += 1
        next_boundary = measure_start + (interval + 1) * SECOND_NS

    while True:
        if conn.poll():
            command, payload = conn.recv()
            if command == "expect":
                expected = payload
                drain_deadline = clock() + int(cell["drain_timeout_s"] * SECOND_NS)
            elif command == "stop":
                break
        if expected is not None and (
            all(accounting.received_from(p) >= e["sent_total"] for p, e in expected.items())
            or clock() >= drain_deadline
        ):
            break
        messages = consumer.poll(POLL_TIMEOUT_S)
        if clock() >= next_boundary:
            close_interval()
        for header, payload, partition in messages:
            t0 = clock()
            decode(payload)
            t1 = clock()
            producer, seq, intended = unpack(header)
            if not add(producer, seq, partition) or intended < measure_start:
                continue  # duplicates and warm-up messages are counted, not measured
            e2e_values.append(t1 - intended)
            decode_values.append(t1 - t0)
            counters["received"] += 1
            counters["bytes"] += len(payload)
    close_interval()
    consumer.close()
    per_producer = {}
    for producer_id, sent in (expected or {}).items():
        per_producer[producer_id] = {
            "received_total": accounting.received_from(producer_id),
            "received": accounting.received_from(producer_id, sent["first_measured_seq"], sent["sent_total"]),
        }
    conn.send(("done", {
        "consumer_id": task.consumer_id,
        "per_producer": per_producer,
        "duplicated": accounting.duplicated,
        "out_of_order": accounting.out_of_order,
    }))
