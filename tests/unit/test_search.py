"""The sustainable-rate search's bracketing, bisection and second look, on rules with a known answer."""

import pytest

from brokerbench.worker.search import GROWTH, Step, next_rate, search

SECONDS = 6.0  # each fake step's measured schedule


def capacity(cap, inconclusive_above=None):
    def measure(rate):
        if inconclusive_above is not None and rate > inconclusive_above and rate <= cap:
            return Step(rate, "inconclusive", ["too few intervals"], measured_s=SECONDS)
        return Step(rate, "sustainable" if rate <= cap else "unsustainable", measured_s=SECONDS)
    return measure


def flaky(cap, wrong_once):
    """The capacity rule, except that the first measurement of each rate in `wrong_once` says the opposite."""
    seen = set()
    honest = capacity(cap)

    def measure(rate):
        step = honest(rate)
        if wrong_once(rate) and rate not in seen:
            step.verdict = "unsustainable" if step.verdict == "sustainable" else "sustainable"
        seen.add(rate)
        return step
    return measure


def measurements(steps, rate):
    return [s.verdict for s in steps if s.rate == rate]


@pytest.mark.parametrize("start", [100, 1900, 2000, 5000, 60000])
def test_the_search_brackets_the_capacity_within_the_precision(start):
    found = search(capacity(2000), start)
    best, steps = found.best, found.steps
    assert best is not None and best.verdict == "sustainable" and best.rate <= 2000
    lowest_failing = min(s.rate for s in steps if s.verdict != "sustainable")
    assert (lowest_failing - best.rate) / best.rate <= 0.05
    assert best.rate >= 2000 / 1.05
    assert "within 5%" in found.ended and "measured again and settled" in found.ended
    # Both ends of the bracket were measured twice, and agreed.
    assert measurements(steps, best.rate) == ["sustainable"] * 2
    assert measurements(steps, lowest_failing) == ["unsustainable"] * 2
    assert found.sustainable_for_s == 2 * SECONDS and found.disputes == []


def test_growth_and_bisection_steps():
    assert next_rate(None, None, 1000, 0.05) == 1000 * GROWTH
    assert next_rate(None, 1000, 1000, 0.05) == 1000 / GROWTH
    assert next_rate(1000, 2000, 2000, 0.05) == 1500
    assert next_rate(1000, 1040, 1040, 0.05) is None


def test_a_one_off_false_unsustainable_does_not_lower_the_bracket_for_good():
    # Capacity 2,000; the first measurement at 1,500 says "unsustainable" (a noisy second on the host).
    # Measured once, that capped the search below 1,500; measured again it holds twice out of three.
    found = search(flaky(2000, lambda rate: rate == 1500), 1000)
    assert measurements(found.steps, 1500) == ["unsustainable", "sustainable", "sustainable"]
    assert found.best.rate >= 2000 / 1.05 and found.best.rate <= 2000
    [disputed] = found.disputes
    assert disputed["rate"] == 1500 and disputed["counted"] == "sustainable"
    assert "1,500 msgs/s measured unsustainable, sustainable, sustainable: counted sustainable (2 of 3" in found.ended


def test_a_one_off_false_sustainable_does_not_raise_the_rate_found():
    # Capacity 2,000; the first measurement at 2,250 says "sustainable" (a lucky quiet spell), so the
    # bracket first closes above it; measured again there, it fails, and the bisection goes on below.
    found = search(flaky(2000, lambda rate: rate == 2250), 1000, max_steps=30)
    assert measurements(found.steps, 2250) == ["sustainable", "unsustainable"]
    assert found.best is not None and 2000 / 1.05 <= found.best.rate <= 2000
    [disputed] = found.disputes
    assert disputed["counted"] == "not sustainable" and "a tie counts against it" in disputed["text"]
    # The rate found held every time it was measured, at least twice.
    assert set(measurements(found.steps, found.best.rate)) == {"sustainable"}
    assert found.sustainable_for_s == SECONDS * len(measurements(found.steps, found.best.rate)) >= 2 * SECONDS


def test_a_tie_counts_against_the_rate_and_is_measured_a_third_time():
    # At 1,500 the verdict alternates: unsustainable, sustainable, unsustainable...
    calls = {"n": 0}
    honest = capacity(2000)

    def measure(rate):
        if rate == 1500:
            calls["n"] += 1
            return Step(rate, "unsustainable" if calls["n"] % 2 else "sustainable", measured_s=SECONDS)
        return honest(rate)

    found = search(measure, 1000)
    assert measurements(found.steps, 1500) == ["unsustainable", "sustainable", "unsustainable"]
    assert found.best.rate < 1500  # two of three failed: the bracket stays below it
    assert found.disputes[0]["counted"] == "not sustainable"


def test_an_inconclusive_step_never_counts_as_sustainable():
    found = search(capacity(2000, inconclusive_above=1500), 1000)
    assert found.best.rate <= 1500
    assert all(s.verdict != "sustainable" for s in found.steps if s.rate > 1500)


def test_nothing_sustainable_ends_at_the_floor():
    found = search(capacity(0), 100, floor=1)
    assert found.best is None and found.steps[-1].rate == 1 and "not sustainable" in found.ended
    assert found.sustainable_for_s is None and found.record()["max_sustainable_rate"] is None


def test_the_step_budget_bounds_the_search():
    found = search(capacity(10**9), 1, max_steps=5)
    assert len(found.steps) == 5 and "stopped after 5 steps" in found.ended
    assert found.best.rate == found.steps[-1].rate and found.sustainable_for_s == SECONDS  # measured once only
    assert "measured once" in found.ended


def test_out_of_steps_the_rate_found_is_the_bracket_low_end_and_says_so():
    # Capacity 2,000 with a lucky pass at 2,250: the budget runs out right after 2,250's second look failed.
    found = search(flaky(2000, lambda rate: rate == 2250), 1000, max_steps=9)
    assert len(found.steps) == 9 and "stopped after 9 steps" in found.ended
    assert found.best.rate == 1500 and "1,500 msgs/s measured once" in found.ended
    assert "2,250 msgs/s measured sustainable, unsustainable: counted not sustainable" in found.ended


def test_the_record_says_how_long_the_rate_found_held():
    found = search(capacity(2000), 1000)
    record = found.record()
    assert record["max_sustainable_rate"] == found.best.rate
    assert record["sustainable_for_s"] == 2 * SECONDS
    assert all(step["measured_s"] == SECONDS for step in record["steps"])
    assert len(record["steps"]) == len(found.steps) and record["disputes"] == []


def test_the_report_prints_how_long_the_rate_found_held_and_what_disagreed():
    from brokerbench.reports import markdown, model, rows

    found = search(flaky(2000, lambda rate: rate == 1500), 1000)
    record = found.record()
    group = {"cells": [{"broker": "kafka", "format": "json", "repeat_numbers": [1], "searches": [record],
                        "max_sustainable_rate": {"median": found.best.rate}, "status": "completed",
                        "sustainability": {"verdict": "search"}}]}
    [line] = markdown.search_lines(rows.group(group))[:1]
    held = found.sustainable_for_s
    assert line.startswith(f"- kafka json repeat 1: maximum sustainable rate {found.best.rate:,.0f} msgs/s, "
                           f"sustainable for {held:,.0f} s (bracketed within 5%")
    assert "1,500 msgs/s measured unsustainable, sustainable, sustainable" in line
    verdict = model.cell_verdict({"rate_target": "sustainable", "max_sustainable_rate": found.best.rate,
                                  "search": record}, [])
    rate = found.best.rate
    assert verdict["reasons"] == [f"maximum sustainable rate {rate:,.0f} msgs/s, sustainable for {held:,.0f} s"]
