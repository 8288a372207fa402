"""When each message of a producer is due: the open-loop send schedule, constant or shaped.

A producer's schedule is a backlog phase (the cell's `backlog`: that producer's share of the messages at
its share of the backlog rate, sent before the consumers read) followed by repeating cycles of fixed
length. A constant rate is one message per cycle of one period; `burst` makes each cycle `every_s` long,
with the baseline rate's messages spread evenly over it and the burst's messages spread evenly over its
first `over_s`:

    intended(seq) = base + seq * backlog_period                                    (seq < backlog)
    intended(seq) = base + backlog * backlog_period + (r // k) * cycle + offsets[r % k], r = seq - backlog

(each product truncated to whole ns). The Python loop, the cell's parent (producer_figures) and the native loop
(`Sender.configure`) compute exactly this, so all three agree on every message's intended time; the
consumer rebuilds the same schedules to tell backlog, burst and baseline messages apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

SECOND_NS = 1_000_000_000


@dataclass(frozen=True)
class Schedule:
    base: int  # ns: when message 0 is due
    backlog: int  # messages of the backlog phase (0: none)
    backlog_period: float  # ns between backlog messages
    cycle_ns: float  # ns: one cycle after the backlog
    offsets: np.ndarray  # int64, sorted: when each of a cycle's messages is due, from the cycle's start
    burst: np.ndarray  # bool: which of a cycle's messages belong to its burst

    @property
    def per_cycle(self) -> int:
        return int(self.offsets.size)

    @property
    def cycles_start(self) -> int:
        """When the backlog phase ends and the first cycle starts (ns)."""
        return self.base + int(self.backlog * self.backlog_period)

    def cycle_start(self, cycle: int) -> int:
        return self.cycles_start + int(cycle * self.cycle_ns)

    def at(self, seq: int) -> int:
        if seq < self.backlog:
            return self.base + int(seq * self.backlog_period)
        cycle, slot = divmod(seq - self.backlog, self.per_cycle)
        return self.cycle_start(cycle) + int(self.offsets[slot])

    def due_function(self):
        """`at` as a closure for the Python send loop, as cheap per message as the schedule allows."""
        base, backlog, backlog_period, cycle_ns = self.base, self.backlog, self.backlog_period, self.cycle_ns
        if not backlog and self.per_cycle == 1 and not self.offsets[0]:
            return lambda seq: base + int(seq * cycle_ns)  # a constant rate
        start, offsets, per_cycle = self.cycles_start, self.offsets.tolist(), self.per_cycle

        def due(seq: int) -> int:
            if seq < backlog:
                return base + int(seq * backlog_period)
            cycle, slot = divmod(seq - backlog, per_cycle)
            return start + int(cycle * cycle_ns) + offsets[slot]
        return due

    def intended(self, seqs: np.ndarray) -> np.ndarray:
        """`at` for many sequence numbers at once (int64 ns)."""
        seqs = np.asarray(seqs, dtype=np.int64)
        out = np.empty(seqs.size, dtype=np.int64)
        early = seqs < self.backlog
        out[early] = self.base + (seqs[early] * self.backlog_period).astype(np.int64)
        rest = seqs[~early] - self.backlog
        cycle, slot = np.divmod(rest, self.per_cycle)
        out[~early] = self.cycles_start + (cycle * self.cycle_ns).astype(np.int64) + self.offsets[slot]
        return out

    def kinds(self, seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each sequence number: whether it is a backlog message, whether a burst message, and its cycle
        (-1 in the backlog)."""
        seqs = np.asarray(seqs, dtype=np.int64)
        backlog = seqs < self.backlog
        rest = np.maximum(seqs - self.backlog, 0)
        cycle, slot = np.divmod(rest, self.per_cycle)
        return backlog, ~backlog & self.burst[slot], np.where(backlog, -1, cycle)

    def first_due_at(self, t: int) -> int:
        """The first sequence number due at or after `t` (ns)."""
        if t <= self.base:
            return 0
        high = 1
        while self.at(high) < t:
            high *= 2
        low = high // 2
        while low < high:  # the first seq in [low, high] with at(seq) >= t
            middle = (low + high) // 2
            if self.at(middle) >= t:
                high = middle
            else:
                low = middle + 1
        return low

    def native_args(self) -> dict:
        """Sender.configure's schedule arguments."""
        return {"base_ns": self.base, "period_ns": self.cycle_ns, "offsets": self.offsets.astype(np.int64).tobytes(),
                "backlog": self.backlog, "backlog_period_ns": self.backlog_period}


def unsent(schedule: Schedule | None, sent_total: int, first_measured_seq: int, measure_start: int, t_end: int,
           limit: int | None = None) -> dict:
    """What a producer owed its schedule and never sent: every message due before the cell's end (`t_end`; a cell run
    by count: among its first `limit` measured ones) is either sent or not sent. A producer behind schedule at the
    end stops on time (both send loops), so the messages it still owed are the sequence numbers from what it sent
    (or the first measured one, whichever is later) up to the first not due before the end: their intended times
    are the schedule's own, so no message needs to be kept to know them. Only measured messages (due at or after
    `measure_start`) count; an unthrottled producer owes nothing (`due` None).

    Returns due_end_seq (the first sequence number not due), due (measured messages due), not_sent (of those, never
    sent)."""
    if schedule is None:
        return {"due_end_seq": sent_total, "due": None, "not_sent": 0}
    first = max(first_measured_seq, schedule.first_due_at(measure_start))
    end = schedule.first_due_at(t_end)
    if limit is not None:
        end = min(end, first + limit)
    end = max(end, first)
    return {"due_end_seq": end, "due": end - first, "not_sent": max(0, end - max(sent_total, first))}


def not_sent_bounds_us(schedule: Schedule, first_seq: int, end_seq: int, t_end: int,
                       chunk: int = 1 << 20) -> Iterator[np.ndarray]:
    """The least latency of each message due and never sent (sequence numbers first_seq..end_seq-1): the cell's
    end less its intended time, in whole µs, taken `chunk` messages at a time (a producer stalled for minutes at
    a high rate owes millions)."""
    for start in range(first_seq, end_seq, chunk):
        yield (t_end - schedule.intended(np.arange(start, min(end_seq, start + chunk), dtype=np.int64))) // 1000


def shaped(cell: dict) -> bool:
    """Whether a cell's schedule has a backlog phase or bursts (not one constant rate)."""
    return bool(cell.get("backlog") or cell.get("burst"))


def share(total: int, parts: int, part: int) -> int:
    """Part `part` of `total` split as evenly as whole numbers allow (the first ones take the remainder)."""
    return total // parts + (1 if part < total % parts else 0)


def phase_ns(cell: dict, producer: int) -> int:
    """Producer `producer`'s schedule starts this long after the cell's, so producers interleave."""
    return int(SECOND_NS / cell["rate"] * producer)


def producer_schedule(cell: dict, producer: int, t_start: int) -> Schedule | None:
    """Producer `producer`'s schedule in a cell whose sending starts at `t_start`; None when unthrottled."""
    rate = cell["rate"]
    if not isinstance(rate, (int, float)):
        return None
    producers = cell["producers"]
    own_rate = rate / producers
    base = t_start + phase_ns(cell, producer)
    backlog = cell.get("backlog") or {}
    count = share(int(backlog.get("messages", 0)), producers, producer)
    backlog_period = SECOND_NS / (backlog["rate"] / producers) if backlog else 0.0
    burst = cell.get("burst")
    if not burst:
        return Schedule(base, count, backlog_period, SECOND_NS / own_rate, np.zeros(1, np.int64), np.zeros(1, bool))
    cycle = burst["every_s"] * SECOND_NS
    baseline = round(own_rate * burst["every_s"])
    extra = share(int(burst["messages"]), producers, producer)
    steady = (np.arange(baseline) * (cycle / baseline)).astype(np.int64) if baseline else np.zeros(0, np.int64)
    spread = burst["over_s"] * SECOND_NS / extra if extra else 0.0
    bursting = (np.arange(extra) * spread).astype(np.int64)
    offsets = np.concatenate([bursting, steady])
    is_burst = np.concatenate([np.ones(extra, bool), np.zeros(baseline, bool)])
    order = np.argsort(offsets, kind="stable")  # burst messages first where both are due at once
    return Schedule(base, count, backlog_period, float(cycle), offsets[order], is_burst[order])


def cell_schedules(cell: dict, t_start: int) -> list[Schedule | None]:
    return [producer_schedule(cell, p, t_start) for p in range(cell["producers"])]


# From the end of the backlog phase to when the consumers attach: the backlog's last messages are
# acknowledged, and the broker is asked for its own count of them (COUNT_BEFORE_ATTACH_NS before attaching).
ATTACH_LEAD_NS = 200_000_000
COUNT_BEFORE_ATTACH_NS = 100_000_000


def attach_ns(cell: dict, t_start: int) -> int:
    """When consumers start reading: ATTACH_LEAD_NS after every producer's backlog phase (t_start without one)."""
    if not cell.get("backlog"):
        return t_start
    return max(s.cycles_start for s in cell_schedules(cell, t_start) if s is not None) + ATTACH_LEAD_NS


def burst_windows(cell: dict, t_start: int, measure_start: int, t_end: int) -> list[tuple[int, int, int]]:
    """The cell's measured bursts: (cycle, first due, last due) for every cycle whose burst lies wholly in
    [measure_start, t_end), over all producers."""
    schedules = [s for s in cell_schedules(cell, t_start) if s is not None]
    if not cell.get("burst") or not schedules:
        return []
    windows = []
    cycle = 0
    while True:
        dues = [s.cycle_start(cycle) + s.offsets[s.burst] for s in schedules if s.burst.any()]
        if not dues:
            return []
        first, last = min(int(d.min()) for d in dues), max(int(d.max()) for d in dues)
        if first >= t_end or last >= t_end:
            return windows
        if first >= measure_start:
            windows.append((cycle, first, last))
        cycle += 1
