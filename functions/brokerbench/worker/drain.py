"""When a cell's consumers stop receiving: a rule of its own, driven by the parent, tested alone.

Once every producer has flushed, the consumers report how many distinct messages they hold. The
drain ends as soon as everything the broker accepted has arrived. While deliveries keep coming it
waits, bounded: it gives up after `timeout_s` with no new delivery, or after `cap_s` in all. Then
the consumers get a short late window: what arrives in it is counted as late, not measured; what
never arrives is lost. With several consumers the total is what counts, so no consumer waits for
messages that went to another.

A publish the producer had no answer to (a broker killed with it in flight) may or may not be stored, so the drain
waits for it as for the rest: up to the whole idle timeout (30 s in the guarantees suite) for a message that was
never stored. When only such messages are missing (everything acknowledged has arrived), the broker's own count of
what it still holds for the consumers' group (the driver's `backlog`) ends the wait: read 0 twice, BACKLOG_EVERY_S
apart, with nothing arriving in between, it holds none of them, and the drain stops. A broker that cannot tell
(None) is waited for as before.
"""

from __future__ import annotations

LATE_WINDOW_S = 3.0
BACKLOG_EVERY_S = 1.0  # the broker's backlog, asked at most this often and only while just unanswered ones are missing


class Drain:
    def __init__(self, sources, expected: int, timeout_s: float, sending_s: float, now: float,
                 unanswered: int = 0) -> None:
        self.counts = dict.fromkeys(sources, 0)
        self.expected = expected
        self.unanswered = unanswered  # of `expected`, the publishes no answer came for
        self.empty_since: tuple[float, int] | None = None  # (when, received) the broker's backlog first read 0
        self.asked_at = float("-inf")
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

    def wants_backlog(self, now: float) -> bool:
        """Whether to ask the broker for the group's backlog now: only unanswered publishes are missing, and it was
        not asked in the last BACKLOG_EVERY_S."""
        return (not self.stop_sent and self.unanswered > 0 and self.received < self.expected
                and self.received >= self.expected - self.unanswered and now - self.asked_at >= BACKLOG_EVERY_S)

    def backlog(self, count: int | None, now: float) -> None:
        """The broker's backlog for the group (None: it cannot tell), asked at `now`."""
        self.asked_at = now
        if count != 0:
            self.empty_since = None
        elif self.empty_since is None or self.empty_since[1] != self.received:
            self.empty_since = (now, self.received)
        elif now - self.empty_since[0] >= BACKLOG_EVERY_S:
            self.broker_empty = True

    broker_empty = False  # the broker holds nothing more for the group: what is missing was never stored

    def decide(self, now: float) -> list[tuple]:
        """Commands for the consumers now: ("stop", None) once all arrived, ("late", seconds) once the wait
        is over; each at most once."""
        if self.stop_sent:
            return []
        if self.received >= self.expected or self.broker_empty:
            self.stop_sent = True
            return [("stop", None)]
        if not self.late_sent and (now - self.last_growth >= self.timeout_s or now - self.started >= self.cap):
            self.late_sent = True
            return [("late", min(LATE_WINDOW_S, self.timeout_s))]
        return []
