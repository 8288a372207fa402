"""Change points over a configuration's runs: where a metric moved, and the run the move began with.

The pairwise check (`regression`) asks whether the newest run is one more run like history's pool. A change that
happened some nights ago is then half in the pool and half not: it reads "unstable" for a while and is absorbed.
This module looks at the whole series instead, as Apache Otava (formerly Hunter) does for MongoDB's and
DataStax's nightly performance tests: E-divisive means to place a change, a t-test to say whether it is real.

The series: one figure per run, the geometric mean of the run's repeats (log scale, so a change is a ratio), or
their median when the run has MEDIAN_REPEATS or more, runs in the order they were requested. The repeats inform the
noise floor but are not counted as independent evidence of a change between runs: they share their run's broker,
page cache and neighbours, and identical runs here differ by more than their repeats say (the pseudo-replication
`regression` avoids too).

For one series of N runs:

- where: E-divisive means: the split τ (at least MIN_SEGMENT runs on either side) that maximises the energy
  statistic Q(τ) = nm/(n+m)·(2/(nm)·Σ|x−y| − C(n,2)⁻¹·Σ|x−x'| − C(m,2)⁻¹·Σ|y−y'|) (Matteson and James 2014,
  α = 1), a difference between the distributions on either side; binary segmentation repeats it on each side
  down to segments too short to split, which gives the candidates.
- whether: as Otava does, each candidate is tested between its neighbouring candidates, and the weakest is
  dropped while it is not significant (its neighbours are then tested over the longer segments it leaves). The
  test is Student's t of the two sides' mean log figures, with the pooled variance of the runs around their
  side's mean (floored at the repeats' own variance of a run's mean: throughput at a fixed rate can agree to the
  last message run after run) and n − 2 degrees of freedom. The split was chosen as the best of the segment's
  admissible ones, so its p-value is multiplied by their number (Bonferroni: valid however the split was chosen;
  adjacent splits are correlated, so conservative by a small factor; Otava leaves the choice uncorrected).
- the newest runs: the split before the newest MIN_SEGMENT runs (against the runs back to the change point before
  it) is also tested on its own, with no factor for splits: a change is then told on its second run after it
  began, where the search above, which pays for every split it could have chosen, needs a change several times its
  noise (at 12 runs and 30 series a critical t of 7.6 against this test's 5.3). It is the test a nightly check
  repeats every night, chosen in advance, so it needs no correction for the choice; it is one-sided, towards worse
  (it is there to tell a regression early; an improvement is left to the search). It runs from NEWEST_MIN runs on,
  before the search can (a change in a schedule's first nights: 2 runs before it and 2 after).
- the newest runs' variance, moderated: a series' own runs give its variance few degrees of freedom (2 at 4 runs,
  8 at 10), so its t must clear a high bar (at 4 degrees of freedom and 30 series, a one-sided critical t of 11).
  The configurations of one noise group (one metric of one broker, mode, rate and clients: they differ in format and
  size, history.noise_group) vary alike from run to run, so their variances inform each other, as limma's
  moderated t does for genes (Smyth 2004): the group's variances (each series' own at its newest split) give a
  prior, s0² with d0 degrees of freedom (variance_prior: fitFDist's moments of log s²; d0 large when the
  variances spread no more than sampling alone makes them, small when they truly differ, and never more than
  PRIOR_SHARE of the group's own degrees of freedom), and a series' test uses (d0·s0² + d·s²)/(d0 + d) at d0 + d
  degrees of freedom. Never below the series' own s²: one run far off inflates its own variance, and the prior
  must not pull that back (measured: with run-to-run noise of Student's t at 3 degrees of freedom, the plain
  moderated variance raised false alerts on 8 nights of 220, twice the budget; with its own s² as the floor, 4 as
  before). The search keeps each series' own variance.
- a latency net of the host: on a small host a tail latency moves with how busy the host was that night, in every
  configuration alike. The cell measures that beside it: its publish delay (how late the producer took up each
  message after its intended time, before any broker was involved) is the host waking the producer late. In the
  quick suite's own runs a repeat's log end-to-end p99 followed its log publish delay p99 within runs with a slope
  of 0.55 on Redis (correlation 0.8) and 0.11-0.15 on Kafka, and the slope between runs was alike; with it taken
  out the spread of a run's figure fell from 0.25 to 0.10 (Redis) and from 0.057 to 0.031 (Kafka) over one set of
  8 runs (bench/aa_schedule.py). So for the latency p99s (ADJUSTED) each repeat is taken net of the host,
  figure × (reference / delay) ** slope, before anything else here: the slope is the group's (history.noise_group)
  within runs, each run's repeats around their own means (host_adjustment), so a change between runs, which is
  what is looked for, cannot bend it; it is held to [0, 1] and needs MIN_PAIRS degrees of freedom. A series is
  taken net only when every repeat of every run has its delay. What is shown stays as measured ("values"); the
  change points are found on, and their changes measured on, the figures net of the host ("tested"). What it
  takes out too: a change of the producer's own lateness (the load generator's, not the broker's), and the part of
  a broker's change that made the host busier (a broker using more CPU on a small host delays the producer too),
  which the CPU figures of the cell still show.
- multiplicity: ALPHA is shared between the search (SEARCH_SHARE of it) and the newest runs' test (the rest): a
  change point holds when its p-value, times the number of series checked (configurations × metrics) and divided
  by its share, is below ALPHA. When nothing changed anywhere, the chance that any change point is reported stays
  near ALPHA: measured on flat series, 2 analyses in 300 with normal run-to-run noise; with heavy-tailed run-to-run
  noise (Student's t, 3 degrees of freedom) 4 nights in 220 told an alert (the search alone: 0), two outlying runs
  in a row being what the newest runs' test calls a change (tests/unit/test_changes.py); on nights drawn from the
  quick suite's own runs, 0.6% (bench/aa_schedule.py).
- the effect: a change point is an alert when it is significant and the change (geometric mean of the segment
  after it over the segment before it, each bounded by the neighbouring change points) is at least MIN_EFFECT of
  its metric; a significant smaller one is shown, not alerted.

Why a median from MEDIAN_REPEATS repeats on: a tail latency's repeats mostly agree and now and then read several
times higher (a stall: one quick-suite repeat in eight at 1.4-7x its configuration's median). A geometric mean
moves with every such repeat, so a run's figure carries the tail and a +30% step stays within the noise however
many repeats a run has; a median moves only when half its repeats do. With 3 repeats that is not rare (two
outlying repeats of three, about one Kafka run in twenty here), and two such runs in a row are a "change" the
t-test trusts: simulated from the quick suite's own repeats, the median of 3 raised false alerts on more nights
than ALPHA allows; from 10 on it is rare (bench/aa_schedule.py's repeats sweep: the A/A nights at 10, 20 and 30
repeats, docs/performance.md). The variance floor of a median-run is the asymptotic one of a median,
(π/2)·(1.4826·MAD)²/n.

A p99 over all of a run's messages (its repeats' histograms merged) is no better a figure: a stall long enough to
move one repeat's p99 moves the merged one too (the spread of the three figures over the real quick-suite runs:
bench/aa_schedule.py's figure_spread, docs/performance.md).

Why not a library: Otava 0.8.0 (`otava.analysis.compute_change_points`) does exactly the above with numpy and
scipy, but its package pulls the BigQuery, Postgres and Slack clients into a Lambda layer that has no use for
them; MongoDB's `signal-processing-algorithms` 2.1.6 pins numpy 1.26, which cannot sit beside the project's
numpy 2; `ruptures` places change points without a significance test. The statistic and the test are a page of
numpy over the project's own t distribution (reports.stats).

Why MIN_SEGMENT = 2: a single run is not a change. One outlying run (the first run on a new machine measured
4–10x the next three, issue 33) cannot form a segment, and a real change is reported on the second run after it
began, placed at the run it began with. Hence MIN_SERIES = 6: the fewest runs with 2 on either side of a split
and N − 2 = 4 degrees of freedom, enough for a t-test to call a large change (the 2.8 of a t at 2 degrees of
freedom would make even a doubling hard to call after the Bonferroni factors). Series shorter than that are judged by the pairwise
check and, from NEWEST_MIN = 4 runs, by the newest runs' test, whose few degrees of freedom the group's prior
makes up (on the quick suite's own noise, a +30% p99 step at a schedule's nights 1-5 on Kafka told within two
nights in 11 of 16 simulated schedules, 4 of 16 without the prior: bench/aa_schedule.py).
"""

from __future__ import annotations

import math

import numpy as np
from msgspec import Struct, convert

from ..eventdata import build_types
from ..metrics import regression_metrics
from .stats import t_two_sided_p

ALPHA = 0.01  # family-wise over every series checked: one night in 100 with any false change point
SEARCH_SHARE = 0.5  # of ALPHA for the search over every split; the rest for the test of the newest runs
MEDIAN_REPEATS = 10  # from this many repeats a run's figure is their median (fewer: their geometric mean)
MIN_SEGMENT = 2  # runs on either side of a change point
MIN_SERIES = 6  # runs a series needs before it is searched (fewer: the newest runs' test and the pairwise verdict)
NEWEST_MIN = 2 * MIN_SEGMENT  # runs a series needs before its newest runs are tested
FLOOR = 1e-3  # values are floored before the log (a throughput of 0 is a very large drop, not -inf)
# The smallest change that is an alert, per metric (brokerbench.metrics, change_floor): throughput and a search's
# maximum rate 10% (what the pairwise check's MIN_EFFECT asks of any change), a tail latency 20% (the claim floor of
# times, reports.model.CLAIM_FLOOR: a p99 is the second-largest of every hundred messages and moves more than a mean).
MIN_EFFECT = {name: m.change_floor for name, m in regression_metrics().items()}
DEFAULT_MIN_EFFECT = 0.20
TINY = 1e-12  # a variance of log figures below this is none (runs that agree to the message, and rounding)
PRIOR_SHARE = 0.5  # of a group's own degrees of freedom, the most its variance prior may carry
MATCH_RUNS = 1  # a change point found again within this many runs of where it was is the same change
# A latency's figures net of the host (host_adjustment): each repeat's log p99 less SLOPE x (its log publish delay p99
# less the group's median). COVARIATE: how late the producer took up its messages after their intended time, before
# any broker was involved: the host waking the producer late. ADJUSTED: the metrics it is taken out of.
COVARIATE = "publish_delay_p99_us"
ADJUSTED = ("end_to_end_p99_us", "publish_latency_p99_us")
MIN_PAIRS = 8  # degrees of freedom within runs (repeats less runs) a group's slope needs; fewer: no adjustment
COVARIATE_FLOOR = 1.0  # µs: a delay is floored here before the log

METHOD = {
    "series": "one figure per run: the geometric mean of its repeats (log scale), their median from "
              f"{MEDIAN_REPEATS} repeats on, runs in the order requested",
    "where": f"E-divisive means (energy statistic, alpha 1) over the splits with at least {MIN_SEGMENT} runs on "
             "either side; binary segmentation for further changes",
    "test": "Student's t of the two sides' mean log figures at the split (pooled variance of the runs, floored at "
            "the repeats' variance of a run's mean; N − 2 degrees of freedom), times the number of splits tried",
    "newest": f"the split before the newest {MIN_SEGMENT} runs also tested alone (no factor for splits), against "
              f"the runs back to the change point before it, from {NEWEST_MIN} runs on; its variance moderated by "
              "the prior of its noise group (limma's fitFDist; the same metric of the broker's other formats and "
              f"sizes; at most {PRIOR_SHARE:g} of the group's own degrees of freedom; never below its own)",
    "multiplicity": f"p-value times the series checked (configurations x metrics), over its share of {ALPHA} "
                    f"({SEARCH_SHARE:g} for the search, {1 - SEARCH_SHARE:g} for the newest runs' test), below "
                    f"{ALPHA}: family-wise (Bonferroni)",
    "effect": "an alert needs |change| (geometric mean after / before − 1, between neighbouring change points) of "
              "at least " + ", ".join(f"{m} {v:.0%}" for m, v in MIN_EFFECT.items()),
    "min_series": f"{MIN_SERIES} runs; a shorter series is judged by the pairwise check against history",
    "host": f"the latency p99s ({', '.join(ADJUSTED)}) net of the host before all of the above: each repeat x "
            f"(the group's median delay / its {COVARIATE}) ** slope, the slope of the log figure on the log delay "
            f"within runs over the noise group, held to [0, 1], from {MIN_PAIRS} degrees of freedom on; shown as "
            "measured, tested net",
}


def run_value(repeats) -> float | None:
    """A run's figure in the series: the geometric mean of its repeats, their median from MEDIAN_REPEATS on (None
    without any)."""
    values = [v for v in repeats if v is not None]
    if not values:
        return None
    return float(np.exp(_log_figure(np.log(np.maximum(np.asarray(values, dtype=float), FLOOR)))[0]))


def _log_figure(logs: np.ndarray) -> tuple[float, float]:
    """A run's log figure and its variance from the run's repeats (0 with a single repeat): the mean and the
    variance of a mean under MEDIAN_REPEATS repeats, from then on the median and a median's variance,
    (π/2)·(1.4826·MAD)²/n."""
    if logs.size >= MEDIAN_REPEATS:
        centre = float(np.median(logs))
        scale = 1.4826 * float(np.median(np.abs(logs - centre)))
        return centre, math.pi / 2 * scale * scale / logs.size
    return float(logs.mean()), (float(np.var(logs, ddof=1)) / logs.size if logs.size >= 2 else 0.0)


class Energies:
    """E-divisive statistics of the splits of any segment of one series, from one table of |x_i − x_j| summed
    (a 2-D prefix sum: each segment's sums in constant time, so binary segmentation costs O(N²) in all)."""

    def __init__(self, x: np.ndarray) -> None:
        distances = np.abs(x[:, None] - x[None, :])
        self.sums = np.zeros((x.size + 1, x.size + 1))
        self.sums[1:, 1:] = distances.cumsum(0).cumsum(1)

    def _block(self, a: int, b: int, c: int, d: int) -> float:
        s = self.sums
        return float(s[b, d] - s[a, d] - s[b, c] + s[a, c])

    def energy(self, start: int, tau: int, end: int) -> float:
        """Q of splitting x[start:end] before index tau (Matteson and James 2014, alpha = 1)."""
        n, m = tau - start, end - tau
        between = self._block(start, tau, tau, end) * 2 / (n * m)
        within_left = self._block(start, tau, start, tau) / (n * (n - 1)) if n > 1 else 0.0
        within_right = self._block(tau, end, tau, end) / (m * (m - 1)) if m > 1 else 0.0
        return n * m / (n + m) * (between - within_left - within_right)

    def best_split(self, start: int, end: int) -> int | None:
        """The E-divisive split of x[start:end] (an index into x: the start of the later segment), None when the
        segment has no room for one."""
        taus = range(start + MIN_SEGMENT, end - MIN_SEGMENT + 1)
        if not taus:
            return None
        return max(taus, key=lambda tau: self.energy(start, tau, end))


class Sums:
    """Prefix sums of the log figures, their squares and the repeats' variances: any segment's mean and sum of
    squares in constant time."""

    def __init__(self, x: np.ndarray, within: np.ndarray) -> None:
        self.x = np.concatenate([[0.0], np.cumsum(x)]).tolist()
        self.x2 = np.concatenate([[0.0], np.cumsum(x * x)]).tolist()
        self.within = np.concatenate([[0.0], np.cumsum(within)]).tolist()

    def mean_and_squares(self, a: int, b: int) -> tuple[float, float]:
        n, total = b - a, self.x[b] - self.x[a]
        return total / n, max(0.0, self.x2[b] - self.x2[a] - total * total / n)


def split_test(sums: Sums, start: int, tau: int, end: int, prior: tuple[float, float] | None = None) -> dict:
    """Student's t of x[tau:end] against x[start:tau] (log figures), and its p-value corrected for the splits
    that segment offers.

    The pooled variance is never below the mean of the runs' variances of their means from their repeats (0
    where a run has one repeat): runs that agree more closely than their repeats do call nothing. With `prior`
    (s0², d0: the group's, variance_prior) the runs' variance is moderated towards s0², d0 degrees of freedom more
    (Smyth 2004)."""
    n, left, right = end - start, tau - start, end - tau
    (left_mean, left_squares), (right_mean, right_squares) = sums.mean_and_squares(start, tau), \
        sums.mean_and_squares(tau, end)
    df = n - 2.0
    runs = (left_squares + right_squares) / df
    if prior is not None and prior[1] > 0:
        runs, df = max(runs, (prior[1] * prior[0] + df * runs) / (prior[1] + df)), df + prior[1]
    variance = max(runs, (sums.within[end] - sums.within[start]) / n)
    difference = right_mean - left_mean
    se = math.sqrt(variance * (1 / left + 1 / right))
    if se > 1e-12:
        t = difference / se
    else:  # every run identical on either side
        t = 0.0 if abs(difference) <= 1e-12 else math.copysign(math.inf, difference)
    splits = n - 2 * MIN_SEGMENT + 1
    p = t_two_sided_p(t, df)
    return {"t": t if math.isfinite(t) else None, "df": df, "p_split": p, "splits": splits,
            "p_raw": min(1.0, p * splits)}


def residual_variance(sums: Sums, start: int, tau: int, end: int) -> tuple[float, float]:
    """The runs' variance around their sides' means at a split of x[start:end] (the split_test's own), and its
    degrees of freedom."""
    df = end - start - 2.0
    return (sums.mean_and_squares(start, tau)[1] + sums.mean_and_squares(tau, end)[1]) / df, df


def _digamma(x: float) -> float:
    """ψ(x), x > 0: the recurrence up to 10, then the asymptotic series (error below 1e-13)."""
    shift = 0.0
    while x < 10:
        shift, x = shift - 1 / x, x + 1
    inv = 1 / (x * x)
    return shift + math.log(x) - 0.5 / x - inv * (1 / 12 - inv * (1 / 120 - inv * (1 / 252 - inv * (1 / 240 - inv / 132))))


def _trigamma(x: float) -> float:
    """ψ'(x), x > 0: the recurrence up to 10, then the asymptotic series (error below 1e-13)."""
    shift = 0.0
    while x < 10:
        shift, x = shift + 1 / (x * x), x + 1
    inv = 1 / (x * x)
    return shift + 1 / x + inv / 2 + inv / x * (1 / 6 - inv * (1 / 30 - inv * (1 / 42 - inv * (1 / 30 - inv * 5 / 66))))


def variance_prior(variances: list[tuple[float, float]]) -> tuple[float, float]:
    """The prior of a group of series' run-to-run variances (each (s², d)): limma's fitFDist (Smyth 2004), s² taken
    as s0²·F(d, d0): (s0², d0). From the moments of log s²: e = log s² − ψ(d/2) + log(d/2); d0 = 2·ψ'⁻¹(var e −
    mean ψ'(d/2)), s0² = exp(mean e + ψ(d0/2) − log(d0/2)); where the spread of log s² is no wider than sampling
    alone gives, the variances share one, s0² = exp(mean e). d0 is capped at PRIOR_SHARE of the group's own degrees
    of freedom (fewer than limma's thousands of series: the prior is worth no more than the runs it was estimated
    from). (0, 0) when fewer than two series have a variance."""
    kept = [(v, d) for v, d in variances if v > TINY and d > 0]
    if len(kept) < 2:
        return 0.0, 0.0
    e = [math.log(v) - _digamma(d / 2) + math.log(d / 2) for v, d in kept]
    mean = sum(e) / len(e)
    spread = sum((x - mean) ** 2 for x in e) / (len(e) - 1) - sum(_trigamma(d / 2) for _, d in kept) / len(kept)
    cap = PRIOR_SHARE * sum(d for _, d in kept)
    if spread <= 0 or _trigamma(cap / 2) >= spread:
        d0 = cap
    else:  # ψ' falls monotonically: bisection on log d0
        low, high = math.log(1e-6), math.log(cap)
        for _ in range(80):
            middle = (low + high) / 2
            low, high = (middle, high) if _trigamma(math.exp(middle) / 2) > spread else (low, middle)
        d0 = math.exp((low + high) / 2)
    return math.exp(mean + _digamma(d0 / 2) - math.log(d0 / 2)), d0


def _logs(runs: list) -> tuple[np.ndarray, np.ndarray]:
    """The log figure of each run and its variance from its repeats (_log_figure)."""
    figures = [_log_figure(np.log(np.maximum(np.asarray([v for v in r if v is not None], dtype=float), FLOOR)))
               for r in runs]
    return np.asarray([f[0] for f in figures]), np.asarray([f[1] for f in figures])


def _candidates(energies: Energies, start: int, end: int) -> list[int]:
    """Every E-divisive split of x[start:end], found by binary segmentation down to segments too short to split."""
    tau = energies.best_split(start, end)
    if tau is None:
        return []
    return _candidates(energies, start, tau) + [tau] + _candidates(energies, tau, end)


def _significant(x: np.ndarray, within: np.ndarray, level: float) -> list[dict]:
    """The candidates that hold: each is tested between its neighbours, and the weakest is dropped while it is
    not significant at `level` (then its neighbours are tested again over the longer segments it leaves)."""
    return _held(_candidates(Energies(x), 0, x.size), Sums(x, within), level)


def _held(points: list[int], sums: Sums, level: float) -> list[dict]:
    """_significant's elimination over the candidate indexes `points` (ascending) of one series."""
    size, tested = len(sums.x) - 1, {}
    while points:
        bounds = [0] + points + [size]
        tests = []
        for k, point in enumerate(points):
            segment = (bounds[k], point, bounds[k + 2])
            if segment not in tested:
                tested[segment] = {"index": point, **split_test(sums, *segment)}
            tests.append(tested[segment])
        weakest = max(range(len(tests)), key=lambda k: tests[k]["p_raw"])
        if tests[weakest]["p_raw"] < level:
            return tests
        del points[weakest]
    return []


class SeriesMetric(Struct, frozen=True, kw_only=True):
    """What the search reads of a series besides its runs: the metric it is of (its minimum effect) and which way is
    better (a series lacking either fails naming the field)."""
    metric: str
    higher_is_better: bool


def detect(series: list[dict]) -> list[dict]:
    """Change points of every series, under one multiplicity control.

    Each series is {"runs": [[repeat values of run 0], [of run 1], ...], "metric": name, "higher_is_better": bool,
    "group": optional, ...}, runs oldest first (runs without a value are left out). Series of one group (by default
    the metric's) share the prior of their newest runs' test's variance (variance_prior). Returns, for each series
    in order, a copy with "values" (each run's geometric mean), "tested" (the same net of the host where the series
    is: its "adjustment", host_adjustment; else "values"; a latency series with "covariates", each repeat's
    COVARIATE aligned with "runs", is taken net), "checked" (whether the series was long enough for
    its newest runs to be tested), "searched" (long enough to search every split) and "change_points": every
    significant change point, oldest first, with the index of the run it began with, the change and the figures of
    its test; `alert` marks those that are regressions beyond the metric's minimum effect.
    """
    typed = [convert(s, SeriesMetric) for s in series]
    net = [of.metric in ADJUSTED and _covariates_whole(s) for s, of in zip(series, typed)]
    members: dict[str, list[dict]] = {}
    for s, of, adjusted in zip(series, typed, net):
        if adjusted:
            members.setdefault(_group(s, of), []).append(s)
    adjustments = {group: host_adjustment(kept) for group, kept in members.items()}
    prepared, measured = [], []
    for s, of, adjusted in zip(series, typed, net):
        adjustment = adjustments.get(_group(s, of)) if adjusted else None
        kept = [k for k, r in enumerate(s["runs"]) if any(v is not None for v in r)]
        raw = [s["runs"][k] for k in kept]
        runs = raw if adjustment is None else [_adjusted(s["runs"][k], s["covariates"][k], adjustment) for k in kept]
        x, within = _logs(runs) if runs else (np.zeros(0), np.zeros(0))
        measured.append(_logs(raw)[0] if adjustment is not None and raw else x)
        prepared.append(({**s, "adjustment": adjustment}, x, Sums(x, within), of, within))
    family = sum(p[1].size >= MIN_SERIES for p in prepared)
    tested = sum(p[1].size >= NEWEST_MIN for p in prepared)
    found = [_searched(x, within, family) if x.size >= MIN_SERIES else [] for _, x, _, _, within in prepared]
    splits = [_newest_split(p[1].size, f) for p, f in zip(prepared, found)]
    groups: dict[str, list[tuple[float, float]]] = {}
    for (s, x, sums, of, _), split in zip(prepared, splits):
        if split is not None:
            groups.setdefault(_group(s, of), []).append(residual_variance(sums, *split, x.size))
    priors = {group: variance_prior(variances) for group, variances in groups.items()}
    out = []
    for (s, x, sums, of, _), f, split, shown in zip(prepared, found, splits, measured):
        if split is not None:
            f = _with_newest(f, sums, split, x.size, tested, of.higher_is_better, priors[_group(s, of)])
        out.append({**s, "values": [float(math.exp(v)) for v in shown], "tested": [float(math.exp(v)) for v in x],
                    "checked": x.size >= NEWEST_MIN, "searched": x.size >= MIN_SERIES,
                    "change_points": _described(f, x, of)})
    return out


def _covariates_whole(s: dict) -> bool:
    """Whether every repeat of every run of a series has its host figure (`covariates`, aligned with `runs`)."""
    given = s.get("covariates")
    return bool(given) and len(given) == len(s["runs"]) and all(
        len(c) == len(r) and all(x is not None for v, x in zip(r, c) if v is not None)
        for r, c in zip(s["runs"], given))


def host_adjustment(series: list[dict]) -> dict | None:
    """How much of a group's latency moves with the host (the series' repeats and their COVARIATE, each series'
    `covariates` aligned with its `runs`): the slope of the log figure on the log publish delay p99 within runs
    (each run's repeats around their own means, pooled over the group's series and runs), held to [0, 1], and the
    group's median delay. Within runs, so that a change between runs (what is looked for) cannot bend it; a slope
    of 1 is a latency that moves in proportion to the delay. None with fewer than MIN_PAIRS degrees of freedom or
    no spread of the delay."""
    dx, dy, logs, pairs = [], [], [], 0
    for s in series:
        for run, given in zip(s["runs"], s["covariates"]):
            kept = [(math.log(max(v, FLOOR)), math.log(max(c, COVARIATE_FLOOR))) for v, c in zip(run, given)
                    if v is not None and c is not None]
            logs += [c for _, c in kept]
            if len(kept) >= 2:
                y, x = np.asarray(kept).T
                dy.append(y - y.mean())
                dx.append(x - x.mean())
                pairs += len(kept)
    df = pairs - len(dx)
    if df < MIN_PAIRS:
        return None
    x, y = np.concatenate(dx), np.concatenate(dy)
    spread = float(x @ x)
    if spread <= TINY:
        return None
    return {"covariate": COVARIATE, "slope": min(1.0, max(0.0, float(x @ y) / spread)),
            "reference": float(math.exp(np.median(logs))), "df": df}


def _adjusted(run: list, given: list, adjustment: dict) -> list:
    """A run's repeats net of the host: each × (reference / its delay) ** slope."""
    slope, reference = adjustment["slope"], adjustment["reference"]
    return [None if v is None else v * (reference / max(c, COVARIATE_FLOOR)) ** slope for v, c in zip(run, given)]


def _group(s: dict, of: SeriesMetric) -> str:
    return s.get("group") or of.metric


def _searched(x: np.ndarray, within: np.ndarray, family: int) -> list[dict]:
    """The change points the search over every split finds in one series, oldest first, each with its p-value
    after the multiplicity control (`found_by` "search")."""
    search = ALPHA * SEARCH_SHARE / family
    return [{**c, "found_by": "search", "p_value": min(1.0, c["p_raw"] / SEARCH_SHARE * family)}
            for c in _significant(x, within, search)]


def _newest_split(size: int, found: list[dict]) -> tuple[int, int] | None:
    """The newest runs' test's segment (start, split) in a series of `size` runs whose search found `found`: the
    split before the newest MIN_SEGMENT runs, back to the change point before it. None when the series is too short
    or the search already placed a change there."""
    newest = size - MIN_SEGMENT
    if size < NEWEST_MIN or any(c["index"] == newest for c in found):
        return None
    start = max([c["index"] for c in found if c["index"] < newest], default=0)
    return None if newest - start < MIN_SEGMENT else (start, newest)


def _with_newest(found: list[dict], sums: Sums, split: tuple[int, int], size: int, family: int,
                 higher_is_better: bool, prior: tuple[float, float]) -> list[dict]:
    """`found` with the newest runs' test's change point when it holds (`found_by` "newest": one-sided towards
    worse, its variance moderated by the group's prior)."""
    start, newest = split
    test = {"index": newest, **split_test(sums, start, newest, size, prior), "splits": 1}
    x_after, x_before = sums.mean_and_squares(newest, size)[0], sums.mean_and_squares(start, newest)[0]
    worse = test["t"] is not None and (test["t"] < 0 if higher_is_better else test["t"] > 0) or \
        test["t"] is None and (x_after < x_before) == higher_is_better
    test["p_split"] = test["p_split"] / 2 if worse else 1 - test["p_split"] / 2  # one-sided, towards worse
    test["p_raw"] = test["p_split"]
    if test["p_raw"] >= (ALPHA - ALPHA * SEARCH_SHARE) / family:
        return found
    newest_point = {**test, "found_by": "newest", "prior_df": prior[1],
                    "p_value": min(1.0, test["p_raw"] / (1 - SEARCH_SHARE) * family)}
    return sorted(found + [newest_point], key=lambda c: c["index"])


def _described(found: list[dict], x: np.ndarray, series: SeriesMetric) -> list[dict]:
    """Each change point's effect between its neighbours, and whether it is an alert."""
    bounds = [0] + [c["index"] for c in found] + [x.size]
    minimum = MIN_EFFECT.get(series.metric, DEFAULT_MIN_EFFECT)
    out = []
    for k, c in enumerate(found):
        before, after = x[bounds[k]:bounds[k + 1]], x[bounds[k + 1]:bounds[k + 2]]
        change = math.expm1(float(after.mean() - before.mean()))
        worse = change < 0 if series.higher_is_better else change > 0
        large = abs(change) >= minimum
        out.append({"index": c["index"], "before_mean": float(math.exp(before.mean())),
                    "after_mean": float(math.exp(after.mean())), "before_runs": int(before.size),
                    "after_runs": int(after.size), "change": change, "min_effect": minimum, "large": large,
                    "direction": "regression" if worse else "improvement", "alert": large and worse,
                    "t": c["t"], "df": c["df"], "splits": c["splits"], "p_split": c["p_split"],
                    "p_value": c["p_value"], "found_by": c["found_by"]})
    return out


def new_alerts(now: dict, before: dict | None) -> list[dict]:
    """The alerts of a series' analysis (`detect`'s entry) that its analysis one run earlier did not have: a
    change is told once, on the run that made it an alert, not every night after. One found again within
    MATCH_RUNS runs of an earlier alert is the same change."""
    earlier = [c["index"] for c in before["change_points"] if c["alert"]] if before else []
    return [c for c in now["change_points"]
            if c["alert"] and not any(abs(c["index"] - e) <= MATCH_RUNS for e in earlier)]


build_types(globals())  # msgspec's information on its Structs, built now (eventdata.build_types)
