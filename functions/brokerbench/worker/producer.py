"""One producer process: an open-loop schedule of intended send times, encode, send, record.

Each message's intended send time comes from the schedule, not from when the previous send
finished, so a producer (or broker) that falls behind shows up as publish delay and in
end-to-end latency instead of silently lowering the load (coordinated omission).
"""

from __future__ import annotations

import gc
import queue
import signal
import threading
import time
from array import array
from dataclasses import dataclass

import numpy as np

from ..codecs import get_codec
from ..drivers import get_driver
from .framing import HEADER, unpack_many
from .payloads import payload_pool

SECOND_NS = 1_000_000_000
# How often a producer that does not wait (unthrottled, or behind schedule) serves acknowledgements.
POLL_EVERY = 64


@dataclass
class ProducerTask:
    cell: dict
    endpoint: dict
    topic: str
    producer_id: int
    rate: float | None  # this producer's msgs/s, None = unthrottled
    phase_ns: int  # offset of this producer's schedule, so producers interleave
    message_limit: int | None  # measured messages for this producer, None = run by time


def producer_main(conn, task: ProducerTask) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides how a cell stops
    try:
        _run(conn, task)
    except BaseException as exc:  # report every failure to the parent, which fails the cell
        conn.send(("error", f"producer {task.producer_id}: {type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _run(conn, task: ProducerTask) -> None:
    cell = task.cell
    codec = get_codec(cell["format"])
    pool = payload_pool(cell["format"], cell["size_basis"], cell["size_bytes"])
    objects = pool.objects
    pool_size = len(objects)
    encode = codec.encode
    partitions = cell["partitions"]
    single = cell["mode"] == "single"
    clock = time.monotonic_ns
    pack = HEADER.pack
    pid = task.producer_id

    acked_headers: list[bytes] = []
    acked_ns = array("q")
    failed = [0]

    def on_ack(header: bytes, ok: bool) -> None:
        if ok:
            acked_headers.append(header)
            acked_ns.append(clock())
        else:
            failed[0] += 1

    gc.freeze()  # the loops below make no reference cycles: no collector pauses in the middle of a send
    gc.disable()

    driver = get_driver(cell["broker"], task.endpoint, cell["client"])
    producer = driver.producer(task.topic, partitions, cell["mode"], on_ack)
    send, poll = producer.send, producer.poll

    # Per message the loop keeps two timestamps; delay, encode time and bytes follow in bulk at each
    # interval's end from the sequence numbers (intended times come from the schedule itself).
    start_ns = array("q")  # when the worker took the message up (after waiting for its intended time)
    send_ns = array("q")  # when the encoded message was handed to the client
    start_append, send_append = start_ns.append, send_ns.append
    sizes = np.asarray(pool.encoded_sizes, dtype=np.int64)

    conn.send(("ready", {"encoded_bytes": pool.mean_encoded_bytes}))
    command, timing = conn.recv()
    if command != "go":
        return
    t_start, measure_start, t_end = timing["t_start"], timing["measure_start"], timing["t_end"]
    first_measured_seq = None
    interval = -1  # -1 is the warm-up: recorded, then discarded
    next_boundary = measure_start
    rate = task.rate
    period = SECOND_NS / rate if rate else 0.0
    base = t_start + task.phase_ns
    measured_limit = task.message_limit
    interval_start_seq = 0

    # Each interval's figures are derived and sent by a helper thread, so the send loop only copies
    # the interval's slices (a memcpy) instead of pausing for the numpy work and the pipe write.
    reports: queue.Queue = queue.Queue()
    reporter = threading.Thread(target=_report_intervals, args=(reports, conn, sizes, pool_size, base, period, rate),
                                name="interval-reporter", daemon=True)
    reporter.start()

    def close_interval() -> None:
        nonlocal interval, next_boundary, first_measured_seq, interval_start_seq, acked_headers, acked_ns
        end = len(send_ns)
        if interval >= 0:
            reports.put((interval, interval_start_seq, start_ns[interval_start_seq:end], send_ns[interval_start_seq:end],
                         acked_headers, acked_ns, failed[0], first_measured_seq))
        else:
            first_measured_seq = end
        acked_headers, acked_ns = [], array("q")
        failed[0] = 0
        interval_start_seq = end
        interval += 1
        next_boundary = measure_start + (interval + 1) * SECOND_NS

    def wait_until(target: int) -> None:
        while True:
            remaining = target - clock()
            if remaining <= 0:
                return
            if remaining > 1_500_000:  # the client's own poll serves acks while it waits
                poll((remaining - 1_000_000) / SECOND_NS)
            elif remaining > 150_000:
                poll(0)
                time.sleep((remaining - 100_000) / SECOND_NS)
            elif remaining > 50_000:
                poll(0)
            # closer than 50 µs: spin on the clock alone (a poll costs more than the gap at high rates)

    seq = 0
    while True:
        if measured_limit is not None and first_measured_seq is not None and seq - first_measured_seq >= measured_limit:
            break
        now = clock()
        if rate:
            intended = base + int(seq * period)
            if intended >= t_end:
                break
            if now < intended:
                wait_until(min(intended, next_boundary))
                if clock() >= next_boundary:
                    close_interval()
                continue
        if now >= t_end:  # behind schedule at the end: stop on time, the shortfall shows as a lower rate
            break
        if now >= next_boundary:
            close_interval()
        t0 = clock()
        if not rate:
            intended = t0
        payload = encode(objects[seq % pool_size])
        t1 = clock()
        start_append(t0)
        send_append(t1)
        send(pack(pid, seq, intended), payload, seq % partitions)
        seq += 1
        if single:
            producer.flush(30)
        elif seq % POLL_EVERY == 0:  # unthrottled, or behind schedule: still serve acknowledgements
            poll(0)

    unacked = producer.flush(cell["drain_timeout_s"])
    if first_measured_seq is None:  # the run ended inside the warm-up
        first_measured_seq = len(send_ns)
    close_interval()
    producer.close()
    reports.put(None)
    reporter.join()
    conn.send(("done", {
        "producer_id": pid,
        "sent_total": seq,
        "first_measured_seq": first_measured_seq,
        "sent": seq - first_measured_seq,
        "unacked": int(unacked),
        "last_send_ns": send_ns[-1] if send_ns else measure_start,
    }))


def _report_intervals(reports: queue.Queue, conn, sizes, pool_size, base, period, rate) -> None:
    """Helper thread: each interval's delay, encode time, bytes and publish latency, sent to the parent."""
    firsts: list[int] = []  # first sequence number of each interval's send times
    chunks: list[np.ndarray] = []
    while (item := reports.get()) is not None:
        interval, first_seq, started, handed, acked_headers, acked_ns, failed, first_measured_seq = item
        seqs = np.arange(first_seq, first_seq + len(started), dtype=np.int64)
        started = np.frombuffer(started, dtype=np.int64)
        handed = np.frombuffer(handed, dtype=np.int64)
        firsts.append(first_seq)
        chunks.append(handed)
        intended = base + (seqs * period).astype(np.int64) if rate else started
        latency = _publish_latency(acked_headers, acked_ns, firsts, chunks, first_measured_seq)
        conn.send(("interval", interval, {
            "counters": {"sent": int(seqs.size), "bytes": int(sizes[seqs % pool_size].sum()),
                         "acked": int(latency.size), "send_errors": failed},
            "values": {"publish_delay_us": (started - intended).tobytes(), "encode_ns": (handed - started).tobytes(),
                       "publish_latency_us": latency.tobytes()},
        }))


def _publish_latency(headers: list[bytes], ack_ns: array, firsts: list[int], chunks: list[np.ndarray],
                     first_measured_seq: int) -> np.ndarray:
    """send→ack in ns for the acknowledged measured messages (warm-up acks dropped)."""
    if not headers:
        return np.empty(0, np.int64)
    seqs = unpack_many(headers)["seq"].astype(np.int64)
    acked = np.frombuffer(ack_ns, dtype=np.int64)[: seqs.size]
    measured = seqs >= first_measured_seq
    seqs, acked = seqs[measured], acked[measured]
    which = np.searchsorted(np.asarray(firsts), seqs, side="right") - 1
    sent = np.empty(seqs.size, dtype=np.int64)
    for chunk in np.unique(which).tolist():  # acks mostly belong to the latest one or two intervals
        here = which == chunk
        sent[here] = chunks[chunk][seqs[here] - firsts[chunk]]
    return acked - sent
