"""Regression checks: a run against its baseline and the baseline's history, configuration by configuration.

The samples are one figure per repeat (its throughput, end-to-end p99 and publish p99), never the
per-second intervals, which are autocorrelated and leave out the variance between runs. Where a run
has a single repeat, the samples are the medians of non-overlapping blocks of its intervals, each
block long enough (from the lag-1 autocorrelation) to be nearly independent of the next.

Two identical runs differ by more than their repeats say: the broker, the page cache and the
neighbours on a shared host change between runs, not between the repeats of one run. That
run-to-run variance is taken from history: the baseline and up to HISTORY_RUNS - 1 earlier
completed runs of the same suite on the same target configuration (versions, settings, host kind).

For each configuration and metric, on the log scale (so changes are ratios):

- the test: is the candidate's run one more run like history's? t = (mean of the candidate's
  samples - mean of history's per-run means) / SE, with SE² = var(history's per-run means)·(1 + 1/k)
  and k - 1 degrees of freedom: the prediction interval of one more run, which carries the
  run-to-run variance and the repeats' share of it. When history's runs agree more closely than
  their repeats would let them, the repeats' variance pooled over all runs is the SE² instead, still
  with k - 1 degrees of freedom (the repeats' own, larger, degrees of freedom know nothing of how
  runs differ: with them a short history alarmed in 3.8-6.2% of A/A runs at a nominal 1%). With
  fewer than MIN_HISTORY runs, run-to-run noise is unknown: the verdict is `unstable` with "cannot
  tell" and the runs needed, never a verdict on an assumed noise (identical single-repeat runs here
  differ 3-4x in p99).
- multiplicity: Holm–Bonferroni over every verdict of the run, at a family-wise ALPHA. A nightly
  run makes hundreds of comparisons, and the question a reader asks of a run with no real change
  is "did it raise any alarm", which is the family-wise error rate; Holm controls it under any
  dependence between the verdicts (the three metrics of one configuration are correlated, and a
  slow spell moves a whole run), and is uniformly more powerful than plain Bonferroni.
  Benjamini–Hochberg would control the false discovery rate: more power when many things really
  changed, but its bound on "any alarm when nothing changed" needs independent or positively
  dependent verdicts.
- the effect: the change (ratio of geometric means of the samples) against the baseline AND
  against history's mean run must be at least MIN_EFFECT and at least K_NOISE × the metric's
  noise, where noise = √(history² + repeats²): the robust spread (1.4826·MAD/median) of history's
  per-run figures, and that of the repeats.

Each verdict gives `detectable`: the smallest change it could call (the effect bar, or the change whose
t reaches ALPHA / comparisons, Holm's strictest step, whichever is larger). Beyond a factor of USEFUL_FACTOR it
is said in words, with the runs of history that would detect a change of AIM by the same formula
(`runs_to_detect`), or why none would. The tables print, beside each change, the figures it is of: the
geometric means of the two runs' samples (FIGURES).

Besides the figures, a configuration's sustainability, tested on its repeats (`flip`): each repeat judged
sustainable or unsustainable (inconclusive ones are no evidence either way) is one trial, and the candidate's
share of unsustainable repeats is tested against history's (the baseline's and the earlier runs' repeats,
pooled) with Boschloo's exact unconditional test (stats.rate_rise_p), one-sided each way: a rise is a
regression, a fall an improvement, and each is its own hypothesis in the same Holm family as the figures (a
way that cannot happen, a fall from 0 unsustainable repeats, has p = 1 and takes no more than its place in the
family's count; doubling the smaller p instead would halve every flip's chance).
Why a test, and this one: identical configurations are judged unsustainable now and then (7 of 72 repeats in
the project's A/A runs, bench/results/false_claims.json); a rule that called every sustainable →
unsustainable flip against a steady history a regression raised one in most quick-suite A/A compares
(bench/sustainability_flip.py). A binomial test against history's observed rate has no rate to test when
history saw no unsustainable repeat (a pseudo-count or an assumed floor would set the false-alarm rate by
choice), and it takes history's rate as exact when it is an estimate from a few repeats; Fisher's exact test
conditions on the total and is exact at any common rate, but is conservative with so few trials (0 of 9
against 3 of 3: p = 1/220); Boschloo's test takes the largest null probability over every common rate, so it
is exact at any rate, 0 of history's repeats included, and never less powerful than Fisher's (the same case:
p = 0.0012). The test takes repeats as independent draws at one rate: a whole run measured on a busy host
breaks that, and is for the host's marks to exclude. A flip in the configuration's verdict the test does not
confirm is `unstable`, with both shares and the p-values; no flip and no significant change is `unchanged`.
Under MIN_HISTORY runs a flip is "cannot tell", as a figure is. Each flip verdict also gives the fewest of the
candidate's repeats that would have to be unsustainable for this history to call it (`callable_unsustainable`),
or says that none would among this many verdicts.
A rate search regresses its maximum sustainable rate (one figure per repeat, or per run), not a
throughput that equals the target of each step.

A repeat measured on a busy host (brokerbench.host) is no evidence: it is left out of the samples of the candidate,
the baseline and history alike, and a verdict on its configuration says so (flag_busy_host).

`regression`/`improvement` needs both (significant after Holm, and beyond the noise). A change
beyond the bar that the test cannot confirm, noise above WATERLINE, or too few samples is
`unstable` (no conclusion).
Everything else is `unchanged`. Each verdict carries the figures behind it and a `why`.
"""

from __future__ import annotations

import math
from itertools import repeat

import numpy as np
from msgspec import Struct, convert, structs

from ..eventdata import Host, RunRequested, build_types, given, run_requested
from ..figures import joined_stamps
from ..events import EventStore, make_event, planned_cells, read_report_events
from ..metrics import regression_metrics
from . import rows
from .changes import ADJUSTED, COVARIATE
from .model import send_loop_text
from .rows import Series
from .stats import holm, rate_rise_p, spread, t_quantile, t_two_sided_p  # noqa: F401 (holm, t_two_sided_p: this module's API too)

ALPHA = 0.01  # family-wise over all verdicts of a run (Holm–Bonferroni): one run in 100 with a false alarm
MIN_EFFECT = 0.10  # smallest change ever reported
K_NOISE = 3.0  # a change must exceed this many times the metric's noise
WATERLINE = 0.25  # noise above this: "unstable" (no conclusion), not "unchanged"
HISTORY_RUNS = 10  # the baseline and up to 9 earlier matching runs
MIN_HISTORY = 3  # runs needed to estimate run-to-run variance (the baseline counts); fewer: "cannot tell"
MIN_REPEATS = 2  # per run, to compare by repeats; fewer: blocks of intervals
MIN_BLOCKS = 3  # per run, to compare by blocks
MIN_WITHIN_DF = 4  # history's repeats give the within-run variance when they have this many degrees of freedom
MIN_BLOCK_S, MAX_BLOCK_S = 3, 10
FLOOR = 1e-3  # values are floored before the log (a throughput of 0 is a very large drop, not -inf)
# A verdict that can call no regression smaller than a factor of USEFUL_FACTOR (a halving, a doubling) says so in
# words, with the runs that would detect a change of AIM (see detectable_text).
USEFUL_FACTOR = 2.0
AIM = 0.30
# What the compare tables print beside a change, so that it can be recomputed from them.
FIGURES = ("baseline and candidate: the geometric means of each run's samples (its repeats, or blocks of a single "
           "repeat's intervals); change = candidate ÷ baseline − 1")

# The metrics checked (brokerbench.metrics): each read from a cell result (Metric.read), with its per-second interval
# series (Metric.series) and its direction (Metric.higher_is_better).
METRICS = regression_metrics()


class TargetSettings(Struct, frozen=True, kw_only=True):
    """The run request's target, client and timing settings that runs compared must share, as the request gave
    them (validated there): None for one it left out (its default then is the release's, which code_version tells
    apart)."""
    brokers: object = None
    client: object = None
    producers: object = None
    consumers: object = None
    partitions: object = None
    size_basis: object = None
    provision: object = None
    targets: object = None
    duration_s: object = None
    warmup_s: object = None
    messages: object = None
    drain_timeout_s: object = None


TARGET_FIELDS = TargetSettings.__struct_fields__


def figure_text(value) -> str:
    """A compared figure with at least 4 significant digits: a change printed to 0.1% can be recomputed from two of
    them."""
    if value is None:
        return "–"
    if not math.isfinite(value):
        return "∞"
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:,.4g}"


# -- small statistics (t, Holm: .stats) ------------------------------------------------------------
def lag1_autocorrelation(series) -> float:
    x = np.asarray(series, dtype=float)
    if x.size < 4:
        return 0.0
    x = x - x.mean()
    denominator = float(np.dot(x, x))
    return float(np.dot(x[:-1], x[1:]) / denominator) if denominator > 0 else 0.0


def block_length(series_list) -> int:
    """Seconds per block: (1 + ρ)/(1 − ρ) (the intervals that carry one independent observation), bounded."""
    rhos = [lag1_autocorrelation(s) for s in series_list if len(s) >= 4]
    rho = min(0.9, max(0.0, float(np.mean(rhos)))) if rhos else 0.0
    return int(min(MAX_BLOCK_S, max(MIN_BLOCK_S, math.ceil((1 + rho) / (1 - rho)))))


def block_medians(series_list, length: int) -> list[float]:
    out = []
    for series in series_list:
        for start in range(0, len(series) - length + 1, length):
            out.append(float(np.median(series[start:start + length])))
    return out


def _raw(values) -> np.ndarray:
    return np.maximum(np.asarray([v for v in values if v is not None], dtype=float), FLOOR)


# -- one comparison ------------------------------------------------------------------------------
def assess(baseline, candidate, higher_is_better: bool, history=(), min_samples: int = MIN_REPEATS) -> dict:
    """The figures and the unadjusted p-value of one comparison (the label needs the run's other p-values).

    `baseline` and `candidate` are a run's samples (one per repeat, or block medians); `history` is a
    list of the samples of earlier runs, newest first, NOT including the baseline.
    """
    raw = [_raw(baseline)] + [r for r in (_raw(h) for h in history if h is not None) if r.size]
    raw_c = _raw(candidate)
    runs, c = [np.log(r) for r in raw], np.log(raw_c)
    b, k = runs[0], len(runs)
    figures = {"n_baseline": int(b.size), "n_candidate": int(c.size), "history_runs": k,
               "baseline_median": None, "candidate_median": None, "baseline_mean": None, "candidate_mean": None,
               "history_mean": None, "change": None,
               "change_vs_history": None, "log_difference": None, "p_raw": None, "p_value": None, "t": None,
               "df": None, "noise": None,
               "history_noise": None, "repeat_noise": None, "threshold": None, "higher_is_better": higher_is_better}
    if b.size < min_samples or c.size < min_samples:
        return {**figures, "verdict": "unstable", "why": f"too few samples ({b.size} vs {c.size}, need {min_samples})"}
    # Within-run variance of one sample: under "nothing changed" the candidate's repeats scatter like
    # history's, so it comes from history's runs (the candidate's own scatter, e.g. one repeat of three
    # that fell, is part of what is tested, not of the noise); without enough of them, the candidate helps.
    with_candidate = sum(r.size - 1 for r in runs if r.size >= 2) < MIN_WITHIN_DF
    pooled = [r for r in (runs + [c] if with_candidate else runs) if r.size >= 2]
    df_w = sum(r.size - 1 for r in pooled)
    s2_w = sum(float(np.sum((r - r.mean()) ** 2)) for r in pooled) / df_w if df_w else 0.0  # one figure per run
    within = s2_w * (1 / c.size + 1 / sum(r.size for r in runs))  # what the repeats alone would say
    means = np.array([r.mean() for r in runs])
    spread_from = [r for r in (raw + [raw_c] if with_candidate else raw) if r.size >= 2]
    repeat_noise = float(np.sqrt(np.mean([spread(r) ** 2 for r in spread_from]))) if spread_from else 0.0
    if k < MIN_HISTORY:  # no verdict, but what was measured is shown all the same
        described = {"baseline_median": float(np.median(raw[0])), "candidate_median": float(np.median(raw_c)),
                     "baseline_mean": float(np.exp(b.mean())), "candidate_mean": float(np.exp(c.mean())),
                     "change": math.expm1(float(c.mean() - b.mean()))}
        return cannot_tell({**figures, **described}, k, s2_w * (1 / c.size + 1 / b.size), repeat_noise)
    # A new run against the history's runs: the prediction interval of one more run, with k - 1 degrees of
    # freedom whichever variance is larger (history's runs may agree more closely than their repeats would
    # let them: then the repeats' variance, but never their degrees of freedom, which know nothing of runs).
    between = float(np.var(means, ddof=1)) * (1 + 1 / k)
    se2, df = max(between, within), k - 1.0
    history_noise = spread(np.exp(means))
    source = f"history of {k} runs"
    difference = float(c.mean() - means.mean())
    if se2 > 0:
        t = difference / math.sqrt(se2)
    else:  # every sample of every run identical
        t = 0.0 if difference == 0 else math.copysign(math.inf, difference)
    noise = math.hypot(history_noise, repeat_noise)
    # The change is the ratio of geometric means (what the test compares, so a repeat that fell counts
    # in proportion); the medians are given beside it.
    return {**figures, "baseline_median": float(np.median(raw[0])), "candidate_median": float(np.median(raw_c)),
            "baseline_mean": float(np.exp(b.mean())), "candidate_mean": float(np.exp(c.mean())),
            "history_mean": float(np.exp(means.mean())), "change": math.expm1(float(c.mean() - b.mean())),
            "change_vs_history": math.expm1(difference), "log_difference": difference, "p_raw": t_two_sided_p(t, df),
            "t": t if math.isfinite(t) else None, "df": float(df), "noise": noise,
            "history_noise": history_noise, "repeat_noise": repeat_noise, "se": math.sqrt(se2),
            "threshold": max(MIN_EFFECT, K_NOISE * noise), "noise_source": source,
            "projection": {"runs": k, "run_variance": float(np.var(means, ddof=1)),
                           "within_candidate": s2_w / c.size, "within_history": s2_w / sum(r.size for r in runs)}}


def cannot_tell(figures: dict, k: int, within: float, repeat_noise: float) -> dict:
    """Fewer than MIN_HISTORY runs: how much runs differ is unknown, so no verdict on any assumed figure. What
    would be detectable is given for MIN_HISTORY runs that differ no more than these samples do (a bound: runs
    usually differ more)."""
    need = MIN_HISTORY - k
    return {**figures, "verdict": "unstable", "cannot_tell": True, "runs_needed": need, "repeat_noise": repeat_noise,
            "se": math.sqrt(within * (1 + 1 / MIN_HISTORY)), "df": MIN_HISTORY - 1.0,
            "projection": {"runs": MIN_HISTORY, "run_variance": within, "within_candidate": 0.0,
                           "within_history": 0.0},
            "threshold": max(MIN_EFFECT, K_NOISE * repeat_noise),
            "why": f"cannot tell: {k} run{'s' if k != 1 else ''} of this configuration, run-to-run noise unknown; "
                   f"{need} more completed run{'s' if need != 1 else ''} of the suite needed"}


def detectable(figures: dict | rows.Verdict, comparisons: int) -> float | None:
    """The size of the smallest regression this comparison is sure to call (a drop for a higher-is-better
    metric, a rise otherwise): the effect bar, or the change whose t reaches Holm's strictest step (ALPHA /
    comparisons) with this SE and these degrees of freedom, whichever is larger. (A smaller change may be called
    when other verdicts' p-values are smaller: Holm's later steps are less strict.)"""
    f = rows.verdict(figures)
    if f.se is None or f.threshold is None:
        return None
    factor = detectable_factor(f, comparisons)
    if factor is None:
        return None
    return 1 - 1 / factor if f.higher_is_better else factor - 1


def detectable_text(figures: dict | rows.Verdict) -> str:
    """The smallest regression a verdict is sure to call, in words: −25%, +40%. Beyond a factor of USEFUL_FACTOR
    (a check that could call only a halving or a doubling), what it means: that this many runs cannot detect a
    change in the metric, and the runs that could detect AIM (or that none the check uses could)."""
    f = rows.verdict(figures)
    factor = f.detectable_factor
    if factor is None:
        return "–"
    worse = "−" if f.higher_is_better else "+"
    if factor < USEFUL_FACTOR:
        return f"{worse}{f.detectable:.0%}"
    runs = f.history_runs if f.projection is None else f.projection.runs
    said = f"{runs} runs cannot detect a change in this metric (only one beyond " \
           f"{'÷' if f.higher_is_better else '×'}{factor:,.3g})"
    aim = f"{worse}{AIM:.0%}"
    if f.runs_to_detect:
        return f"{said}; about {f.runs_to_detect} runs could detect {aim}"
    if f.threshold >= AIM:
        noise = f.noise if f.noise is not None else f.repeat_noise or 0.0
        return f"{said}, nor could more runs: its noise of {noise:.0%} needs a change beyond {K_NOISE:g}× that"
    return f"{said}; not even the {HISTORY_RUNS} runs a check uses at most could detect {aim}"


def detectable_factor(figures: dict | rows.Verdict, comparisons: int, runs: int | None = None) -> float | None:
    """`detectable` as the factor (≥ 1) by which the geometric mean must move: ÷ it for a drop, × it for a rise
    (a drop of 99.9% and one of 99.99% are both "100%"; as factors, ÷1,000 and ÷10,000). With `runs`: what it
    would be with that many runs of history as steady as these (`projected_se`)."""
    f = rows.verdict(figures)
    if f.se is None or f.threshold is None:
        return None
    se, df = (f.se, f.df) if runs is None else (projected_se(f, runs), runs - 1.0)
    bar = t_quantile(ALPHA / max(1, comparisons), df) * se
    if not math.isfinite(bar) or bar > 700:
        return None
    floor = -math.log1p(-min(f.threshold, 0.999)) if f.higher_is_better else math.log1p(f.threshold)
    return math.exp(max(bar, floor))


def projected_se(figures: dict | rows.Verdict, runs: int) -> float:
    """The SE with `runs` runs of history whose per-run figures vary as much as these runs' do, by `assess`'s
    formula: the larger of their variance × (1 + 1/runs) and the repeats' share (the candidate's, and history's,
    which shrinks as history's samples grow with its runs). At the verdict's own number of runs, its SE."""
    p = rows.verdict(figures).projection
    within = p.within_candidate + p.within_history * p.runs / runs
    return math.sqrt(max(p.run_variance * (1 + 1 / runs), within))


def runs_to_detect(figures: dict | rows.Verdict, comparisons: int) -> int | None:
    """The fewest runs of history (up to HISTORY_RUNS, the most a check uses) with which this comparison would
    call a regression of AIM, or None when none would (its noise bar above AIM, or too few runs)."""
    f = rows.verdict(figures)
    if f.projection is None or f.threshold is None or f.threshold >= AIM:
        return None
    aim = 1 / (1 - AIM) if f.higher_is_better else 1 + AIM
    for runs in range(f.projection.runs + 1, HISTORY_RUNS + 1):
        factor = detectable_factor(f, comparisons, runs)
        if factor is not None and factor <= aim:
            return runs
    return None


def label(figures: dict, p_adjusted: float | None, comparisons: int) -> dict:
    """The verdict of one assessed comparison, given its Holm-adjusted p-value among `comparisons`."""
    f = rows.verdict(figures)
    if f.metric == "sustainability" and f.verdict is None:
        return flip_label(figures, p_adjusted, comparisons)
    if f.verdict is not None:  # decided before any test (too few samples, too short a history)
        figures = {**figures, **_detectable(f, comparisons)}
        if f.cannot_tell and figures["detectable"] is not None:
            figures["why"] += f" ({_as_steady(figures)})"
        return figures
    out = {**figures, "p_value": p_adjusted, "comparisons": comparisons, **_detectable(figures, comparisons)}
    change, threshold = figures["change"], figures["threshold"]
    # Beyond the noise against the baseline AND against history's mean run, in the direction of the test.
    same_way = figures["log_difference"] * change > 0 and change * figures["change_vs_history"] > 0
    large = min(abs(change), abs(figures["change_vs_history"])) >= threshold
    significant = p_adjusted < ALPHA and same_way
    if significant and large:
        worse = change < 0 if figures["higher_is_better"] else change > 0
        why = (f"{change:+.1%} is beyond {threshold:.0%} (the larger of {MIN_EFFECT:.0%} and {K_NOISE:g}× noise "
               f"{figures['noise']:.1%}) and significant (Holm p={p_adjusted:.2g} among {comparisons}; "
               f"{figures['noise_source']})")
        return {**out, "verdict": "regression" if worse else "improvement", "why": why}
    noisy = figures["noise"] > WATERLINE
    if large:  # a change beyond the bar that the test cannot confirm: the data disagree, no conclusion
        source = f"{figures['noise_source']}, which varies by {figures['history_noise']:.0%} run to run" if noisy \
            else figures["noise_source"]
        why = (f"{change:+.1%} is beyond {threshold:.0%} but not significant (Holm p={p_adjusted:.2g} among "
               f"{comparisons}; {source})")
        return {**out, "verdict": "unstable", "why": why}
    if noisy:
        why = (f"{change:+.1%}: noise {figures['noise']:.0%} (history {figures['history_noise']:.0%}, repeats "
               f"{figures['repeat_noise']:.0%}) hides changes below {threshold:.0%}; {figures['noise_source']}")
        return {**out, "verdict": "unstable", "why": why}
    why = f"{change:+.1%} is within {threshold:.0%} (noise {figures['noise']:.1%}; {figures['noise_source']})"
    return {**out, "verdict": "unchanged", "why": why}


def _detectable(figures: dict, comparisons: int) -> dict:
    factor = detectable_factor(figures, comparisons)
    return {"detectable": detectable(figures, comparisons), "detectable_factor": factor,
            "runs_to_detect": runs_to_detect(figures, comparisons) if factor and factor >= USEFUL_FACTOR else None}


def _as_steady(figures: dict) -> str:
    """What MIN_HISTORY runs as steady as a short history's samples would detect."""
    if figures["detectable_factor"] < USEFUL_FACTOR:
        return f"with {MIN_HISTORY} runs as steady as these samples, a change of {detectable_text(figures)} would " \
               "be detectable"
    return f"even as steady as these samples, {detectable_text(figures)}"


def decide(assessed: list[dict]) -> list[dict]:
    """Holm–Bonferroni over every comparison of a run that has a p-value, then the labels."""
    tested = [(i, name, p) for i, f in enumerate(assessed) for name, p in hypotheses(f)]
    adjusted: dict = {}
    for (i, name, _), p in zip(tested, holm([p for _, _, p in tested])):
        if name is None:
            adjusted[i] = p
        else:
            adjusted.setdefault(i, {})[name] = p
    family = len(tested) or len(assessed)  # with nothing tested: the family these comparisons would make
    return [label(f, adjusted.get(i), family) for i, f in enumerate(assessed)]


def hypotheses(figures: dict) -> list[tuple[str | None, float]]:
    """The p-values one assessed comparison adds to Holm's family: a figure's two-sided one, or a flip's two
    one-sided ones (a rise and a fall in the share of unsustainable repeats, each its own hypothesis)."""
    f = rows.verdict(figures)
    if f.p_tests:
        return list(f.p_tests.items())
    return [(None, f.p_raw)] if f.p_raw is not None else []


def verdict(baseline, candidate, higher_is_better: bool, history=()) -> dict:
    """One comparison on its own (a family of one). A run's check uses `decide` over all of its verdicts."""
    return decide([assess(baseline, candidate, higher_is_better, history)])[0]


# -- a run's samples -----------------------------------------------------------------------------
def _measured(series: Series, name: str) -> list[float]:
    """The per-second figures of the schedule's intervals (not the drain after it)."""
    values = series.of(name)
    keep = series.in_schedule or series.sent or [1] * len(values)
    return [float(v) for v, k in zip(values, keep) if v is not None and k]


def run_figures(source) -> dict[str, dict]:
    """Per configuration key: its label, per-repeat figures and per-second series of each metric.

    `source` is a run's events or its report from `build_report` (or figures computed before). The
    per-repeat figures are the report's `values_by_repeat` (each repeat's own throughput and p99s,
    None where a repeat has too few messages for the percentile); reports without them fall back to
    the cell results (from events) or, last, to the intervals (throughput: the mean of the per-second
    figures; a p99: the median of the per-second p99s).
    """
    from .model import build_report, config_key
    from .results import build_results

    if isinstance(source, dict) and "groups" not in source:
        return source  # already a run's figures
    events = source if isinstance(source, list) else None
    report = build_report(events) if events is not None else source
    cells = None
    out = {}
    for group in map(rows.group, report["groups"]):
        for config in group.cells:
            # A repeat measured on a busy host is no evidence (brokerbench.host): its figures and series are left out.
            busy = set(config.busy_repeats)
            quiet = [r not in busy for r in config.repeat_numbers]
            # With no quiet repeat the figures stay, to be shown beside a verdict that is no evidence (unstable:
            # flag_busy_host), not dropped with the row; a series over runs leaves such a run out (history).
            kept = quiet if any(quiet) else []
            series = [s for s, keep in zip(config.intervals, kept or repeat(True)) if keep]
            entry = {"key": config.key, "cell": f"{config.broker} {config.format} · {group.title}",
                     "cell_id": config.cell_ids[0], "status": config.status, "repeats": {}, "series": {},
                     "search": _is_search(config.rate_target),
                     "send_loop": config.send_loop, "priority": config.priority,
                     "ack_stamps": config.ack_stamps, "delivery_stamps": config.delivery_stamps,
                     "sustainability": config.sustainability.verdict,
                     # each quiet repeat's sustainability verdict: what a flip is tested on
                     "repeat_verdicts": [r.verdict for r in config.sustainability.repeats
                                         if r.repeat not in busy or not kept],
                     "host_busy": {"repeats": sorted(busy), "of": len(quiet),
                                   "reasons": list(config.host.reasons)} if busy else None}
            by_repeat = {name: [v for v, keep in zip(values, kept or repeat(True)) if keep]
                         for name, values in config.values_by_repeat.items()}
            for metric in metrics_of(entry):
                read, name = METRICS[metric].read, METRICS[metric].series
                per_second = [_measured(s, name) for s in series] if name else []
                entry["series"][metric] = [s for s in per_second if s]
                if metric in by_repeat:
                    values = by_repeat[metric]
                elif events is not None:
                    if cells is None:
                        cells = [c for c in build_results(events)["cells"] if c["status"] == "completed"]
                    values = [read(c) for c in sorted((c for c in cells if config_key(c) == config.key),
                                                      key=lambda c: c["repeat"])]
                elif name:
                    agg = np.mean if name == "throughput" else np.median
                    values = [float(agg(s)) if s else None for s in per_second]
                else:
                    values = []
                entry["repeats"][metric] = [v for v in values if v is not None]
                if metric in by_repeat and metric in ADJUSTED and COVARIATE in by_repeat:
                    # the same repeats' publish delay p99 (reports.changes: a series' figures net of the host)
                    entry.setdefault("covariates", {})[metric] = [
                        x for v, x in zip(values, by_repeat[COVARIATE]) if v is not None]
            out[config.key] = entry
    return out


def _is_search(rate) -> bool:
    return not isinstance(rate, (int, float)) and rate != "max"


def metrics_of(entry: dict) -> list[str]:
    """A rate search regresses its maximum sustainable rate; every other cell its throughput and latencies."""
    if entry["search"]:
        return ["max_sustainable_rate"]
    return [m for m in METRICS if m != "max_sustainable_rate"]


JUDGED = ("sustainable", "unsustainable")  # a repeat's verdicts that are evidence about its sustainability


def judged_repeats(run: dict) -> tuple[int, int]:
    """(unsustainable, judged) repeats of a configuration in one run; figures without per-repeat verdicts count
    the configuration's verdict as one repeat."""
    figures = rows.config_figures(run)
    verdicts = figures.repeat_verdicts or [figures.sustainability]
    return sum(v == "unsustainable" for v in verdicts), sum(v in JUDGED for v in verdicts)


def flip(old: dict, new: dict, older: list[dict]) -> dict | None:
    """The sustainability of a configuration, candidate against history (see the module's docstring): decided
    here only when no test can be made (too short a history, no judged repeat); otherwise the figures of the test,
    its unadjusted p-value `p_raw`, for `flip_label` to label among the run's other p-values."""
    before, after = old["sustainability"], new["sustainability"]
    if not {before, after} <= {"sustainable", "unsustainable", "inconclusive"} or before is None or after is None:
        return None  # max-rate cells and rate searches have no such verdict
    runs = [old, *(h for h in older if h is not None and h["sustainability"] is not None)]
    k = len(runs)
    counted = [judged_repeats(r) for r in runs]
    u_h, n_h = sum(u for u, _ in counted), sum(n for _, n in counted)
    u_c, n_c = judged_repeats(new)
    figures = {"metric": "sustainability", "baseline_median": None, "candidate_median": None, "change": None,
               "p_raw": None, "p_value": None, "history_runs": k, "samples": "repeats' verdicts",
               "higher_is_better": True, "threshold": None, "se": None, "before": before, "after": after,
               "history_unsustainable": u_h, "history_judged": n_h, "candidate_unsustainable": u_c,
               "candidate_judged": n_c, "history_rate": u_h / n_h if n_h else None,
               "candidate_rate": u_c / n_c if n_c else None}
    moved = f"{before} → {after}"
    if k < MIN_HISTORY or not n_h or not n_c:
        if before == after:
            return {**figures, "verdict": "unchanged", "why": f"{after} in both runs"}
        if not n_h or not n_c:
            return {**figures, "verdict": "unstable", "why": f"{moved}: an inconclusive verdict is no evidence"}
        need = MIN_HISTORY - k
        return {**figures, "verdict": "unstable", "cannot_tell": True, "runs_needed": need,
                "why": f"{moved}; cannot tell: {k} run{'s' if k != 1 else ''} of this configuration, {need} more "
                       f"completed run{'s' if need != 1 else ''} needed to know how often it flips run to run"}
    rise, fall = rate_rise_p(u_h, n_h, u_c, n_c), rate_rise_p(n_h - u_h, n_h, n_c - u_c, n_c)
    return {**figures, "p_raw": min(rise, fall), "p_tests": {"rise": rise, "fall": fall}}


def shares_text(figures: dict) -> str:
    """Both shares of unsustainable repeats, as a flip verdict gives them."""
    u_h, n_h, u_c, n_c = (figures[f] for f in ("history_unsustainable", "history_judged", "candidate_unsustainable",
                                               "candidate_judged"))
    return (f"unsustainable repeats: candidate {u_c} of {n_c} ({u_c / n_c:.0%}), history {u_h} of {n_h} "
            f"({u_h / n_h:.0%}) over its {figures['history_runs']} runs")


def callable_unsustainable(figures: dict, comparisons: int) -> int | None:
    """The fewest unsustainable repeats of the candidate's judged ones that this history would call a regression
    at Holm's strictest step (ALPHA / comparisons), or None when not even all of them would."""
    u_h, n_h, n_c = figures["history_unsustainable"], figures["history_judged"], figures["candidate_judged"]
    for x in range(1, n_c + 1):
        if rate_rise_p(u_h, n_h, x, n_c) < ALPHA / max(1, comparisons):
            return x
    return None


def flip_label(figures: dict, adjusted: dict, comparisons: int) -> dict:
    """A sustainability verdict with its test: `regression` (`improvement`) when the rise (fall) in the share of
    unsustainable repeats is significant after Holm; a flip of the configuration's verdict it does not confirm is
    `unstable`; otherwise `unchanged`. The why gives both shares and the p-values."""
    before, after, tests = figures["before"], figures["after"], figures["p_tests"]
    way = "rise" if tests["rise"] <= tests["fall"] else "fall"
    callable_ = callable_unsustainable(figures, comparisons)
    out = {**figures, "p_value": adjusted[way], "comparisons": comparisons, "callable_unsustainable": callable_,
           "detectable": None, "detectable_factor": None, "runs_to_detect": None}
    test = f"Boschloo p={tests[way]:.2g} for a {way}, Holm p={adjusted[way]:.2g} among {comparisons}"
    moved = f"{before} → {after}" if before != after else f"{after} in both runs"
    shares = shares_text(figures)
    if adjusted[way] < ALPHA:
        return {**out, "verdict": "regression" if way == "rise" else "improvement",
                "why": f"{moved}; {shares}: improbable at one rate ({test})"}
    n_c = figures["candidate_judged"]
    bar = f"{callable_} of {n_c} would be called" if callable_ else \
        f"not even {n_c} of {n_c} would be called among {comparisons} comparisons"
    if before != after:
        return {**out, "verdict": "unstable", "why": f"{moved}, but {shares}: as likely by chance ({test}; {bar})"}
    return {**out, "verdict": "unchanged", "why": f"{moved}; {shares} ({test})"}


def _samples(run: rows.ConfigFigures, metric: str, block: int | None) -> list[float] | None:
    if run.status == "failed":
        return None
    if block is None:
        return run.repeats_of(metric) or None
    return block_medians(run.series_of(metric), block) or None


# -- a run against its baseline and history ------------------------------------------------------
def compare(baseline, candidate, history=()) -> list[dict]:
    """Every configuration the baseline and the candidate share, every metric: a verdict and its figures.

    Each argument is a run's events or its report (see `run_figures`); `history` holds earlier runs
    than the baseline, newest first. Holm's correction runs over all verdicts of the comparison.
    """
    before, after = run_figures(baseline), run_figures(candidate)
    older = [run_figures(h) for h in history]
    assessed = []
    history_of = {}  # per configuration: the baseline's figures and the earlier runs' that measured it
    for key, config in after.items():
        old = before.get(key)  # the baseline's figures of this configuration, if it measured it
        if old is None:
            continue
        was, now = rows.config_figures(old), rows.config_figures(config)
        if now.status == "failed" or was.status == "failed":
            continue
        earlier = [h[key] for h in older if key in h]  # the earlier runs that measured it, newest first
        history_of[key] = [old, *earlier]
        changed = flip(old, config, earlier)
        if changed is not None:
            assessed.append({"cell": config["cell"], "key": key, "cell_id": config["cell_id"], **changed})
        history_figures = [rows.config_figures(h) for h in earlier]
        for metric in metrics_of(config):
            higher = METRICS[metric].higher_is_better
            if not now.repeats_of(metric) and not was.repeats_of(metric):
                continue  # e.g. end-to-end latency of publish-only cells
            by_repeats = min(len(was.repeats_of(metric)), len(now.repeats_of(metric))) >= MIN_REPEATS
            one_figure = not by_repeats and METRICS[metric].series is None  # no per-second series: one figure per run
            block = None if by_repeats or one_figure else block_length(was.series_of(metric) + now.series_of(metric))
            hist = [s for s in (_samples(h, metric, block) for h in history_figures) if s]
            figures = assess(_samples(was, metric, block) or [], _samples(now, metric, block) or [], higher, hist,
                             MIN_REPEATS if by_repeats else 1 if one_figure else MIN_BLOCKS)
            found = rows.verdict(figures)
            if block is not None and found.verdict == "unstable" and not found.cannot_tell:
                figures["why"] = (f"single repeat: fewer than {MIN_BLOCKS} blocks of {block} s "
                                  f"({figures['n_baseline']} vs {figures['n_candidate']})")
            figures["samples"] = "repeats" if by_repeats else "one per run" if one_figure else f"blocks of {block} s"
            assessed.append({"cell": config["cell"], "key": key, "cell_id": config["cell_id"], "metric": metric,
                             **figures})
    flagged = (flag_send_loops(flag_stamps(v, history_of[v["key"]], after[v["key"]]), before[v["key"]], after[v["key"]])
               for v in decide(assessed))
    return [flag_busy_host(flag_priority(v, before[v["key"]], after[v["key"]]), before[v["key"]], after[v["key"]])
            for v in flagged]


def flag_busy_host(verdict: dict, old: dict, new: dict) -> dict:
    """A verdict on a configuration with repeats measured on a busy host (brokerbench.host) says so first: those
    repeats were left out of its samples, and a sustainability change or a verdict left with none of the run's
    repeats is no evidence: `unstable`, never a regression or an improvement."""
    sides = {"baseline": old, "candidate": new}
    marked = {side: busy for side, run in sides.items() if (busy := rows.config_figures(run).host_busy)}
    if not marked:
        return verdict
    said = "; ".join(f"{side} repeat{'s' if len(b.repeats) > 1 else ''} {', '.join(map(str, b.repeats))} of "
                     f"{b.of} ({'; '.join(b.reasons)})" for side, b in marked.items())
    whole = any(len(b.repeats) >= b.of for b in marked.values())
    out = {**verdict, "host_busy": {side: sides[side]["host_busy"] for side in marked}}  # as the figures hold them
    if whole or rows.verdict(verdict).metric == "sustainability":
        if verdict["verdict"] in ("regression", "improvement"):
            out["verdict"] = "unstable"
        if whole:  # what the samples' rule would add (too few samples, blocks) says nothing more
            return {**out, "why": f"host busy in {said}: no quiet repeat, no evidence"}
        return {**out, "why": f"host busy in {said}: a change of verdict is no evidence; {verdict['why']}"}
    return {**out, "why": f"host busy in {said}: left out; {verdict['why']}"}


def flag_send_loops(verdict: dict, old: dict, new: dict) -> dict:
    """A verdict between cells that different send loops measured says so first (reports.model.SEND_LOOP_RULE):
    the change may be the loop's. Figures stored before cells named their loop are left as they are."""
    before, after = rows.config_figures(old).send_loop, rows.config_figures(new).send_loop
    if not before or not after or before == after:
        return verdict
    loops = f"{send_loop_text(before)} → {send_loop_text(after)}"
    return {**verdict, "send_loops": {"baseline": before, "candidate": after},
            "why": f"send loops differ ({loops}): the change may be the loop's; {verdict['why']}"}


def flag_priority(verdict: dict, old: dict, new: dict) -> dict:
    """A verdict between cells run at different scheduling priorities (worker/priority.py: real-time or the fair
    scheduler, for the cell's processes and a local broker) says so first, its verdict kept as the test found it, as
    flag_send_loops keeps one: on a shared host the priority moves tail latencies by itself (the quick suite's Redis
    p99 halved under SCHED_FIFO). Figures stored before cells recorded it are left as they are."""
    before, after = rows.config_figures(old).priority, rows.config_figures(new).priority
    if not before or not after or before == after:
        return verdict
    return {**verdict, "priorities": {"baseline": before, "candidate": after},
            "why": f"scheduling priority differs ({before} → {after}): the change may be the host's scheduling, not "
                   f"the broker's; {verdict['why']}"}


# Where each latency the check reads ends (brokerbench.figures: ARRIVAL, READ, client_stamps): publish latency at the
# acknowledgement's stamp, end-to-end and delivery latency at the delivery's; by the cell result's latency field.
STAMPED_AT = {"publish_latency_us": ("ack_stamps", "acknowledgements", "publish latency"),
              "end_to_end_latency_us": ("delivery_stamps", "deliveries", "end-to-end latency"),
              "delivery_latency_us": ("delivery_stamps", "deliveries", "delivery latency")}
STAMPS_RULE = ("a latency verdict between runs that stamped its end differently (acknowledgements or deliveries: at "
               "arrival, as the read returned, or in a client library's thread) says so beside it, its verdict kept "
               "as the test found it, as a verdict between send loops is: a change of method, not of the broker")


def flag_stamps(verdict: dict, history: list[dict], new: dict) -> dict:
    """A latency verdict whose latency ends at a stamp the earlier runs (`history`: the baseline's figures first)
    took otherwise than the candidate says so first: "stamped differently: arrival vs client:librdkafka" (history's,
    then the run's). The verdict stays as the test found it, as flag_send_loops leaves a verdict between send loops:
    the figures are what was measured, and the reader is told the change may be the method's. Figures stored before
    cells recorded their stamps are left as they are."""
    metric = METRICS.get(verdict.get("metric") or "")
    if metric is None or metric.field not in STAMPED_AT:
        return verdict  # throughput, a rate found, sustainability: no stamp ends them
    field, what, latency = STAMPED_AT[metric.field]
    before = joined_stamps(getattr(rows.config_figures(h), field) for h in history)
    after = joined_stamps([getattr(rows.config_figures(new), field)])
    if not before or not after or before == after:
        return verdict
    return {**verdict, "stamps": {"of": field, "history": before, "candidate": after},
            "why": f"{stamps_differ_text(before, after)} ({what}, where {latency} ends: earlier runs vs this run), a "
                   f"change of method, not of the broker; {verdict['why']}"}


def stamps_differ_text(history: str, candidate: str) -> str:
    """'stamped differently: arrival vs client:librdkafka' (the earlier runs' stamps, then the run's)."""
    return f"stamped differently: {history} vs {candidate}"


def host_kind(host: Host) -> dict:
    """The host's kind, which runs compared must share: its CPU model and cores."""
    return {"cpu_model": given(host.cpu_model), "cores": given(host.cores)}


def suite_of(events: list[dict]) -> str:
    """The suite a run is listed under (the event store's suite index): its suite, else its spec's name."""
    requested = convert(next(e for e in events if e["type"] == "RunRequested")["data"], RunRequested)
    return given(requested.suite) or given(requested.spec.name, "adhoc")


def target_configuration(events: list[dict]) -> dict:
    """What must match for runs to be compared: the targets (versions, settings), the spec's
    target, client and timing settings (TARGET_FIELDS, looked up in the run request as given), and the host kind."""
    spec = next(e for e in events if e["type"] == "RunRequested")["data"]["spec"]
    targets = next((e["data"]["targets"] for e in events if e["type"] == "TargetsReady"), {})
    return {"targets": {b: dict(sorted(t.items())) for b, t in sorted(targets.items())},
            "host": host_kind(run_requested(events)[1].host), **target_settings(spec)}


def target_settings(spec: dict) -> dict:
    """The spec's target, client and timing settings (TARGET_FIELDS) as the run request gave them: None for one it
    left out (its default then is the release's, which code_version tells apart)."""
    return structs.asdict(convert(spec, TargetSettings))


def find_history(store: EventStore, run_id: str, candidate_events: list[dict] | None = None,
                 limit: int = HISTORY_RUNS) -> list[str]:
    """Completed runs of the same suite on the same target configuration before this one, newest first."""
    events = candidate_events or read_report_events(store, run_id)
    suite = suite_of(events)
    wanted = target_configuration(events)
    found = []
    for listed in store.list_runs(limit=100, suite=suite):
        other = listed["run_id"]
        if other >= run_id:
            continue
        header = store.read(other, prefix="0") + store.read(other, prefix="90#")
        ended = [e for e in header if e["type"] == "RunCompleted"]
        if ended and ended[0]["data"]["status"] == "completed" and target_configuration(header) == wanted:
            found.append(other)
            if len(found) >= limit:
                break
    return found


def find_baseline(store: EventStore, run_id: str, candidate_events: list[dict] | None = None) -> str | None:
    """The latest completed run of the same suite, on the same target configuration, before this one."""
    history = find_history(store, run_id, candidate_events, limit=1)
    return history[0] if history else None


METHOD = {
    "samples": "one figure per repeat; a single repeat: medians of non-overlapping blocks of intervals "
               f"({MIN_BLOCK_S}-{MAX_BLOCK_S} s, from the lag-1 autocorrelation); a rate search: its maximum "
               "sustainable rate (not a throughput that equals its target)",
    "test": "t on log figures: the candidate's mean against history's per-run means, SE² = the larger of their "
            "variance·(1 + 1/k) and the repeats' pooled variance, always k − 1 degrees of freedom (the prediction "
            "interval of one more run)",
    "multiplicity": f"Holm–Bonferroni over all verdicts of the run, family-wise alpha {ALPHA}",
    "effect": f"|change| (geometric means, against the baseline and against history) ≥ max({MIN_EFFECT:.0%}, "
              f"{K_NOISE:g} × √(history spread² + repeat spread²))",
    "figures": FIGURES + " (each run's median sample beside them in the JSON)",
    "detectable": f"per verdict, the smallest change it can call: the effect bar, or the change whose t reaches "
                  f"alpha / comparisons with its SE and k − 1 degrees of freedom, whichever is larger",
    "sustainability": "the candidate's share of unsustainable repeats against history's (its runs' repeats pooled): "
                      "Boschloo's exact test, one-sided each way (a rise, a fall), both in the same Holm family; a "
                      "flip of the configuration's verdict that the test does not confirm is unstable",
    "stamps": STAMPS_RULE,
    "host": "a repeat measured on a busy host (brokerbench.host.RULE) is left out of every run's samples; a verdict "
            "with no quiet repeat on either side, or a sustainability change beside a busy repeat, is unstable",
    "history": f"the baseline and up to {HISTORY_RUNS - 1} earlier completed runs of the suite on the same "
               f"target configuration and host kind; under {MIN_HISTORY} runs, run-to-run noise is unknown: "
               "\"cannot tell\" (unstable), never a verdict on an assumed noise",
}


def event_marks(verdict: dict) -> dict:
    """What a RegressionDetected event keeps of a verdict besides its figures: a sustainability regression's counts
    of repeats, and whether the latency was stamped (flag_stamps), the cells sent (flag_send_loops) or ran at a
    priority (flag_priority) otherwise before."""
    return {**_repeat_shares(verdict),
            **{k: verdict[k] for k in ("stamps", "send_loops", "priorities") if verdict.get(k)}}


def _repeat_shares(verdict: dict) -> dict:
    """A sustainability regression's counts, as RegressionDetected stores them (figures have none)."""
    if verdict["metric"] != "sustainability":
        return {}
    return {"unsustainable_repeats": {
        "candidate": {"unsustainable": verdict["candidate_unsustainable"], "judged": verdict["candidate_judged"]},
        "history": {"unsustainable": verdict["history_unsustainable"], "judged": verdict["history_judged"],
                    "runs": verdict["history_runs"]}}}


def check(store: EventStore, run_id: str, baseline_id: str | None = None, *, record: bool = True) -> dict:
    """Compare a run with its baseline and history; record each regression as a RegressionDetected event."""
    events = read_report_events(store, run_id)
    history_ids = find_history(store, run_id, events)
    if baseline_id is None:
        baseline_id = history_ids[0] if history_ids else None
    if baseline_id is None:
        return {"baseline_run_id": None, "history_run_ids": [], "verdicts": [], "regressions": [], "method": METHOD}
    older = [h for h in history_ids if h != baseline_id and h < baseline_id][:HISTORY_RUNS - 1]
    verdicts = compare(read_report_events(store, baseline_id), events,
                       [read_report_events(store, h) for h in older])
    regressions = [v for v in verdicts if v["verdict"] == "regression"]
    if record and regressions:
        index = {c["cell_id"]: c["index"] for c in planned_cells(events)}
        store.append([make_event(run_id, "RegressionDetected", {
            "baseline_run_id": baseline_id, "cell": r["cell"], "cell_id": r["cell_id"], "metric": r["metric"],
            "verdict": r["verdict"], "baseline_median": r["baseline_median"], "candidate_median": r["candidate_median"],
            "baseline_mean": rows.verdict(r).baseline_mean, "candidate_mean": rows.verdict(r).candidate_mean,
            "change": r["change"],
            "p_value": r["p_value"], "why": r["why"], **event_marks(r)}, cell_index=index[r["cell_id"]],
            key=r["metric"])
            for r in regressions])
    return {"baseline_run_id": baseline_id, "history_run_ids": [baseline_id, *older], "verdicts": verdicts,
            "regressions": regressions, "method": METHOD, "alpha": ALPHA,
            "comparisons": sum(len(hypotheses(v)) for v in verdicts)}


build_types(globals())  # msgspec's information on its Structs, built now (eventdata.build_types)
