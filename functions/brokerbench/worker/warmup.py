"""When a cell's warm-up ends: once end-to-end latency is steady, bounded. A rule of its own, tested alone.

The consumers report the end-to-end p99 of every half second of the warm-up (aligned to the start of
sending). Measurement may begin once `min_s` has passed and the last three complete half-seconds are
steady: the highest p99 at most 1.5 times the lowest (or all within 1 ms), and not rising in each step
(latency that climbs steadily, however gently, is a queue that grows). At `max_s` it begins anyway,
and the cell records that its warm-up never settled. A window with too few messages to have a p99
does not hold the warm-up back (a slow cell would otherwise always wait for the bound).
"""

from __future__ import annotations

WINDOW_NS = 500_000_000
STEADY_RATIO = 1.5
STEADY_ABS_US = 1000.0
MIN_SAMPLES = 10
STEADY_WINDOWS = 3
DEFAULT_EXTRA_S = 10.0


def warmup_max_s(cell: dict) -> float:
    """The bound: warmup_max_s, or warmup_s + 10 s when the spec leaves it open."""
    bound = cell.get("warmup_max_s")
    return max(cell["warmup_s"], bound if bound is not None else cell["warmup_s"] + DEFAULT_EXTRA_S)


def steady(windows: list[float | None]) -> bool:
    """The last STEADY_WINDOWS half-seconds' p99 (µs) agree and do not climb."""
    if len(windows) < STEADY_WINDOWS:
        return False
    known = [w for w in windows[-STEADY_WINDOWS:] if w is not None]
    if len(known) < 2:  # too few messages to tell: nothing to wait for
        return True
    low, high = min(known), max(known)
    if high - low > STEADY_ABS_US and high > STEADY_RATIO * low:
        return False
    rising = all(b > a for a, b in zip(known, known[1:]))
    return not (rising and known[-1] - known[0] > STEADY_ABS_US)


class WarmupWatch:
    """The parent's view of the warm-up: per window, the highest p99 any consumer saw."""

    def __init__(self, sources, t_start_ns: int, min_s: float, max_s: float) -> None:
        self.sources = set(sources)
        self.t_start = t_start_ns
        self.min_ns, self.max_ns = int(min_s * 1e9), int(max(min_s, max_s) * 1e9)
        self.windows: dict[int, dict] = {}  # window -> {source: (p99_us or None, count)}
        self.decided: dict | None = None

    def add(self, source, window: int, p99_us: float | None, count: int) -> None:
        self.windows.setdefault(window, {})[source] = (p99_us if count >= MIN_SAMPLES else None, count)

    def _p99(self, window: int) -> float | None:
        values = [p for p, _ in self.windows[window].values() if p is not None]
        return max(values) if values else None

    def complete(self) -> list[int]:
        return sorted(w for w, reports in self.windows.items() if set(reports) >= self.sources)

    def decide(self, now_ns: int) -> bool:
        """True once measurement may start (the reason and the figures are kept in `decided`)."""
        if self.decided is not None:
            return True
        complete = self.complete()
        series = [self._p99(w) for w in complete]
        past_minimum = bool(complete) and (complete[-1] + 1) * WINDOW_NS >= self.min_ns
        if past_minimum and steady(series):
            self.decided = {"steady": True, "p99_us": series}
        elif now_ns - self.t_start >= self.max_ns:
            self.decided = {"steady": False, "p99_us": series}
        return self.decided is not None
