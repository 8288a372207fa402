"""One consumer process: receive, decode (timed), account for every (producer, sequence).

Each message's receipt is stamped when the poll that brought it returns, before any message of that poll is
decoded. Delivery latency is receipt minus intended send time: the broker and its client, no codec.
End-to-end latency is delivery latency plus the message's own decode time, so decoding the earlier
messages of the same poll is in neither.
"""

from __future__ import annotations

import gc
import queue
import threading
import time
from array import array
from dataclasses import dataclass

import numpy as np

from .. import native
from ..codecs import get_codec
from ..registry import get_driver
from .framing import PROBE_PRODUCER, is_probe, unpack_many
from . import priority
from .processes import serve, stacks_fd
from .producer_figures import AckGap
from .schedule import cell_schedules, shaped
from .warmup import WINDOW_NS as WARM_WINDOW_NS

SECOND_NS = 1_000_000_000
POLL_TIMEOUT_S = 0.05
# While draining, how often a consumer tells the parent how many distinct messages it has.
PROGRESS_EVERY_NS = 100_000_000


class ArrivalBound:
    """Over the measured window, the polls of a consumer whose deliveries are stamped at the latest of the responses
    their messages can have come from (a driver's `arrival_responses` and `arrival_spread_ns` beside `arrived_ns`:
    Kafka's, at the read of a Fetch response): how many brought messages, how many of them could have them from one
    response only (there the stamp is that response's own read), and over the rest the spread, latest − earliest
    response's read: the most the stamp can come after the read of the response that carried a message."""

    def __init__(self) -> None:
        self.polls = 0
        self.single = 0
        self.spreads = array("q")

    def add(self, responses: int | None, spread_ns: int | None) -> None:
        if responses is None:  # the driver says nothing of the responses: no bound
            return
        self.polls += 1
        if responses == 1:
            self.single += 1
        elif spread_ns is not None:
            self.spreads.append(spread_ns)

    def record(self) -> dict:
        spreads = np.frombuffer(self.spreads, dtype=np.int64) if self.spreads else None
        return {"polls": self.polls, "single_response_polls": self.single,
                "spread_p99_us": None if spreads is None else round(float(np.percentile(spreads, 99)) / 1000, 1),
                "spread_max_us": None if spreads is None else round(int(spreads.max()) / 1000, 1)}


@dataclass
class ConsumerTask:
    cell: dict
    endpoint: dict
    topic: str
    group: str
    consumer_id: int
    partitions: list[int]
    normal_why: str | None = None  # why it runs at normal priority (priority.decide); None: real-time


class ShapeFigures:
    """What a shaped schedule's figures need from one consumer (see schedule.py): its first delivery, the
    startup backlog's messages it received and when the last came, and per burst cycle how many of the burst's
    messages it received and when the last came."""

    def __init__(self, cell: dict, t_start: int) -> None:
        self.schedules = cell_schedules(cell, t_start)
        self.first_delivery_ns: int | None = None
        self.backlog_received = 0
        self.backlog_last_ns: int | None = None
        self.bursts: dict[int, list[int]] = {}  # cycle -> [messages received, last delivery ns]

    def add(self, producers: np.ndarray, seqs: np.ndarray, delivered: np.ndarray) -> None:
        """Distinct deliveries (producer id, sequence number, delivered at)."""
        if not seqs.size:
            return
        first = int(delivered.min())
        self.first_delivery_ns = first if self.first_delivery_ns is None else min(self.first_delivery_ns, first)
        for producer in np.unique(producers).tolist():
            here = producers == producer
            backlog, burst, cycle = self.schedules[producer].kinds(seqs[here])
            at = delivered[here]
            if backlog.any():
                self.backlog_received += int(backlog.sum())
                last = int(at[backlog].max())
                self.backlog_last_ns = last if self.backlog_last_ns is None else max(self.backlog_last_ns, last)
            for c in np.unique(cycle[burst]).tolist():
                mine = burst & (cycle == c)
                entry = self.bursts.setdefault(int(c), [0, 0])
                entry[0] += int(mine.sum())
                entry[1] = max(entry[1], int(at[mine].max()))

    def record(self) -> dict:
        return {"first_delivery_ns": self.first_delivery_ns, "backlog_received": self.backlog_received,
                "backlog_last_ns": self.backlog_last_ns, "bursts": self.bursts}


class Accounting:
    """Distinct, duplicate and out-of-order deliveries per producer, from the sequence numbers (in bulk)."""

    def __init__(self) -> None:
        self.seen: dict[int, np.ndarray] = {}
        self.last_seq: dict[tuple[int, int], int] = {}
        self.duplicated = 0
        self.out_of_order = 0

    def add_many(self, producers: np.ndarray, seqs: np.ndarray, partitions: np.ndarray) -> np.ndarray:
        """Record deliveries in arrival order; returns which of them are not duplicates."""
        fresh = np.ones(seqs.size, dtype=bool)
        for producer in np.unique(producers).tolist():
            where = np.flatnonzero(producers == producer)
            s = seqs[where]
            seen = self.seen.get(producer, np.zeros(0, dtype=bool))
            if s.max() >= seen.size:
                grown = np.zeros(max(int(s.max()) + 1, 2 * seen.size, 1024), dtype=bool)
                grown[: seen.size] = seen
                seen = self.seen[producer] = grown
            first = np.zeros(s.size, dtype=bool)
            first[np.unique(s, return_index=True)[1]] = True  # a repeat inside this batch is a duplicate too
            duplicate = seen[s] | ~first
            seen[s] = True
            fresh[where] = ~duplicate
            self.duplicated += int(duplicate.sum())
            parts = partitions[where]
            for partition in np.unique(parts).tolist():  # reordering counts per producer and partition
                in_order = s[parts == partition]
                running = np.maximum.accumulate(np.r_[self.last_seq.get((producer, partition), -1), in_order])
                self.out_of_order += int((in_order < running[:-1]).sum())
                self.last_seq[(producer, partition)] = int(running[-1])
        return fresh

    def add(self, producer: int, seq: int, partition: int) -> bool:
        return bool(self.add_many(np.array([producer]), np.array([seq]), np.array([partition]))[0])

    def delivered_of(self, producer: int, seqs: np.ndarray) -> int:
        """How many of `seqs` (sequence numbers of `producer`) were delivered."""
        seen = self.seen.get(producer)
        if seen is None or not seqs.size:
            return 0
        return int(seen[seqs[seqs < seen.size]].sum())

    def received_from(self, producer: int, first_seq: int = 0, end_seq: int | None = None) -> int:
        seen = self.seen.get(producer)
        return 0 if seen is None else int(seen[first_seq:end_seq].sum())


def consumer_main(conn, task: ConsumerTask) -> None:
    serve("consumer", task.consumer_id, conn, lambda grant: _run(conn, task, grant), task.normal_why)


# Received messages are processed in bulk once this many wait (or at each interval's end).
PROCESS_EVERY = 8192


def _await_go(conn, consumer, partitions: set[int], idle_when_probed: bool) -> tuple[dict | None, list]:
    """Receive until the readiness probe has come through every assigned partition (then tell the
    parent), and until the parent says go: the consumer is fetching before the first message is sent.
    Returns the cell's timing (None when the parent stops the cell instead) and any of the cell's own
    messages that arrived before "go" was read (a busy machine can delay reading it). With
    `idle_when_probed` (a startup backlog) it reads nothing after the probe: a "go" read late must not
    let the backlog's first messages be read before the consumer holds."""
    probed: set[int] = set()
    early: list = []
    told = False
    while True:
        if conn.poll(POLL_TIMEOUT_S if told and idle_when_probed else 0):
            command, payload = conn.recv()
            return (payload if command == "go" else None), early
        if told and idle_when_probed:
            continue
        for message in consumer.poll(POLL_TIMEOUT_S):
            if is_probe(message[0]):
                probed.add(message[2])
            else:
                early.append(message)
        if not told and partitions <= probed:
            conn.send(("probed", sorted(probed)))
            told = True


class _Forwarder:
    """What the consumer tells the parent while it reads (interval snapshots, warm-up windows, drain progress), sent in
    order by a thread of its own: the poll loop only hands it over. An interval's snapshot holds every measured
    message's latencies (24 bytes each: a megabyte a second at 40k msgs/s), far more than a pipe holds, and a parent
    busy with its other processes reads it late: written from the poll loop, the consumer stopped reading until then
    (a quarter of a Pulsar consumer's samples, py-spy, in the pipe write of `close_interval`). The write releases the
    GIL, so the loop polls on meanwhile. A parent that closed the pipe (the cell ended) is not written to again."""

    def __init__(self, conn) -> None:
        self._conn = conn
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="consumer-forwarder", daemon=True)
        self._thread.start()

    def send(self, message: tuple) -> None:
        self._queue.put(message)

    def _run(self) -> None:
        while (message := self._queue.get()) is not None:
            try:
                self._conn.send(message)
            except OSError:  # BrokenPipeError and the like
                return

    def close(self) -> None:
        """Everything handed over is sent (the connection has one writer again)."""
        self._queue.put(None)
        self._thread.join()


def _run(conn, task: ConsumerTask, grant: priority.Grant) -> None:
    began_ns = time.monotonic_ns()  # the interpreter is up and this module imported (the parent logs the phases)
    cell = task.cell
    decode = get_codec(cell["format"]).decode
    driver = get_driver(cell["broker"], task.endpoint, cell["client"])
    consumer = driver.consumer(task.topic, task.group, task.partitions)
    clock = time.monotonic_ns
    accounting = Accounting()
    # Per message: its header, and (before decode, after decode, partition, size) as four int64 in a
    # record chunk; per poll: when its messages were received and how many it brought. The rest is numpy, in bulk.
    headers: list[bytes] = []
    chunks: list[bytes] = []
    polls = array("q")  # (received at: the poll's return, or its messages' arrival; messages) per poll, flat
    timed_decode = native.timed_decode_function()
    e2e_parts: list[np.ndarray] = []
    delivery_parts: list[np.ndarray] = []
    decode_parts: list[np.ndarray] = []
    counters = {"received": 0, "bytes": 0}
    # Over the whole cell: distinct deliveries (warm-up included: the parent compares them with what
    # the producers had acknowledged), measured ones in time and late, and the delivery window of the
    # measured ones in time (their first and last receipt, how many came with the first poll that brought any,
    # the earliest intended send time among them), and when the last warm-up message came.
    totals = {"distinct": 0, "received": 0, "late": 0, "first_intended_ns": None, "last_delivery_ns": None,
              "first_delivery_ns": None, "first_poll_measured": 0, "last_warmup_ns": None}
    late = False  # after the drain deadline, measured deliveries are late: counted, not measured
    receipts = AckGap()  # the longest stretch without a delivery from the cell's first fault on (fault_at_ns)

    gc.freeze()  # no reference cycles are made below: no collector pauses while receiving
    gc.disable()
    conn.send(("ready", {"began_ns": began_ns, "stacks_fd": stacks_fd()}))
    timing, early = _await_go(conn, consumer, set(task.partitions), bool(cell.get("backlog")))
    if timing is None:
        return
    forwarder = _Forwarder(conn)  # from here on, the parent is told through it (its "done" after it closed)
    try:
        if early:  # the first messages can arrive before "go" is read: they are the cell's too
            polls.extend((clock(), len(early)))
            chunks.append(timed_decode(decode, early, headers))
        shape = ShapeFigures(cell, timing["t_start"]) if shaped(cell) else None
        # A startup backlog builds up at the broker while the consumers hold (fetch nothing) until attach_ns, and until
        # the parent has taken the broker's count of it ("attach": on a loaded host the count can come late, and it
        # must find nothing read). A consumer that reads "go" late holds all the same.
        attach = timing.get("attach_ns")
        holding = attach is not None
        counted = False
        if holding:
            consumer.hold(True)
        measure_start = timing["measure_start"]  # provisional while the warm-up waits to be steady
        fault_at, span = timing.get("fault_at_ns"), timing["t_end"] - timing["measure_start"]
        idle_ns = 0  # time in polls that waited for messages, from the measured start to the schedule's end (limit.py)
        bound = ArrivalBound()  # how far a consumer's `arrived_ns` can come after the response that carried a message
        if fault_at is not None:
            receipts.from_ns = measure_start + fault_at
        interval = -1
        next_boundary = measure_start
        # Adaptive warm-up: the end-to-end p99 of each half second goes to the parent, which says when
        # measurement starts ("measure"). While warming, messages are processed only right after the control
        # pipe was read, so none that is already measured can be taken for warm-up.
        warming = timing.get("warmup_until_steady", False)
        warm_window, next_warm = 0, timing["t_start"] + WARM_WINDOW_NS
        warm_parts: list[tuple[np.ndarray, np.ndarray]] = []  # (delivered at, end-to-end ns) of warm-up messages
        draining = False  # the producers are done: tell the parent how many distinct messages arrived
        next_progress = 0
        late_until = None
        not_acked: dict = {}  # producer id -> its measured sequence numbers never acknowledged

        def process() -> None:
            if not headers:
                return
            framed = unpack_many(headers)
            records = np.frombuffer(b"".join(chunks), dtype=np.int64).reshape(-1, 4)
            stamps = np.array(polls, dtype=np.int64).reshape(-1, 2)  # a copy: `polls` is cleared below
            received_at = np.repeat(stamps[:, 0], stamps[:, 1])  # each message's receipt: its poll's stamp
            if (framed["producer"] == PROBE_PRODUCER).any():  # a readiness probe delivered again: never counted
                keep = framed["producer"] != PROBE_PRODUCER
                framed, records, received_at = framed[keep], records[keep], received_at[keep]
            t0, t1, partitions, lengths = records.T
            decoded = t1 - t0
            fresh = accounting.add_many(framed["producer"].astype(np.int64), framed["seq"].astype(np.int64), partitions)
            intended = framed["intended_ns"].astype(np.int64)
            measured = fresh & (intended >= measure_start)  # duplicates and warm-up are counted, not measured
            totals["distinct"] += int(fresh.sum())
            if receipts.from_ns is not None:
                receipts.add(received_at[fresh])
            if shape is not None:
                shape.add(framed["producer"][fresh].astype(np.int64), framed["seq"][fresh].astype(np.int64),
                          received_at[fresh])
            delivery_ns = received_at - intended
            if warming:
                warming_up = fresh & ~measured
                warm_parts.append((received_at[warming_up], (delivery_ns + decoded)[warming_up]))
            headers.clear()
            chunks.clear()
            del polls[:]
            count = int(measured.sum())
            if late:
                totals["late"] += count
                return
            warm = fresh & ~measured
            delivery_parts.append(delivery_ns[measured])
            e2e_parts.append((delivery_ns + decoded)[measured])
            decode_parts.append(decoded[measured])
            counters["received"] += count
            counters["bytes"] += int(lengths[measured].sum())
            totals["received"] += count
            if warm.any():
                last = int(received_at[warm].max())
                totals["last_warmup_ns"] = max(totals["last_warmup_ns"] or last, last)
            if count:
                if totals["first_delivery_ns"] is None:  # the first poll that brought measured messages
                    at = received_at[measured]
                    totals["first_delivery_ns"] = int(at.min())
                    totals["first_poll_measured"] = int(np.count_nonzero(at == at.min()))
                last, first = int(received_at[measured].max()), int(intended[measured].min())
                totals["last_delivery_ns"] = max(totals["last_delivery_ns"] or last, last)
                totals["first_intended_ns"] = min(totals["first_intended_ns"] or first, first)

        def close_interval() -> None:
            nonlocal interval, next_boundary
            process()
            consumer.commit()  # the broker-side backlog (end offsets - committed) follows this consumer
            snapshot = {"counters": dict(counters), "values": {
                "end_to_end_latency_us": b"".join(part.tobytes() for part in e2e_parts),
                "delivery_latency_us": b"".join(part.tobytes() for part in delivery_parts),
                "decode_ns": b"".join(part.tobytes() for part in decode_parts)}}
            e2e_parts.clear()
            delivery_parts.clear()
            decode_parts.clear()
            counters.update(received=0, bytes=0)
            if interval >= 0:
                forwarder.send(("interval", interval, snapshot))
            interval += 1
            next_boundary = measure_start + (interval + 1) * SECOND_NS

        def report_warm_windows(now: int) -> None:
            nonlocal warm_window, next_warm, warm_parts
            process()
            at = np.concatenate([p[0] for p in warm_parts] or [np.empty(0, np.int64)])
            e2e = np.concatenate([p[1] for p in warm_parts] or [np.empty(0, np.int64)])
            while now >= next_warm:
                here = at < next_warm
                p99 = float(np.percentile(e2e[here], 99)) / 1000 if here.any() else None
                forwarder.send(("warm", (warm_window, p99, int(here.sum()))))
                at, e2e = at[~here], e2e[~here]
                warm_window, next_warm = warm_window + 1, next_warm + WARM_WINDOW_NS
            warm_parts = [(at, e2e)]

        while True:
            if conn.poll():
                command, payload = conn.recv()
                if command == "measure":  # the warm-up is over: measurement starts at `payload`
                    warming = False
                    warm_parts.clear()
                    measure_start = next_boundary = payload
                    if fault_at is not None:
                        receipts.from_ns = measure_start + fault_at
                elif command == "not_acked":  # the producers' measured messages never acknowledged
                    not_acked = payload
                elif command == "attach":  # the broker's count of the startup backlog is taken
                    counted = True
                elif command == "expect":
                    draining = True
                elif command == "late":  # the drain deadline passed: what still comes is late
                    process()
                    late = True
                    late_until = clock() + int(payload * SECOND_NS)
                elif command == "stop":
                    break
            now = clock()
            if warming and now >= next_warm:
                report_warm_windows(now)
            if late_until is not None and now >= late_until:
                break
            if draining and now >= next_progress:
                process()
                forwarder.send(("progress", totals["distinct"]))
                next_progress = now + PROGRESS_EVERY_NS
            if holding:
                if now < attach or not counted:
                    conn.poll(min(POLL_TIMEOUT_S, (attach - now) / SECOND_NS) if now < attach else POLL_TIMEOUT_S)
                    if clock() >= next_boundary:
                        close_interval()
                    continue
                consumer.hold(False)
                holding = False
            asked = clock()
            messages = consumer.poll(POLL_TIMEOUT_S)
            polled = clock()  # every message of this poll was received by now: its receipt, before any decode
            if len(messages) <= 1 and not warming and asked < measure_start + span:
                # a poll that brought nothing, or the one message it waited for: idle while measured (limit.py)
                idle_ns += max(0, min(polled, measure_start + span) - max(asked, measure_start))
            if polled >= next_boundary:  # received after the boundary: they belong to the next interval
                close_interval()
            if messages:
                # A consumer that reads its own socket says when what this poll returned arrived (the kernel's
                # receive time: brokers/socket_buffer.py recv_stamped), however late the loop read it: their receipt.
                # Kafka's says when the latest Fetch response before the poll returned was read (its `arrival_responses`
                # and `arrival_spread_ns` say how far that can be from the one that carried them: ArrivalBound).
                arrived = getattr(consumer, "arrived_ns", None)
                polls.extend((min(arrived, polled) if arrived else polled, len(messages)))
                if arrived and not warming and measure_start <= polled < measure_start + span:
                    bound.add(getattr(consumer, "arrival_responses", None), getattr(consumer, "arrival_spread_ns", None))
                chunks.append(timed_decode(decode, messages, headers))
            if len(headers) >= PROCESS_EVERY and not warming:
                process()
        close_interval()  # (commits the final position: the broker's backlog after the drain is exact)
        # A consumer whose close keeps its connection open for the broker's count acknowledges here and closes
        # after "done" (drivers.Consumer: finish)
        finish = getattr(consumer, "finish", None)
        (finish or consumer.close)()
        receipts.finish(measure_start + span)
    finally:  # before anything else is sent: the connection has one writer at a time
        forwarder.close()
    conn.send(("done", {
        "consumer_id": task.consumer_id,
        "priority": grant.record(),
        **totals,
        "duplicated": accounting.duplicated,
        "out_of_order": accounting.out_of_order,
        # of the messages the producers never had acknowledged, those delivered here all the same
        "delivered_not_acked": sum(accounting.delivered_of(producer, seqs) for producer, seqs in not_acked.items()),
        **({"shape": shape.record()} if shape is not None else {}),
        **({"receipt_gap": [*receipts.longest, receipts.until_end]} if receipts.longest else {}),
        "idle_share": round(max(0, idle_ns) / span, 4) if span > 0 else None,
        "stamps": getattr(consumer, "stamps", None),  # how its deliveries' receipts were stamped (brokerbench.figures)
        **({"stamp_bound": bound.record()} if bound.polls else {}),
    }))
    if finish is not None:
        consumer.close()
