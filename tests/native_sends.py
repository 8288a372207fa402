"""What the send loops' tests share: sending a burst through a native sender and taking its records, the same
through a driver's Python-loop producer, and the check that a broker's Python-loop cells were recorded and counted as
the native ones are."""

from __future__ import annotations

import time

import numpy as np

from brokerbench import native
from brokerbench.worker.framing import HEADER


def send_all(sender, count: int, first: int = 0, drained: bool = True):
    """Send first..first+count-1 as fast as the window lets, flush, and take the records: (handed, acked, acked_ns,
    failed) as int64 arrays, each failed send named once. `drained`: every message was answered by the flush's end."""
    far = time.monotonic_ns() + 60_000_000_000
    assert sender.send_until(first, first + count, far, far) == (first + count, native.module().STOP_LIMIT)
    left = sender.flush(30)
    assert left == 0 or not drained, left
    _, handed, acked, acked_ns, failed = (np.frombuffer(b, dtype=np.int64) for b in sender.take())
    assert np.unique(failed).size == failed.size
    return handed, acked, acked_ns, failed


def assert_python_loop_cells(events: list[dict], results: dict) -> None:
    """The run's cells ran the Python loop (BROKERBENCH_SEND_LOOP=python), and each delivered what it sent, once,
    as the broker's own count says."""
    assert {e["data"]["send_loop"] for e in events if e["type"] == "CellCompleted"} == {"python"}
    for cell in results["cells"]:
        assert cell["status"] == "completed", cell.get("reason")
        assert cell["sent"] == cell["received"] > 0 and cell["lost"] == cell["duplicated"] == 0
        assert cell["broker_count"]["difference"] == 0


def python_producer(driver, topic: str, lanes: int, mode: str = "batch"):
    """The driver's Python-loop producer, its answers kept by sequence number: producer.answers[seq] = (ok, at_ns);
    a message answered twice fails the test."""
    answers: dict[int, tuple[bool, int]] = {}

    def on_ack(header: bytes, ok: bool, at_ns: int) -> None:
        seq = HEADER.unpack(header)[1]
        assert seq not in answers, f"message {seq} answered twice"
        answers[seq] = (ok, at_ns)

    producer = driver.producer(topic, lanes, mode, on_ack)
    producer.answers = answers
    return producer


def python_sends(producer, count: int, payload, first: int = 0, lanes: int = 1, producer_id: int = 0,
                 flush_each: bool = False) -> dict[int, int]:
    """first..first+count-1 through a Python-loop producer (the worker's header, `payload(seq)`, each lane in turn),
    flushed after each (`flush_each`, single mode) or at the end; returns the monotonic stamp before each send."""
    handed = {}
    for seq in range(first, first + count):
        handed[seq] = time.monotonic_ns()
        producer.send(HEADER.pack(producer_id, seq, 0), payload(seq), seq % lanes)
        if flush_each:
            producer.flush(30)
    producer.flush(30)
    return handed
