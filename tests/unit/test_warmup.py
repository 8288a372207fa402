"""The adaptive warm-up's rule: measure once end-to-end p99 is steady, never before the minimum, at the bound anyway."""

from brokerbench.worker.warmup import WINDOW_NS, WarmupWatch, steady, warmup_max_s

S = 1_000_000_000


def watch(min_s=1.0, max_s=10.0, sources=("a",)):
    return WarmupWatch(sources, 0, min_s, max_s)


def test_two_windows_agreeing_are_steady():
    assert steady(10_000, 14_000)  # within 1.5x
    assert steady(200, 1_100)  # within 1 ms
    assert not steady(10_000, 16_000)
    assert steady(None, 50_000)  # too few messages to tell: nothing to wait for


def test_a_settling_warm_up_ends_when_the_p99_stops_falling():
    w = watch()
    for window, p99 in enumerate([900_000, 300_000, 60_000, 20_000]):  # cold start, settling
        w.add("a", window, p99, 500)
        assert not w.decide((window + 1) * WINDOW_NS)
    w.add("a", 4, 18_000, 500)
    assert w.decide(5 * WINDOW_NS) and w.decided["steady"] is True
    assert w.decided["p99_us"][-2:] == [20_000, 18_000]


def test_never_before_the_minimum():
    w = watch(min_s=3.0)
    w.add("a", 0, 5_000, 500)
    w.add("a", 1, 5_000, 500)  # steady already, but only 1 s has passed
    assert not w.decide(2 * WINDOW_NS)
    for window in range(2, 6):
        w.add("a", window, 5_000, 500)
    assert w.decide(6 * WINDOW_NS)  # the window ending at 3 s


def test_at_the_bound_it_measures_anyway_and_says_the_warm_up_never_settled():
    w = watch(max_s=4.0)
    for window in range(8):
        w.add("a", window, 1_000 * 3 ** window, 500)  # rising: never steady
        assert not w.decide((window + 1) * WINDOW_NS - 1)
    assert w.decide(4 * S) and w.decided["steady"] is False


def test_every_consumer_must_have_reported_a_window():
    w = watch(sources=("a", "b"))
    w.add("a", 0, 5_000, 500)
    w.add("a", 1, 5_000, 500)
    assert not w.decide(WINDOW_NS * 2)  # b has not reported
    w.add("b", 0, 5_000, 500)
    w.add("b", 1, 40_000, 500)  # the slower consumer decides: 5 ms then 40 ms is not steady
    assert not w.decide(WINDOW_NS * 2)
    w.add("a", 2, 5_000, 500)
    w.add("b", 2, 42_000, 500)
    assert w.decide(WINDOW_NS * 3)


def test_the_bound_defaults_to_ten_seconds_past_the_minimum():
    assert warmup_max_s({"warmup_s": 2, "warmup_max_s": None}) == 12
    assert warmup_max_s({"warmup_s": 2, "warmup_max_s": 5}) == 5
    assert warmup_max_s({"warmup_s": 2, "warmup_max_s": 1}) == 2  # never below the minimum
