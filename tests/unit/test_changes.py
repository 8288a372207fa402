"""Change points over a configuration's runs (reports.changes) on synthetic series whose truth is known.

Simulated runs follow the model the rule is built for, as in test_regression: each run has its own offset per
series (run-to-run variance its repeats do not show), and each repeat its own noise, lognormal around a level.
"""

import math

import numpy as np
import pytest

from brokerbench.reports import changes as C

P99 = "end_to_end_p99_us"


def series_of(rng, runs, *, between, within=0.02, repeats=3, level=1000.0, step=0.0, at=None, metric=P99,
              higher=False, heavy=False):
    """One series: `runs` runs of `repeats` figures; from run `at` on, the level is multiplied by 1 + step."""
    offsets = (rng.standard_t(3, runs) * between / math.sqrt(3) if heavy else rng.normal(0, between, runs))
    out = []
    for i in range(runs):
        shift = math.log1p(step) if at is not None and i >= at else 0.0
        out.append(list(level * np.exp(offsets[i] + shift + rng.normal(0, within, repeats))))
    return {"runs": out, "metric": metric, "higher_is_better": higher}


def family_with_step(rng, runs, at, step, *, between, others=11, metric=P99, higher=False):
    """A night's check: one series with a step at run `at`, `others` flat series beside it (12 = 4
    configurations x 3 metrics, the family a quick suite's watch makes)."""
    return [series_of(rng, runs, between=between, step=step, at=at, metric=metric, higher=higher)] + \
        [series_of(rng, runs, between=between) for _ in range(others)]


@pytest.mark.parametrize("runs,at", [(12, 6), (20, 15), (30, 9)])
@pytest.mark.parametrize("seed", range(5))
def test_a_step_of_30_percent_is_found_at_the_run_it_began_with(seed, runs, at):
    rng = np.random.default_rng(seed)
    found = C.detect(family_with_step(rng, runs, at, 0.30, between=0.04))
    alerts = [c for c in found[0]["change_points"] if c["alert"]]
    assert len(alerts) == 1, found[0]["change_points"]
    assert abs(alerts[0]["index"] - at) <= 1
    assert alerts[0]["direction"] == "regression" and alerts[0]["change"] == pytest.approx(0.30, abs=0.08)
    assert not any(c["alert"] for s in found[1:] for c in s["change_points"])


@pytest.mark.parametrize("seed", range(5))
def test_a_throughput_drop_is_a_regression_and_a_rise_is_not(seed):
    rng = np.random.default_rng(100 + seed)
    drop = C.detect(family_with_step(rng, 14, 8, -0.20, between=0.03, metric="throughput_msgs_per_s", higher=True))
    assert [(c["index"], c["alert"]) for c in drop[0]["change_points"]] in ([(8, True)], [(7, True)], [(9, True)])
    rise = C.detect(family_with_step(rng, 14, 8, 0.25, between=0.03, metric="throughput_msgs_per_s", higher=True))
    assert rise[0]["change_points"] and all(c["direction"] == "improvement" and not c["alert"]
                                            for c in rise[0]["change_points"])


def test_a_step_is_told_on_the_second_run_after_it_not_the_first():
    """A single run is no change (MIN_SEGMENT): the newest run alone moved is not searched; one run later the change
    is placed on the run it began with."""
    rng = np.random.default_rng(7)
    full = series_of(rng, 12, between=0.02, step=0.5, at=10)
    one_after = {**full, "runs": full["runs"][:11]}
    assert C.detect([one_after])[0]["change_points"] == []
    found = C.detect([full])[0]
    assert [c["index"] for c in found["change_points"] if c["alert"]] == [10]
    assert C.new_alerts(found, C.detect([one_after])[0]) == found["change_points"]


def test_an_alert_is_told_once():
    """The analysis one run later finds the same change again: it is not new."""
    rng = np.random.default_rng(8)
    full = series_of(rng, 14, between=0.02, step=0.5, at=8)
    now = C.detect([full])[0]
    before = C.detect([{**full, "runs": full["runs"][:13]}])[0]
    assert [c["index"] for c in now["change_points"]] == [8] == [c["index"] for c in before["change_points"]]
    assert C.new_alerts(now, before) == []


def test_two_changes_are_both_placed():
    rng = np.random.default_rng(9)
    s = series_of(rng, 24, between=0.03, step=0.6, at=8)
    back = series_of(rng, 24, between=0.03)
    s["runs"] = [r if i < 16 else back["runs"][i] for i, r in enumerate(s["runs"])]
    found = C.detect([s])[0]["change_points"]
    assert [c["index"] for c in found] == [8, 16]
    assert [c["direction"] for c in found] == ["regression", "improvement"]
    assert found[0]["change"] == pytest.approx(0.6, abs=0.1) and found[1]["change"] == pytest.approx(-0.375, abs=0.06)


def test_one_outlying_run_is_not_a_change():
    """The first run on a new machine measured 4-10x the next ones (issue 33): one run cannot make a segment, and the
    split beside it does not hold against the noise the outlier brings."""
    rng = np.random.default_rng(11)
    for position in (0, 5, 11):
        s = series_of(rng, 12, between=0.05)
        s["runs"][position] = [v * 6 for v in s["runs"][position]]
        assert C.detect([s])[0]["change_points"] == [], position


def test_a_short_series_is_not_checked_and_one_of_newest_min_runs_is_tested_but_not_searched():
    rng = np.random.default_rng(12)
    s = series_of(rng, C.NEWEST_MIN - 1, between=0.01, step=2.0, at=2)
    found = C.detect([s])[0]
    assert not found["checked"] and not found["searched"] and found["change_points"] == []
    assert len(found["values"]) == C.NEWEST_MIN - 1
    longer = C.detect([series_of(rng, C.MIN_SERIES - 1, between=0.01, step=2.0, at=C.MIN_SERIES - 3)])[0]
    assert longer["checked"] and not longer["searched"]
    assert [(c["index"], c["found_by"]) for c in longer["change_points"]] == [(C.MIN_SERIES - 3, "newest")]


def test_the_digamma_and_trigamma_functions():
    assert C._digamma(1.0) == pytest.approx(-0.5772156649015329, abs=1e-10)
    assert C._digamma(0.5) == pytest.approx(-1.9635100260214235, abs=1e-10)
    assert C._trigamma(1.0) == pytest.approx(math.pi ** 2 / 6, abs=1e-10)
    assert C._trigamma(0.5) == pytest.approx(math.pi ** 2 / 2, abs=1e-10)
    # ψ'(x) = Σ 1/(x + k)², summed here by hand (the tail beyond 10⁶ terms is about 1/(x + 10⁶))
    assert C._trigamma(40.0) == pytest.approx(sum(1 / (40 + k) ** 2 for k in range(10 ** 6)) + 1 / (40 + 10 ** 6),
                                              abs=1e-12)


def test_the_variance_prior_of_a_group_that_shares_one_variance_and_of_one_that_does_not():
    """limma's fitFDist: variances drawn as s0² chi²(d)/d with one s0² give s0² back and as many prior degrees of
    freedom as the cap allows (half the group's own); variances whose true values spread by a factor of e either
    way give few. Fewer than two variances: no prior."""
    rng = np.random.default_rng(3)
    d = 4.0
    shared = [(0.04 * rng.chisquare(d) / d, d) for _ in range(200)]
    s0, d0 = C.variance_prior(shared)
    assert s0 == pytest.approx(0.04, rel=0.15) and d0 == pytest.approx(C.PRIOR_SHARE * 200 * d)
    spread = [(0.04 * math.exp(rng.normal(0, 1.0)) * rng.chisquare(d) / d, d) for _ in range(200)]
    assert C.variance_prior(spread)[1] < 5
    assert C.variance_prior([(0.04, d)]) == (0.0, 0.0) and C.variance_prior([(0.0, d), (1e-20, d)]) == (0.0, 0.0)


def test_a_step_on_a_young_series_is_told_with_its_group_prior_and_not_without():
    """Four runs, the newest two +50% (run-to-run noise 5%), in a family of ten: where the nine flat series beside
    it are of its group, the newest runs' test borrows their variance (2 degrees of freedom of its own, up to half
    the group's more) and tells the step at the run it began with on most nights; where each series is a group of
    its own, at 2 degrees of freedom and the same family, on none."""
    rng = np.random.default_rng(8)
    grouped = apart = 0
    for _ in range(20):
        family = [series_of(rng, 4, between=0.05, step=0.5, at=2)] + [series_of(rng, 4, between=0.05)
                                                                        for _ in range(9)]
        found = C.detect(family)[0]["change_points"]
        grouped += [(c["index"], c["found_by"], c["alert"]) for c in found] == [(2, "newest", True)]
        alone = C.detect([{**s, "group": str(i)} for i, s in enumerate(family)])[0]["change_points"]
        apart += any(c["alert"] for c in alone)
    assert grouped >= 16 and apart == 0


def test_identical_runs_and_a_small_change_call_no_alert():
    """Throughput at a fixed rate agrees run after run to the message: no infinite t, and a change below the metric's
    minimum effect is a change point at most, never an alert."""
    flat = {"runs": [[1000.0, 1000.0]] * 8, "metric": "throughput_msgs_per_s", "higher_is_better": True}
    assert C.detect([flat])[0]["change_points"] == []
    small = {**flat, "runs": [[1000.0, 1000.0]] * 5 + [[950.0, 950.0]] * 5}
    points = C.detect([small])[0]["change_points"]
    assert [c["index"] for c in points] == [5] and not points[0]["alert"] and points[0]["change"] == pytest.approx(-0.05)


def test_the_run_value_is_the_geometric_mean_of_its_repeats():
    assert C.run_value([100.0, 400.0]) == pytest.approx(200.0)
    assert C.run_value([None, 50.0]) == pytest.approx(50.0)
    assert C.run_value([]) is None


def test_from_median_repeats_on_the_run_value_is_their_median():
    """Ten repeats, one of them a stall at 50x: the geometric mean would read 1.48x the others, the median does
    not move; its variance floor is a median's, (pi/2)(1.4826 MAD)^2 / n, here of logs 0 and log 2 only."""
    repeats = [100.0] * 5 + [200.0] * 4 + [5000.0]
    assert C.MEDIAN_REPEATS == 10
    assert C.run_value(repeats) == pytest.approx(math.sqrt(100.0 * 200.0))
    assert C.run_value(repeats[:9]) == pytest.approx(math.exp(np.mean(np.log(repeats[:9]))))
    x, within = C._logs([repeats])
    mad = math.log(2) / 2  # nine logs lie log(2)/2 from the median (between 100 and 200), the stall's far off
    assert x[0] == pytest.approx(math.log(100.0 * math.sqrt(2)))
    assert within[0] == pytest.approx(math.pi / 2 * (1.4826 * mad) ** 2 / 10)


def newest_step(change, *, t=6.5, runs=12, metric=P99, higher=False):
    """A series whose newest 2 runs moved by `change` with a Student's t of exactly `t` at that split: the log
    figures alternate ±s around their level (10 runs before, 2 after), so the pooled variance is 12s²/10 and the
    standard error of the difference s·√(1.2 · (1/10 + 1/2)) = 0.8485·s."""
    d = math.log1p(change)
    s = abs(d) / (t * math.sqrt(1.2 * (1 / 10 + 1 / 2)))
    logs = [(-s if i % 2 == 0 else s) + (d if i >= runs - 2 else 0.0) for i in range(runs)]
    return {"runs": [[1000.0 * math.exp(v)] * 3 for v in logs], "metric": metric, "higher_is_better": higher}


def flat(runs=12):
    return {"runs": [[1000.0] * 3] * runs, "metric": P99, "higher_is_better": False}


def test_a_step_is_told_on_its_second_run_by_the_newest_runs_test_where_the_search_is_not_enough():
    """+30% in one of 30 series (10 configurations x 3 metrics) at t = 6.5 on its second run: the search over every
    split holds nothing, at its share of ALPHA (critical t 7.6) nor at the whole of it (7.0); the newest runs' test
    (5.3) tells it, placed on the run it began with."""
    series = newest_step(0.30)
    x, within = C._logs(series["runs"])
    assert C.split_test(C.Sums(x, within), 0, 10, 12)["t"] == pytest.approx(6.5)
    assert C._significant(x, within, C.ALPHA * C.SEARCH_SHARE / 30) == []
    assert C._significant(x, within, C.ALPHA / 30) == []
    found = C.detect([series] + [flat() for _ in range(29)])
    alerts = [c for c in found[0]["change_points"] if c["alert"]]
    assert [(c["index"], c["found_by"], c["direction"]) for c in alerts] == [(10, "newest", "regression")]
    assert alerts[0]["change"] == pytest.approx(0.30) and alerts[0]["splits"] == 1
    assert (alerts[0]["before_runs"], alerts[0]["after_runs"]) == (10, 2)
    # one-sided at (1 - SEARCH_SHARE) of ALPHA, times the 30 series
    assert alerts[0]["p_value"] == pytest.approx(C.t_two_sided_p(6.5, 10) / 2 / (1 - C.SEARCH_SHARE) * 30)
    assert not any(s["change_points"] for s in found[1:])
    # below the newest test's critical t (5.3) nothing is told
    assert C.detect([newest_step(0.30, t=5.0)] + [flat() for _ in range(29)])[0]["change_points"] == []


def test_the_newest_runs_test_calls_only_a_change_for_the_worse():
    """One-sided: a throughput drop at the newest runs is told, a throughput rise and a p99 fall of the same t are
    not (they are left to the search, once there are runs enough after them)."""
    tp = {"metric": "throughput_msgs_per_s", "higher": True}
    drop = C.detect([newest_step(-0.25, **tp)] + [flat() for _ in range(29)])[0]["change_points"]
    assert [(c["index"], c["found_by"], c["alert"]) for c in drop] == [(10, "newest", True)]
    for series in (newest_step(0.25, **tp), newest_step(-0.25)):
        assert C.detect([series] + [flat() for _ in range(29)])[0]["change_points"] == []


def heavy_series(rng, runs, *, repeats, step=0.0, at=None, stall=1 / 8):
    """A p99 as the quick suite measured it: repeats within 10% of their level, and a stall in one repeat of
    `1 / stall` reading 2-7x higher."""
    out = []
    for i in range(runs):
        logs = rng.normal(0, 0.10, repeats) + np.where(rng.random(repeats) < stall,
                                                         rng.uniform(math.log(2), math.log(7), repeats), 0.0)
        out.append(list(1000.0 * np.exp(logs + (math.log1p(step) if at is not None and i >= at else 0.0))))
    return {"runs": out, "metric": P99, "higher_is_better": False}


def test_a_run_of_many_repeats_tells_a_p99_step_through_the_stalls_and_a_flat_night_stays_quiet():
    """20 repeats per run (a suite sized for detection), one repeat in eight a stall: +30% is told on its second
    run at the run it began with in most schedules, and flat families of 12 such series alert within the budget."""
    rng = np.random.default_rng(60)
    told = 0
    for _ in range(20):
        family = [heavy_series(rng, 12, repeats=20, step=0.30, at=10)] + \
            [heavy_series(rng, 12, repeats=20) for _ in range(11)]
        found = C.detect(family)
        told += [c["index"] for c in found[0]["change_points"] if c["alert"]] == [10]
    assert told >= 18
    nights = 100
    quiet = sum(not any(c["alert"] for s in C.detect([heavy_series(rng, 12, repeats=20) for _ in range(12)])
                        for c in s["change_points"]) for _ in range(nights))
    assert (nights - quiet) / nights <= budget(nights)


def false_alert_nights(seed: int, nights: int, runs: int) -> int:
    """Nights, each a family of 12 flat series (noise between runs 30%, repeats 2%), with any alert."""
    rng = np.random.default_rng(seed)
    count = 0
    for _ in range(nights):
        found = C.detect([series_of(rng, runs, between=0.30) for _ in range(12)])
        count += any(c["alert"] for s in found for c in s["change_points"])
    return count


def budget(nights: int) -> float:
    """The goal (at most ALPHA of nights with a false alert) plus two binomial standard errors of `nights`."""
    return C.ALPHA + 2 * math.sqrt(C.ALPHA * (1 - C.ALPHA) / nights)


@pytest.mark.parametrize("runs", [4, 5, 8, 20])
def test_flat_series_raise_alerts_within_the_budget(runs):
    """With nothing changed, the share of analyses with any alert stays within the family-wise ALPHA: 300 analyses of
    12 series each (4 configurations x 3 metrics) with normal run-to-run noise."""
    alerts = false_alert_nights(1000 + runs, 300, runs)
    print(f"{runs} runs: {alerts} of 300 analyses with an alert")
    assert alerts / 300 <= budget(300)


def test_a_nightly_watch_over_heavy_tailed_runs_tells_few_false_alerts():
    """The watch as a schedule runs it: night after night the series grows by one run (the newest WINDOW runs are
    analysed), and an alert is told on the night it first appears (new_alerts). Run-to-run noise is Student's t with
    3 degrees of freedom (sd 30%): outlying runs, the hard case for a t-test. Nights with a new alert stay within the
    budget (4 of 220 with the newest runs' test beside the search; 0 of 220 with the search alone)."""
    window, rng = 20, np.random.default_rng(5)
    nights = told = 0
    for _ in range(5):
        runs = [series_of(rng, 50, between=0.30, heavy=True)["runs"] for _ in range(12)]
        for n in range(C.MIN_SERIES, 50):
            low = max(0, n - window)
            now = C.detect([{"runs": r[low:n], "metric": P99, "higher_is_better": False} for r in runs])
            before = C.detect([{"runs": r[low:n - 1], "metric": P99, "higher_is_better": False} for r in runs])
            nights += 1
            told += any(C.new_alerts(a, b) for a, b in zip(now, before))
    print(f"{told} of {nights} nights told a false alert")
    assert told / nights <= budget(nights)


def host_series(rng, runs, *, slope, host_sd, step=0.0, at=None, repeats=3, level=800.0, within=0.05, group="g"):
    """A latency series whose runs move with the host: each run's host figure (the publish delay p99, around 200 µs,
    its log moving host_sd from run to run and within it) moves the latency by slope x its log; from run `at` on the
    latency alone is multiplied by 1 + step (the delays do not move: a change of the broker, not of the host)."""
    out, delays = [], []
    for i in range(runs):
        host = rng.normal(0, host_sd) + rng.normal(0, host_sd / 2, repeats)
        shift = math.log1p(step) if at is not None and i >= at else 0.0
        out.append(list(level * np.exp(slope * host + shift + rng.normal(0, within, repeats))))
        delays.append(list(200.0 * np.exp(host)))
    return {"runs": out, "covariates": delays, "metric": P99, "higher_is_better": False, "group": group}


def test_the_host_slope_is_found_within_runs_and_none_without_enough_repeats():
    rng = np.random.default_rng(41)
    found = C.host_adjustment([host_series(rng, 10, slope=0.6, host_sd=0.4) for _ in range(5)])
    assert found["covariate"] == C.COVARIATE and found["slope"] == pytest.approx(0.6, abs=0.1)
    assert found["df"] == 5 * 10 * (3 - 1) and 120 < found["reference"] < 330
    # a slope past 1 or below 0 is held to the bounds; one repeat per run gives no degrees of freedom within runs
    assert C.host_adjustment([host_series(rng, 10, slope=1.8, host_sd=0.4)])["slope"] == 1.0
    assert C.host_adjustment([host_series(rng, 10, slope=-0.5, host_sd=0.4)])["slope"] == 0.0
    assert C.host_adjustment([host_series(rng, 12, slope=0.6, host_sd=0.4, repeats=1)]) is None


@pytest.mark.parametrize("seed", range(4))
def test_a_latency_net_of_the_host_tells_a_broker_step_and_not_a_busy_host(seed):
    """Runs that move with the host (slope 0.6, the host's log delay 0.35 from run to run): a +30% step of the latency
    alone at run 8 of 10 is told once the host is taken out, and not when the series is read as measured; a host
    that woke the producer later in the newest runs (its delays x2.5, the latency with them) is no alert either way
    it would be read."""
    rng = np.random.default_rng(300 + seed)
    stepped = [host_series(rng, 10, slope=0.6, host_sd=0.35, step=0.30, at=8)] + \
        [host_series(rng, 10, slope=0.6, host_sd=0.35) for _ in range(4)]
    net = C.detect(stepped)
    assert net[0]["adjustment"]["slope"] == pytest.approx(0.6, abs=0.15)
    alerts = [c for c in net[0]["change_points"] if c["alert"]]
    assert [c["index"] for c in alerts] == [8] and alerts[0]["change"] == pytest.approx(0.30, abs=0.12)
    assert net[0]["tested"] != net[0]["values"]  # shown as measured, tested net of the host
    assert net[0]["values"] == pytest.approx([C.run_value(r) for r in stepped[0]["runs"]])
    assert not any(c["alert"] for s in net[1:] for c in s["change_points"])
    measured = C.detect([{k: v for k, v in s.items() if k != "covariates"} for s in stepped])
    assert measured[0]["adjustment"] is None and not any(c["alert"] for c in measured[0]["change_points"])

    busy = [host_series(rng, 10, slope=0.6, host_sd=0.1) for _ in range(5)]
    for run in (8, 9):  # the host, not the broker: delays x2.5 and the latency moved by 2.5 ** 0.6
        busy[0]["covariates"][run] = [d * 2.5 for d in busy[0]["covariates"][run]]
        busy[0]["runs"][run] = [v * 2.5 ** 0.6 for v in busy[0]["runs"][run]]
    assert not any(c["alert"] for s in C.detect(busy) for c in s["change_points"])


def test_a_series_with_a_repeat_missing_its_host_figure_is_read_as_measured():
    rng = np.random.default_rng(9)
    group = [host_series(rng, 8, slope=0.5, host_sd=0.3) for _ in range(3)]
    group[0]["covariates"][2][1] = None
    found = C.detect(group)
    assert found[0]["adjustment"] is None and found[0]["tested"] == found[0]["values"]
    assert found[1]["adjustment"] is not None and found[1]["adjustment"] == found[2]["adjustment"]
    throughput = {**host_series(rng, 8, slope=0.5, host_sd=0.3), "metric": "throughput_msgs_per_s",
                  "higher_is_better": True}
    assert C.detect([throughput])[0]["adjustment"] is None  # only the latencies (ADJUSTED) are taken net of the host
