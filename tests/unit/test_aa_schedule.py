"""The nightly-schedule simulation of bench/aa_schedule.py on cases worked out by hand: the noise model's two
variances, and a noise-free schedule, where the scheduled check must stay silent in A/A and tell a step exactly on
the nights its rules allow (the pairwise check from MIN_HISTORY runs of history, change points once a series has
MIN_SERIES runs and two of them after the step)."""

import math

import numpy as np
import pytest

from bench_scripts import load

from brokerbench import schedules
from brokerbench.reports import changes, regression


@pytest.fixture(scope="module")
def bench():
    return load("aa_schedule")


def entry(throughput, verdicts, busy=None):
    return {"cell": "kafka raw", "repeats": {"throughput_msgs_per_s": throughput}, "repeat_verdicts": verdicts,
            "host_busy": busy}


def test_the_noise_model_splits_the_runs_spread_into_repeats_and_runs(bench):
    runs = [{"a": entry([1.0, math.exp(0.2)], ["sustainable", "unsustainable"])},
            {"a": entry([math.e, math.exp(1.2)], ["inconclusive"], {"repeats": [2], "of": 2, "reasons": []})}]
    model = bench.noise_model(runs)
    m = model["configurations"]["a"]["metrics"]["throughput_msgs_per_s"]
    # log repeats (0, 0.2) and (1, 1.2): each run's squares 0.02, 2 degrees of freedom -> 0.02; the means 0.1 and
    # 1.1 vary by 0.5, of which 0.02 / 2 is the repeats' share -> 0.49
    assert m["log_mean"] == pytest.approx(0.6)
    assert m["sd_repeat"] == pytest.approx(math.sqrt(0.02))
    assert m["sd_run"] == pytest.approx(0.7)
    assert (model["unsustainable"], model["inconclusive"], model["quiet_repeats"]) == (1, 1, 3)
    assert (model["busy"], model["repeats"], model["busy_rate"]) == (1, 4, 0.25)


def flat_model(configurations=2):
    metrics = {m: {"log_mean": math.log(v), "sd_repeat": 0.0, "sd_run": 0.0, "centre": math.log(v), "residuals": [0.0],
                   "sd_run_robust": 0.0}
               for m, v in (("throughput_msgs_per_s", 1000.0), ("end_to_end_p99_us", 2000.0),
                            ("publish_latency_p99_us", 900.0))}
    return {"configurations": {f"k{i}": {"cell": f"cell {i}", "metrics": metrics} for i in range(configurations)},
            "unsustainable_rate": 0.0, "inconclusive_rate": 0.0, "busy_rate": 0.0, "repeats_per_run": 3}


def test_a_drawn_run_has_the_figures_the_checks_read(bench):
    model = {**flat_model(1), "unsustainable_rate": 1.0, "busy_rate": 0.0}
    run = bench.draw_run(model, np.random.default_rng(0), ("k0", "throughput_msgs_per_s", 0.8))["k0"]
    assert run["repeats"]["throughput_msgs_per_s"] == pytest.approx([800.0] * 3)
    assert run["repeats"]["end_to_end_p99_us"] == pytest.approx([2000.0] * 3)
    assert run["sustainability"] == "unsustainable" and run["repeat_verdicts"] == ["unsustainable"] * 3
    busy = bench.draw_run({**flat_model(1), "busy_rate": 1.0}, np.random.default_rng(0))["k0"]
    assert busy["repeats"]["throughput_msgs_per_s"] == [] and busy["host_busy"]["repeats"] == [1, 2, 3]
    assert set(regression.metrics_of(run)) == set(run["repeats"])


def test_identical_nights_raise_nothing(bench):
    result = bench.false_alerts(flat_model(), nights=12, seed=0, per_schedule=8)
    assert (result["nights"], result["nights_with_an_alert"], result["schedules"]) == (12, 0, 2)
    # a schedule of 8 runs checks 7 nights; its series reach MIN_SERIES runs on the MIN_SERIES − 1th night
    assert result["by_phase"]["pairwise"]["nights"] == (changes.MIN_SERIES - 2) + (changes.MIN_SERIES - 2)


def test_a_noise_free_step_is_told_exactly_where_the_rules_allow(bench):
    result = bench.detection(flat_model(), "throughput", trials=40, seed=3, per_schedule=10)
    # start s: the pairwise check on night s needs MIN_HISTORY runs before it (s >= 3); the newest runs' test tells
    # it on night s + 1 at run s once the series has NEWEST_MIN runs (s >= 2), and a series of s + 1 >= MIN_SERIES
    # runs is left to change points, told on night s + 1 at run s
    first = min(regression.MIN_HISTORY, changes.NEWEST_MIN - changes.MIN_SEGMENT)
    assert result["by_start"] and result["other_alerts"] == 0 and first == 2
    for start, (told, trials) in result["by_start"].items():
        assert told == (trials if int(start) >= first else 0), start
    starts = {int(s): n for s, (_, n) in result["by_start"].items()}
    pairwise = {s for s in starts if regression.MIN_HISTORY <= s < changes.MIN_SERIES - 1}
    assert result["by_source"] == {"pairwise": sum(starts[s] for s in pairwise),
                                   "change_point": sum(n for s, n in starts.items() if s >= first and s not in pairwise)}
    assert result["by_found"]["newest"] == sum(n for s, n in starts.items() if first <= s < regression.MIN_HISTORY)


def test_the_empirical_noise_keeps_the_repeats_as_they_came(bench):
    """By hand: logs (0, 0.1, 2) and (0.2, 0.3, 0.3): centre 0.25 (the median of all six), residuals each log less
    it; robust spread 1.4826 x median |residual| = 1.4826 x 0.1; the runs' medians 0.1 and 0.3 spread (robustly:
    1.4826 x 0.1) as medians of 3 repeats drawn from those residuals do, so no run effect is added."""
    noise = bench.empirical_noise([np.array([0.0, 0.1, 2.0]), np.array([0.2, 0.3, 0.3])])
    assert noise["centre"] == pytest.approx(0.25)
    assert noise["residuals"] == pytest.approx([-0.25, -0.15, 1.75, -0.05, 0.05, 0.05])
    assert noise["sd_repeat_robust"] == pytest.approx(1.4826 * 0.1)
    assert noise["sd_run_robust"] == pytest.approx(0.0, abs=1e-6)
    model = {**flat_model(1), "repeats_per_run": 3}
    model["configurations"]["k0"]["metrics"] = {"end_to_end_p99_us": {**noise, "centre": math.log(1000.0),
                                                                      "sd_run_robust": 0.0}}
    drawn = bench.draw_run(model, np.random.default_rng(1))["k0"]["repeats"]["end_to_end_p99_us"]
    allowed = {round(1000.0 * math.exp(r), 6) for r in noise["residuals"]}
    assert len(drawn) == 3 and {round(v, 6) for v in drawn} <= allowed


def test_the_bound_matches_the_normal_formula_where_the_noise_is_normal(bench):
    """With log-normal repeats (standard deviation 0.3) and no run effect, the best estimator after 2 runs of 3
    repeats is the mean of the 6 logs, standard error 0.3 / √6: the smallest step told at 90% by a one-sided 1%
    test is exp((2.326 + 1.282) x 0.3 / √6) = 1.556, and +30% is told with probability Φ(log 1.3 / SE − 2.326)."""
    residuals = np.random.default_rng(3).normal(0, 0.3, 20000).tolist()
    bound = bench.bound_of({"residuals": residuals, "sd_run_robust": 0.0}, 3, 2, 1.3, 0.01)
    se = 0.3 / math.sqrt(6)
    assert bound["smallest_step"] == pytest.approx(math.exp((2.3263 + 1.2816) * se), rel=0.03)
    from statistics import NormalDist
    assert bound["power"] == pytest.approx(NormalDist().cdf(math.log(1.3) / se - 2.3263), abs=0.03)
    flat = bench.bound_of({"residuals": [0.0], "sd_run_robust": 0.0}, 3, 2, 1.3, 0.01)
    assert (flat["power"], flat["smallest_step"]) == (1.0, 1.0)


def cell_events(latencies: list[tuple[list[int], bool]]) -> tuple[list[dict], list[dict]]:
    """A run of one configuration whose repeats recorded `latencies` (µs; each with whether its host was busy): its
    CellCompleted events and its results.json cells."""
    from brokerbench.histogram import encode, from_values
    from brokerbench.reports.model import CONFIG_FIELDS

    cells = [{**{f: "x" for f in CONFIG_FIELDS}, "cell_id": f"c.r{i}", "host": {"busy": busy}}
             for i, (_, busy) in enumerate(latencies)]
    ends = [{"type": "CellCompleted", "data": {"cell_id": f"c.r{i}",
                                               "histograms": {"end_to_end_latency_us": encode(from_values(values)),
                                                              "publish_latency_us": encode(from_values(values))}}}
            for i, (values, _) in enumerate(latencies)]
    return ends, cells


def test_a_runs_merged_p99_is_over_all_its_quiet_repeats_messages(bench):
    """By hand: repeats of 1..100 µs and 101..200 µs: each p99 is its 99th value (99, 199); over their 200
    messages the 198th value, 198. A third repeat on a busy host (10,000 µs) is left out; with every repeat busy,
    all of them count."""
    low, high = list(range(1, 101)), list(range(101, 201))
    merged = bench.merged_p99s(*cell_events([(low, False), (high, False), ([10_000] * 100, True)]))
    (key, figures), = merged.items()
    assert figures["end_to_end_p99_us"] == pytest.approx(198, abs=1) == figures["publish_latency_p99_us"]
    busy = bench.merged_p99s(*cell_events([(low, True), (high, True)]))[key]
    assert busy["end_to_end_p99_us"] == pytest.approx(198, abs=1)


def test_the_figure_spread_compares_a_runs_three_figures(bench):
    """Three runs of one configuration, p99 repeats (e, e, e^4), (1, 1, 1), (e^2, e^2, e^2) with merged p99s e^3,
    1, e^2: log figures (2, 0, 2) as geometric means, (1, 0, 2) as medians, (3, 0, 2) merged; their standard
    deviations √(4/3), 1 and √(7/3)."""
    def run(repeats, merged):
        return {"figures": {"k": {"repeats": {"end_to_end_p99_us": [math.exp(v) for v in repeats]}}},
                "merged": {"k": {"end_to_end_p99_us": math.exp(merged)}}}

    spread = bench.figure_spread([run([1, 1, 4], 3), run([0, 0, 0], 0), run([2, 2, 2], 2)])
    assert set(spread) == {"end_to_end_p99_us"}
    assert spread["end_to_end_p99_us"]["geometric mean"] == pytest.approx(math.sqrt(4 / 3))
    assert spread["end_to_end_p99_us"]["median"] == pytest.approx(1.0)
    assert spread["end_to_end_p99_us"]["merged"] == pytest.approx(math.sqrt(7 / 3))
    assert spread["end_to_end_p99_us"]["configurations"] == 1


def test_a_latency_and_its_host_figure_are_drawn_in_pairs_and_the_watch_finds_their_slope(bench):
    """Real runs whose end-to-end p99 moves with the publish delay p99 at a slope of 0.5 within runs: the model keeps
    the slope and the pairs, and a drawn run's repeats carry their delays, from which changes.host_adjustment finds
    the slope again; without covariates the model draws as before."""
    rng = np.random.default_rng(5)
    runs = []
    for _ in range(6):
        host = rng.normal(0, 0.3) + rng.normal(0, 0.2, 3)
        delays = list(200 * np.exp(host))
        e2e = list(1000 * np.exp(0.5 * host + rng.normal(0, 0.02, 3)))
        runs.append({"redis-streams|raw|batch|record|1024|1000|1|1|1": {
            "cell": "redis raw", "repeats": {"end_to_end_p99_us": e2e}, "covariates": {"end_to_end_p99_us": delays},
            "repeat_verdicts": ["sustainable"] * 3, "host_busy": None}})
    model = bench.noise_model(runs)
    [config] = model["configurations"].values()
    joint = config["metrics"]["end_to_end_p99_us"]["joint"]
    assert joint["slope"] == pytest.approx(0.5, abs=0.05)
    assert len(joint["residuals"]) == len(joint["delay_residuals"]) == 18
    assert max(map(abs, joint["residuals"])) < 0.1  # the figures net of the host keep only their own noise
    model.update(unsustainable_rate=0.0, inconclusive_rate=0.0, busy_rate=0.0, repeats_per_run=3)
    drawn = [bench.draw_run(model, np.random.default_rng(seed)) for seed in range(8)]
    key = next(iter(drawn[0]))
    series = [{"runs": [d[key]["repeats"]["end_to_end_p99_us"] for d in drawn],
               "covariates": [d[key]["covariates"]["end_to_end_p99_us"] for d in drawn]}]
    assert changes.host_adjustment(series)["slope"] == pytest.approx(0.5, abs=0.1)
    plain = bench.draw_run({**model, "covariates": False}, np.random.default_rng(0))[key]
    assert plain["covariates"] == {} and len(plain["repeats"]["end_to_end_p99_us"]) == 3


def test_a_baseline_of_runs_makes_a_step_on_the_first_night_tellable(bench):
    """Night 0 is the schedule's baseline: with MIN_HISTORY runs back to back, a noise-free step on the first night
    has a history to be judged against (without one it is never told), and the A/A nights count each baseline
    run after the first as a night of the check."""
    without = bench.detection(flat_model(), "throughput", trials=30, seed=3, per_schedule=6)
    based = bench.detection(flat_model(), "throughput", trials=30, seed=3, per_schedule=6,
                            baseline=regression.MIN_HISTORY)
    assert without["by_start"]["1"][0] == 0 and without["baseline_runs"] == 1
    assert based["told"] == based["trials"] and based["baseline_runs"] == regression.MIN_HISTORY
    quiet = bench.false_alerts(flat_model(), nights=7, seed=0, per_schedule=6, baseline=regression.MIN_HISTORY)
    assert (quiet["nights"], quiet["schedules"], quiet["nights_with_an_alert"]) == (7, 1, 0)
    assert bench.baseline_runs() == next(s.baseline_runs for s in schedules.load() if s.name == bench.SCHEDULE) > 1
