"""Could a cell keep up with its target rate? The sustainability verdict, from per-second intervals.

Pure (numpy only): the worker's sustainable-rate search calls it at cell time, the reports call it
from stored events, and both get the same answer from the same intervals.

A verdict needs evidence both ways. "unsustainable" is declared on any one failed rule;
"sustainable" only when every rule could be checked on enough intervals and passed; anything in
between is "inconclusive". The rules, in order:

1. enough measured intervals inside the send schedule (MIN_INTERVALS);
2. the received rate keeps up, in every inner interval and on average;
3. the backlog does not grow: the broker's own (consumer lag) and the counted one (sent minus received);
4. per-second p99 latency has no significant upward trend;
5. publish delay (how late the load generator sends) stays bounded and does not trend upward.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np

MIN_INTERVALS = 5
# Rate. Each inner interval may dip (a GC pause, a log roll) but not below this share of the target...
INTERVAL_RATE_FLOOR = 0.90
# ...and on average they must deliver this share of it (a steady small shortfall is a growing queue).
MEAN_RATE_FLOOR = 0.99
# Backlog: growing by more than this share of the target every second, and ending above this many
# seconds' worth of messages, is a queue that would only get longer.
BACKLOG_SLOPE_FRACTION = 0.01
BACKLOG_FINAL_S = 0.5
BACKLOG_ALPHA = 0.05  # one-sided Mann–Kendall: the growth must be consistent, not one noisy sample
# Trend: Mann–Kendall at this level, and a Theil–Sen rise over the schedule that matters in practice
# (per-second p99s are autocorrelated, so the test alone would fire too often on slow wander).
TREND_ALPHA = 0.01
TREND_MIN_RISE_FRACTION = 0.5
TREND_MIN_RISE_US = 1000.0
# Publish delay: the median of the second half's per-second p99 must stay under this.
DELAY_BOUND_US = 100_000.0

RULE = (
    f"A rated cell is sustainable when, over at least {MIN_INTERVALS} one-second intervals of its send "
    f"schedule: every interval but the first and last received (publish-only cells: had acknowledged) at "
    f"least {INTERVAL_RATE_FLOOR:.0%} of the target rate, and on average at least {MEAN_RATE_FLOOR:.0%} of "
    f"it; neither the broker-side "
    f"backlog (consumer lag) nor the counted one (sent minus received; minus acknowledged for publish-only "
    f"cells) grew (growing: a Theil–Sen slope above {BACKLOG_SLOPE_FRACTION:.0%} of the target per second, a "
    f"rise over the schedule and a final backlog above {BACKLOG_FINAL_S:g} s of messages, and a Mann–Kendall "
    f"trend with one-sided p < {BACKLOG_ALPHA:g}); per-second end-to-end p99 (publish p99 for publish-only "
    f"cells) had no upward trend (Mann–Kendall p < {TREND_ALPHA:g}, corrected for autocorrelation, with a "
    f"rise over the schedule above {TREND_MIN_RISE_FRACTION:.0%} of its median and "
    f"{TREND_MIN_RISE_US / 1000:g} ms); and publish delay p99 stayed bounded (median of the second half "
    f"under {DELAY_BOUND_US / 1000:g} ms, no such upward trend). Any failed rule makes it unsustainable; "
    f"too few intervals, or a rule that could not be checked, make it inconclusive, never sustainable. "
    f"Max-rate cells get no verdict: they measure capacity."
)


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


def _trend(indexes: list[int], values: list[float]) -> dict:
    """Is the series rising, significantly and by enough to matter?"""
    test = trend_test(indexes, values)
    slope = test["slope"]
    median = float(np.median(values))
    rise = slope * (indexes[-1] - indexes[0])
    rising = (test["s"] > 0 and test["p"] < TREND_ALPHA and rise > TREND_MIN_RISE_FRACTION * median
              and rise > TREND_MIN_RISE_US)
    return {"n": len(values), "median_us": median, "slope_us_per_s": slope, "rise_us": rise,
            "mann_kendall_p": test["p"], "mann_kendall_s": test["s"],
            "lag1_autocorrelation": test["lag1_autocorrelation"], "rising": rising}


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
    """Every inner interval ≥ INTERVAL_RATE_FLOOR of the target, their mean ≥ MEAN_RATE_FLOOR.

    The first and last intervals are left out: the first includes the pipeline filling, the last is
    cut by the schedule's end, and deliveries shifted by the latency would read as a shortfall there.
    """
    if publish_only:
        basis = "acked" if all(i.get("acked") is not None for i in schedule) else "sent"
    else:
        basis = "received"
    inner = schedule[1:-1]
    counts = [i[basis] for i in inner]
    if any(c is None for c in counts):
        return {"basis": basis, "passed": None}, None, f"the {basis} count per interval is missing"
    worst = int(np.argmin(counts))
    mean = float(np.mean(counts))
    check = {"basis": basis, "target": target, "inner_intervals": len(inner), "min": counts[worst],
             "min_interval": inner[worst]["interval"], "mean": mean, "interval_floor": INTERVAL_RATE_FLOOR,
             "mean_floor": MEAN_RATE_FLOOR}
    failures = []
    if counts[worst] < INTERVAL_RATE_FLOOR * target:
        below = sum(c < INTERVAL_RATE_FLOOR * target for c in counts)
        failures.append(f"{below} of {len(counts)} inner intervals {basis} less than {INTERVAL_RATE_FLOOR:.0%} of "
                        f"{target:,.0f} msgs/s (lowest {counts[worst]:,} in second {inner[worst]['interval']})")
    if mean < MEAN_RATE_FLOOR * target:
        failures.append(f"{basis} {mean:,.0f} msgs/s on average ({mean / target:.1%} of {target:,.0f})")
    check["passed"] = not failures
    if failures:
        return check, "; ".join(failures), ""
    return check, None, f"{basis} {mean / target:.1%} of the target rate (lowest second {counts[worst] / target:.0%})"


def _growth(indexes: list[int], backlog: list[float], target: float) -> dict:
    """Is this backlog growing: fast enough, by enough, consistently, and is it already large?

    A sampled backlog is noisy (Kafka's lag moves with the consumer's commits, up to about a
    second of messages), so a Theil–Sen slope alone would see growth in noise: the rise over the
    schedule must also exceed BACKLOG_FINAL_S of messages and the series must trend (Mann–Kendall,
    one-sided p < BACKLOG_ALPHA).
    """
    test = trend_test(indexes, backlog)
    slope = test["slope"]
    rise = slope * (indexes[-1] - indexes[0])
    one_sided = test["p"] / 2 if test["s"] > 0 else 1.0
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
    check = {"slope_limit_per_s": BACKLOG_SLOPE_FRACTION * target, "limit": BACKLOG_FINAL_S * target}
    series = {}
    known = [i for i in schedule if i.get("backlog") is not None]
    if publish_only:
        check["broker"] = None  # without a consumer, the broker's lag is everything that was published
    elif len(known) >= MIN_INTERVALS:  # a lag query that failed once leaves a gap, no more
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
    if len(values) < MIN_INTERVALS:
        return ({"metric": key, "n": len(values), "passed": None}, None,
                f"{label} was measured in only {len(values)} intervals: no trend can be judged")
    trend = _trend(indexes, values)
    check = {"metric": key, **trend, "passed": not trend["rising"]}
    if trend["rising"]:
        return (check, f"{label} rises {trend['slope_us_per_s'] / 1000:,.1f} ms/s (Mann–Kendall "
                       f"p={trend['mann_kendall_p']:.2g}; median {trend['median_us'] / 1000:,.1f} ms)", "")
    return check, None, f"no rising {label} trend (Mann–Kendall p={trend['mann_kendall_p']:.2g})"


def _delay_check(schedule: list[dict]) -> tuple[dict, str | None, str]:
    indexes, values = _series(schedule, "publish_delay_p99_us")
    if len(values) < MIN_INTERVALS:
        return ({"n": len(values), "passed": None}, None,
                f"publish delay was measured in only {len(values)} intervals: cannot tell if it is bounded")
    second_half = float(np.median(values[len(values) // 2:]))
    trend = _trend(indexes, values)
    check = {**trend, "second_half_median_us": second_half, "bound_us": DELAY_BOUND_US}
    failures = []
    if second_half > DELAY_BOUND_US:
        failures.append(f"publish delay p99 {second_half / 1000:,.0f} ms in the second half (bound "
                        f"{DELAY_BOUND_US / 1000:g} ms): the load generator fell behind its schedule")
    if trend["rising"]:
        failures.append(f"publish delay p99 rises {trend['slope_us_per_s'] / 1000:,.1f} ms/s (Mann–Kendall "
                        f"p={trend['mann_kendall_p']:.2g})")
    check["passed"] = not failures
    if failures:
        return check, "; ".join(failures), ""
    return check, None, f"publish delay p99 bounded ({second_half / 1000:,.1f} ms in the second half)"


def sustainability(target_rate: float | None, intervals: list[dict], *, publish_only: bool = False,
                   shaped: bool = False) -> dict:
    """The verdict for one cell: sustainable, unsustainable, inconclusive, or max-rate (no target)."""
    if target_rate is None:
        return {"verdict": "max-rate", "reasons": ["unthrottled: measures capacity; latency from enqueue"],
                "checks": {}}
    if shaped:  # every check below compares a second's figures with one constant rate
        return {"verdict": "inconclusive", "checks": {},
                "reasons": ["a startup backlog or bursts: no constant rate to judge; see the startup and burst figures"]}
    schedule = [i for i in sorted(intervals, key=lambda i: i["interval"]) if i["in_schedule"]]
    checks: dict = {"intervals": {"in_schedule": len(schedule), "drain": len(intervals) - len(schedule),
                                  "min": MIN_INTERVALS}}
    if len(schedule) < MIN_INTERVALS:
        return {"verdict": "inconclusive", "checks": checks,
                "reasons": [f"only {len(schedule)} measured intervals; at least {MIN_INTERVALS} are needed to judge"]}
    failures, passes, undecided = [], [], []
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
