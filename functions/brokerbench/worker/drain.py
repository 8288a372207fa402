"""When a cell's consumers stop receiving: a rule of its own, driven by the parent, tested alone.

Once every producer has flushed, the consumers report how many distinct messages they hold. The
drain ends as soon as everything the broker accepted has arrived. While deliveries keep coming it
waits, bounded: it gives up after `timeout_s` with no new delivery, or after `cap_s` in all. Then
the consumers get a short late window: what arrives in it is counted as late, not measured; what
never arrives is lost. With several consumers the total is what counts, so no consumer waits for
messages that went to another.
"""

from __future__ import annotations

LATE_WINDOW_S = 3.0


class Drain:
    def __init__(self, sources, expected: int, timeout_s: float, sending_s: float, now: float) -> None:
        self.counts = dict.fromkeys(sources, 0)
        self.expected = expected
        self.timeout_s = timeout_s
        self.cap = self.cap_s(timeout_s, sending_s)
        self.started = self.last_growth = now
        self.late_sent = self.stop_sent = False

    @staticmethod
    def cap_s(timeout_s: float, sending_s: float) -> float:
        """The longest drain: the idle timeout plus as long again as the sending took (at least 10 s),
        so a broker that delivers at half the offered rate still finishes inside it."""
        return timeout_s + max(10.0, sending_s)

    def update(self, source, count: int, now: float) -> None:
        if count > self.counts.get(source, 0):
            self.last_growth = now
        self.counts[source] = count

    @property
    def received(self) -> int:
        return sum(self.counts.values())

    def decide(self, now: float) -> list[tuple]:
        """Commands for the consumers now: ("stop", None) once all arrived, ("late", seconds) once the wait
        is over; each at most once."""
        if self.stop_sent:
            return []
        if self.received >= self.expected:
            self.stop_sent = True
            return [("stop", None)]
        if not self.late_sent and (now - self.last_growth >= self.timeout_s or now - self.started >= self.cap):
            self.late_sent = True
            return [("late", min(LATE_WINDOW_S, self.timeout_s))]
        return []
