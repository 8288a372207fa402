"""Checks of a timed cell's counts and rates that hold on any host, however loaded.

A cell's open-loop schedule fixes which messages are due; how many of them the producers sent before the schedule
ended, how evenly they fell into the 1 s intervals and the rate they reached depend on the host as well: a producer
behind at the schedule's end stops on time (the shortfall shows as a lower rate, its lateness as publish delay), and
one that catches up sends a late second's messages in the next. So the tests assert what the rules promise (never
ahead of the schedule, throughput = delivered over its window, a figure of the offered rate's magnitude) and leave
the timings themselves (rate error, per-second evenness) to bench/harness.py, measured on a quiet machine.
"""


def due(rate: float, seconds: float) -> float:
    """The messages the schedule has due in `seconds` at `rate` msgs/s (all producers together)."""
    return rate * seconds


def assert_sent_on_schedule(cell: dict, rate: float, producers: int = 1) -> None:
    """Never more than the schedule had due (each producer ±1 at the window's edges); at least half of it, a bound
    that only a send loop waiting for something other than the schedule (or a rate set wrong) could miss."""
    scheduled = due(rate, cell["measured_s"])
    assert scheduled / 2 <= cell["sent"] <= scheduled + producers, (cell["sent"], scheduled, cell["cell_id"])


def assert_never_ahead(intervals: list[dict], rate: float, producers: int = 1) -> None:
    """Per second, an open loop sends no message before it is due: by the end of interval k at most the schedule's
    first k + 1 seconds have been sent (a burst hidden in the total would show here); a late second's messages may
    go out in the next one. `intervals` are IntervalMeasured events' data, in order."""
    sent = 0
    for k, interval in enumerate(intervals):
        sent += interval["counters"]["sent"]
        assert sent <= due(rate, k + 1) + producers, (k, sent, [i["counters"]["sent"] for i in intervals])


def assert_rate_of_the_offered_magnitude(figure: float, rate: float) -> None:
    """A throughput figure within a factor of two of the offered rate: a unit or window defect is off by far more,
    while a loaded host's late deliveries move the figure by a few percent to tens of percent."""
    assert rate / 2 <= figure <= 2 * rate, (figure, rate)


def p50_known_or_bound(figures: dict) -> float:
    """A latency's p50, or its lower bound where the p50 is known from below only: more than half of what was due
    never sent (a producer behind its schedule at the cell's end, on a loaded host), which counts at no less than
    the time from its intended send to the cell's end, and results.json writes as null with the bound beside."""
    if figures["p50"] is not None:
        return figures["p50"]
    assert figures.get("not_sent") or figures.get("missing"), figures  # only unsent or missing messages make it so
    return figures["lower_bounds"]["p50"]
