"""The regression rule on synthetic series: few false alarms on noise, a 20% shift found."""

import numpy as np
import pytest

from brokerbench.reports.regression import verdict
from brokerbench.reports.stats import mann_whitney_p, median_ci, spread

TRIALS = 400
SAMPLES = 30  # e.g. three repeats of ten one-second intervals


def noisy(rng, level, n=SAMPLES, cv=0.08):
    """Per-interval figures: lognormal noise around a level, as throughput and p99 samples look."""
    return level * rng.lognormal(0, cv, n)


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_pure_noise_gives_at_most_five_percent_false_alarms(higher_is_better):
    rng = np.random.default_rng(7)
    alarms = sum(verdict(noisy(rng, 1000), noisy(rng, 1000), higher_is_better)["verdict"] in ("regression", "improvement")
                 for _ in range(TRIALS))
    assert alarms / TRIALS <= 0.05


@pytest.mark.parametrize("metric,shift,higher_is_better", [
    ("throughput drops 20%", 0.8, True),
    ("p99 rises 20%", 1.2, False),
])
def test_a_twenty_percent_shift_is_detected_in_95_percent_of_trials(metric, shift, higher_is_better):
    rng = np.random.default_rng(11)
    found = sum(verdict(noisy(rng, 1000), noisy(rng, 1000 * shift), higher_is_better)["verdict"] == "regression"
                for _ in range(TRIALS))
    assert found / TRIALS >= 0.95, metric


def test_the_opposite_shift_is_an_improvement_and_noise_beyond_the_waterline_is_unstable():
    rng = np.random.default_rng(3)
    assert verdict(noisy(rng, 1000), noisy(rng, 1300), True)["verdict"] == "improvement"
    wild = verdict(noisy(rng, 1000, cv=0.8), noisy(rng, 1000, cv=0.8), False)
    assert wild["verdict"] == "unstable" and wild["spread_baseline"] > 0.25
    assert verdict([1, 2], [1, 2, 3], True)["verdict"] == "unstable"


def test_verdicts_carry_the_figures_behind_them():
    result = verdict([100] * 5 + [101] * 5, [80] * 5 + [81] * 5, True)
    assert result["verdict"] == "regression"
    assert result["baseline_median"] == 100.5 and result["candidate_median"] == 80.5
    assert result["change"] == pytest.approx(-0.199, abs=1e-3) and result["p_value"] < 0.01


def test_mann_whitney_matches_known_values():
    # Identical samples: no evidence. Fully separated samples of 10: p ≈ 0.00018 (normal approximation).
    assert mann_whitney_p([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0, abs=0.2)
    assert mann_whitney_p(range(10), range(10, 20)) == pytest.approx(0.00018, rel=0.1)


def test_median_interval_and_spread():
    est = median_ci([10, 11, 12, 13, 14])
    assert est.median == 12 and est.ci_low <= 12 <= est.ci_high and est.n == 5
    assert median_ci([5]).as_dict() == {"median": 5, "ci_low": 5, "ci_high": 5, "n": 1}
    assert spread([10, 10, 10]) == 0 and spread([1, 10, 100]) > 1
