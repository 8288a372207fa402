"""The adaptive warm-up's rule: measure once end-to-end p99 is steady, never before the minimum, at the bound anyway."""

from brokerbench.worker.warmup import WINDOW_NS, WarmupWatch, steady, warmup_max_s

S = 1_000_000_000


def watch(min_s=1.0, max_s=10.0, sources=("a",)):
    return WarmupWatch(sources, 0, min_s, max_s)


def test_three_windows_that_agree_and_do_not_climb_are_steady():
    assert steady([10_000, 14_000, 12_000])  # within 1.5x
    assert steady([200, 1_100, 900])  # within 1 ms
    assert not steady([10_000, 16_000, 12_000])
    assert not steady([10_000, 12_000])  # two are not enough to judge
    assert steady([None, None, 50_000])  # too few messages to tell: nothing to wait for
    # A queue that grows: each window a little higher, 1.17x from first to last but 500 ms more.
    assert not steady([3_000_000, 3_250_000, 3_500_000])
    assert steady([3_000, 3_200, 3_400])  # rising by less than 1 ms in all: noise


def test_a_settling_warm_up_ends_when_the_p99_stops_falling():
    w = watch()
    for window, p99 in enumerate([900_000, 300_000, 60_000, 20_000, 17_000]):  # cold start, settling
        w.add("a", window, p99, 500)
        assert not w.decide((window + 1) * WINDOW_NS)
    w.add("a", 5, 18_000, 500)
    assert w.decide(6 * WINDOW_NS) and w.decided["steady"] is True
    assert w.decided["p99_us"][-3:] == [20_000, 17_000, 18_000]


def test_never_before_the_minimum():
    w = watch(min_s=3.0)
    for window in range(3):
        w.add("a", window, 5_000, 500)  # steady already, but only 1.5 s have passed
    assert not w.decide(3 * WINDOW_NS)
    for window in range(3, 6):
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
    for window in range(3):
        w.add("a", window, 5_000, 500)
    assert not w.decide(WINDOW_NS * 3)  # b has not reported
    for window, p99 in enumerate([5_000, 40_000, 41_000]):  # the slower consumer decides
        w.add("b", window, p99, 500)
    assert not w.decide(WINDOW_NS * 3)
    w.add("a", 3, 5_000, 500)
    w.add("b", 3, 40_500, 500)
    assert w.decide(WINDOW_NS * 4)


def test_the_bound_defaults_to_ten_seconds_past_the_minimum():
    assert warmup_max_s({"warmup_s": 2, "warmup_max_s": None}) == 12
    assert warmup_max_s({"warmup_s": 2, "warmup_max_s": 5}) == 5
    assert warmup_max_s({"warmup_s": 2, "warmup_max_s": 1}) == 2  # never below the minimum
