"""The maximum sustainable rate: bracket, then bisect over fixed-rate steps, each a full verdict.

A step is a whole fixed-rate measurement (warm-up, schedule, drain) judged by the same
sustainability verdict as any rated cell. The search grows the rate by GROWTH until a step is not
sustainable (or shrinks it until one is), then bisects between the highest sustainable and the
lowest unsustainable rate until they are within `precision` of each other. An inconclusive or
failed step counts as not sustainable: the rate found is one that was shown to hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

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

    def summary(self) -> dict:
        return {"rate": self.rate, "verdict": self.verdict, "reasons": self.reasons, **self.figures}


def next_rate(low: float | None, high: float | None, last: float, precision: float) -> float | None:
    """The next rate to try, or None when the bracket [low, high] is within `precision`."""
    if high is None:
        return last * GROWTH
    if low is None:
        return high / GROWTH
    if (high - low) / low <= precision:
        return None
    return (low + high) / 2


def search(measure: Callable[[float], Step], start: float, *, precision: float = PRECISION,
           max_steps: int = MAX_STEPS, floor: float = 1.0) -> tuple[Step | None, list[Step], str]:
    """Run steps from `start`; returns the highest sustainable step (None if none held), every step,
    and how the search ended."""
    steps: list[Step] = []
    low: Step | None = None
    high: float | None = None
    rate = start
    while len(steps) < max_steps:
        step = measure(max(floor, round(rate)))
        steps.append(step)
        if step.verdict == "sustainable":
            if low is None or step.rate > low.rate:
                low = step
        elif high is None or step.rate < high:
            high = step.rate
        if low is None and step.rate <= floor:
            return None, steps, f"not sustainable even at {floor:g} msgs/s"
        rate = next_rate(low.rate if low else None, high, step.rate, precision)
        if rate is None:
            return low, steps, f"bracketed within {precision:.0%}"
        if round(rate) in {s.rate for s in steps}:  # the bracket is narrower than one message per second
            return low, steps, "bracketed to one message per second"
    return low, steps, f"stopped after {max_steps} steps (bracket not yet within {precision:.0%})"
