"""The sustainable-rate search's bracketing and bisection, on a rule with a known answer."""

import pytest

from brokerbench.worker.search import GROWTH, Step, next_rate, search


def capacity(cap, inconclusive_above=None):
    def measure(rate):
        if inconclusive_above is not None and rate > inconclusive_above and rate <= cap:
            return Step(rate, "inconclusive", ["too few intervals"])
        return Step(rate, "sustainable" if rate <= cap else "unsustainable")
    return measure


@pytest.mark.parametrize("start", [100, 1900, 2000, 5000, 60000])
def test_the_search_brackets_the_capacity_within_the_precision(start):
    best, steps, ended = search(capacity(2000), start)
    assert best is not None and best.verdict == "sustainable" and best.rate <= 2000
    lowest_failing = min(s.rate for s in steps if s.verdict != "sustainable")
    assert (lowest_failing - best.rate) / best.rate <= 0.05
    assert best.rate >= 2000 / 1.05
    assert "within 5%" in ended


def test_growth_and_bisection_steps():
    assert next_rate(None, None, 1000, 0.05) == 1000 * GROWTH
    assert next_rate(None, 1000, 1000, 0.05) == 1000 / GROWTH
    assert next_rate(1000, 2000, 2000, 0.05) == 1500
    assert next_rate(1000, 1040, 1040, 0.05) is None


def test_an_inconclusive_step_never_counts_as_sustainable():
    best, steps, _ = search(capacity(2000, inconclusive_above=1500), 1000)
    assert best.rate <= 1500
    assert all(s.verdict != "sustainable" for s in steps if s.rate > 1500)


def test_nothing_sustainable_ends_at_the_floor():
    best, steps, ended = search(capacity(0), 100, floor=1)
    assert best is None and steps[-1].rate == 1 and "not sustainable" in ended


def test_the_step_budget_bounds_the_search():
    best, steps, ended = search(capacity(10**9), 1, max_steps=5)
    assert len(steps) == 5 and "stopped after 5 steps" in ended and best.rate == steps[-1].rate
