"""Could a cell keep up with its target rate? The sustainability verdict, from per-second intervals.

Pure (numpy only): the worker's sustainable-rate search calls it at cell time, the reports call it
from stored events, and both get the same answer from the same intervals.

A verdict needs evidence both ways. "unsustainable" is declared on any one failed rule;
"sustainable" only when every rule could be checked on enough intervals and passed; anything in
between is "inconclusive". The rules, in order:

1. enough measured intervals inside the send schedule (MIN_INTERVALS: the largest of the rules'
   own minimum n, MIN_N, so that every rule can fail on a cell that is judged at all);
2. the received rate keeps up: a low quantile of the inner intervals and their mean;
3. the backlog does not grow: the broker's own (consumer lag) and the counted one (sent minus received);
4. per-second p99 latency has no significant upward trend;
5. publish delay (how late the load generator sends) stays bounded and does not trend upward;
6. the producers sent what was due: messages due before the cell's end and never sent (the producer fell behind
   and stopped on time) may be at most NOT_SENT_TOLERANCE of those due, whichever interval they fell in.

Rule 6 exists because the others cannot see the cell's tail: the rate rule leaves the last interval out, and a
producer that stalls in it sends nothing more, so no delay, latency or backlog of those messages is ever measured
(coordinated omission at the tail: a producer stalled for the last 0.3 s of an 8 s cell at 1,000 msgs/s read
sustainable with p99 0.75 ms over what it sent). Its tolerance is the mean rate rule's: a cell may deliver
MEAN_RATE_FLOOR of its target on average, so it may leave 1 - MEAN_RATE_FLOOR of what was due unsent. It is a count
over the whole cell, not a trend, so it can fail at any number of intervals, and it also judges a shaped schedule
(whatever its shape, the producer owed those messages).

Trends (rules 3–5) are judged on the per-second figures with a one-sided Mann–Kendall test
(`rising_p`). Up to EXACT_MAX_N intervals its p is exact: the share of the n! orders of the values
whose S is at least the one seen (Kendall's distribution of inversions), so a strictly rising
series of 5 (2, 4, 8, 16, 32 ms) gets p = 1/120 = 0.0083 and can fail the rule at α = 1%. The
normal approximation used before gave it 0.0275 two-sided, so no 5 s cell could ever show a trend.
Above EXACT_MAX_N the normal approximation is close, and its variance is widened for lag-1
autocorrelation (per-second figures wander: a slow spell lasts several seconds); from ten points or
fewer a lag-1 autocorrelation cannot be estimated (its standard error is about 1/√n), so the small-n
test leaves it out and relies, as every trend rule does, on the rise having to matter as well: a
Theil–Sen rise over the schedule above the series' median (the p99 about doubling) and above 1 ms.
That share was half the median before; a whole median halves the false alarms on wandering series.
Measured on simulated flat series (lognormal per-second p99s, σ = 0.4 and 0.8 in log space, 2,000
series each, n = 5 to 60): independent ones fire 0–1.3% of the time at any n; lag-1 autocorrelated
ones (AR(1), ρ = 0.5) up to 5%, and strongly wandering ones (ρ = 0.8) up to 10% at n = 8–10 and 6%
at n = 30, where the rule before this one fired 2–5% (and could never fire at n = 5). The tests
in tests/unit/test_verdict.py hold the rule to these rates.
A per-message test (the last interval's latencies against the first inner one's, from their
histograms) was not used: the messages of one second are not independent (a pause delays all of
them at once), so thousands of them would make any one slow second "significant", and a report
re-judging a cell from its digest has the per-second figures only.

Each rule's minimum n (MIN_N) is the fewest judged intervals at which it can fail at all: the rate
rule needs one inner interval (3), a trend rule the n at which a strictly rising series reaches its
α. A rule judged on fewer values than that says so and makes the verdict inconclusive.

The rate rule reads a low quantile of the inner intervals, not their minimum: the k-th lowest with
k = floor(RATE_QUANTILE × inner intervals), RATE_QUANTILE = 5%, must reach INTERVAL_RATE_FLOOR of
the target. With the minimum, one 100 ms stall failed a 30-minute cell that a 5 s cell passes; with
the 5% quantile a cell of 20 inner seconds or more rides out one stalled second (one in twenty), a
short one (under 20 inner seconds) still tolerates none, and a shortfall in more than one second in
twenty fails at any length. A stall that does not catch up shows in the backlog rule, and a steady
small shortfall in the mean (MEAN_RATE_FLOOR), so the quantile only has to tell a pattern from a
transient.
"""

from __future__ import annotations

import hashlib
import math
from functools import lru_cache
from pathlib import Path

import numpy as np

# Rate. A low quantile of the inner intervals must reach this share of the target...
INTERVAL_RATE_FLOOR = 0.90
RATE_QUANTILE = 0.05  # ...the k-th lowest, k = floor(RATE_QUANTILE × inner intervals): one second in twenty may dip
# ...and on average they must deliver this share of it (a steady small shortfall is a growing queue).
MEAN_RATE_FLOOR = 0.99
# Backlog: growing by more than this share of the target every second, and ending above this many
# seconds' worth of messages, is a queue that would only get longer.
BACKLOG_SLOPE_FRACTION = 0.01
BACKLOG_FINAL_S = 0.5
BACKLOG_ALPHA = 0.05  # one-sided Mann–Kendall: the growth must be consistent, not one noisy sample
# Trend: one-sided Mann–Kendall at this level, and a Theil–Sen rise over the schedule that matters in
# practice (per-second p99s are autocorrelated, so the test alone would fire too often on slow wander).
TREND_ALPHA = 0.01
TREND_MIN_RISE_FRACTION = 1.0  # the Theil–Sen rise over the schedule must exceed the median: about doubling
# ...and above this absolute rise: per-second p99s under a millisecond wander by hundreds of microseconds (a timer
# tick, a scheduler's slice), and no rule tells such wander from a slow climb. A climb that passes the test and the
# relative bar but stays under it is named in the cell's reasons (`below_floor`): the verdict does not see it.
TREND_MIN_RISE_US = 1000.0
# A rise that large whose test is not below TREND_ALPHA but below this is unclear: a short cell cannot tell
# one noisy second from a climb (at 6 intervals one second out of order gives p = 0.028), so the rule says so
# and the verdict is inconclusive, never sustainable.
TREND_UNCLEAR_ALPHA = 0.10
EXACT_MAX_N = 10  # up to this many points the Mann–Kendall p is exact (and not corrected for autocorrelation)
# Publish delay: the median of the second half's per-second p99 must stay under this.
DELAY_BOUND_US = 100_000.0
# Not sent: of the messages due before the cell's end, at most this share may be left unsent (the mean rate
# rule's own tolerance: a cell that sent less than MEAN_RATE_FLOOR of what was due did not keep its rate).
NOT_SENT_TOLERANCE = round(1 - MEAN_RATE_FLOOR, 6)

RULE_TEXT = (
    "A rated cell is sustainable when, over at least {min_intervals} one-second intervals of its send schedule: "
    "the {quantile:.0%} quantile of the inner intervals (all but the first and last; the k-th lowest, k = "
    "floor({quantile:g} × their number), so one second in twenty may dip) received (publish-only cells: had "
    "acknowledged) at least {interval_floor:.0%} of the target rate, and their mean at least {mean_floor:.0%} of it; "
    "neither the broker-side backlog (consumer lag) nor the counted one (sent minus received; minus acknowledged "
    "for publish-only cells) grew (growing: a Theil–Sen slope above {backlog_slope:.0%} of the target per second, "
    "a rise over the schedule and a final backlog above {backlog_final:g} s of messages, and a one-sided "
    "Mann–Kendall trend with p < {backlog_alpha:g}); per-second end-to-end p99 (publish p99 for publish-only "
    "cells) had no upward trend (one-sided Mann–Kendall p < {trend_alpha:g}, exact up to {exact_n} intervals, "
    "corrected for autocorrelation above, with a rise over the schedule above {rise_fraction:.0%} of its median "
    "and {rise_ms:g} ms, so a p99 under a millisecond that climbs by less than {rise_ms:g} ms never fails it: the "
    "cell's reasons say when one did; such a rise with p < {unclear_alpha:g} is unclear: the rule is not passed); publish delay p99 stayed bounded (median of the second half under {delay_ms:g} ms, "
    "no such upward trend); and the producers left at most {not_sent:.0%} of the messages due before the cell's end "
    "unsent (a count over the whole cell, whichever interval they fell in; it judges shaped schedules and short "
    "cells too). Each rule's minimum n, the fewest intervals at which it can fail: {min_n}. Any "
    "failed rule makes it unsustainable; too few intervals, or a rule that could not be checked, make it "
    "inconclusive, never sustainable. Max-rate cells get no verdict: they measure capacity."
)


def min_n_text(min_n: dict) -> str:
    """Each rule's minimum n, as the rule text and the report print it."""
    return ", ".join(f"{name.replace('_', ' ')} {n}" for name, n in min_n.items())


def _fingerprint() -> str | None:
    """These rules' code: a verdict judged at cell time stands in a report only while it is unchanged."""
    try:
        return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    except OSError:  # no source to tell: every stored verdict is judged again
        return None


FINGERPRINT = _fingerprint()


# -- statistics -----------------------------------------------------------------------------------
def theil_sen_slope(x, y) -> float | None:
    """Median of the pairwise slopes: a straight-line trend that a few outliers cannot drag."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 2:
        return None
    i, j = np.triu_indices(x.size, k=1)
    dx = x[j] - x[i]
    keep = dx != 0
    if not keep.any():
        return None
    return float(np.median((y[j] - y[i])[keep] / dx[keep]))


def mann_kendall(values) -> dict:
    """Mann–Kendall trend test: S, z and the two-sided p (normal approximation, tie-corrected)."""
    v = np.asarray(values, dtype=float)
    n = v.size
    if n < 3:
        return {"n": int(n), "s": 0, "z": 0.0, "p": 1.0}
    i, j = np.triu_indices(n, k=1)
    s = int(np.sign(v[j] - v[i]).sum())
    _, ties = np.unique(v, return_counts=True)
    variance = (n * (n - 1) * (2 * n + 5) - float((ties * (ties - 1) * (2 * ties + 5)).sum())) / 18
    if variance <= 0:  # every value equal: no trend
        return {"n": int(n), "s": s, "z": 0.0, "p": 1.0}
    z = (s - math.copysign(1, s)) / math.sqrt(variance) if s else 0.0  # continuity correction
    return {"n": int(n), "s": s, "z": float(z), "p": float(math.erfc(abs(z) / math.sqrt(2)))}


def trend_test(indexes, values) -> dict:
    """Mann–Kendall with its variance widened for lag-1 autocorrelation (Yue & Wang's AR(1) form).

    Per-second figures of one cell are autocorrelated (a slow spell lasts several seconds); the
    plain test treats them as independent and finds "trends" in stationary wander. The lag-1
    autocorrelation is taken from the series with its Theil–Sen trend removed, and only a positive
    one widens the variance (a negative one is left alone: conservative).
    """
    v = np.asarray(values, dtype=float)
    test = mann_kendall(v)
    slope = theil_sen_slope(indexes, v) or 0.0
    residual = v - slope * np.asarray(indexes, dtype=float)
    residual -= residual.mean()
    denominator = float((residual * residual).sum())
    rho = float((residual[1:] * residual[:-1]).sum() / denominator) if denominator > 0 and v.size > 2 else 0.0
    factor = 1.0
    if rho > 0:
        k = np.arange(1, v.size)
        factor = 1 + 2 * float(((1 - k / v.size) * rho**k).sum())
    z = test["z"] / math.sqrt(factor)
    return {"s": test["s"], "z": z, "p": float(math.erfc(abs(z) / math.sqrt(2))), "p_uncorrected": test["p"],
            "lag1_autocorrelation": rho, "slope": slope}


@lru_cache(maxsize=None)
def _inversion_counts(n: int) -> tuple[float, ...]:
    """How many of the n! orders of n distinct values have k inversions, k = 0 … n(n−1)/2 (Mahonian numbers)."""
    counts = np.ones(1)
    for m in range(2, n + 1):
        counts = np.convolve(counts, np.ones(m))
    return tuple(float(c) for c in counts)


def exact_rising_p(values) -> float:
    """One-sided exact Mann–Kendall p: the share of the n! orders of the values with an S at least this large.

    S = concordant − discordant pairs; with no ties an order with S has (N − S) / 2 inversions (N the
    number of pairs). A tie counts as half an inversion (S treats it as neither), which can only raise p.
    """
    v = np.asarray(values, dtype=float)
    n = v.size
    if n < 2:
        return 1.0
    i, j = np.triu_indices(n, k=1)
    s = int(np.sign(v[j] - v[i]).sum())
    counts = _inversion_counts(n)
    allowed = math.floor((len(i) - s) / 2 + 1e-9)
    return float(sum(counts[:allowed + 1]) / sum(counts))


def rising_p(indexes, values) -> dict:
    """One-sided Mann–Kendall for an upward trend: exact up to EXACT_MAX_N points, beyond that the normal
    approximation with its variance widened for lag-1 autocorrelation (trend_test)."""
    test = trend_test(indexes, values)
    if len(values) <= EXACT_MAX_N:
        return {**test, "p": exact_rising_p(values), "method": "exact"}
    return {**test, "p": 0.5 * math.erfc(test["z"] / math.sqrt(2)), "method": "normal, autocorrelation-corrected"}


def smallest_n(alpha: float) -> int:
    """The fewest points at which rising_p can fall below alpha at all (a strictly rising series)."""
    n = 2
    while rising_p(list(range(n)), list(range(n)))["p"] >= alpha:
        n += 1
    return n


# Each rule's minimum n: the fewest intervals it is judged on at which it can fail. The rate rule needs
# one inner interval; the trend rules the n at which a strictly rising series reaches their alpha.
MIN_N = {"rate": 3, "backlog": smallest_n(BACKLOG_ALPHA), "latency_trend": smallest_n(TREND_ALPHA),
         "publish_delay": smallest_n(TREND_ALPHA)}
MIN_INTERVALS = max(MIN_N.values())  # every rule can fail on a cell that is judged at all


def _trend(indexes: list[int], values: list[float]) -> dict:
    """Is the series rising, significantly and by enough to matter?"""
    test = rising_p(indexes, values)
    slope = test["slope"]
    median = float(np.median(values))
    rise = slope * (indexes[-1] - indexes[0])
    large = test["s"] > 0 and rise > TREND_MIN_RISE_FRACTION * median and rise > TREND_MIN_RISE_US
    rising = large and test["p"] < TREND_ALPHA
    return {"n": len(values), "median_us": median, "slope_us_per_s": slope, "rise_us": rise,
            "mann_kendall_p": test["p"], "mann_kendall_s": test["s"], "test": test["method"],
            "lag1_autocorrelation": test["lag1_autocorrelation"], "rising": rising,
            "unclear": large and not rising and test["p"] < TREND_UNCLEAR_ALPHA,
            "below_floor": (test["s"] > 0 and rise > TREND_MIN_RISE_FRACTION * median and rise <= TREND_MIN_RISE_US
                            and test["p"] < TREND_ALPHA)}


def _floor_note(label: str, trend: dict) -> str:
    """A climb the rule cannot see: significant, beyond the median, but under TREND_MIN_RISE_US."""
    return (f"{label} rose {trend['rise_us'] / 1000:,.2f} ms over the cell (Mann–Kendall p={trend['mann_kendall_p']:.2g}, "
            f"median {trend['median_us'] / 1000:,.2f} ms): a climb, but under the {TREND_MIN_RISE_US / 1000:g} ms "
            "this rule needs, so not judged")


def _unclear_note(label: str, trend: dict) -> str:
    return (f"{label} rose {trend['rise_us'] / 1000:,.1f} ms over the cell (Mann–Kendall p={trend['mann_kendall_p']:.2g}, "
            f"not below {TREND_ALPHA:g}): too few or too noisy intervals to tell a climb from noise")


RULE = RULE_TEXT.format(
    min_intervals=MIN_INTERVALS, quantile=RATE_QUANTILE, interval_floor=INTERVAL_RATE_FLOOR,
    mean_floor=MEAN_RATE_FLOOR, backlog_slope=BACKLOG_SLOPE_FRACTION, backlog_final=BACKLOG_FINAL_S,
    backlog_alpha=BACKLOG_ALPHA, trend_alpha=TREND_ALPHA, exact_n=EXACT_MAX_N, rise_fraction=TREND_MIN_RISE_FRACTION,
    rise_ms=TREND_MIN_RISE_US / 1000, unclear_alpha=TREND_UNCLEAR_ALPHA, delay_ms=DELAY_BOUND_US / 1000, not_sent=NOT_SENT_TOLERANCE,
    min_n=min_n_text(MIN_N))


# -- input ----------------------------------------------------------------------------------------
def schedule_end(measured_s: float | None) -> int | None:
    """The first interval after the send schedule (ceil(measured_s)); None when the schedule is unknown."""
    return None if measured_s is None else math.ceil(measured_s - 1e-9)


def in_schedule(interval: int, sent: int, schedule: int | None) -> bool:
    """An interval is in the schedule when it starts before the schedule ends; without a known schedule,
    when something was sent in it. The rest are the drain."""
    return interval < schedule if schedule is not None else sent > 0


INPUT_FIELDS = ("interval", "sent", "acked", "received", "backlog", "end_to_end_p99_us", "publish_delay_p99_us",
                "publish_latency_p99_us")  # an input's fields besides in_schedule (which measured_s decides)


def interval_inputs(interval_events: list[dict], measured_s: float | None) -> list[dict]:
    """The verdict's input from IntervalMeasured data: counters, summaries and the broker backlog.

    An interval is in the schedule when it starts before the schedule ends (ceil(measured_s)); the
    rest are the drain. Without measured_s, the intervals in which something was sent are.
    """
    schedule = schedule_end(measured_s)
    out = []
    for data in sorted(interval_events, key=lambda d: d["interval"]):
        counters, summary = data.get("counters", {}), data.get("summary", {})
        p99 = lambda metric: summary.get(metric, {}).get("p99")  # noqa: E731
        out.append({
            "interval": data["interval"],
            "in_schedule": in_schedule(data["interval"], counters.get("sent", 0), schedule),
            "sent": counters.get("sent", 0),
            "acked": counters.get("acked"),
            "received": counters.get("received"),
            "backlog": data.get("backlog"),
            "end_to_end_p99_us": p99("end_to_end_latency_us"),
            "publish_delay_p99_us": p99("publish_delay_us"),
            "publish_latency_p99_us": p99("publish_latency_us"),
        })
    return out


def inputs_from_columns(columns: dict[str, list], measured_s: float | None) -> list[dict]:
    """interval_inputs from its fields in columns (INPUT_FIELDS, in interval order), as a digest keeps them."""
    schedule = schedule_end(measured_s)
    return [{"interval": row[0], "in_schedule": in_schedule(row[0], row[1], schedule),
             **dict(zip(INPUT_FIELDS[1:], row[1:]))} for row in zip(*(columns[k] for k in INPUT_FIELDS))]


# -- the rules ------------------------------------------------------------------------------------
def _rate_check(target: float, schedule: list[dict], publish_only: bool) -> tuple[dict, str | None, str]:
    """The RATE_QUANTILE quantile of the inner intervals ≥ INTERVAL_RATE_FLOOR of the target, their mean ≥
    MEAN_RATE_FLOOR.

    The first and last intervals are left out: the first includes the pipeline filling, the last is
    cut by the schedule's end, and deliveries shifted by the latency would read as a shortfall there.
    The quantile is the k-th lowest inner interval, k = floor(RATE_QUANTILE × their number): up to k of
    them may fall below the floor (see the module's docstring).
    """
    if publish_only:
        basis = "acked" if all(i.get("acked") is not None for i in schedule) else "sent"
    else:
        basis = "received"
    inner = schedule[1:-1]
    counts = [i[basis] for i in inner]
    if any(c is None for c in counts):
        return {"basis": basis, "passed": None}, None, f"the {basis} count per interval is missing"
    if len(schedule) < MIN_N["rate"]:
        return ({"basis": basis, "n": len(schedule), "min_n": MIN_N["rate"], "passed": None}, None,
                f"only {len(schedule)} intervals: no inner interval to judge the rate on")
    order = np.argsort(counts, kind="stable")
    worst, allowed = int(order[0]), int(RATE_QUANTILE * len(counts))
    low, floor, mean = counts[int(order[allowed])], INTERVAL_RATE_FLOOR * target, float(np.mean(counts))
    below = sum(c < floor for c in counts)
    check = {"basis": basis, "target": target, "inner_intervals": len(inner), "min": counts[worst],
             "min_interval": inner[worst]["interval"], "quantile": RATE_QUANTILE, "low_quantile": low,
             "allowed_below": allowed, "below_floor": below, "mean": mean, "interval_floor": INTERVAL_RATE_FLOOR,
             "mean_floor": MEAN_RATE_FLOOR, "min_n": MIN_N["rate"]}
    failures = []
    if low < floor:
        failures.append(f"{below} of {len(counts)} inner intervals {basis} less than {INTERVAL_RATE_FLOOR:.0%} of "
                        f"{target:,.0f} msgs/s (at most {allowed} may; lowest {counts[worst]:,} in second "
                        f"{inner[worst]['interval']})")
    if mean < MEAN_RATE_FLOOR * target:
        failures.append(f"{basis} {mean:,.0f} msgs/s on average ({mean / target:.1%} of {target:,.0f})")
    check["passed"] = not failures
    if failures:
        return check, "; ".join(failures), ""
    dips = f"; {below} of {len(counts)} seconds below {INTERVAL_RATE_FLOOR:.0%}, {allowed} allowed" if below else ""
    lowest = counts[worst] / target
    return check, None, f"{basis} {mean / target:.1%} of the target rate (lowest second {lowest:.0%}{dips})"


def _growth(indexes: list[int], backlog: list[float], target: float) -> dict:
    """Is this backlog growing: fast enough, by enough, consistently, and is it already large?

    A sampled backlog is noisy (Kafka's lag moves with the consumer's commits, up to about a
    second of messages), so a Theil–Sen slope alone would see growth in noise: the rise over the
    schedule must also exceed BACKLOG_FINAL_S of messages and the series must trend (Mann–Kendall,
    one-sided p < BACKLOG_ALPHA).
    """
    test = rising_p(indexes, backlog)
    slope = test["slope"]
    rise = slope * (indexes[-1] - indexes[0])
    one_sided = test["p"]
    growing = (slope > BACKLOG_SLOPE_FRACTION * target and rise > BACKLOG_FINAL_S * target
               and backlog[-1] > BACKLOG_FINAL_S * target and one_sided < BACKLOG_ALPHA)
    return {"first": float(backlog[0]), "last": float(backlog[-1]), "slope_per_s": slope, "rise": rise,
            "mann_kendall_p_rising": one_sided, "growing": growing}


def _backlog_check(target: float, schedule: list[dict], publish_only: bool) -> tuple[dict, str | None, str]:
    """The broker's own backlog and the counted one (sent minus what arrived): neither may grow.

    Both are followed because each sees what the other misses: a producer throttled by a broker
    quota queues in the client, so only the counted backlog grows; the broker's lag sees messages
    the consumer has not yet taken, whatever the counters say.
    """
    check = {"slope_limit_per_s": BACKLOG_SLOPE_FRACTION * target, "limit": BACKLOG_FINAL_S * target,
             "min_n": MIN_N["backlog"]}
    series = {}
    known = [i for i in schedule if i.get("backlog") is not None]
    if publish_only:
        check["broker"] = None  # without a consumer, the broker's lag is everything that was published
    elif len(known) >= MIN_N["backlog"]:  # a lag query that failed once leaves a gap, no more
        series["broker"] = ("backlog", [i["interval"] for i in known], [float(i["backlog"]) for i in known])
    else:
        check["broker"] = None
        check["note"] = "broker-side backlog not available: followed as cumulative sent − received only"
    # Publish-only: what the producer has not had acknowledged is its own queue (acknowledgements
    # running seconds behind the sends).
    other = "acked" if publish_only else "received"
    if all(i.get(other) is not None for i in schedule):
        label = "unacknowledged sends" if publish_only else "backlog (sent − received)"
        series["counted"] = (label, [i["interval"] for i in schedule],
                             [float(v) for v in np.cumsum([i["sent"] - i[other] for i in schedule])])
    else:
        check["counted"] = None
    if not series:
        check["passed"] = None
        return check, None, f"the backlog could not be followed (no broker-side backlog, no {other} counts)"
    failures, notes = [], []
    for source, (label, indexes, backlog) in series.items():
        figures = check[source] = {"label": label, **_growth(indexes, backlog, target)}
        if figures["growing"]:
            failures.append(f"{label} grew from {figures['first']:,.0f} to {figures['last']:,.0f} messages "
                            f"({figures['slope_per_s']:+,.0f}/s)")
        else:
            notes.append(f"{label} steady ({figures['slope_per_s']:+,.0f}/s, {figures['last']:,.0f} at the end)")
    check["passed"] = not failures
    return check, "; ".join(failures) or None, "; ".join(notes)


def _series(schedule: list[dict], key: str) -> tuple[list[int], list[float]]:
    pairs = [(i["interval"], float(i[key])) for i in schedule if i.get(key) is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _latency_check(schedule: list[dict], publish_only: bool) -> tuple[dict, str | None, str]:
    key = "publish_latency_p99_us" if publish_only else "end_to_end_p99_us"
    label = "publish p99" if publish_only else "end-to-end p99"
    indexes, values = _series(schedule, key)
    need = MIN_N["latency_trend"]
    if len(values) < need:
        return ({"metric": key, "n": len(values), "min_n": need, "passed": None}, None,
                f"{label} was measured in only {len(values)} intervals: no trend can be judged (at least {need})")
    trend = _trend(indexes, values)
    check = {"metric": key, **trend, "min_n": need, "passed": None if trend["unclear"] else not trend["rising"]}
    if trend["rising"]:
        return (check, f"{label} rises {trend['slope_us_per_s'] / 1000:,.1f} ms/s (Mann–Kendall "
                       f"p={trend['mann_kendall_p']:.2g}; median {trend['median_us'] / 1000:,.1f} ms)", "")
    if trend["unclear"]:
        return check, None, _unclear_note(label, trend)
    if trend["below_floor"]:
        return check, None, _floor_note(label, trend)
    return check, None, f"no rising {label} trend (Mann–Kendall p={trend['mann_kendall_p']:.2g})"


def _delay_check(schedule: list[dict]) -> tuple[dict, str | None, str]:
    indexes, values = _series(schedule, "publish_delay_p99_us")
    need = MIN_N["publish_delay"]
    if len(values) < need:
        return ({"n": len(values), "min_n": need, "passed": None}, None,
                f"publish delay was measured in only {len(values)} intervals: cannot tell if it is bounded "
                f"(at least {need})")
    second_half = float(np.median(values[len(values) // 2:]))
    trend = _trend(indexes, values)
    check = {**trend, "second_half_median_us": second_half, "bound_us": DELAY_BOUND_US, "min_n": need}
    failures = []
    if second_half > DELAY_BOUND_US:
        failures.append(f"publish delay p99 {second_half / 1000:,.0f} ms in the second half (bound "
                        f"{DELAY_BOUND_US / 1000:g} ms): the load generator fell behind its schedule")
    if trend["rising"]:
        failures.append(f"publish delay p99 rises {trend['slope_us_per_s'] / 1000:,.1f} ms/s (Mann–Kendall "
                        f"p={trend['mann_kendall_p']:.2g})")
    check["passed"] = None if trend["unclear"] and not failures else not failures
    if failures:
        return check, "; ".join(failures), ""
    if trend["unclear"]:
        return check, None, _unclear_note("publish delay p99", trend)
    return check, None, f"publish delay p99 bounded ({second_half / 1000:,.1f} ms in the second half)"


def not_sent_check(not_sent: int | None, due: int | None) -> tuple[dict | None, str | None, str]:
    """Rule 6: of the messages due before the cell's end, at most NOT_SENT_TOLERANCE left unsent. No check (None)
    where nothing was counted (cells stored before it was) or nothing was due."""
    if not_sent is None or not due:
        return None, None, ""
    share = not_sent / due
    check = {"not_sent": not_sent, "due": due, "share": share, "tolerance": NOT_SENT_TOLERANCE,
             "passed": share <= NOT_SENT_TOLERANCE}
    if not check["passed"]:
        return check, (f"{not_sent:,} of {due:,} messages due were never sent ({share:.1%}, more than "
                       f"{NOT_SENT_TOLERANCE:.0%}): the producer fell behind its schedule and the cell ended"), ""
    return check, None, f"{not_sent:,} of {due:,} due messages not sent ({share:.2%})" if not_sent else ""


def backlog_growth(rate: float, intervals: list[dict]) -> dict:
    """The backlog rule alone (rule 3), for a cell of consumers the verdict does not judge (at max rate, none is):
    `rate` stands for the target (the rate sent). The check as `sustainability` stores it."""
    schedule = [i for i in sorted(intervals, key=lambda i: i["interval"]) if i["in_schedule"]]
    return _backlog_check(float(rate), schedule, False)[0]


def sustainability(target_rate: float | None, intervals: list[dict], *, publish_only: bool = False,
                   shaped: bool = False, not_sent: int | None = None, due: int | None = None) -> dict:
    """The verdict for one cell: sustainable, unsustainable, inconclusive, or max-rate (no target). `not_sent` and
    `due`: the cell's messages due before its end and never sent, and all those due (rule 6; None: not counted)."""
    if target_rate is None:
        return {"verdict": "max-rate", "reasons": ["unthrottled: measures capacity; latency from enqueue"],
                "checks": {}}
    owed, owed_failure, owed_note = not_sent_check(not_sent, due)
    owed_checks = {"not_sent": owed} if owed is not None else {}
    if owed_failure:  # a count over the whole cell: it fails whatever the other rules could judge
        return {"verdict": "unsustainable", "reasons": [owed_failure], "checks": owed_checks}
    if shaped:  # every check below compares a second's figures with one constant rate
        return {"verdict": "inconclusive", "checks": owed_checks,
                "reasons": ["a startup backlog or bursts: no constant rate to judge; see the startup and burst figures"]}
    schedule = [i for i in sorted(intervals, key=lambda i: i["interval"]) if i["in_schedule"]]
    checks: dict = {"intervals": {"in_schedule": len(schedule), "drain": len(intervals) - len(schedule),
                                  "min": MIN_INTERVALS, "min_n": dict(MIN_N)}, **owed_checks}
    if len(schedule) < MIN_INTERVALS:
        return {"verdict": "inconclusive", "checks": checks,
                "reasons": [f"only {len(schedule)} measured intervals; at least {MIN_INTERVALS} are needed to judge"]}
    failures, passes, undecided = [], [], []
    if owed_note:
        passes.append(owed_note)
    for name, (check, failure, note) in (("rate", _rate_check(float(target_rate), schedule, publish_only)),
                                         ("backlog", _backlog_check(float(target_rate), schedule, publish_only)),
                                         ("latency_trend", _latency_check(schedule, publish_only)),
                                         ("publish_delay", _delay_check(schedule))):
        checks[name] = check
        if check["passed"] is False:
            failures.append(failure)
        elif check["passed"] is None:
            undecided.append(note)
        else:
            passes.append(note)
    if failures:
        return {"verdict": "unsustainable", "reasons": failures, "checks": checks}
    if undecided:
        return {"verdict": "inconclusive", "reasons": undecided, "checks": checks}
    return {"verdict": "sustainable", "reasons": passes, "checks": checks}
