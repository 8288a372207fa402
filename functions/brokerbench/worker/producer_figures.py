"""A producer's per-interval figures and accounting, derived in the cell's parent from the send loop's raw records.

The producer process only measures: per interval its send loop hands over raw int64 buffers (when each message
was taken up and handed to the client, which sequence numbers were acknowledged and when, which failed), and a
thread forwards them over the pipe as they are (`send_records`, no copy, no numpy). Everything derived from them
(publish delay, encode time, bytes, publish latency, the acknowledgement bookkeeping, how full the producer's
in-flight window was) is worked out here, in the parent (`ProducerFigures`). So the producer's interpreter lock is
never held for per-interval numpy work while its send loop waits to encode the next message: a raw cell (whose native
loop never needs the lock) and a coded cell (which needs it to call the codec) are measured under the same
conditions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import histogram
from .framing import HEADER_DTYPE
from .schedule import Schedule, not_sent_bounds_us

# Acknowledgements stamped within this of the first measured one came with it: one response's delivery reports
# run back to back (the native loop's ~0.1 µs apart, the Python loop's ~1-2 µs), so a batch of a thousand is
# stamped within it. Counting a few later ones with them costs nothing: they are counted at the measured rate.
FIRST_ACKS_NS = 1_000_000
RECORDS = "records"  # the pipe message that announces one interval's raw buffers
BUFFERS = ("started", "handed", "acked", "acked_ns", "failed")


def send_records(conn, interval: int, first_seq: int, started, handed, acked, acked_ns, failed,
                 first_measured_seq: int) -> None:
    """One interval's raw records to the parent: a small header, then each buffer as it is (bytes, array("q"), or
    the Python loop's list of message headers, joined). Large buffers are written without a copy, and the write
    lets go of the interpreter lock while the pipe is full."""
    headers = isinstance(acked, list)
    if headers:
        acked, failed = b"".join(acked), b"".join(failed)
    conn.send((RECORDS, interval, {"first_seq": first_seq, "first_measured_seq": first_measured_seq,
                                   "headers": headers}))
    for buffer in (started, handed, acked, acked_ns, failed):
        conn.send_bytes(buffer)


def recv_records(conn, interval: int, meta: dict) -> dict:
    """The buffers that follow a RECORDS header (send_records), with the header's fields."""
    return {"interval": interval, **meta, **{name: conn.recv_bytes() for name in BUFFERS}}


@dataclass
class AckTotals:
    """What the producer's acknowledgements add up to over the whole cell (warm-up included)."""

    acked_total: int = 0  # every message the broker acknowledged, warm-up included
    failed_total: int = 0  # every failed send, warm-up included (measured ones: the intervals' send_errors)
    delivered: int = 0  # acknowledgements from the start of measurement on, warm-up messages included
    bytes_delivered: int = 0
    last_ack_ns: int | None = None  # when the last measured message was acknowledged
    # The start of the delivery window (outcome.delivery): the earliest intended send time of a measured message,
    # when the first measured acknowledgement came, and how many measured ones came with it (FIRST_ACKS_NS).
    first_intended_ns: int | None = None
    first_ack_ns: int | None = None
    first_acks: int = 0


class AckedSeqs:
    """A set of sequence numbers (those the broker acknowledged, or those whose send failed), as a growing bitmap."""

    def __init__(self) -> None:
        self.bits = np.zeros(0, dtype=bool)

    def add(self, seqs: np.ndarray) -> None:
        if not seqs.size:
            return
        top = int(seqs.max()) + 1
        if top > self.bits.size:
            grown = np.zeros(max(top, 2 * self.bits.size, 1024), dtype=bool)
            grown[: self.bits.size] = self.bits
            self.bits = grown
        self.bits[seqs] = True

    def has(self, seqs: np.ndarray) -> np.ndarray:
        """Whether each of `seqs` is in the set."""
        inside = seqs < self.bits.size
        out = np.zeros(seqs.size, dtype=bool)
        out[inside] = self.bits[seqs[inside]]
        return out

    def missing(self, first: int, end: int) -> np.ndarray:
        """The sequence numbers in [first, end) never acknowledged."""
        seen = np.zeros(max(0, end - first), dtype=bool)
        known = self.bits[first:end]
        seen[: known.size] = known
        return np.flatnonzero(~seen).astype(np.int64) + first


def in_flight_at(first_seq: int, handed: np.ndarray, acked_ns: np.ndarray, done_before: int) -> np.ndarray:
    """How many messages were in flight as each of an interval's messages was handed to the client, itself included:
    the messages handed before it (its sequence number: a producer hands them over in order from 0) and itself, less
    the acknowledgements and failures that came before that moment: `done_before` reported in earlier intervals, and
    those of this interval's acknowledgements stamped before it (`acked_ns`, sorted).

    Itself included, so that a count at the window means it waited for room or left none for the next send (Redis,
    RabbitMQ: a send fills the window, then waits; Kafka, NATS: a send waits when the window is already full), and a
    single-mode send (window 1, each waiting for its acknowledgement) always meets it full."""
    seqs = np.arange(first_seq + 1, first_seq + 1 + handed.size, dtype=np.int64)
    return seqs - done_before - np.searchsorted(acked_ns, handed, side="left")


@dataclass
class InFlight:
    """How full one producer's in-flight window was over its measured intervals: its sends, those that met the window
    full (in flight, themselves included, at least `window`), the sum of what was in flight at each (at most the
    window: a count above it is an acknowledgement stamped just after its report was taken), and how long it waited
    for room: from handing over a send that met the window full to taking up the next message (both loops wait for
    room there), against the whole time from its first measured message taken up to its last handed over."""

    window: int | None
    sends: int = 0
    full: int = 0
    in_flight_sum: int = 0
    waited_ns: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    last_full: bool = False  # the latest send met the window full: its wait ends in the next interval

    def add(self, in_flight: np.ndarray, started: np.ndarray, handed: np.ndarray) -> None:
        if self.window is None or not in_flight.size:
            return
        full = in_flight >= self.window
        self.sends += int(in_flight.size)
        self.full += int(np.count_nonzero(full))
        self.in_flight_sum += int(np.clip(in_flight, 0, self.window).sum())
        if self.last_full:
            self.waited_ns += int(started[0] - self.last_ns)
        self.waited_ns += int((started[1:] - handed[:-1])[full[:-1]].sum())
        self.first_ns = int(started[0]) if self.first_ns is None else self.first_ns
        self.last_ns, self.last_full = int(handed[-1]), bool(full[-1])


@dataclass(frozen=True)
class WindowShares:
    """Over a cell's producers (None when no window is known, or nothing was sent in the measured intervals): the
    share of sends that met a full window, the mean in flight at a send as a share of the window, and the share of the
    sending time spent waiting for room."""

    full: float | None = None
    in_flight_mean: float | None = None
    waited: float | None = None


def window_shares(producers: list[InFlight]) -> WindowShares:
    known = [p for p in producers if p.window and p.sends]
    sends = sum(p.sends for p in known)
    if not sends:
        return WindowShares()
    span = sum(p.last_ns - p.first_ns for p in known)
    return WindowShares(sum(p.full for p in known) / sends, sum(p.in_flight_sum / p.window for p in known) / sends,
                        sum(p.waited_ns for p in known) / span if span > 0 else None)


def never_acknowledged(acked: AckedSeqs, failed: AckedSeqs, first: int, end: int) -> tuple[np.ndarray, int]:
    """The measured messages (sequence numbers first..end-1) never acknowledged, send errors among them, and how
    many of them had no report at all (unacknowledged). Warm-up messages count in neither, as `sent` counts
    measured messages only. The consumers say which of the first arrived anyway, so that none is counted both
    delivered and unacknowledged (outcome.totals)."""
    missing = acked.missing(first, end)
    return missing, int(missing.size - np.count_nonzero(failed.has(missing)))


def _seqs(reported: bytes, headers: bool) -> np.ndarray:
    """Sequence numbers from the loop's records: message headers (Python loop) or int64 values (native loop)."""
    if headers:
        return np.frombuffer(reported, dtype=HEADER_DTYPE)["seq"].astype(np.int64)
    return np.frombuffer(reported, dtype=np.int64)


class AckGap:
    """The longest stretch without an acknowledgement from `from_ns` on (a cell's first fault): from the later of
    that moment and the acknowledgement before, to the next one; at the end, a stretch still open runs to the end
    (`until_end`). The producer's side of a fault's unavailability window, to the acknowledgement's own stamp."""

    def __init__(self) -> None:
        self.from_ns: int | None = None
        self.last: int | None = None  # the latest acknowledgement so far
        self.longest: tuple[int, int] | None = None
        self.until_end = False

    def add(self, acked_ns: np.ndarray) -> None:
        if not acked_ns.size:
            return
        times = np.sort(acked_ns)
        if self.from_ns is not None:
            after = times[times >= self.from_ns]
            if after.size:
                first = self.from_ns if self.last is None else max(self.last, self.from_ns)
                starts = np.concatenate(([first], after[:-1]))
                k = int(np.argmax(after - starts))
                self._consider(int(starts[k]), int(after[k]))
        self.last = int(times[-1]) if self.last is None else max(self.last, int(times[-1]))

    def _consider(self, start: int, end: int) -> None:
        if self.longest is None or end - start > self.longest[1] - self.longest[0]:
            self.longest = (start, end)
            self.until_end = False

    def finish(self, end_ns: int) -> None:
        """The cell's sending ended at `end_ns`: a stretch without acknowledgements still open counts to there."""
        if self.from_ns is None or end_ns <= self.from_ns:
            return
        before = self.longest
        self._consider(self.from_ns if self.last is None else max(self.last, self.from_ns), end_ns)
        self.until_end = self.longest is not before


class ProducerFigures:
    """One producer's figures, fed its intervals' raw records in order (`add`), completed by its "done" (`finish`).
    Send errors are the failures of measured messages only, as `sent` counts measured messages only."""

    def __init__(self, sizes: np.ndarray, pool_size: int, schedule: Schedule | None, window: int | None = None) -> None:
        self.sizes, self.pool_size, self.schedule = sizes, pool_size, schedule
        self.acks = AckTotals()
        self.in_flight = InFlight(window)
        self.acked, self.failed = AckedSeqs(), AckedSeqs()
        self.firsts: list[int] = []  # first sequence number of each measured interval's send times
        self.chunks: list[np.ndarray] = []
        self.gap = AckGap()  # from the cell's first fault on (its from_ns set by the cell), else unused

    def add(self, records: dict) -> dict | None:
        """One interval's snapshot (counters and raw values, as intervals.IntervalAggregator takes them); None for
        the warm-up (-1), whose acknowledgements and failures count in the totals only."""
        first_measured_seq = records["first_measured_seq"]
        acked_seqs = _seqs(records["acked"], records["headers"])
        failed_seqs = _seqs(records["failed"], records["headers"])
        measured = records["interval"] >= 0
        if measured:  # before this interval's reports are counted: those came while its messages were handed over
            self._occupancy(records, acked_seqs.size)
        self._count(acked_seqs, failed_seqs)
        if self.gap.from_ns is not None:
            self.gap.add(np.frombuffer(records["acked_ns"], dtype=np.int64)[:acked_seqs.size])
        if not measured:  # warm-up: counted above, never measured
            return None
        acks, sizes, pool_size = self.acks, self.sizes, self.pool_size
        acks.delivered += int(acked_seqs.size)
        acks.bytes_delivered += int(sizes[acked_seqs % pool_size].sum())
        first_seq = records["first_seq"]
        started = np.frombuffer(records["started"], dtype=np.int64)
        handed = np.frombuffer(records["handed"], dtype=np.int64)
        seqs = np.arange(first_seq, first_seq + started.size, dtype=np.int64)
        self.firsts.append(first_seq)
        self.chunks.append(handed)  # whole: acknowledgements are looked up by sequence number
        if first_seq < first_measured_seq:  # sent late but intended in the warm-up: not measured
            measured = seqs >= first_measured_seq
            seqs, started, handed = seqs[measured], started[measured], handed[measured]
        intended = self.schedule.intended(seqs) if self.schedule else started
        if intended.size:
            first = int(intended.min())
            acks.first_intended_ns = min(acks.first_intended_ns or first, first)
        latency, acked_at = _publish_latency(acked_seqs, records["acked_ns"], self.firsts, self.chunks,
                                             first_measured_seq)
        self._window(acked_at)
        return {
            "counters": {"sent": int(seqs.size), "bytes": int(sizes[seqs % pool_size].sum()),
                         "acked": int(latency.size),
                         "send_errors": int(np.count_nonzero(failed_seqs >= first_measured_seq))},
            "values": {"publish_delay_us": (started - intended).tobytes(), "encode_ns": (handed - started).tobytes(),
                       "publish_latency_us": latency.tobytes()},
        }

    def _occupancy(self, records: dict, acked: int) -> None:
        """The window's occupancy as each message of the interval was handed over (in_flight_at). A failure carries no
        time: it counts from the next interval on, as if reported at the end of the one that reported it."""
        if self.in_flight.window is None:
            return
        handed = np.frombuffer(records["handed"], dtype=np.int64)
        acked_ns = np.sort(np.frombuffer(records["acked_ns"], dtype=np.int64)[:acked])
        done_before = self.acks.acked_total + self.acks.failed_total
        self.in_flight.add(in_flight_at(records["first_seq"], handed, acked_ns, done_before),
                           np.frombuffer(records["started"], dtype=np.int64), handed)

    def _window(self, acked_at: np.ndarray) -> None:
        """The first and last measured acknowledgement, and how many came with the first."""
        if not acked_at.size:
            return
        acks = self.acks
        last = int(acked_at.max())
        acks.last_ack_ns = max(acks.last_ack_ns or last, last)
        if acks.first_ack_ns is None:
            acks.first_ack_ns = int(acked_at.min())
        acks.first_acks += int(np.count_nonzero(acked_at <= acks.first_ack_ns + FIRST_ACKS_NS))

    def _count(self, acked_seqs: np.ndarray, failed_seqs: np.ndarray) -> None:
        """The whole cell's acknowledgements and failures (warm-up included)."""
        acks = self.acks
        acks.acked_total += int(acked_seqs.size)
        acks.failed_total += int(failed_seqs.size)
        self.acked.add(acked_seqs)
        self.failed.add(failed_seqs)

    def finish(self, done: dict) -> dict:
        """The producer's "done" with the accounting added: the totals, the measured messages never
        acknowledged (`not_acked`), of which `unacked` had no report at all, and the least latency of each message
        it owed and never sent (`not_sent_bounds`: a histogram in µs, None when it owed none)."""
        not_acked, unacked = never_acknowledged(self.acked, self.failed, done["first_measured_seq"],
                                                done["sent_total"])
        return {**done, **vars(self.acks), "unacked": unacked, "not_acked": not_acked, "in_flight": self.in_flight,
                "not_sent_bounds": self._not_sent_bounds(done)}

    def _not_sent_bounds(self, done: dict):
        """The cell's end less the intended time of each message due and never sent (schedule.unsent: the last
        `not_sent` before `due_end_seq`), as a histogram in µs; None when none."""
        owed = done.get("not_sent") or 0
        if not owed or self.schedule is None:
            return None
        bounds = histogram.new()
        end = done["due_end_seq"]
        for chunk in not_sent_bounds_us(self.schedule, end - owed, end, done["t_end"]):
            histogram.record_many(bounds, chunk)
        return bounds


def _publish_latency(seqs: np.ndarray, ack_ns, firsts: list[int], chunks: list[np.ndarray],
                     first_measured_seq: int) -> tuple[np.ndarray, np.ndarray]:
    """send→ack in ns for the acknowledged measured messages (warm-up acks dropped), and when each of them was
    acknowledged."""
    if not seqs.size:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    acked = np.frombuffer(ack_ns, dtype=np.int64)[: seqs.size]
    measured = seqs >= first_measured_seq
    seqs, acked = seqs[measured], acked[measured]
    if not seqs.size:
        return np.empty(0, np.int64), acked
    which = np.searchsorted(np.asarray(firsts), seqs, side="right") - 1
    sent = np.empty(seqs.size, dtype=np.int64)
    for chunk in np.unique(which).tolist():  # acks mostly belong to the latest one or two intervals
        here = which == chunk
        sent[here] = chunks[chunk][seqs[here] - firsts[chunk]]
    return acked - sent, acked
