"""The producer's own accounting, from the send loop's raw records: measured messages only, warm-up apart.

The producer process forwards its loop's raw buffers over a real pipe; the cell's parent derives the figures
(producer_figures). These tests send the records through a real multiprocessing pipe, as a cell does."""

import multiprocessing
import queue
import threading
import time
from array import array
from types import SimpleNamespace

import numpy as np

from brokerbench.codecs import get_codec
from brokerbench.worker import producer
from brokerbench.worker.framing import HEADER
from brokerbench.worker.producer import _forward_intervals
from brokerbench.worker.producer_figures import (FIRST_ACKS_NS, RECORDS, ProducerFigures, never_acknowledged,
                                                 recv_records)
from brokerbench.worker.schedule import producer_schedule

WARM, END = 10, 20  # messages 0-9 are the warm-up's, 10-19 are measured
SIZE = 100
SECOND_NS = 1_000_000_000


def ints(*values) -> bytes:
    return np.array(values, dtype=np.int64).tobytes()


def through_pipe(items: list[tuple]) -> list[dict]:
    """The items a send loop hands over, forwarded by the producer's thread and read as the parent reads them."""
    parent, child = multiprocessing.Pipe()
    reports: queue.Queue = queue.Queue()
    for item in items:
        reports.put(item)
    reports.put(None)
    forwarder = threading.Thread(target=_forward_intervals, args=(reports, child))
    forwarder.start()  # a thread: buffers larger than the pipe's are read while they are written
    received = []
    for _ in items:
        kind, interval, meta = parent.recv()
        assert kind == RECORDS
        received.append(recv_records(parent, interval, meta))
    forwarder.join()
    assert not parent.poll()  # nothing else was sent
    return received


def figures_of(items: list[tuple], schedule=None) -> tuple[list[dict], ProducerFigures]:
    figures = ProducerFigures(np.full(8, SIZE, dtype=np.int64), 8, schedule)
    snapshots = [figures.add(records) for records in through_pipe(items)]
    return [s for s in snapshots if s is not None], figures


def report(acked_in_warmup, failed_in_warmup, acked_later, failed_later):
    """Two intervals as the native loop hands them over: the warm-up (-1) and the first measured one (0)."""
    sent_at = list(range(1_000, 1_000 + END))
    items = [(-1, 0, ints(*sent_at[:WARM]), ints(*sent_at[:WARM]), ints(*acked_in_warmup),
              ints(*(5_000 for _ in acked_in_warmup)), ints(*failed_in_warmup), WARM),
             (0, WARM, ints(*sent_at[WARM:]), ints(*sent_at[WARM:]), ints(*acked_later),
              ints(*(6_000 for _ in acked_later)), ints(*failed_later), WARM)]
    [snapshot], figures = figures_of(items)
    return snapshot["counters"], figures


def test_warm_up_failures_reported_in_a_measured_interval_are_not_send_errors():
    # Warm-up message 9 fails, and warm-up 6-8 are acknowledged, only once measurement has started.
    counters, figures = report(range(6), [], [6, 7, 8, *range(10, 18)], [9, 18])
    assert counters["sent"] == 10 and counters["acked"] == 8  # measured messages only
    assert counters["send_errors"] == 1  # message 18; not warm-up message 9
    totals = figures.acks
    assert totals.failed_total == 2 and totals.acked_total == 6 + 3 + 8  # the whole cell's, for the broker's count
    missing, unacked = never_acknowledged(figures.acked, figures.failed, WARM, END)
    assert missing.tolist() == [18, 19] and unacked == 1  # 19 had no report at all; 18 failed
    assert counters["sent"] == counters["acked"] + counters["send_errors"] + unacked
    done = figures.finish({"first_measured_seq": WARM, "sent_total": END, "sent": END - WARM})
    assert done["unacked"] == 1 and done["not_acked"].tolist() == [18, 19] and done["failed_total"] == 2
    # the delivery window's start: the first measured acknowledgement and the 8 measured ones with it (warm-up 6-8,
    # acknowledged at the same moment, are not among them)
    assert (done["first_ack_ns"], done["first_acks"]) == (6_000, 8)


def test_warm_up_messages_never_answered_are_not_unacknowledged():
    counters, figures = report(range(3), [], range(10, 20), [])
    missing, unacked = never_acknowledged(figures.acked, figures.failed, WARM, END)
    assert missing.size == 0 and unacked == 0  # warm-up 3-9 never answered: not measured
    assert counters["send_errors"] == 0 and counters["acked"] == 10


def test_figures_by_hand_delay_encode_time_bytes_and_publish_latency():
    """1,000 msgs/s from t=0: message n is intended at n ms. Each measured message is taken up 30 µs late,
    encoded in 2 µs, and acknowledged 500 µs after it was handed over (the last three one interval later)."""
    schedule = producer_schedule({"rate": 1000, "producers": 1}, 0, 0)
    intended = [n * 1_000_000 for n in range(END)]
    started = [t + 30_000 for t in intended]
    handed = [t + 2_000 for t in started]
    acks = [t + 500_000 for t in handed]
    items = [(-1, 0, ints(*started[:WARM]), ints(*handed[:WARM]), ints(), ints(), ints(), WARM),
             (0, WARM, ints(*started[WARM:]), ints(*handed[WARM:]), ints(*range(WARM, 17)), ints(*acks[WARM:17]),
              ints(), WARM),
             (1, END, ints(), ints(), ints(*range(17, END)), ints(*acks[17:]), ints(), WARM)]
    (first, second), figures = figures_of(items, schedule)
    values = {name: np.frombuffer(raw, dtype=np.int64).tolist() for name, raw in first["values"].items()}
    assert values["publish_delay_us"] == [30_000] * 10 and values["encode_ns"] == [2_000] * 10  # in ns
    assert values["publish_latency_us"] == [500_000] * 7
    assert first["counters"] == {"sent": 10, "bytes": 10 * SIZE, "acked": 7, "send_errors": 0}
    assert np.frombuffer(second["values"]["publish_latency_us"], dtype=np.int64).tolist() == [500_000] * 3
    assert second["counters"]["acked"] == 3 and second["counters"]["sent"] == 0
    assert figures.acks.last_ack_ns == acks[-1] and figures.acks.bytes_delivered == 10 * SIZE


def test_python_loop_records_give_the_native_loop_figures():
    """The Python loop hands over array("q") times and message headers; the native loop int64 bytes. The same
    messages give the same figures either way."""
    started = list(range(5_000, 5_000 + 3_000 * 7, 7))  # 3,000 messages: buffers larger than a pipe's
    handed = [t + 3 for t in started]
    acked, failed = list(range(0, 3_000, 2)), [1, 3]
    ack_ns = [10_000 + s for s in acked]
    native = [(0, 0, ints(*started), ints(*handed), ints(*acked), ints(*ack_ns), ints(*failed), 0)]
    python = [(0, 0, array("q", started), array("q", handed), [HEADER.pack(7, s, 0) for s in acked],
               array("q", ack_ns), [HEADER.pack(7, s, 0) for s in failed], 0)]
    [from_native], native_figures = figures_of(native)
    [from_python], python_figures = figures_of(python)
    assert from_python == from_native
    assert vars(python_figures.acks) == vars(native_figures.acks)
    assert from_native["counters"] == {"sent": 3_000, "bytes": 3_000 * SIZE, "acked": 1_500, "send_errors": 2}


def test_the_first_acknowledgements_are_those_stamped_with_the_first():
    """The delivery window's start (outcome.delivery): the first measured acknowledgement, the measured ones
    stamped within FIRST_ACKS_NS of it (warm-up ones left out, however close), the last one, and the earliest
    intended send time of a measured message."""
    figures = ProducerFigures(np.full(8, SIZE), 8, None)
    at = 10 * SECOND_NS

    def add(interval, first_seq, taken_up, acked, acked_ns):
        figures.add({"interval": interval, "first_seq": first_seq, "first_measured_seq": 4, "headers": False,
                     "started": ints(*taken_up), "handed": ints(*taken_up), "acked": ints(*acked),
                     "acked_ns": ints(*acked_ns), "failed": ints()})

    add(-1, 0, [1, 2, 3, 4], [], [])
    # measured 4-7 taken up at 11-14 ns (no schedule: intended = taken up); warm-up 0-3 answered up to the moment
    # measured 4 is, measured 5 and 6 within a few µs, measured 7 just over FIRST_ACKS_NS later, in the next interval
    add(0, 4, [11, 12, 13, 14], [0, 1, 2, 3, 4, 5, 6], [at - 5, at - 4, at, at, at, at + 1000, at + 2000])
    add(1, 8, [], [7], [at + FIRST_ACKS_NS + 1])
    acks = figures.acks
    assert (acks.first_ack_ns, acks.first_acks, acks.last_ack_ns) == (at, 3, at + FIRST_ACKS_NS + 1)
    assert acks.first_intended_ns == 11


class _KeptProducer:
    """A client that acknowledges each send at once and keeps the headers it was handed."""

    def __init__(self, on_ack) -> None:
        self.on_ack, self.headers = on_ack, []

    def send(self, header: bytes, payload: bytes, partition: int) -> None:
        self.headers.append(header)
        self.on_ack(header, True, 0)

    def poll(self, timeout_s: float) -> None:
        pass

    def flush(self, timeout_s: float) -> int:
        return 0

    def close(self) -> None:
        pass


class _KeptDriver:
    def producer(self, topic, partitions, mode, on_ack):
        self.client = _KeptProducer(on_ack)
        return self.client


def test_a_message_taken_up_across_the_measured_start_is_warm_up_on_both_sides(monkeypatch):
    """At max rate a message's intended time is the clock; the consumer calls it measured from that stamp, the
    producer from the interval it was sent in. A clock that ticks 1 ns per reading puts the measured start
    between the loop's boundary check and the message's take-up once in every three starts tried: either way
    a message is measured on both sides or on neither (an off-by-one in the accounting otherwise)."""
    for measure_start in (1_000, 1_001, 1_002):
        ticks = iter(range(10**9))
        monkeypatch.setattr(producer, "time", SimpleNamespace(monotonic_ns=lambda: next(ticks),
                                                              monotonic=time.monotonic))
        cell = {"mode": "batch", "partitions": 1, "drain_timeout_s": 1.0}
        task = producer.ProducerTask(cell, {}, "t", 7, None, message_limit=50)
        timing = {"t_start": 0, "measure_start": measure_start, "t_end": 10**9}
        driver, reports = _KeptDriver(), queue.Queue()
        done = producer._python_loop(driver, task, get_codec("raw"), SimpleNamespace(objects=[b"x" * SIZE]),
                                     timing, None, reports, None)
        stamped = [HEADER.unpack(h) for h in driver.client.headers]
        by_stamp = [seq for _, seq, intended in stamped if intended >= measure_start]
        assert by_stamp == list(range(done["first_measured_seq"], done["sent_total"])), measure_start
        assert done["sent"] == 50 and len(by_stamp) == 50
