"""One producer process: an open-loop schedule of intended send times, encode, send, record.

Each message's intended send time comes from the schedule (`schedule.py`: a constant rate, or a
startup backlog and periodic bursts), not from when the previous send finished, so a producer (or
broker) that falls behind shows up as publish delay and in
end-to-end latency instead of silently lowering the load (coordinated omission).
"""

from __future__ import annotations

import gc
import os
import queue
import sys
import threading
import time
from array import array
from dataclasses import dataclass

import numpy as np

from .. import native
from ..codecs import get_codec
from ..registry import get_driver
from ..spec import lanes
from .drain import Drain
from .framing import HEADER
from . import priority
from .processes import serve, stacks_fd
from .producer_figures import send_records
from .payloads import payload_pool, pool_size_for
from .schedule import Schedule, producer_schedule, unsent

SECOND_NS = 1_000_000_000
# How often a producer that does not wait (unthrottled, or behind schedule) serves acknowledgements.
POLL_EVERY = 64
# Waits shorter than this spin on the clock (a poll costs more than the gap at high rates); longer ones wait in
# the client's poll, which serves (and stamps) acknowledgements as they arrive.
SPIN_NS = 50_000
LINGER = "linger"  # in a loop's result: the client's close still to be made after "done" (close_after_settle)


@dataclass
class ProducerTask:
    cell: dict
    endpoint: dict
    topic: str
    producer_id: int
    rate: float | None  # this producer's msgs/s (its baseline, with bursts), None = unthrottled
    message_limit: int | None  # measured messages for this producer, None = run by time
    normal_why: str | None = None  # why it runs at normal priority (priority.decide); None: real-time


def producer_main(conn, task: ProducerTask) -> None:
    serve("producer", task.producer_id, conn, lambda grant: _run(conn, task, grant), task.normal_why)


def _run(conn, task: ProducerTask, grant: priority.Grant) -> None:
    began_ns = time.monotonic_ns()  # the interpreter is up and this module imported (the parent logs the phases)
    cell = task.cell
    codec = get_codec(cell["format"])
    pool = payload_pool(cell["format"], cell["size_basis"], cell["size_bytes"], pool_size_for(cell))
    driver = get_driver(cell["broker"], task.endpoint, cell["client"])
    sender = _native_sender(driver, task)

    gc.freeze()  # the loops below make no reference cycles: no collector pauses in the middle of a send
    gc.disable()
    # At each interval's end the send thread needs the GIL back from the forwarding thread (which holds it only
    # to start each pipe write): ask for it after 0.1 ms instead of the default 5 ms.
    sys.setswitchinterval(1e-4)

    conn.send(("ready", {"began_ns": began_ns, "stacks_fd": stacks_fd(), "encoded_bytes": pool.mean_encoded_bytes,
                         "send_loop": "native" if sender else "python",
                         "sender": sender_path(sender),
                         # what the parent derives bytes from (producer_figures): each pool object's encoded size
                         "encoded_sizes": np.asarray(pool.encoded_sizes, dtype=np.int64).tobytes(),
                         "pool_size": len(pool.objects)}))
    command, timing = conn.recv()
    if command != "go":
        if sender:
            sender.close()
        return
    schedule = producer_schedule(cell, task.producer_id, timing["t_start"])

    # Each interval's raw records go to the parent through a second thread, as they are: the send loop only hands
    # them over instead of pausing for the pipe write, and no figure is derived here (producer_figures), so the
    # send loop of a coded format never waits for the GIL behind per-interval numpy work.
    reports: queue.Queue = queue.Queue()
    forwarder = threading.Thread(target=_forward_intervals, args=(reports, conn), name="interval-forwarder",
                                 daemon=True)
    forwarder.start()
    nice = _boost_this_thread() if schedule else None
    loop = _native_loop if sender else _python_loop
    try:
        done = loop(sender or driver, task, codec, pool, timing, schedule, reports, conn,
                    settle_s=driver.count_settle_s() if hasattr(driver, "count_settle_s") else 0.0)
    finally:  # the records handed over are sent before anything else (a failure included): one writer at a time
        reports.put(None)
        forwarder.join()
    linger = done.pop(LINGER)  # the client's close, where it waits for the broker's count (close_after_settle)
    # Both loops stop on time at the cell's end, behind schedule or not: what was due by then and never sent is
    # counted here, from the schedule (the parent reads the unsent messages' intended times from it too).
    owed = unsent(schedule, done["sent_total"], done["first_measured_seq"], timing["measure_start"], timing["t_end"],
                  task.message_limit)
    conn.send(("done", {"producer_id": task.producer_id, "send_thread_nice": nice, "priority": grant.record(),
                        **done, **owed,
                        "t_end": timing["t_end"]}))
    if linger is not None:
        linger()


def _forward_intervals(reports: queue.Queue, conn) -> None:
    """The forwarding thread: each interval's raw records, as the loop handed them over, to the parent. A parent
    that closed the pipe (it ended the cell, or its worker died: this process is being stopped, or killed with the
    worker's fork server a moment later) is not written to again, and no traceback hides why the cell ended."""
    while (item := reports.get()) is not None:
        try:
            send_records(conn, *item)
        except OSError:  # BrokenPipeError and the like
            return


SEND_THREAD_NICE = -10


def _boost_this_thread() -> int:
    """Raise the send thread's scheduling priority where allowed (Linux: per thread; the client's own
    threads, created earlier, keep theirs). On a machine the broker and consumer share, a waking
    sender then gets a core when its next message is due instead of queueing behind them; it still
    sleeps whenever it is ahead, so it takes no more CPU than before. Returns the nice value in force."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, SEND_THREAD_NICE)
    except OSError:  # not permitted (no CAP_SYS_NICE): the delay figures show what that costs
        pass
    return os.getpriority(os.PRIO_PROCESS, 0)


def sender_path(sender) -> str | None:
    """Which native path sends, where a broker has two ("native-pwire": Pulsar's binary protocol, spoken by the loop;
    "native-capi": Pulsar's C API); None for the Python loop and the brokers with one native path."""
    path = getattr(sender, "path", None) if sender is not None else None
    return f"native-{path}" if path else None


def stamps_of(client) -> str | None:
    """How a producer or consumer (a driver's, or a native sender) stamps what it receives (brokerbench.figures:
    ARRIVAL, READ, client_stamps); None where it does not say."""
    return getattr(client, "stamps", None)


def _native_sender(driver, task: ProducerTask):
    """The native send loop's sender, or None for the Python loop (BROKERBENCH_SEND_LOOP decides)."""
    wanted = native.choice()
    if wanted == "python":
        return None
    make = driver.native_sender
    if task.cell.get("faults"):
        if not getattr(driver, "native_follows_failover", True):
            # a native loop that keeps one connection would fail every send after the node it reached went down; the
            # Python producer reaches the node that leads next
            return None
        make = getattr(driver, "native_failover_sender", make)  # where the fastest native loop does not follow
    try:
        return make(task.topic, lanes(task.cell), task.cell["mode"])
    except native.Unsupported:
        if wanted == "native":
            raise
        return None


class _Intervals:
    """The interval clock shared by both loops: warm-up first (-1, discarded), then 1 s intervals."""

    def __init__(self, timing: dict, reports: queue.Queue, schedule: Schedule | None = None) -> None:
        self.schedule = schedule
        self.measure_start = timing["measure_start"]
        self.reports = reports
        self.interval = -1
        self.next_boundary = self.measure_start
        self.first_measured_seq: int | None = None
        self.start_seq = 0  # first sequence number of the open interval

    def start_at(self, measure_start: int) -> None:
        """The warm-up ends at `measure_start` (decided while it ran)."""
        self.measure_start = self.next_boundary = measure_start

    def close(self, end_seq: int, started, handed, acked, acked_ns, failed) -> None:
        """End the open interval at `end_seq`; the message arrays hold its messages only, `acked` and `failed`
        the sends reported since the last close (whichever message they were).

        The warm-up (-1) goes to the parent too: its acknowledgements and failures are not
        measured, but they count in the totals the broker's own count is reconciled with."""
        if self.interval < 0:
            # Measured means intended at or after the measured start, for the consumer alike: a producer
            # running behind sends warm-up messages after the boundary, and they stay warm-up.
            scheduled = self.schedule.first_due_at(self.measure_start) if self.schedule else 0
            self.first_measured_seq = max(end_seq, scheduled)
        self.reports.put((self.interval, self.start_seq, started, handed, acked, acked_ns, failed,
                          self.first_measured_seq))
        self.start_seq = end_seq
        self.interval += 1
        self.next_boundary = self.measure_start + (self.interval + 1) * SECOND_NS


class _AwaitMeasure:
    """While the warm-up waits to be steady, the parent's "measure" message (when measurement starts),
    looked for every 100 ms: the send loop hands control back that often until it has come."""

    CHECK_NS = 100_000_000

    def __init__(self, conn, timing: dict, intervals: _Intervals) -> None:
        self.conn, self.timing, self.intervals = conn, timing, intervals
        self.pending = bool(timing.get("warmup_until_steady"))
        self.next_check = 0

    def until(self, boundary: int) -> int:
        return min(boundary, time.monotonic_ns() + self.CHECK_NS) if self.pending else boundary

    def check(self) -> None:
        if not self.pending or not self.conn.poll():
            return
        command, start = self.conn.recv()
        if command == "measure":
            span = self.timing["t_end"] - self.timing["measure_start"]
            self.timing.update(measure_start=start, t_end=start + span)
            self.intervals.start_at(start)
            self.pending = False

    def check_every(self, now: int) -> None:
        if self.pending and now >= self.next_check:
            self.check()
            self.next_check = now + self.CHECK_NS


def _native_loop(sender, task: ProducerTask, codec, pool, timing: dict, schedule: Schedule | None,
                 reports: queue.Queue, conn, settle_s: float = 0.0) -> dict:
    """The native send loop: one call per interval, the interval's records taken at its end."""
    encode = None if codec.prebuilt else codec.encode
    timed = schedule.native_args() if schedule else {"base_ns": timing["t_start"], "period_ns": 0.0}
    sender.configure(list(pool.objects), encode, task.producer_id, **timed)
    t_end = timing["t_end"]
    intervals = _Intervals(timing, reports, schedule)
    limit = task.message_limit
    no_limit = 1 << 62
    seq, last_send_ns = 0, timing["measure_start"]

    def close(end_seq: int) -> None:
        nonlocal last_send_ns
        started, handed, acked_seq, acked_ns, failed = sender.take()
        native.forward_logs(sender)  # librdkafka's lines, into the log rather than onto the terminal
        if handed:
            last_send_ns = int(np.frombuffer(handed, dtype=np.int64)[-1])
        intervals.close(end_seq, started, handed, acked_seq, acked_ns, failed)

    await_measure = _AwaitMeasure(conn, timing, intervals)
    while True:
        first = intervals.first_measured_seq
        stop = first + limit if limit is not None and first is not None else no_limit
        seq, why = sender.send_until(seq, stop, await_measure.until(min(intervals.next_boundary, t_end)), t_end)
        if why != native.module().STOP_BOUNDARY:
            break
        if await_measure.pending:
            await_measure.check()
            t_end = timing["t_end"]
            if time.monotonic_ns() < intervals.next_boundary:
                continue
        close(seq)
    unanswered = flush_while_acking(sender.flush, task.cell["drain_timeout_s"], timing)
    # its last flush serves acknowledgements too: closed first (unless nothing is left to answer), so that they are
    # taken below
    linger = close_after_settle(sender.close, settle_s, unanswered)
    if intervals.first_measured_seq is None:  # the run ended inside the warm-up
        intervals.first_measured_seq = seq
    close(seq)
    return {"sent_total": seq, "first_measured_seq": intervals.first_measured_seq,
            "sent": max(0, seq - intervals.first_measured_seq), "last_send_ns": last_send_ns, LINGER: linger,
            "stamps": stamps_of(sender)}


def close_after_settle(close, settle_s: float, unanswered: int):
    """Close the producer's client, `settle_s` after its last publish where the broker's count needs its channel
    open that long (the driver's count_settle_s: RabbitMQ's management API, whose figures a channel closed too soon
    leaves out). Where every publish was answered, closing can take no more answers: the wait and the close are
    returned, to be done after the producer's "done" (beside the cell's drain and the consumers' own wait for the
    count: a quorum-queue cell's 1.25 s on the local node, paid once instead of one after the other); else the wait
    is made and the client closed here (its close may still take answers, which the figures count), and None
    returned."""
    if settle_s and not unanswered:
        until = time.monotonic() + settle_s

        def linger() -> None:
            time.sleep(max(0.0, until - time.monotonic()))
            close()

        return linger
    if settle_s:
        time.sleep(settle_s)  # the broker's count sees this channel's last publishes
    close()
    return None


def flush_while_acking(flush, idle_s: float, timing: dict) -> int:
    """Flush until every message is acknowledged, waiting while acknowledgements still arrive: give up
    after `idle_s` without one, or at the drain's cap (a broker that is slow but working is waited for,
    one that stopped answering is not). Returns the messages still unacknowledged."""
    sending_s = max(0.0, (time.monotonic_ns() - timing["t_start"]) / SECOND_NS)
    cap = time.monotonic() + Drain.cap_s(idle_s, sending_s)
    left = flush(min(1.0, idle_s))
    last_growth = time.monotonic()
    while left:
        now = time.monotonic()
        if now - last_growth >= idle_s or now >= cap:
            return int(left)
        before, left = left, flush(min(1.0, idle_s))
        if left < before:
            last_growth = time.monotonic()
    return 0


def _python_loop(driver, task: ProducerTask, codec, pool, timing: dict, schedule: Schedule | None,
                 reports: queue.Queue, conn, settle_s: float = 0.0) -> dict:
    """The send loop in Python, for where the native one cannot run (Redis TLS, MSK IAM, not built)."""
    cell = task.cell
    objects = pool.objects
    pool_size = len(objects)
    encode = codec.encode
    partitions = lanes(cell)
    single = cell["mode"] == "single"
    clock = time.monotonic_ns
    pack = HEADER.pack
    pid = task.producer_id

    acked_headers: list[bytes] = []
    acked_ns = array("q")
    failed_headers: list[bytes] = []

    def on_ack(header: bytes, ok: bool, at_ns: int) -> None:  # at_ns: stamped by the driver where it arrived
        if ok:
            acked_headers.append(header)
            acked_ns.append(at_ns)
        else:
            failed_headers.append(header)

    producer = driver.producer(task.topic, partitions, cell["mode"], on_ack)
    send, poll = producer.send, producer.poll

    # Per message the loop keeps two timestamps; delay, encode time and bytes follow in bulk at each
    # interval's end from the sequence numbers (intended times come from the schedule itself).
    start_ns = array("q")  # when the worker took the message up (after waiting for its intended time)
    send_ns = array("q")  # when the encoded message was handed to the client
    start_append, send_append = start_ns.append, send_ns.append
    t_end = timing["t_end"]
    intervals = _Intervals(timing, reports, schedule)
    measured_limit = task.message_limit
    due = schedule.due_function() if schedule else None

    def close_interval() -> None:
        nonlocal acked_headers, acked_ns, failed_headers
        begin, end = intervals.start_seq, len(send_ns)
        intervals.close(end, start_ns[begin:end], send_ns[begin:end], acked_headers, acked_ns, failed_headers)
        acked_headers, acked_ns, failed_headers = [], array("q"), []

    def wait_until(target: int) -> None:
        """Wait in the client's poll, which serves acknowledgements as they arrive (a sleep would leave them
        to be stamped when it ends); closer than SPIN_NS, spin on the clock alone."""
        while True:
            remaining = target - clock()
            if remaining <= 0:
                return
            if remaining > SPIN_NS:
                poll((remaining - SPIN_NS) / SECOND_NS)

    await_measure = _AwaitMeasure(conn, timing, intervals)
    seq = 0
    while True:
        first = intervals.first_measured_seq
        if measured_limit is not None and first is not None and seq - first >= measured_limit:
            break
        now = clock()
        if await_measure.pending:
            await_measure.check_every(now)
            t_end = timing["t_end"]
        if due:
            intended = due(seq)
            if intended >= t_end:
                break
            if now < intended:
                wait_until(min(intended, intervals.next_boundary))
                if clock() >= intervals.next_boundary:
                    close_interval()
                continue
        if now >= t_end:  # behind schedule at the end: stop on time; what was still due is counted as not sent
            break
        if now >= intervals.next_boundary:
            close_interval()
        t0 = clock()
        if not due:  # as fast as possible: intended when the boundary was checked, so that a message taken up
            intended = now  # across it is warm-up on both sides (the consumer reads measured from this stamp)
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

    unanswered = flush_while_acking(producer.flush, cell["drain_timeout_s"], timing)
    # its last flush serves acknowledgements too: closed first (unless nothing is left to answer), so that they are
    # counted below
    linger = close_after_settle(producer.close, settle_s, unanswered)
    if intervals.first_measured_seq is None:  # the run ended inside the warm-up
        intervals.first_measured_seq = len(send_ns)
    close_interval()
    first = intervals.first_measured_seq
    return {"sent_total": seq, "first_measured_seq": first, "sent": max(0, seq - first),
            "last_send_ns": send_ns[-1] if send_ns else timing["measure_start"], LINGER: linger,
            "stamps": stamps_of(producer)}
