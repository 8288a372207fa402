"""Small statistics for comparing benchmark samples: Mann–Whitney U, intervals for the median, spread, Student's t
and Holm–Bonferroni."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_MIN_N = 30  # below this, exact order statistics (the bootstrap is poor for small samples)


def mann_whitney_p(a, b) -> float:
    """Two-sided p-value of the Mann–Whitney U test (normal approximation with tie correction)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n1, n2 = a.size, b.size
    if n1 == 0 or n2 == 0:
        return 1.0
    both = np.concatenate([a, b])
    order = both.argsort(kind="mergesort")
    ranks = np.empty(both.size)
    sorted_values = both[order]
    # Average ranks over ties.
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = np.r_[starts[1:], both.size]
    for start, end in zip(starts, ends):
        ranks[order[start:end]] = (start + end + 1) / 2
    u1 = ranks[:n1].sum() - n1 * (n1 + 1) / 2
    tie_sizes = ends - starts
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - (tie_sizes**3 - tie_sizes).sum() / (n * (n - 1)))
    if variance <= 0:
        return 1.0
    z = (abs(u1 - n1 * n2 / 2) - 0.5) / math.sqrt(variance)  # continuity correction
    return float(math.erfc(max(z, 0) / math.sqrt(2)))


def spread(values) -> float:
    """Robust coefficient of variation: 1.4826 × MAD / median (0 for a single value)."""
    v = np.asarray(values, dtype=float)
    if v.size < 2:
        return 0.0
    median = float(np.median(v))
    if median == 0:
        return 0.0 if np.all(v == 0) else math.inf
    return float(1.4826 * np.median(np.abs(v - median)) / abs(median))


@dataclass(frozen=True)
class Estimate:
    median: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    coverage: float | None = None  # the interval's exact coverage (below `confidence` when n is small)
    method: str | None = None  # "order-statistic" or "bootstrap"; None when there is no interval

    def as_dict(self) -> dict:
        return {"median": self.median, "ci_low": self.ci_low, "ci_high": self.ci_high, "n": self.n,
                "coverage": self.coverage, "method": self.method}


def order_statistic_ranks(n: int, confidence: float = 0.95) -> tuple[int, int, float]:
    """Ranks (1-based) of the distribution-free interval [x_(k), x_(n-k+1)] for the median.

    The number of values below the true median is Binomial(n, 1/2), so the interval covers it with
    probability 1 - 2·P(B ≤ k-1), whatever the distribution. The innermost k with coverage ≥
    `confidence` is chosen; when even the whole range falls short (n < 6 at 95%), the range is
    returned with its exact, lower coverage.
    """
    k, coverage = 1, 1 - 2 * 0.5**n
    tail = 0.0
    for rank in range(1, n // 2 + 1):
        tail += math.comb(n, rank - 1) / 2**n  # P(B ≤ rank - 1)
        if 1 - 2 * tail < confidence:
            break
        k, coverage = rank, 1 - 2 * tail
    return k, n - k + 1, coverage


def median_ci(values, confidence: float = 0.95) -> Estimate:
    """Median and a distribution-free interval: exact order statistics, a bootstrap for large n.

    One value has no interval (None, not a zero-width one that would look like certainty).
    """
    v = np.sort(np.asarray([x for x in values if x is not None], dtype=float))
    if v.size == 0:
        return Estimate(None, None, None, 0)
    median = float(np.median(v))
    if v.size == 1:
        return Estimate(median, None, None, 1)
    if v.size < BOOTSTRAP_MIN_N:
        low, high, coverage = order_statistic_ranks(int(v.size), confidence)
        return Estimate(median, float(v[low - 1]), float(v[high - 1]), int(v.size), coverage, "order-statistic")
    rng = np.random.default_rng(0)  # deterministic: the same data gives the same report
    medians = np.median(rng.choice(v, size=(BOOTSTRAP_RESAMPLES, v.size), replace=True), axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return Estimate(median, float(low), float(high), int(v.size), confidence, "bootstrap")


# -- Student's t and Holm ---------------------------------------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c if abs(1 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c if abs(1 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| ≥ |t|) for Student's t with df degrees of freedom (df = inf: the normal)."""
    if math.isnan(t):
        return 1.0
    if math.isinf(t):
        return 0.0
    if df == math.inf or df > 1e6:
        return float(math.erfc(abs(t) / math.sqrt(2)))
    return float(min(1.0, _betainc(df / 2, 0.5, df / (df + t * t))))


def holm(p_values: list[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (same order as given): reject where adjusted < alpha."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


@cache
def t_quantile(p_two_sided: float, df: float) -> float:
    """The t with P(|T| ≥ t) = p_two_sided for df degrees of freedom (bisection on t_two_sided_p)."""
    if p_two_sided >= 1:
        return 0.0
    low, high = 0.0, 1.0
    while t_two_sided_p(high, df) > p_two_sided:
        low, high = high, high * 2
        if high > 1e12:
            return math.inf
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if t_two_sided_p(middle, df) > p_two_sided else (low, middle)
    return (low + high) / 2


# -- a rate of repeats: Boschloo's exact test ------------------------------------------------------------------------
NUISANCE_GRID = 400  # rates at which the null's probability is evaluated before the best one is refined


@cache
def _fisher_rise_p(x1: int, n1: int, x2: int, n2: int) -> float:
    """Fisher's one-sided p that the second sample's share is higher: P(X ≥ x2), X hypergeometric (the x1 + x2
    events spread over n1 + n2 trials, n2 of them drawn)."""
    events, total = x1 + x2, n1 + n2
    return sum(math.comb(n2, x) * math.comb(n1, events - x) for x in range(x2, min(n2, events) + 1)) \
        / math.comb(total, events)


@cache
def rate_rise_p(x1: int, n1: int, x2: int, n2: int) -> float:
    """One-sided p of Boschloo's exact unconditional test: is the share x2/n2 higher than x1/n1 by more than
    chance, both samples drawn at one unknown rate π?

    Its statistic is Fisher's one-sided p; its p-value the largest probability, over every π in [0, 1], of a
    table whose Fisher p is at most the one observed. Taking the largest over π makes it exact whatever the
    common rate is, including 0 events in the first sample (no pseudo-count or assumed floor is needed), and it
    is never larger than Fisher's p: 0 of 9 against 3 of 3 gives (3/4)⁹(1/4)³ = 0.0012 (π = 1/4), Fisher
    1/220 = 0.0045. The largest value is found on a grid of NUISANCE_GRID rates, then refined between the grid
    points beside it (golden section)."""
    if n1 <= 0 or n2 <= 0:
        return 1.0
    observed = _fisher_rise_p(x1, n1, x2, n2) * (1 + 1e-9)  # tables as extreme; the margin absorbs rounding
    coefficients = np.zeros(n1 + n2 + 1)
    for a in range(n1 + 1):
        for b in range(n2 + 1):
            if _fisher_rise_p(a, n1, b, n2) <= observed:
                coefficients[a + b] += math.comb(n1, a) * math.comb(n2, b)
    s = np.arange(n1 + n2 + 1)

    def probability(rates: np.ndarray) -> np.ndarray:
        r = np.clip(rates, 1e-12, 1 - 1e-12)[:, None]
        return np.exp(s * np.log(r) + (n1 + n2 - s) * np.log1p(-r)) @ coefficients

    grid = np.linspace(0, 1, NUISANCE_GRID + 1)
    values = probability(grid)
    best = int(np.argmax(values))
    low, high = grid[max(0, best - 1)], grid[min(NUISANCE_GRID, best + 1)]
    golden = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        left, right = high - golden * (high - low), low + golden * (high - low)
        pl, pr = probability(np.array([left, right]))
        low, high = (left, high) if pr > pl else (low, right)
    return float(min(1.0, max(values[best], probability(np.array([(low + high) / 2]))[0])))
