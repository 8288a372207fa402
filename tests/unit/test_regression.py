"""The regression rule: runs compared by their repeats, noise from history, Holm over a run's verdicts.

Simulated runs follow the model the rule is built for: each run has its own offset per configuration
and metric (run-to-run variance the repeats of one run do not show), and each repeat its own noise.
A 12-verdict run is 4 configurations × 3 metrics, as in bench/aa_regression.py.
"""

import math

import numpy as np
import pytest
from synthetic import synthetic_run

from brokerbench.events import make_event
from brokerbench.events.memory import MemoryEventStore
from brokerbench.reports import regression as R
from brokerbench.reports.model import build_report
from brokerbench.reports.rows import section

VERDICTS = 12
OLDER = 9  # a full history: the baseline and 9 earlier runs


def simulated_runs(rng, runs, *, between, within, repeats=3, level=1000.0, shared=0.0):
    """runs × VERDICTS × repeats figures: lognormal run offsets (per verdict, plus one shared) and repeat noise."""
    offsets = rng.normal(0, between, (runs, VERDICTS, 1)) + rng.normal(0, shared, (runs, 1, 1))
    return level * np.exp(offsets + rng.normal(0, within, (runs, VERDICTS, repeats)))


def one_run_check(data, candidate, higher=True, older=OLDER):
    """Verdicts of one run: candidate (VERDICTS × repeats) against data[0] (baseline) and data[1:older+1]."""
    assessed = [R.assess(data[0, v], candidate[v], higher, [data[r, v] for r in range(1, older + 1)])
                for v in range(VERDICTS)]
    return R.decide(assessed)


def false_alarm_runs(seed, trials, **noise):
    rng = np.random.default_rng(seed)
    older = noise.pop("older", OLDER)
    alarms = regressions = 0
    for _ in range(trials):
        data = simulated_runs(rng, older + 2, **noise)
        verdicts = one_run_check(data[1:], data[0], older=older)
        alarms += any(v["verdict"] in ("regression", "improvement") for v in verdicts)
        regressions += any(v["verdict"] == "regression" for v in verdicts)
    return alarms, regressions


# -- A/A: identical runs ---------------------------------------------------------------------------
@pytest.mark.parametrize("noise", [
    {"between": 0.05, "within": 0.01},  # runs differ more than repeats (what fooled the per-second rule)
    {"between": 0.0, "within": 0.05},  # repeats are the only noise
    {"between": 0.15, "within": 0.10},  # p99 on a shared 2-core host
    {"between": 0.03, "within": 0.02, "shared": 0.05},  # the whole run is slower or faster
    {"between": 0.05, "within": 0.01, "older": 2},  # a short history (3 runs)
    {"between": 0.05, "within": 0.01, "older": 0},  # no history: cannot tell
])
def test_identical_runs_raise_no_false_regression_in_twenty_runs_of_twelve_verdicts(noise):
    alarms, regressions = false_alarm_runs(20, 20, **dict(noise))
    assert regressions <= 1 and alarms <= 1, noise


def test_the_false_alarm_rate_per_run_stays_near_the_family_wise_alpha():
    alarms, _ = false_alarm_runs(5, 300, between=0.05, within=0.01)
    assert alarms / 300 <= 0.03  # ALPHA = 1% family-wise; the effect gate only lowers it


def test_a_short_history_keeps_its_k_minus_1_degrees_of_freedom():
    """3 runs of history whose 2 degrees of freedom may underestimate how much runs differ: taking the repeats'
    variance AND their degrees of freedom instead alarmed in 4.4% of these runs at a nominal 1% (1,000 runs)."""
    alarms, _ = false_alarm_runs(7, 1000, between=0.05, within=0.02, older=2)
    assert alarms / 1000 <= 0.02


def test_without_history_the_repeats_alone_would_cry_wolf():
    """Contrast: Welch's test on the repeats alone, per verdict at p < 0.01, when runs differ by 5%."""
    rng = np.random.default_rng(8)
    runs_with_alarm = 0
    for _ in range(100):
        data = simulated_runs(rng, 2, between=0.05, within=0.01)
        p = []
        for v in range(VERDICTS):
            a, b = np.log(data[0, v]), np.log(data[1, v])
            se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
            p.append(R.t_two_sided_p((b.mean() - a.mean()) / se, 4))
        runs_with_alarm += min(p) < 0.01
    assert runs_with_alarm >= 50  # the rule above: at most 1 in 20


# -- a real change -----------------------------------------------------------------------------------
@pytest.mark.parametrize("shift,higher,expected", [
    (0.75, True, "regression"),  # throughput drops 25%
    (0.80, True, "regression"),  # throughput drops 20%
    (1.25, False, "regression"),  # p99 rises 25%
    (1.30, False, "regression"),  # p99 rises 30%
    (1.25, True, "improvement"),
])
def test_a_twenty_to_thirty_percent_shift_with_three_repeats_and_a_quiet_history_is_found(shift, higher, expected):
    rng = np.random.default_rng(11)
    found = false = 0
    for _ in range(200):
        # quiet: runs differ by 1.5%, repeats by 2% (a rated cell's throughput; a steady p99)
        data = simulated_runs(rng, OLDER + 2, between=0.015, within=0.02)
        candidate = data[0].copy()
        candidate[0] *= shift  # one configuration changes; the other 11 verdicts are noise
        verdicts = one_run_check(data[1:], candidate, higher)
        found += verdicts[0]["verdict"] == expected
        false += any(v["verdict"] in ("regression", "improvement") for v in verdicts[1:])
    assert found / 200 >= 0.95 and false / 200 <= 0.02


def test_one_repeat_that_fell_counts_and_the_candidate_scatter_is_not_taken_for_noise():
    history = [[2000 * (1 + e), 2001 * (1 + e), 1999 * (1 + e)] for e in (0.001, -0.001, 0.0005, -0.0005, 0.0)]
    partial = R.verdict([2000, 2001, 1999], [2000, 1998, 1265], True, history)  # one repeat of three throttled
    assert partial["verdict"] == "regression" and partial["change"] == pytest.approx(-0.14, abs=0.01)
    assert partial["candidate_median"] == 1998


def test_a_noisy_history_raises_the_bar():
    rng = np.random.default_rng(4)
    quiet = simulated_runs(rng, OLDER + 1, between=0.01, within=0.01)
    noisy = simulated_runs(rng, OLDER + 1, between=0.12, within=0.01)
    for data, expected in ((quiet, "regression"), (noisy, None)):
        result = R.verdict(data[0, 0], data[0, 0] * 0.8, True, [data[r, 0] for r in range(1, OLDER + 1)])
        if expected:
            assert result["verdict"] == expected
        else:
            assert result["verdict"] in ("unchanged", "unstable") and result["threshold"] > 0.2


def test_without_history_no_verdict_is_called_on_an_assumed_noise():
    base, halved = [1000, 1010, 990], [500, 505, 495]
    for history in ((), ([1000, 1002, 998],)):
        alone = R.verdict(base, halved, True, history)
        assert alone["verdict"] == "unstable" and alone["cannot_tell"] and alone["p_value"] is None
        assert alone["why"].startswith(f"cannot tell: {1 + len(history)} run")
        assert f"{R.MIN_HISTORY - 1 - len(history)} more completed run" in alone["why"]
        assert alone["runs_needed"] == R.MIN_HISTORY - 1 - len(history)
        # No verdict, but the figures measured are shown: the medians and the change of the geometric means.
        assert (alone["baseline_median"], alone["candidate_median"]) == (1000, 500)
        assert alone["change"] == pytest.approx(-0.5, abs=1e-4)
        # What would be detectable with 3 runs as steady as these repeats: above the 10% floor, and said.
        assert alone["detectable"] >= R.MIN_EFFECT and f"{R.detectable_text(alone)} would be detectable" in alone["why"]
        assert alone["detectable"] == pytest.approx(1 - 1 / alone["detectable_factor"])  # a drop: ÷ the factor
    # The same halving with 3 runs of history is called.
    history = [[1000 * (1 + e), 1005 * (1 + e), 995 * (1 + e)] for e in (0.01, -0.01)]
    called = R.verdict(base, halved, True, history)
    assert called["verdict"] == "regression" and called["df"] == 2 and called["detectable"] < 0.5


def test_what_a_comparison_can_detect_shrinks_with_history_and_grows_with_noise():
    rng = np.random.default_rng(12)
    data = simulated_runs(rng, OLDER + 2, between=0.05, within=0.02)
    def bar(older, scale=1.0):
        verdicts = one_run_check(data[1:] * np.exp(np.log(data[1:] / 1000) * (scale - 1)), data[0], older=older)
        return float(np.median([v["detectable"] for v in verdicts]))
    assert bar(9) < bar(4) < bar(2)  # k - 1 = 9, 4, 2 degrees of freedom
    assert bar(9, scale=2.0) > bar(9)
    # A change as large as what is detectable is called; the figure is what the test needs, not a guess.
    base = data[1, 0]
    history = [data[r, 0] for r in range(2, OLDER + 2)]
    quiet = R.verdict(base, base, True, history)
    worse = R.verdict(base, base * (1 - 1.2 * quiet["detectable"]), True, history)
    assert worse["verdict"] == "regression"


def repeats(*verdicts):
    """A configuration's sustainability in one run, as run_figures gives it: its repeats' verdicts and theirs
    combined (any unsustainable: unsustainable; all sustainable: sustainable; else inconclusive)."""
    kinds = set(verdicts)
    combined = "unsustainable" if "unsustainable" in kinds else "sustainable" if kinds == {"sustainable"} \
        else "inconclusive"
    return {"sustainability": combined, "repeat_verdicts": list(verdicts)}


S, U, I = "sustainable", "unsustainable", "inconclusive"


def flip_verdict(old, new, older, others=0):
    """The flip's verdict in a family with `others` verdicts whose p-value is 0.5 (a run's quiet figures)."""
    return R.decide([R.flip(old, new, older), *({"p_raw": 0.5, "verdict": None, "change": 0.0, "threshold": 0.1,
                                                 "log_difference": 0.0, "change_vs_history": 0.0, "noise": 0.01,
                                                 "higher_is_better": True, "se": None, "noise_source": "-"}
                                                for _ in range(others))])[0]


def test_the_exact_test_of_two_shares_agrees_with_a_hand_calculation_and_an_independent_implementation():
    # 0 of 9 against 3 of 3: the only table as extreme is the observed one, P = (1 − π)⁹π³, largest at π = 1/4.
    assert R.rate_rise_p(0, 9, 3, 3) == pytest.approx(3 ** 9 / 4 ** 12, rel=1e-9)
    # Fisher's one-sided p of the same table is 1/220; Boschloo's is never larger.
    from brokerbench.reports.stats import _fisher_rise_p
    assert _fisher_rise_p(0, 9, 3, 3) == pytest.approx(1 / 220)
    # scipy.stats.boschloo_exact 1.17.1 (alternative "greater", its nuisance grid n=64) on the same tables:
    for counts, expected in (((0, 9, 1, 3), 0.13101162129141183), ((2, 9, 3, 3), 0.02016165198392078),
                             ((1, 30, 3, 3), 0.00019073813063508196), ((7, 72, 3, 3), 0.000619777455099636),
                             ((5, 20, 2, 6), 0.37621508200118275), ((0, 6, 2, 3), 0.03378681597695337)):
        assert R.rate_rise_p(*counts) == pytest.approx(expected, rel=1e-6)
        assert R.rate_rise_p(*counts) <= _fisher_rise_p(*counts)
    assert R.rate_rise_p(0, 9, 0, 3) == 1.0 and R.rate_rise_p(0, 0, 3, 3) == 1.0


@pytest.mark.parametrize("history,candidate", [(9, 3), (15, 3), (30, 3)])
def test_the_exact_test_keeps_its_level_at_any_common_rate(history, candidate):
    """Its size, summed over every table: at no common rate does it reject more often than its level."""
    for rate in (0.001, 0.02, 7 / 72, 0.25, 0.5, 0.9):
        for alpha in (0.01, 0.05):
            size = sum(math.comb(history, a) * math.comb(candidate, b) * rate ** (a + b)
                       * (1 - rate) ** (history + candidate - a - b)
                       for a in range(history + 1) for b in range(candidate + 1)
                       if R.rate_rise_p(a, history, b, candidate) <= alpha)
            assert size <= alpha * (1 + 1e-9), (rate, alpha, size)


def test_a_flip_is_a_regression_only_when_the_share_of_unsustainable_repeats_is_improbable():
    steady = [repeats(S, S, S)] * 2
    # 0 of 9 repeats in history against 3 of 3: improbable at any one rate, even among one configuration's 4 verdicts.
    failed = flip_verdict(repeats(S, S, S), repeats(U, U, U), steady)
    assert failed["verdict"] == "regression" and failed["p_raw"] == pytest.approx(3 ** 9 / 4 ** 12, rel=1e-9)
    assert failed["why"].startswith("sustainable → unsustainable; unsustainable repeats: candidate 3 of 3 (100%), "
                                    "history 0 of 9 (0%) over its 3 runs: improbable at one rate (Boschloo p=0.0012 "
                                    "for a rise, Holm p=0.0023 among 2)")
    # A fall from 0 of 9 cannot happen: its p is 1, and it only counts in the family.
    assert failed["p_tests"]["fall"] == 1.0 and failed["comparisons"] == 2
    assert flip_verdict(repeats(S, S, S), repeats(U, U, U), steady, others=3)["verdict"] == "regression"
    # One repeat of three: as likely by chance at a rate history could have (0.13 one-sided), so no conclusion,
    # with the shares that made it so.
    one = flip_verdict(repeats(S, S, S), repeats(S, U, S), steady)
    assert one["verdict"] == "unstable" and one["p_raw"] == pytest.approx(0.13101162129141183, rel=1e-6)
    assert "candidate 1 of 3 (33%), history 0 of 9 (0%)" in one["why"] and "as likely by chance" in one["why"]
    assert one["callable_unsustainable"] == 3 and "3 of 3 would be called" in one["why"]
    # History that was unsustainable now and then: 3 of 3 is no longer improbable.
    shaky = flip_verdict(repeats(S, S, S), repeats(U, U, U), [repeats(S, U, S), repeats(U, S, S)])
    assert shaky["verdict"] == "unstable" and shaky["history_rate"] == pytest.approx(2 / 9)
    # The reverse, and no change at all.
    assert flip_verdict(repeats(U, U, U), repeats(S, S, S), [repeats(U, U, U)] * 2)["verdict"] == "improvement"
    same = flip_verdict(repeats(S, S, S), repeats(S, S, S), steady)
    assert same["verdict"] == "unchanged" and same["p_value"] == 1.0
    # A share that rose while the configuration's verdict stayed unsustainable is a regression too.
    worse = flip_verdict(repeats(S, S, U), repeats(U, U, U), [repeats(S, S, S)] * 9)
    assert worse["verdict"] == "regression" and worse["why"].startswith("unsustainable in both runs; ")
    # Among a quick suite's 50 comparisons (10 configurations: 30 figures, 10 flips that test both ways), 3 runs
    # of history cannot call even 3 of 3, and the verdict says so; 10 runs can.
    among = flip_verdict(repeats(S, S, S), repeats(U, U, U), steady, others=48)
    assert among["verdict"] == "unstable" and among["callable_unsustainable"] is None
    assert "not even 3 of 3 would be called among 50 comparisons" in among["why"]
    full = flip_verdict(repeats(S, S, S), repeats(U, U, U), [repeats(S, S, S)] * 9, others=48)
    assert full["verdict"] == "regression" and full["callable_unsustainable"] == 3
    # Decided without a test: too short a history, an inconclusive side, no verdict at all.
    short = flip_verdict(repeats(S, S, S), repeats(U, U, U), [repeats(S, S, S)])
    assert short["verdict"] == "unstable" and short["p_value"] is None
    assert short["why"].endswith("1 more completed run needed to know how often it flips run to run")
    assert flip_verdict(repeats(S, S, S), repeats(I, I, I), steady)["verdict"] == "unstable"
    assert R.flip({"sustainability": "search"}, {"sustainability": "search"}, []) is None
    # Figures without per-repeat verdicts: the configuration's verdict counts as one repeat.
    assert R.judged_repeats({"sustainability": "unsustainable"}) == (1, 1)
    assert R.judged_repeats(repeats(S, U, I)) == (1, 2)


# -- A/A with sustainability flips: a quick suite's compare ------------------------------------------
QUICK_CONFIGS, QUICK_REPEATS = 10, 3  # suites/quick.json: 2 brokers × 5 formats, 3 repeats
INCONCLUSIVE = 6 / 120  # the share of inconclusive repeats in four nightly quick runs on one build
FIGURE_METRICS = ("throughput_msgs_per_s", "end_to_end_p99_us", "publish_latency_p99_us")


def quick_run(rng, unsustainable, unsustainable_in=(), figures=True):
    """One quick-suite run's figures (run_figures' shape): per configuration 3 repeats, each judged unsustainable
    at the per-repeat rate `unsustainable` (all of them in the configurations `unsustainable_in`), inconclusive at
    INCONCLUSIVE, and (`figures`) figures that scatter by 5% run to run and 2% per repeat. Without figures, the
    flips are the whole Holm family: a stricter test of them (α / 20 at Holm's first step, not α / 50)."""
    offsets = rng.normal(0, 0.05, (QUICK_CONFIGS, 3))
    run = {}
    for c in range(QUICK_CONFIGS):
        draw = rng.random(QUICK_REPEATS)
        verdicts = [U if c in unsustainable_in or d < unsustainable else I if d < unsustainable + INCONCLUSIVE
                    else S for d in draw]
        values = {m: list(1000 * np.exp(offsets[c, i] + rng.normal(0, 0.02, QUICK_REPEATS))) if figures else []
                  for i, m in enumerate(FIGURE_METRICS)}
        run[f"c{c}"] = {"key": f"c{c}", "cell": f"c{c}", "cell_id": f"c{c}", "status": "completed", "search": False,
                        "series": {}, "repeats": values, **repeats(*verdicts)}
    return run


def quick_compares(seed, trials, runs, rate, figures=False):
    """A/A compares of quick runs with `runs` runs of history (the baseline counts), through R.compare: how many
    raised a regression, any alarm, and what the rule this one replaced (a flip against a history whose
    configuration was sustainable in every run) would have called on the same runs."""
    rng = np.random.default_rng(seed)
    regressions = alarms = previous = 0
    for _ in range(trials):
        history = [quick_run(rng, rate, figures=figures) for _ in range(runs)]
        candidate = quick_run(rng, rate, figures=figures)
        verdicts = R.compare(history[0], candidate, history[1:])
        regressions += any(v["verdict"] == "regression" for v in verdicts)
        alarms += any(v["verdict"] in ("regression", "improvement") for v in verdicts)
        previous += any(candidate[k]["sustainability"] == U and all(h[k]["sustainability"] == S for h in history)
                        for k in candidate)
    return regressions / trials, alarms / trials, previous / trials


CLAIM_BUDGET = 0.05  # DESIGN: a claim's false-claim rate per report is kept ≤ 5%


@pytest.mark.parametrize("rate", [0.02, 7 / 72, 0.10])
@pytest.mark.parametrize("runs", [3, 5, 10])
def test_quick_suite_a_a_compares_raise_no_false_sustainability_regression(rate, runs):
    """Per-repeat unsustainable rates of 2% and 10% (and the A/A runs' 7 of 72), 3, 5 and 10 runs of history: the
    share of compares with any false regression or improvement of sustainability stays within the budget, and
    within what the family-wise ALPHA allows for 500 compares (binomial 99.9% bound at 1%: 3%); the previous
    rule's share, on the same runs, does not."""
    regressions, alarms, previous = quick_compares(100 * runs + int(1000 * rate), 500, runs, rate)
    assert regressions <= alarms <= min(CLAIM_BUDGET, 0.03)
    # The previous rule on the same runs: at 3 runs 28-50% of compares; at 2% per repeat beyond the budget at any
    # history (a longer history of a higher rate, with its inconclusive repeats, is seldom steady throughout).
    if runs == 3 or rate == 0.02:
        assert previous > (0.25 if runs == 3 else CLAIM_BUDGET)


def test_quick_suite_a_a_compares_with_their_figures_raise_no_false_regression():
    """The same, with the figures' verdicts in the family (a quick compare's 50 comparisons), at the A/A runs' rate
    and 3 runs of history, where the previous rule called a flip in most compares."""
    regressions, alarms, previous = quick_compares(7, 100, 3, 7 / 72, figures=True)
    assert regressions <= alarms <= CLAIM_BUDGET and previous > 0.4


def test_a_real_change_of_sustainability_is_called_with_a_full_history_among_a_quick_suites_verdicts():
    """Two configurations whose repeats are all unsustainable now, against 10 runs that saw none (a quiet host, as
    the four nightly quick runs: 0 of 120): called whenever the candidate judged all 3 repeats, and nothing else is.
    (A repeat that came out inconclusive leaves 2 of 2, which 10 runs cannot call among 50 comparisons.)"""
    rng = np.random.default_rng(33)
    found = other = 0
    for _ in range(50):
        history = [quick_run(rng, 0.0) for _ in range(10)]
        candidate = quick_run(rng, 0.0, unsustainable_in=(0, 1))
        verdicts = R.compare(history[0], candidate, history[1:])
        called = {v["key"] for v in verdicts if v["metric"] == "sustainability" and v["verdict"] == "regression"}
        found += {"c0", "c1"} <= called
        other += bool(called - {"c0", "c1"}) or any(v["verdict"] == "regression" for v in verdicts
                                                   if v["metric"] != "sustainability")
    assert found >= 35 and other <= 1


# -- multiplicity ----------------------------------------------------------------------------------
def test_holm_adjusts_over_the_family():
    assert R.holm([0.01] + [0.5] * 11)[0] == pytest.approx(0.12)
    assert R.holm([0.001, 0.02, 0.03]) == pytest.approx([0.003, 0.04, 0.04])
    assert R.holm([0.04, 0.001]) == pytest.approx([0.04, 0.002])  # order kept, monotone


def test_one_p_value_that_passes_alone_is_not_enough_among_twelve():
    history = [[1000 * (1 + e), 1000 * (1 + e) + 5, 1000 * (1 + e) - 5] for e in (0.0, 0.01, -0.01, 0.02, -0.02,
                                                                                   0.01, -0.01, 0.06, -0.06)]
    baseline = [1000, 1005, 995]
    candidate = [880, 885, 875]  # -12%: beyond the 10% floor and the noise gate
    alone = R.assess(baseline, candidate, True, history)
    assert R.ALPHA / VERDICTS < alone["p_raw"] < R.ALPHA  # passes alone, not among twelve
    assert R.decide([alone])[0]["verdict"] == "regression"
    quiet = [R.assess(baseline, [1001, 1006, 996], True, history) for _ in range(VERDICTS - 1)]
    among = R.decide([alone, *quiet])
    assert among[0]["verdict"] == "unstable" and among[0]["comparisons"] == VERDICTS  # no conclusion
    assert among[0]["p_value"] == pytest.approx(alone["p_raw"] * VERDICTS) and "not significant" in among[0]["why"]


# -- samples: repeats, or blocks of a single repeat ------------------------------------------------
def ar1(rng, n, rho, level, sd):
    x = np.empty(n)
    x[0] = rng.normal()
    for i in range(1, n):
        x[i] = rho * x[i - 1] + math.sqrt(1 - rho ** 2) * rng.normal()
    return level * np.exp(sd * x)


def test_block_length_follows_the_lag1_autocorrelation():
    rng = np.random.default_rng(2)
    assert R.block_length([rng.normal(size=60)]) == R.MIN_BLOCK_S
    assert R.block_length([ar1(rng, 300, 0.8, 1000, 0.05)]) >= 6
    assert R.block_length([np.arange(60.0)]) == R.MAX_BLOCK_S
    assert R.block_medians([[1, 2, 3, 4, 5, 6, 7]], 3) == [2.0, 5.0]


def test_single_repeat_runs_compare_blocks_of_intervals_without_false_alarms():
    rng = np.random.default_rng(6)
    runs_with_alarm = 0
    for _ in range(20):
        # 12 runs (candidate, baseline, 10 older) of one 30-second repeat, AR(1) per-second series
        offsets = rng.normal(0, 0.03, (12, VERDICTS))
        series = [[ar1(rng, 30, 0.6, 1000 * math.exp(offsets[r, v]), 0.05) for v in range(VERDICTS)] for r in range(12)]
        assessed = []
        for v in range(VERDICTS):
            block = R.block_length([series[0][v], series[1][v]])
            samples = [R.block_medians([series[r][v]], block) for r in range(12)]
            assessed.append(R.assess(samples[1], samples[0], True, samples[2:], R.MIN_BLOCKS))
        runs_with_alarm += any(v["verdict"] in ("regression", "improvement") for v in R.decide(assessed))
    assert runs_with_alarm <= 1


def test_too_few_samples_are_unstable():
    assert R.verdict([1000], [900, 905], True)["verdict"] == "unstable"
    blocks = R.assess([1, 2], [1, 2], True, min_samples=R.MIN_BLOCKS)
    assert blocks["verdict"] == "unstable" and "too few samples" in blocks["why"]


def test_student_t_p_values():
    assert R.t_two_sided_p(2.776, 4) == pytest.approx(0.05, abs=1e-3)
    assert R.t_two_sided_p(12.706, 1) == pytest.approx(0.05, abs=1e-3)
    assert R.t_two_sided_p(2.228, 10) == pytest.approx(0.05, abs=1e-3)
    assert R.t_two_sided_p(1.96, math.inf) == pytest.approx(0.05, abs=1e-3)
    assert R.t_two_sided_p(0, 5) == pytest.approx(1.0) and R.t_two_sided_p(math.inf, 5) == 0


# -- runs from events: history, host kind, RegressionDetected ----------------------------------------
SPEC = {"name": "aa", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [2000],
        "formats": ["raw", "json"], "repeats": 3}


def run_id(i):
    return f"20250101T{i:06d}Z-abcdef"


def on_host(events, cpu_model):
    requested = events[0]
    data = {**requested["data"], "environment": {**requested["data"]["environment"],
                                                 "host": {**requested["data"]["environment"]["host"],
                                                          "cpu_model": cpu_model}}}
    return [make_event(requested["run_id"], "RunRequested", data), *events[1:]]


@pytest.fixture(scope="module")
def stored():
    store = MemoryEventStore()
    for i in range(12):
        store.append(synthetic_run(SPEC, intervals=5, seed=i, run_id=run_id(i)))
    store.append(on_host(synthetic_run(SPEC, intervals=5, seed=50, run_id=run_id(12)), "another CPU"))
    store.append(synthetic_run({**SPEC, "client": {"acks": "0"}}, intervals=5, seed=51, run_id=run_id(13)))
    store.append(synthetic_run(SPEC, intervals=5, seed=52, run_id=run_id(14), rate_scale=0.75))
    return store


def test_history_is_the_last_ten_matching_runs_on_the_same_host_kind_and_settings(stored):
    history = R.find_history(stored, run_id(14))
    assert history == [run_id(i) for i in range(11, 1, -1)]  # newest first, not 12 (host) or 13 (acks)
    assert R.find_baseline(stored, run_id(14)) == run_id(11)
    assert R.find_baseline(stored, run_id(0)) is None
    config = R.target_configuration(stored.read(run_id(12)))
    assert config["host"]["cpu_model"] == "another CPU" and "cores" in config["host"]
    assert config["client"] == stored.read(run_id(12))[0]["data"]["spec"]["client"]


def test_check_finds_the_throughput_drop_records_it_once_and_says_how(stored):
    checked = R.check(stored, run_id(14))
    assert checked["baseline_run_id"] == run_id(11) and len(checked["history_run_ids"]) == 10
    assert set(checked) >= {"baseline_run_id", "history_run_ids", "verdicts", "regressions", "method"}
    # 4 configurations × 3 figures, and each configuration's sustainability verdict
    assert len(checked["verdicts"]) == VERDICTS + 4
    assert {v["verdict"] for v in checked["verdicts"] if v["metric"] == "sustainability"} <= {"unstable", "unchanged"}
    assert {(v["metric"], v["verdict"]) for v in checked["regressions"]} == {("throughput_msgs_per_s", "regression")}
    assert len(checked["regressions"]) == 4
    assert all(v["change"] == pytest.approx(-0.25, abs=0.03) and v["samples"] == "repeats" for v in checked["regressions"])
    assert all(v["verdict"] == "unchanged" for v in checked["verdicts"]
               if v["metric"] not in ("throughput_msgs_per_s", "sustainability"))
    stored_events = [e for e in stored.read(run_id(14)) if e["type"] == "RegressionDetected"]
    assert len(stored_events) == 4 and all(e["data"]["baseline_run_id"] == run_id(11) for e in stored_events)
    assert all(0 <= e["data"]["p_value"] <= 1 for e in stored_events)
    R.check(stored, run_id(14))  # replayed: nothing new
    assert len([e for e in stored.read(run_id(14)) if e["type"] == "RegressionDetected"]) == 4
    assert "Holm" in checked["method"]["multiplicity"]


def test_identical_stored_runs_are_unchanged(stored):
    checked = R.check(stored, run_id(11), record=False)
    assert checked["baseline_run_id"] == run_id(10) and len(checked["history_run_ids"]) == 10
    assert [v for v in checked["verdicts"] if v["verdict"] != "unchanged" and v["metric"] != "sustainability"] == []
    # The synthetic generator's cells are sometimes short of their rate: their verdict flips run to run, and the
    # test of the shares finds that as likely by chance
    flips = [v for v in checked["verdicts"] if v["metric"] == "sustainability"]
    assert all(v["verdict"] == "unchanged" or "as likely by chance" in v["why"] for v in flips)


def test_a_report_gives_the_same_verdicts_as_the_events(stored):
    events = [stored.read(run_id(i)) for i in (14, 11, 10, 9)]
    from_events = R.compare(events[1], events[0], events[2:])
    from_reports = R.compare(*(build_report(e) for e in events[:2][::-1]), [build_report(e) for e in events[2:]])
    assert [(v["key"], v["metric"], v["verdict"], v["change"]) for v in from_events] == \
        [(v["key"], v["metric"], v["verdict"], v["change"]) for v in from_reports]


def test_compare_works_on_reports_and_on_single_repeat_runs():
    one = {**SPEC, "repeats": 1}
    runs = [synthetic_run(one, intervals=12, seed=i, run_id=run_id(i)) for i in range(4)]
    verdicts = [v for v in R.compare(build_report(runs[2]), build_report(runs[3]),
                                     [build_report(r) for r in runs[:2][::-1]]) if v["metric"] != "sustainability"]
    assert len(verdicts) == VERDICTS and all(v["samples"].startswith("blocks of") for v in verdicts)
    assert all(v["verdict"] in ("unchanged", "unstable") for v in verdicts)
    # One repeat and no history: run-to-run noise unknown, whatever the blocks say.
    alone = [v for v in R.compare(runs[2], runs[3]) if v["metric"] != "sustainability"]
    assert {v["verdict"] for v in alone} == {"unstable"} and all(v["why"].startswith("cannot tell") for v in alone)
    short = [synthetic_run(one, intervals=3, seed=i, run_id=run_id(i)) for i in range(4)]
    verdicts = [v for v in R.compare(short[2], short[3], short[:2][::-1]) if v["metric"] != "sustainability"]
    assert {v["verdict"] for v in verdicts} == {"unstable"} and "single repeat" in verdicts[0]["why"]


def _search_run(rates):
    """A run's figures (run_figures' shape) of one rate-search configuration: its maximum sustainable rate per repeat."""
    return {"k": {"key": "k", "cell": "kafka json · search", "cell_id": "c0", "status": "completed", "search": True,
                  "sustainability": "search", "repeats": {"max_sustainable_rate": list(rates)}, "series": {}}}


def test_a_rate_search_regresses_its_maximum_sustainable_rate_not_a_throughput_at_its_target():
    rng = np.random.default_rng(21)
    history = [_search_run(10_000 * np.exp(rng.normal(0, 0.02, 3))) for _ in range(5)]
    lower = R.compare(history[0], _search_run([7_000, 7_100, 6_900]), history[1:])
    assert [(v["metric"], v["verdict"]) for v in lower] == [("max_sustainable_rate", "regression")]
    assert lower[0]["change"] == pytest.approx(-0.3, abs=0.03)
    same = R.compare(history[0], _search_run(10_000 * np.exp(rng.normal(0, 0.02, 3))), history[1:])
    assert [v["verdict"] for v in same] == ["unchanged"]
    # One repeat per run: one figure per run against history's runs.
    single = [_search_run([10_000 * math.exp(rng.normal(0, 0.02))]) for _ in range(5)]
    found = R.compare(single[0], _search_run([6_000]), single[1:])
    assert found[0]["verdict"] == "regression" and found[0]["samples"] == "one per run"


def steady_history(offsets, level=1000.0, repeats=3):
    """Runs whose repeats agree exactly, at the given log offsets: the run-to-run variance is theirs alone."""
    return [[level * math.exp(o)] * repeats for o in offsets]


def standardized(n, scale, seed=7):
    """n log offsets with mean 0 and sample standard deviation `scale` exactly."""
    z = np.random.default_rng(seed).normal(size=n)
    return (z - z.mean()) / z.std(ddof=1) * scale


def test_an_absurd_detectable_change_is_said_in_words_with_the_runs_that_would_detect_30_percent():
    family = 36  # a 12-configuration run's verdicts
    aim = 1 / (1 - R.AIM)  # a drop of 30%, as a factor

    def check(offsets):
        runs = steady_history(offsets)
        return R.label(R.assess(runs[0], runs[0], True, runs[1:]), 1.0, family)

    three = check(standardized(3, 0.05))
    assert three["detectable_factor"] > R.USEFUL_FACTOR  # 2 degrees of freedom at alpha / 36
    n = three["runs_to_detect"]
    text = R.detectable_text(three)
    assert text.startswith(f"3 runs cannot detect a change in this metric (only one beyond "
                           f"÷{three['detectable_factor']:,.3g})")
    assert text.endswith(f"; about {n} runs could detect −30%")
    # The figure is what the rule itself gives with that many runs as steady (the same run-to-run variance): n runs
    # detect a 30% drop, n - 1 do not.
    assert check(standardized(n, 0.05))["detectable_factor"] <= aim
    assert check(standardized(n - 1, 0.05))["detectable_factor"] > aim
    assert 3 < n <= R.HISTORY_RUNS
    # Noise above a tenth: its bar (3 × noise) is beyond 30%, and no number of runs helps.
    noisy = check([0.0, 0.25, -0.25])
    assert noisy["runs_to_detect"] is None and noisy["threshold"] >= R.AIM
    assert R.detectable_text(noisy).endswith(f", nor could more runs: its noise of {noisy['noise']:.0%} needs a "
                                             "change beyond 3× that")
    # One run far off the others: a small robust noise, but a variance that not even 10 runs bring down to 30%.
    odd = check([0.0, 0.001, 0.9])
    assert odd["threshold"] < R.AIM and odd["runs_to_detect"] is None
    assert R.detectable_text(odd).endswith("; not even the 10 runs a check uses at most could detect −30%")
    # A full, steady history: a plain figure.
    full = check(standardized(10, 0.02))
    assert full["detectable_factor"] < R.USEFUL_FACTOR and full["runs_to_detect"] is None
    assert R.detectable_text(full) == f"−{full['detectable']:.0%}"
    rise = R.label(R.assess([1000] * 3, [1000] * 3, False, steady_history(standardized(9, 0.02))), 1.0, family)
    assert R.detectable_text(rise) == f"+{rise['detectable']:.0%}"


def test_a_short_history_says_what_steady_runs_could_detect_in_words():
    base = [1000, 1010, 990]
    steady = R.label(R.assess(base, base, True, ()), None, 1)
    assert "with 3 runs as steady as these samples, a change of −" in steady["why"]
    shaky = R.label(R.assess(base, [600, 1400, 1000], True, ()), None, 36)
    assert shaky["detectable_factor"] > R.USEFUL_FACTOR
    assert "(even as steady as these samples, 3 runs cannot detect a change in this metric" in shaky["why"]


def _decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def change_recomputes(baseline: str, candidate: str, change: str) -> bool:
    """Whether a printed change is candidate ÷ baseline − 1 of the printed figures, within their rounding: some
    pair of values that print as these gives a change that prints as this."""
    b, c = (float(x.replace(",", "")) for x in (baseline, candidate))
    half_b, half_c = 0.5 * 10 ** -_decimals(baseline), 0.5 * 10 ** -_decimals(candidate)
    lowest, highest = (c - half_c) / (b + half_b) - 1, (c + half_c) / (b - half_b) - 1
    shown = float(change.rstrip("%")) / 100
    return lowest - 0.0005 <= shown <= highest + 0.0005


def test_a_compare_table_prints_the_figures_its_change_is_of(stored):
    """`brokerbench compare` and the report's regression section: each printed change is candidate ÷ baseline − 1 of
    the two printed figures (the geometric means), within rounding; the medians would not give it."""
    from rich.console import Console

    from brokerbench.cli.stored import _compare_table
    from brokerbench.reports import markdown

    events = [stored.read(run_id(i)) for i in (14, 11, 10, 9)]
    short = R.compare(events[1], events[0], events[2:3])  # 2 runs: cannot tell, figures shown all the same
    verdicts = R.compare(events[1], events[0], events[2:]) + short
    console = Console(width=2000, record=True)
    console.print(_compare_table("t", verdicts))
    text = console.export_text()
    assert R.FIGURES in text
    lines = text.splitlines()
    header = next([cell.strip() for cell in line.split("┃")[1:-1]] for line in lines if line.count("┃") > 5)
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines if line.count("│") > 5]
    b, c, ch = (header.index(name) for name in ("baseline (geo. mean)", "candidate (geo. mean)", "change"))
    figures = [(row[b], row[c], row[ch]) for row in rows if row[ch] != "–"]
    assert len(figures) == 2 * VERDICTS and all(change_recomputes(*f) for f in figures)
    # The medians beside the same change would not check (the test can fail).
    assert not all(change_recomputes(R.figure_text(v["baseline_median"]), R.figure_text(v["candidate_median"]),
                                     f"{v['change']:+.1%}") for v in verdicts if v["change"] is not None)
    lines = markdown.regression_section(section({"regression_check": {"baseline_run_id": run_id(11), "verdicts": verdicts}}))
    table = [[cell.strip() for cell in line.split("|")[1:-1]] for line in lines if line.startswith("| ")]
    assert table[0][3:6] == ["baseline (geo. mean)", "candidate (geo. mean)", "change"]
    shown = [row[3:6] for row in table[1:] if row[5] != "–"]
    assert len(shown) == 2 * VERDICTS and all(change_recomputes(*f) for f in shown)


def test_a_sustainability_regression_is_recorded_with_the_shares_it_was_called_on():
    """10 runs of history and a candidate at half the rate: each configuration's verdict flips, and only the flips
    whose share of unsustainable repeats is improbable at history's are recorded, with both shares (the schema
    checks the stored event; a count that is not an integer would be refused)."""
    from brokerbench.events import InvalidEvent, validate

    store = MemoryEventStore()
    # Synthetic runs are the same for the same seed; these histories leave 2 to 7 of a configuration's 30 repeats
    # unsustainable by their noise alone, so some flips are called and some are not.
    for i in range(11):
        store.append(synthetic_run(SPEC, intervals=8, seed=11 + i, run_id=run_id(i)))
    store.append(synthetic_run(SPEC, intervals=8, seed=60, run_id=run_id(11), rate_scale=0.5))
    checked = R.check(store, run_id(11))
    assert checked["comparisons"] == VERDICTS + 2 * 4  # each flip tests a rise and a fall
    flips = {v["key"]: v for v in checked["verdicts"] if v["metric"] == "sustainability"}
    assert {(v["before"], v["after"]) for v in flips.values()} == {("sustainable", "unsustainable")}
    called = {k for k, v in flips.items() if v["verdict"] == "regression"}
    assert called and all(flips[k]["verdict"] == "unstable" for k in flips.keys() - called)
    # Called where history saw fewer unsustainable repeats: the test, not the flip, decides.
    assert max(flips[k]["history_unsustainable"] for k in called) < \
        min(flips[k]["history_unsustainable"] for k in flips.keys() - called)
    stored = [e["data"] for e in store.read(run_id(11)) if e["type"] == "RegressionDetected"
              and e["data"]["metric"] == "sustainability"]
    assert sorted(e["cell"] for e in stored) == sorted(flips[k]["cell"] for k in called)
    for e in stored:
        v = next(f for f in flips.values() if f["cell"] == e["cell"])
        assert e["unsustainable_repeats"] == {
            "candidate": {"unsustainable": v["candidate_unsustainable"], "judged": v["candidate_judged"]},
            "history": {"unsustainable": v["history_unsustainable"], "judged": v["history_judged"], "runs": 10}}
        assert e["p_value"] < R.ALPHA and e["change"] is None
    bad = {**next(ev for ev in store.read(run_id(11)) if ev["type"] == "RegressionDetected"
                  and ev["data"]["metric"] == "sustainability")}
    bad["data"] = {**bad["data"], "unsustainable_repeats": {"candidate": {"unsustainable": 1.5, "judged": 3},
                                                            "history": {"unsustainable": 0, "judged": 9}}}
    with pytest.raises(InvalidEvent, match="unsustainable_repeats.candidate.unsustainable"):
        validate(bad)
