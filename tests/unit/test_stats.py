"""Intervals for the median: exact order statistics for small samples, no false certainty for one value."""

import math

import numpy as np
import pytest

from brokerbench.reports.stats import BOOTSTRAP_MIN_N, median_ci, order_statistic_ranks


def test_one_value_has_no_interval():
    est = median_ci([5])
    assert est.median == 5 and est.ci_low is None and est.ci_high is None and est.n == 1
    assert est.as_dict()["coverage"] is None and est.as_dict()["method"] is None
    assert median_ci([]).median is None and median_ci([None, None]).n == 0


def test_below_six_values_the_interval_is_the_whole_range_with_its_exact_coverage():
    for n, coverage in ((2, 0.5), (3, 0.75), (4, 0.875), (5, 0.9375)):
        values = list(range(10, 10 + n))
        est = median_ci(values)
        assert (est.ci_low, est.ci_high) == (10, 10 + n - 1)
        assert est.coverage == pytest.approx(coverage) and est.method == "order-statistic"


def test_ranks_match_the_binomial_tables():
    # Classic table of distribution-free 95% intervals for the median: (n, lower rank, upper rank).
    for n, low, high in ((6, 1, 6), (8, 1, 8), (9, 2, 8), (10, 2, 9), (12, 3, 10), (15, 4, 12), (20, 6, 15),
                         (25, 8, 18)):
        k, upper, coverage = order_statistic_ranks(n)
        assert (k, upper) == (low, high), n
        exact = 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n
        assert coverage == pytest.approx(exact) and coverage >= 0.95


def test_the_interval_covers_the_median_as_often_as_it_says():
    rng = np.random.default_rng(3)
    for n in (3, 7, 12):
        hits = 0
        trials = 4000
        for _ in range(trials):
            sample = rng.lognormal(0, 1, n)  # skewed; true median 1
            est = median_ci(sample)
            hits += est.ci_low <= 1 <= est.ci_high
        assert hits / trials == pytest.approx(median_ci(rng.random(n)).coverage, abs=0.025), n


def test_large_samples_use_a_deterministic_bootstrap():
    values = np.random.default_rng(1).normal(100, 5, BOOTSTRAP_MIN_N)
    first, again = median_ci(values), median_ci(values)
    assert first.method == "bootstrap" and first == again
    assert first.ci_low < first.median < first.ci_high
