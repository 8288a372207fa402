"""The maximum sustainable rate: bracket, bisect, then measure the bracket's ends again.

A step is a whole fixed-rate measurement (warm-up, schedule, drain) judged by the same
sustainability verdict as any rated cell. The search grows the rate by GROWTH until a step is not
sustainable (or shrinks it until one is), then bisects between the highest sustainable and the
lowest unsustainable rate until they are within `precision` of each other. An inconclusive or
failed step counts as not sustainable.

One measurement per rate lets luck decide: on a noisy host one false "unsustainable" lowered the
bracket for good. So before concluding, each end of the bracket is measured again, and a rate
stands by the majority of its measurements, a tie counting against it (conservative). Where the
two measurements of an end disagree, that rate is measured a third time and the majority decides:
a low end that fails again is no longer sustainable and the bisection goes on below it; a high end
that holds twice after failing once was a one-off and the search goes on above it. Every such
disagreement is recorded and said. The search concludes only when both ends are settled (measured
at least twice, no tie), so the rate found held in at least two measurements, and
`sustainable_for_s` is the measured seconds behind it: the schedules of its sustainable steps.

Each step records what limited it (brokerbench.limit). A search ends below the lowest rate that did not stand; when
a failed measurement there was client-bound (its producers fell behind with their windows seldom full, or their cores
saturated), the load generator stopped the search, not the broker: its `limit` says so, and the rate found is only a
lower bound of the broker's ("≥ X (client-bound)").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..limit import search_limit

GROWTH = 1.5
PRECISION = 0.05
MAX_STEPS = 16


@dataclass
class Step:
    rate: float
    verdict: str  # sustainable | unsustainable | inconclusive | failed | max-rate
    reasons: list[str] = field(default_factory=list)
    figures: dict = field(default_factory=dict)  # throughput, end-to-end p50/p99, publish p99
    events: list[dict] = field(default_factory=list)  # what the step measured, written if it is kept
    measured_s: float | None = None  # the step's send schedule (the seconds its verdict judged)
    limit: dict | None = None  # what limited the step's rate (brokerbench.limit), as its cell recorded it
    host: dict | None = None  # the host over the step's measured sending, as its cell recorded it (host.judged)

    def summary(self) -> dict:
        return {"rate": self.rate, "verdict": self.verdict, "reasons": self.reasons, **self.figures,
                **({"measured_s": self.measured_s} if self.measured_s is not None else {}),
                **({"limit": self.limit} if self.limit is not None else {}),
                **({"host": self.host} if self.host is not None else {})}


@dataclass
class Found:
    """How a search ended: the rate found (`best`: its latest sustainable step; None if none held)."""

    best: Step | None
    steps: list[Step]
    ended: str
    sustainable_for_s: float | None = None  # measured seconds behind the rate found (its sustainable steps)
    disputes: list[dict] = field(default_factory=list)  # rates whose measurements disagreed, and how they counted
    limit: dict | None = None  # what held the search below the rate above the one found (limit.search_limit)

    def record(self) -> dict:
        """What a CellCompleted's `search` carries of it (besides the probe and latency_at)."""
        return {"max_sustainable_rate": self.best.rate if self.best else None,
                "sustainable_for_s": self.sustainable_for_s, "ended": self.ended, "disputes": self.disputes,
                "limit": self.limit, "steps": [s.summary() for s in self.steps]}


def next_rate(low: float | None, high: float | None, last: float, precision: float) -> float | None:
    """The next rate to try, or None when the bracket [low, high] is within `precision`."""
    if high is None:
        return last * GROWTH
    if low is None:
        return high / GROWTH
    if (high - low) / low <= precision:
        return None
    return (low + high) / 2


def _held(steps: list[Step]) -> int:
    return sum(s.verdict == "sustainable" for s in steps)


def stands(steps: list[Step]) -> bool:
    """A rate stands as sustainable by the majority of its measurements; a tie counts against it."""
    return 2 * _held(steps) > len(steps)


def settled(steps: list[Step]) -> bool:
    """Measured at least twice, and not a tie."""
    return len(steps) >= 2 and 2 * _held(steps) != len(steps)


def bracket(by_rate: dict[float, list[Step]]) -> tuple[float | None, float | None]:
    """The highest rate that stands, and the lowest one above it that does not (None: none yet)."""
    held = [r for r, steps in by_rate.items() if stands(steps)]
    low = max(held) if held else None
    above = [r for r, steps in by_rate.items() if not stands(steps) and (low is None or r > low)]
    return low, (min(above) if above else None)


def dispute(rate: float, steps: list[Step]) -> dict:
    """A rate whose measurements disagree: what they said and how it counts."""
    counted = "sustainable" if stands(steps) else "not sustainable"
    verdicts = [s.verdict for s in steps]
    tie = "" if settled(steps) else ", a tie counts against it"
    return {"rate": rate, "verdicts": verdicts, "counted": counted,
            "text": f"{rate:,.0f} msgs/s measured {', '.join(verdicts)}: counted {counted} "
                    f"({_held(steps)} of {len(steps)} sustainable{tie})"}


def _found(best_rate: float | None, by_rate: dict[float, list[Step]], steps: list[Step], ended: str) -> Found:
    disputes = [dispute(r, s) for r, s in by_rate.items() if 0 < _held(s) < len(s)]
    if disputes:
        ended += "; " + "; ".join(d["text"] for d in disputes)
    if best_rate is None:
        return Found(None, steps, ended, None, disputes)
    held = [s for s in by_rate[best_rate] if s.verdict == "sustainable"]
    seconds = [s.measured_s for s in held]
    total = None if any(s is None for s in seconds) else float(sum(seconds))
    above = [r for r, ms in by_rate.items() if r > best_rate and not stands(ms)]
    high = min(above) if above else None
    limited = search_limit([s.summary() for s in by_rate[high]] if high is not None else [], high)
    return Found(held[-1], steps, ended, total, disputes, limited)


def search(measure: Callable[[float], Step], start: float, *, precision: float = PRECISION,
           max_steps: int = MAX_STEPS, floor: float = 1.0) -> Found:
    """Run steps from `start` until the bracket is within `precision` and both its ends are settled (or the
    step budget is spent); the rate found is the bracket's low end."""
    steps: list[Step] = []
    by_rate: dict[float, list[Step]] = {}
    rate: float = start
    while len(steps) < max_steps:
        step = measure(max(floor, round(rate)))
        steps.append(step)
        by_rate.setdefault(step.rate, []).append(step)
        low, high = bracket(by_rate)
        if low is None and step.rate <= floor and not stands(by_rate[step.rate]):
            return _found(None, by_rate, steps, f"not sustainable even at {floor:g} msgs/s")
        rate = next_rate(low, high, low if low is not None else step.rate, precision)  # growth from what stands
        if rate is not None and round(rate) not in by_rate:
            continue
        closed = f"bracketed within {precision:.0%}" if rate is None else "bracketed to one message per second"
        unsettled = [r for r in (low, high) if r is not None and not settled(by_rate[r])]
        if not unsettled:
            ends = " and ".join(f"{r:,.0f}" for r in (low, high) if r is not None)
            return _found(low, by_rate, steps, f"{closed}; {ends} msgs/s each measured again and settled")
        rate = unsettled[0]  # measure an end again before concluding
    # Out of steps: the highest rate that stands and was measured again, else the bracket's low end (said).
    low, _ = bracket(by_rate)
    confirmed = [r for r, ms in by_rate.items() if stands(ms) and settled(ms)]
    best = max(confirmed) if confirmed else low
    once = "" if best is None or settled(by_rate[best]) else f"; {best:,.0f} msgs/s measured once"
    return _found(best, by_rate, steps, f"stopped after {max_steps} steps (bracket not yet within {precision:.0%}, "
                                        f"or its ends not yet measured again){once}")
