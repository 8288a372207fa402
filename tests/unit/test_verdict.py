"""The sustainability verdict on synthetic per-second series: each rule, and what must not trip it."""

import numpy as np
import pytest

from brokerbench import verdict
from brokerbench.verdict import mann_kendall, sustainability, theil_sen_slope

TARGET = 1000


def series(n=10, *, received=None, sent=None, backlog=None, e2e=None, delay=None, publish=None, drain=0,
           acked=None):
    """n in-schedule intervals (plus `drain` after them), flat and healthy unless told otherwise."""
    out = []
    for i in range(n + drain):
        pick = lambda values, default: default if values is None else values[i] if i < len(values) else default  # noqa: E731
        inside = i < n
        out.append({"interval": i, "in_schedule": inside, "sent": pick(sent, TARGET if inside else 0),
                    "received": pick(received, TARGET if inside else 0), "backlog": pick(backlog, None),
                    "acked": pick(acked, None),
                    "end_to_end_p99_us": pick(e2e, 2000.0), "publish_delay_p99_us": pick(delay, 300.0),
                    "publish_latency_p99_us": pick(publish, 1500.0)})
    return out


def test_max_rate_cells_get_no_verdict():
    assert sustainability(None, series())["verdict"] == "max-rate"


def test_too_few_intervals_is_inconclusive_never_sustainable():
    result = sustainability(TARGET, series(n=4, drain=3))
    assert result["verdict"] == "inconclusive"
    assert result["reasons"] == ["only 4 measured intervals; at least 5 are needed to judge"]
    # Even a cell that looks perfect for 3 s (the quick suite's cells) is not called sustainable.
    assert sustainability(TARGET, series(n=3))["verdict"] == "inconclusive"


def test_a_flat_healthy_series_is_sustainable_and_says_why():
    result = sustainability(TARGET, series())
    assert result["verdict"] == "sustainable"
    assert len(result["reasons"]) == 4
    assert result["checks"]["backlog"]["broker"] is None and "not available" in result["checks"]["backlog"]["note"]
    assert result["checks"]["backlog"]["counted"]["growing"] is False


def test_a_noisy_flat_series_stays_sustainable():
    rng = np.random.default_rng(7)
    verdicts = []
    for _ in range(200):
        n = 30
        # Deliveries jitter around the boundaries (what one interval misses the next one gets),
        # latency and delay are noisy but flat, and the broker's lag is sampled anywhere between two
        # of the consumer's commits (up to a second of messages).
        shift = rng.integers(-30, 31, n + 1)
        received = [TARGET + int(shift[i + 1] - shift[i]) for i in range(n)]
        e2e = rng.lognormal(np.log(3000), 0.4, n)
        delay = rng.lognormal(np.log(500), 0.6, n)
        backlog = rng.integers(0, TARGET, n)
        verdicts.append(sustainability(TARGET, series(n, received=received, e2e=e2e, delay=delay,
                                                      backlog=list(backlog)))["verdict"])
    assert verdicts.count("sustainable") >= 196, verdicts  # at most 2% false alarms


def test_a_received_rate_below_the_target_is_unsustainable():
    # The Kafka quota case: about half the target arrives every second.
    result = sustainability(TARGET, series(received=[500] * 10, backlog=[500 * (i + 1) for i in range(10)]))
    assert result["verdict"] == "unsustainable"
    assert "8 of 8 inner intervals received less than 90% of 1,000 msgs/s" in result["reasons"][0]
    assert any("backlog grew from 500 to 5,000 messages (+500/s)" in r for r in result["reasons"])


def test_one_dip_is_tolerated_but_a_steady_shortfall_is_not():
    dip = [TARGET] * 10
    dip[4], dip[5] = 950, 1050  # a pause: late by a few messages, caught up at once
    assert sustainability(TARGET, series(received=dip))["verdict"] == "sustainable"
    short = sustainability(TARGET, series(received=[975] * 10))  # every second 2.5% short
    assert short["verdict"] == "unsustainable" and "received 975 msgs/s on average (97.5%" in short["reasons"][0]


def test_the_first_and_last_intervals_are_edge_effects():
    received = [TARGET] * 10
    received[0], received[-1] = 400, 600  # the pipeline filling; the schedule's cut
    assert sustainability(TARGET, series(received=received))["verdict"] == "sustainable"


def test_a_growing_broker_backlog_is_unsustainable_even_when_the_rate_looks_fine():
    backlog = [100 + 150 * i for i in range(10)]
    result = sustainability(TARGET, series(backlog=backlog))
    assert result["verdict"] == "unsustainable"
    assert result["reasons"] == ["backlog grew from 100 to 1,450 messages (+150/s)"]
    assert result["checks"]["backlog"]["broker"]["growing"] and not result["checks"]["backlog"]["counted"]["growing"]


def test_a_client_side_queue_grows_where_the_broker_sees_none():
    # A producer throttled by a broker quota: the broker's lag stays small, the counted backlog grows.
    received = [TARGET - 100] * 12
    result = sustainability(TARGET, series(n=12, received=received, backlog=[20] * 12))
    assert result["verdict"] == "unsustainable"
    assert any(r.startswith("backlog (sent − received) grew from 100 to 1,200") for r in result["reasons"])
    assert result["checks"]["backlog"]["broker"]["growing"] is False


def test_a_small_growing_backlog_below_half_a_second_is_not_called_unsustainable():
    backlog = [10 * i for i in range(10)]  # +10/s (1% of the target) to 90 messages
    assert sustainability(TARGET, series(backlog=backlog))["verdict"] == "sustainable"


def test_without_a_broker_backlog_sent_minus_received_is_followed():
    # 4% short every second: the rate rule fails, and so does the backlog (600 messages after 15 s, +40/s).
    result = sustainability(TARGET, series(n=15, received=[TARGET - 40] * 15))
    assert result["verdict"] == "unsustainable"
    assert any("backlog (sent − received) grew from 40 to 600 messages (+40/s)" in r for r in result["reasons"])
    assert result["checks"]["backlog"]["counted"]["growing"]


def test_a_rising_p99_is_unsustainable():
    e2e = [2000 + 1500 * i for i in range(12)]  # +1.5 ms every second
    result = sustainability(TARGET, series(n=12, e2e=e2e))
    assert result["verdict"] == "unsustainable"
    (reason,) = result["reasons"]
    assert reason.startswith("end-to-end p99 rises 1.5 ms/s (Mann–Kendall p=")
    assert result["checks"]["latency_trend"]["mann_kendall_p"] < 0.001


def test_a_significant_but_tiny_rise_is_not_called_unsustainable():
    e2e = [2000 + 10 * i for i in range(12)]  # significant, but 110 µs over 11 s
    assert sustainability(TARGET, series(n=12, e2e=e2e))["verdict"] == "sustainable"


def test_a_sub_millisecond_climb_under_the_absolute_floor_is_named_not_judged():
    """A local p99 quadrupling from 0.3 to 1.2 ms over 10 s: significant and beyond its median, but a rise of 0.9 ms
    is under the 1 ms floor. The verdict stands (the floor is the rule), and the reasons say what it did not see;
    the same climb from 3 to 12 ms fails the rule."""
    e2e = [300 + 100 * i for i in range(10)]
    result = sustainability(TARGET, series(n=10, e2e=e2e))
    trend = result["checks"]["latency_trend"]
    assert result["verdict"] == "sustainable" and trend["below_floor"] and not trend["rising"]
    assert trend["rise_us"] == pytest.approx(900.0) and trend["median_us"] == pytest.approx(750.0)
    assert "end-to-end p99 rose 0.90 ms over the cell (Mann–Kendall p=2.8e-07, median 0.75 ms): a climb, but under " \
           "the 1 ms this rule needs, so not judged" in result["reasons"]
    assert "never fails it: the cell's reasons say when one did" in verdict.RULE
    tenfold = sustainability(TARGET, series(n=10, e2e=[10 * v for v in e2e]))
    assert tenfold["verdict"] == "unsustainable" and not tenfold["checks"]["latency_trend"]["below_floor"]
    # Flat sub-millisecond wander is not named: the note needs the test and the relative bar as well.
    flat = sustainability(TARGET, series(n=10, e2e=[300, 320, 290, 310, 305, 295, 315, 300, 310, 290]))
    assert not flat["checks"]["latency_trend"]["below_floor"]
    assert not any("under the 1 ms" in r for r in flat["reasons"])


def test_publish_delay_must_stay_bounded():
    late = sustainability(TARGET, series(delay=[150_000.0] * 10))
    assert late["verdict"] == "unsustainable" and "publish delay p99 150 ms in the second half" in late["reasons"][0]
    rising = sustainability(TARGET, series(n=12, delay=[1000 + 3000 * i for i in range(12)]))
    assert rising["verdict"] == "unsustainable" and rising["reasons"][0].startswith("publish delay p99 rises 3.0 ms/s")


def test_a_missing_latency_series_is_inconclusive():
    result = sustainability(TARGET, series(e2e=[None] * 10))
    assert result["verdict"] == "inconclusive"
    assert "end-to-end p99 was measured in only 0 intervals" in result["reasons"][0]


def test_publish_only_cells_use_acknowledgements_and_publish_latency():
    intervals = series(received=[None] * 10, acked=[TARGET] * 10, e2e=[None] * 10)
    assert sustainability(TARGET, intervals, publish_only=True)["verdict"] == "sustainable"
    # Acknowledgements running behind the sends: the producer's own queue grows.
    behind = series(received=[None] * 10, acked=[600] * 10, e2e=[None] * 10,
                    publish=[1000.0 + 200_000 * i for i in range(10)])
    result = sustainability(TARGET, behind, publish_only=True)
    assert result["verdict"] == "unsustainable"
    assert any("acked less than 90%" in r for r in result["reasons"])
    assert any("unacknowledged sends grew" in r for r in result["reasons"])
    assert any(r.startswith("publish p99 rises 200.0 ms/s") for r in result["reasons"])
    assert result["checks"]["rate"]["basis"] == "acked"


def test_drain_intervals_are_not_judged():
    # After the schedule, deliveries of the tail and high p99s of the drain do not count.
    intervals = series(n=8, drain=3, e2e=[2000.0] * 8 + [90_000.0] * 3)
    assert sustainability(TARGET, intervals)["verdict"] == "sustainable"


def test_interval_inputs_from_events():
    events = [{"interval": i, "counters": {"sent": 1000, "acked": 1000, "received": 990},
               "summary": {"end_to_end_latency_us": {"count": 990, "p99": 2500.0}}, "backlog": 12}
              for i in range(6)]
    inputs = verdict.interval_inputs(events, measured_s=4.2)
    assert [i["in_schedule"] for i in inputs] == [True] * 5 + [False]
    assert inputs[0]["backlog"] == 12 and inputs[0]["end_to_end_p99_us"] == 2500.0
    assert inputs[0]["publish_delay_p99_us"] is None
    old = [{k: v for k, v in e.items() if k != "backlog"} for e in events]  # events written before backlog
    assert verdict.interval_inputs(old, None)[0]["backlog"] is None


def test_mann_kendall_against_known_values():
    # 1..5: S = 10, Var(S) = 5·4·15/18, z = (10-1)/sqrt(Var) = 2.2045, two-sided p = 0.0275.
    result = mann_kendall([1, 2, 3, 4, 5])
    assert result["s"] == 10 and result["z"] == pytest.approx(2.2045, abs=1e-4)
    assert result["p"] == pytest.approx(0.0275, abs=1e-4)
    # With ties: [1, 2, 2, 3]: S = 5, Var = (4·3·13 - 2·1·9) / 18 = 7.667, z = 4/2.769 = 1.4446, p = 0.1486.
    tied = mann_kendall([1, 2, 2, 3])
    assert tied["s"] == 5 and tied["p"] == pytest.approx(0.1486, abs=1e-3)
    assert mann_kendall([5, 4, 3, 2, 1])["s"] == -10
    assert mann_kendall([3, 3, 3, 3])["p"] == 1.0


def test_theil_sen_ignores_an_outlier():
    y = [2.0 * i for i in range(10)]
    y[5] = 1000
    assert theil_sen_slope(range(10), y) == pytest.approx(2.0)


def test_the_rule_is_stated_with_its_thresholds():
    assert "Mann–Kendall" in verdict.RULE and "Theil–Sen" in verdict.RULE and "inconclusive" in verdict.RULE
    assert f"at least {verdict.MIN_INTERVALS}" in verdict.RULE


# -- trends at small n --------------------------------------------------------------------------------
def test_a_doubling_p99_fails_a_five_second_cell():
    # 2, 4, 8, 16, 32 ms: the normal approximation gave p = 0.0275 two-sided, so this was "not rising".
    e2e = [2000.0, 4000.0, 8000.0, 16000.0, 32000.0]
    result = sustainability(TARGET, series(n=5, e2e=e2e))
    assert result["verdict"] == "unsustainable"
    check = result["checks"]["latency_trend"]
    assert check["mann_kendall_p"] == pytest.approx(1 / 120) and check["test"] == "exact"
    assert result["reasons"][0].startswith("end-to-end p99 rises")
    delay = sustainability(TARGET, series(n=5, delay=e2e))
    assert delay["verdict"] == "unsustainable" and delay["reasons"][0].startswith("publish delay p99 rises")


def test_exact_mann_kendall_p_against_a_hand_count():
    # n = 5: 120 orders; 1 with no inversion, 4 with one (the Mahonian numbers 1, 4, 9, 15, ...).
    assert verdict.exact_rising_p([1, 2, 3, 4, 5]) == pytest.approx(1 / 120)
    assert verdict.exact_rising_p([2, 1, 3, 4, 5]) == pytest.approx(5 / 120)
    assert verdict.exact_rising_p([5, 4, 3, 2, 1]) == pytest.approx(1.0)
    # A tie counts as half an inversion: [1, 1, 2, 3, 4] has S = 9, so p = P(at most 0.5 inversions) = 1/120.
    assert verdict.exact_rising_p([1, 1, 2, 3, 4]) == pytest.approx(1 / 120)
    assert verdict.exact_rising_p([1, 1, 1, 3, 4]) == pytest.approx(5 / 120)  # S = 7: 1.5 inversions


def test_each_rules_minimum_n_is_where_a_strictly_rising_series_reaches_its_alpha():
    assert verdict.smallest_n(0.01) == 5  # 1/120 < 0.01 ≤ 1/24
    assert verdict.smallest_n(0.05) == 4  # 1/24 < 0.05 ≤ 1/6
    assert verdict.MIN_N == {"rate": 3, "backlog": 4, "latency_trend": 5, "publish_delay": 5}
    assert verdict.MIN_INTERVALS == 5
    result = sustainability(TARGET, series())
    assert result["checks"]["intervals"]["min_n"] == verdict.MIN_N
    assert all(result["checks"][name]["min_n"] == n for name, n in verdict.MIN_N.items())
    assert "rate 3, backlog 4, latency trend 5, publish delay 5" in verdict.RULE


def test_a_trend_rule_judged_on_too_few_values_is_inconclusive():
    e2e = [None] * 6 + [2000.0] * 4  # measured in 4 of 10 intervals
    result = sustainability(TARGET, series(e2e=e2e))
    assert result["verdict"] == "inconclusive"
    assert result["reasons"] == ["end-to-end p99 was measured in only 4 intervals: no trend can be judged (at least 5)"]


def _flat(rng, n, rho, sigma=0.4):
    """Per-second p99s of a cell that keeps up: lognormal around 3 ms, AR(1) in log space."""
    noise = rng.normal(0, 1, n)
    x = np.empty(n)
    x[0] = noise[0]
    for i in range(1, n):
        x[i] = rho * x[i - 1] + np.sqrt(1 - rho ** 2) * noise[i]
    return list(3000 * np.exp(sigma * x))


@pytest.mark.parametrize("n", [5, 10, 30])
@pytest.mark.parametrize("rho, limit", [(0.0, 0.02), (0.5, 0.05)])
def test_the_latency_trend_rarely_fires_on_a_flat_series(n, rho, limit):
    rng = np.random.default_rng(n)
    fired = sum(sustainability(TARGET, series(n=n, e2e=_flat(rng, n, rho)))["verdict"] == "unsustainable"
                for _ in range(1000))
    assert fired <= limit * 1000, fired


def test_a_steady_rise_is_caught_at_five_eight_and_thirty_intervals_through_noise():
    """Eight: the quick suite's cells (93% in 1,000 such cells, 98% at ten, 58% at five)."""
    rng = np.random.default_rng(3)
    caught = {5: 0, 8: 0, 30: 0}
    for n in caught:
        for _ in range(200):  # the p99 climbs from 2 ms by 10 ms over the schedule, ±20% noise
            e2e = [(2000 + 10_000 * i / (n - 1)) * rng.lognormal(0, 0.2) for i in range(n)]
            caught[n] += sustainability(TARGET, series(n=n, e2e=e2e))["verdict"] == "unsustainable"
    assert caught[30] == 200 and caught[8] >= 170 and caught[5] >= 100, caught


def test_a_large_rise_the_test_cannot_confirm_is_inconclusive_never_sustainable():
    # A real cell (tests/integration/test_climbing_latency.py): Toxiproxy's delay doubling every second, one noisy
    # second out of order. Six intervals with one pair out of order give p = 0.028: not below 0.01, not flat.
    e2e = [3007.0, 5467.0, 38079.0, 31151.0, 33823.0, 70719.0]
    result = sustainability(200, series(n=6, e2e=e2e, received=[200] * 6, sent=[200] * 6))
    trend = result["checks"]["latency_trend"]
    assert trend["rising"] is False and trend["unclear"] is True and trend["passed"] is None
    assert result["verdict"] == "inconclusive"
    assert any("too few or too noisy intervals" in r and "p=0.028" in r for r in result["reasons"]), result
    delay = sustainability(200, series(n=6, delay=e2e, received=[200] * 6, sent=[200] * 6))
    assert delay["checks"]["publish_delay"]["passed"] is None and delay["verdict"] == "inconclusive"


@pytest.mark.parametrize("n", [5, 10, 30])
def test_the_unclear_band_rarely_takes_a_flat_cell_from_sustainable(n):
    rng = np.random.default_rng(100 + n)
    judged = [sustainability(TARGET, series(n=n, e2e=_flat(rng, n, 0.5)))["verdict"] for _ in range(1000)]
    assert judged.count("sustainable") >= 950, {v: judged.count(v) for v in set(judged)}


# -- the rate rule's quantile -------------------------------------------------------------------------
def test_one_stalled_second_does_not_fail_a_thirty_second_cell():
    received = [TARGET] * 30
    received[12], received[13] = 0, 2 * TARGET  # a stall, caught up the next second
    result = sustainability(TARGET, series(n=30, received=received))
    assert result["verdict"] == "sustainable", result["reasons"]
    rate = result["checks"]["rate"]
    assert rate["min"] == 0 and rate["allowed_below"] == 1 and rate["below_floor"] == 1
    assert "1 of 28 seconds below 90%, 1 allowed" in result["reasons"][0]


def test_the_quantile_tolerates_one_second_in_twenty_and_no_more():
    received = [TARGET] * 30
    received[5], received[6], received[20], received[21] = 0, 2 * TARGET, 0, 2 * TARGET  # two stalls in 28
    result = sustainability(TARGET, series(n=30, received=received))
    assert result["verdict"] == "unsustainable"
    assert result["reasons"][0].startswith("2 of 28 inner intervals received less than 90% of 1,000 msgs/s "
                                           "(at most 1 may")
    short = [TARGET] * 12  # 10 inner seconds: floor(0.05 × 10) = 0 may dip
    short[5], short[6] = 0, 2 * TARGET
    assert sustainability(TARGET, series(n=12, received=short))["verdict"] == "unsustainable"


def test_a_sustained_fifteen_percent_shortfall_fails_at_any_length():
    for n in (5, 30, 300):
        rng = np.random.default_rng(n)
        received = [int(0.85 * TARGET) + int(d) for d in rng.integers(-20, 21, n)]
        result = sustainability(TARGET, series(n=n, received=received))
        assert result["verdict"] == "unsustainable"
        assert result["checks"]["rate"]["passed"] is False and result["checks"]["rate"]["low_quantile"] < 0.9 * TARGET


def test_the_stored_basis_and_the_reports_rules_carry_each_rules_minimum_n():
    from brokerbench.reports import markdown, rows
    from brokerbench.reports.model import verdict_basis

    assert verdict_basis(1000, 10.0, False)["min_n"] == verdict.MIN_N
    lines = markdown.rules_section(rows.section({"rules": {"sustainability": verdict.RULE}}))
    assert any("minimum n, the fewest intervals at which it can fail: rate 3, backlog 4, latency trend 5" in line
               for line in lines)
