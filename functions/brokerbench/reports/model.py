"""The comparison report: a projection of a run's events.

Cells that differ only by repeat form one configuration. Its percentiles come from the exact
merge of the repeats' cumulative histograms (never from averaging percentiles), and a percentile
finer than the sample supports is withheld. Its headline figures carry the median over the
repeats with a distribution-free interval. Each cell gets the sustainability verdict of
brokerbench.verdict; latency is compared only between cells that kept up. Comparative claims
(highlights, "best" marks) are made only when repeats put the difference beyond the run's noise.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from functools import cache
from itertools import groupby

from msgspec import convert

from .. import cost, host, limit, verdict
from ..eventdata import Digest, given
from ..figures import STAMP_RULE, joined_priorities, joined_stamps, merge_stamp_bounds
from ..events import has_digest
from ..metrics import Metric, claimed, latency_fields, net_figures, shown_in
from ..series import (  # noqa: F401 (the old import paths)
    DIGEST_MAX_INTERVALS,
    SERIES_FIELDS,
    interval_columns,
    interval_digest,
    interval_series,
    intervals_by_cell,
    rate_target,
    series_from_columns,
    verdict_basis,
)
from ..spec import request_schema
from .results import (ACCOUNTING_RULE, DURABILITY_RULE, LOSS_CLASSES, MISSING_COUNTS_IN, MISSING_RULE, NOT_SENT_BOUNDS,
                      NOT_SENT_COUNTS_IN, NOT_SENT_RULE, SPECTRUM, SUMMARY_FIELDS, build_results, figures, figures_of,
                      merge_blobs, with_missing)
from .faults import by_setting, rows as fault_rows
from .rows import Limits, ResultCell, missing_in, result_cell, run_spec
from .stats import holm, median_ci, t_quantile, t_two_sided_p

MIN_CLAIM_REPEATS = 3
CLAIM_ALPHA = 0.05  # family-wise over a report's claims: at most 1 report in 20 with a false one
CLAIM_CONFIDENCE = 0.95  # the interval shown with a highlight
# The metrics a highlight is made on (brokerbench.metrics), and their effect floor: a claim must also be large enough
# to matter.
MIN_CLAIM_EFFECT = {name: m.claim_floor for name, m in claimed("highlight").items()}
PERCENTILES = {"p50": 50.0, "p75": 75.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}
LATENCY_FIELDS = latency_fields()
THROUGHPUT_FIELDS = ("throughput_msgs_per_s", "throughput_mb_per_s")  # client-bound cells compare no broker on them
CONFIG_FIELDS = ("broker", "format", "mode", "size_basis", "size_bytes", "rate_target", "producers", "consumers",
                 "partitions")

# The effect floor of every metric claimed on (highlights and "best"): throughput and sizes 5%, times 20%.
CLAIM_FLOOR = {m.key: m.claim_floor for m in shown_in("report").values() if m.claim_floor is not None}
CLAIMS_RULE = (
    f"A comparison (highlight or bold \"best\") is made only with at least {MIN_CLAIM_REPEATS} completed repeats "
    "of each side. Repeat r of a configuration is paired with repeat r of the other; the mean of the log ratios "
    "is tested with Student's t, its variance the larger of the pair's own and twice the repeats' noise pooled "
    "over the run's configurations (with the pooled degrees of freedom), and the interval shown is 95%. Every "
    "comparison the report could claim (each configuration against its references on throughput and "
    "end-to-end p99, and per group and metric the leader against every rival) is one family, corrected by "
    f"Holm–Bonferroni at a family-wise {CLAIM_ALPHA:.0%}: a report of identical configurations carries a false "
    "claim at most 1 time in 20. A claim must also exceed its effect floor (5% for throughput and sizes, 20% for "
    "latency and serialization times) and the run's noise, with the medians over repeats in the same order; "
    "\"best\" must do so against every rival. Latency is compared only between sustainable cells without loss; "
    "max-rate cells are compared only with each other, and never on latency; a client-bound cell (its rate the load "
    "generator's) is compared with no other broker on throughput; a repeat measured on a busy host (host.RULE) enters "
    "no comparison. Brokers are compared on delivery "
    "p99 too (receipt, before any decode: no codec in it); formats on end-to-end p99."
)
PERCENTILE_RULE = (
    "A percentile p is shown only when its sample holds at least 10 / (1 − p/100) values (p50 ≥ 20, p99 ≥ 1,000, "
    "p99.9 ≥ 10,000, p99.99 ≥ 100,000); a finer one would be an extrapolation from the few largest values "
    "and is marked n<… instead."
)
MAX_RATE_NOTE = ("max-rate cells: latency from enqueue (no intended send time at max rate); not comparable "
                 "with rated cells.")
RESOURCES_NOTE = ("CPU: share of one core (100 = one core busy), sampled once per interval write from /proc; "
                  "RSS: resident memory, summed over the group's processes; a managed or external broker is not "
                  "sampled.")


# A configuration's figures (report.json `metrics`): the metrics shown in the report (brokerbench.metrics).
METRICS: dict[str, Metric] = shown_in("report")
# Codec figures net of the timed call's own cost around a no-op (codecs.floor): each is the median over repeats of
# a repeat's p50 less that repeat's floor (results.encode_net_ns); name -> (the measured metric, the result field).
NET_METRICS = {m.key: (measured, m.field) for measured, m in net_figures().items()}
CODEC_RULE = (
    "Encode and decode are timed as two clock reads around one call, which cost something whatever the codec "
    "does. Each cell also times the same call around a no-op on its own loops (the call floor, codecs/floor.py). "
    "enc and dec show the p50 as measured, enc net and dec net the p50 less that cell's floor (the median over "
    "repeats), and floor the median floor, encode / decode. A dash: the cell was stored before the floor was "
    "measured, so no net figure is known."
)
# What each cell's producers sent with (CellCompleted.send_loop, worker/producer.py): the native C loop (built on
# the worker's host and chosen by BROKERBENCH_SEND_LOOP) or Python's. Lambda and EC2 workers in AWS always run the
# Python loop: the code asset leaves the native module out, and it refuses MSK's IAM and TLS settings.
SEND_LOOP_NAMES = {"native": "native C", "python": "Python", "mixed": "mixed (native C and Python producers in one cell)"}
# Where a broker's native loop has two paths (Pulsar), which one sent: the binary protocol is several times cheaper
# per message than the C API (docs/performance.md), so a report says which measured its cells.
SENDER_NAMES = {"native-pwire": "Pulsar binary protocol", "native-capi": "Pulsar C API"}
SEND_LOOP_RULE = (
    "The send loop is the producers' inner loop: native C or Python. It sets how fast a producer can send and where "
    "its publish timings are taken, so a figure measured by one loop is compared with another loop's only with a "
    "warning: the header names the loop when every cell used the same one; otherwise each row names its loop and "
    "the report says above the tables that its cells mix loops (`brokerbench compare` and GET /compare mark each "
    "verdict whose two runs used different loops)."
)


@cache
def min_samples(percentile: float) -> int:
    """The smallest sample that supports a percentile: 10 values beyond it (1 for the maximum)."""
    if percentile >= 100:
        return 1
    return math.ceil(round(10 / (1 - percentile / 100), 6))


def need_label(count: int) -> str:
    """n<1k, n<10k: what the renderers print for a withheld percentile."""
    return f"n<{count // 1000}k" if count >= 1000 and count % 1000 == 0 else f"n<{count:,}"


def config_key(cell: dict) -> str:
    """Identifies a configuration across repeats and across runs (what regression checks pair up)."""
    return "|".join(str(cell[f]) for f in CONFIG_FIELDS)


def rate_text(rate) -> str:
    """1,000 msgs/s, max rate, or what a rate search names its rate."""
    if isinstance(rate, (int, float)):
        return f"{rate:,} msgs/s"
    return "max rate" if rate == "max" else f"{rate} rate"


def _rate_sort(rate) -> tuple:
    """Numeric rates ascending, then max, then anything else (a rate search)."""
    if isinstance(rate, (int, float)):
        return (0, float(rate))
    return (1, 0.0) if rate == "max" else (2, 0.0)


def cell_verdict(cell: dict, intervals: list[dict], digest: dict | None = None) -> dict:
    """The sustainability verdict of one completed cell, from its intervals or their digest.

    A verdict stored with the digest stands when it was judged on what this report would judge it on, by
    the same rules; otherwise it is judged again from the digest's columns. (Only a verdict and its reasons
    are stored: `checks` is then empty.)"""
    cell = result_cell(cell)
    rate = cell.rate_target
    if not isinstance(rate, (int, float)) and rate != "max":  # a rate search: its steps carry the verdicts
        found, held = cell.max_sustainable_rate, cell.search.sustainable_for_s if cell.search else None
        text = f"maximum sustainable rate {found:,.0f} msgs/s" if found else "rate search"
        return {"verdict": "search", "reasons": [text + (f", sustainable for {held:,.0f} s" if found and held else "")],
                "checks": {}}
    measured = len(digest["interval"]) if digest is not None else len(intervals)
    stored = {"verdict": cell.verdict, "reasons": cell.verdict_reasons, "checks": {}}
    if not measured and cell.verdict:  # stored at cell time, but no intervals to recompute it from
        return stored
    if digest is not None:
        basis = verdict_basis(rate, cell.measured_s, cell.publish_only, cell.shaped)
        if cell.verdict and given(convert(digest, Digest).judged) == basis:
            return stored
        inputs = verdict.inputs_from_columns(digest, cell.measured_s)
    else:
        inputs = verdict.interval_inputs(intervals, cell.measured_s)
    return verdict.sustainability(rate_target(rate), inputs, publish_only=cell.publish_only, shaped=cell.shaped,
                                  not_sent=cell.not_sent, due=cell.due)


def combined_verdict(cells: list[dict], per_cell: dict[str, dict]) -> dict:
    """Over repeats: any unsustainable → unsustainable; all sustainable → sustainable; else inconclusive."""
    done = [c for c in cells if c["status"] == "completed"]
    if not done:
        return {"verdict": "failed", "reasons": ["no repeat completed"], "repeats": []}
    repeats = [{"repeat": c["repeat"], **{k: per_cell[c["cell_id"]][k] for k in ("verdict", "reasons")}} for c in done]
    kinds = {r["verdict"] for r in repeats}
    if len(kinds) == 1 and kinds & {"max-rate", "search", "sustainable"}:
        result = kinds.pop()
    elif "unsustainable" in kinds:
        result = "unsustainable"
    else:
        result = "inconclusive"
    if len(repeats) == 1:
        return {"verdict": result, "reasons": list(repeats[0]["reasons"]), "repeats": repeats}
    # The repeats that decided the verdict give its reasons; the others are named with theirs.
    reasons = [f"repeat {r['repeat']}: {reason}" for r in repeats if r["verdict"] == result for reason in r["reasons"]]
    others = defaultdict(list)
    for r in repeats:
        if r["verdict"] != result:
            others[r["verdict"]].append(str(r["repeat"]))
    reasons += [f"repeat{'s' if len(numbers) > 1 else ''} {', '.join(numbers)} {kind}" for kind, numbers in others.items()]
    return {"verdict": result, "reasons": reasons, "repeats": repeats}


# -- percentiles the sample supports ----------------------------------------------------------------
def sample_needed(stat: str) -> int:
    """The least sample a latency object's statistic is shown from: min_samples for a percentile, 1 for the mean
    and the maximum."""
    return min_samples(PERCENTILES[stat]) if stat in PERCENTILES else 1


def _read(cell: dict, name: str, counts: Counter[str]):
    """A metric of one repeat; a percentile its histogram's sample cannot support reads as None (`counts`: each
    histogram's sample, 0 where the cell has none)."""
    metric = METRICS[name]
    value = metric.read(cell)
    if metric.stat is None or value is None:
        return value
    return value if counts[metric.field] >= sample_needed(metric.stat) else None


def _withheld(name: str, cells: list[dict], counts: dict[str, Counter[str]]) -> int | None:
    """The sample a percentile metric needed, when some repeat had one but too small."""
    metric = METRICS[name]
    if metric.stat is None:
        return None
    need = sample_needed(metric.stat)
    if any(0 < counts[c["cell_id"]][metric.field] < need for c in cells):
        return need
    return None


def _lower_bound(name: str, done: list[dict], typed: list[ResultCell], counts: dict[str, Counter[str]]) -> float | None:
    """When some repeat's figure is only a lower bound (missing messages at +infinity): the median over the
    repeats with each bound in place of its value, itself a lower bound of the median. None otherwise."""
    metric = METRICS[name]
    if metric.stat is None:
        return None
    bounds = [getattr(t.latency(metric.field).lower_bounds, metric.stat) for t in typed]
    if all(b is None for b in bounds):
        return None
    values = [_read(c, name, counts[c["cell_id"]]) if b is None else b for c, b in zip(done, bounds)]
    values = [v for v in values if v is not None]
    return float(statistics.median(values)) if values else None


def _net_metrics(done: list[ResultCell], by_repeat: dict, metrics: dict) -> dict:
    """NET_METRICS of a configuration, over the repeats whose measured p50 counts: None unless each of them has its
    net figure (a repeat stored before the floor has none), and withheld where the measured p50 is."""
    out = {}
    for name, (measured, field) in NET_METRICS.items():
        values = [c.latency(field).p50 for c, v in zip(done, by_repeat[measured]) if v is not None]
        out[name] = _median_ci(values if all(v is not None for v in values) else [])
        if "withheld" in metrics[measured]:  # set only with the sample it needed
            out[name]["withheld"] = metrics[measured]["withheld"]
    return out


def _codec_floor(done: list[ResultCell]) -> dict | None:
    """The median call floor (codecs.floor) over the repeats, encode and decode, in ns; None when a repeat has
    none."""
    floors = [c.codec_floor_ns for c in done]
    if not floors or any(f is None for f in floors):
        return None
    return {"encode_ns": float(statistics.median(f.encode_ns for f in floors)),
            "decode_ns": float(statistics.median(f.decode_ns for f in floors)), "n": len(floors)}


def _merged_latency(blob_maps: list[dict], cache: dict, missing: int = 0) -> dict:
    """Per latency field, the exact merge of the repeats' cumulative histograms (stored, encoded), and its
    figures; a merge of one non-empty histogram (in brokerbench's layout) is that histogram, already figured.
    `missing`: the repeats' measured messages not received in time, at +infinity in end-to-end and delivery
    latency (results.MISSING_RULE); and the messages they never sent, at their lower bounds in end-to-end latency and
    publish delay (results.NOT_SENT_RULE): a figure they put out of reach is None, its bound in `lower_bounds`."""
    merged = {}
    owed = merge_blobs([m[NOT_SENT_BOUNDS] for m in blob_maps if m.get(NOT_SENT_BOUNDS)])
    for field in LATENCY_FIELDS:
        found = [m[field] for m in blob_maps if m.get(field) is not None and figures(m[field], cache).total]
        alone = figures(found[0], cache) if len(found) == 1 else None
        combined = alone if alone is not None and alone.standard else figures_of(merge_blobs(found))
        summary, count, spectrum = dict(combined.summary), combined.total, combined.spectrum
        out = {"count": count, "withheld": {}}
        beyond = missing if field in MISSING_COUNTS_IN else 0
        bounded = owed if field in NOT_SENT_COUNTS_IN and owed.total else None
        if beyond or bounded is not None:
            buckets = merge_blobs(found)
            values, out["lower_bounds"] = with_missing(buckets, beyond, PERCENTILES, bounded)
            summary.update(values, mean=None, max=None)
            spectrum = list(with_missing(buckets, beyond, dict(zip(map(str, SPECTRUM), SPECTRUM)), bounded)[0].values())
            out["missing"] = beyond
            if bounded is not None:
                out["not_sent"] = int(bounded.total)
        for key in SUMMARY_FIELDS:
            value = summary[key]  # the histogram's summary has every one (figures.bucket_summary)
            if key in PERCENTILES and value is not None and count < min_samples(PERCENTILES[key]):
                out["withheld"][key] = f"needs {min_samples(PERCENTILES[key]):,} samples, has {count:,}"
                value = None
            out[key] = value
        if field in ("end_to_end_latency_us", "publish_latency_us") and count:
            out["spectrum"] = [[p, v if count >= min_samples(p) else None] for p, v in zip(SPECTRUM, spectrum)]
        merged[field] = out
    return merged


def _sum(values) -> int | None:
    """The sum of the values that are known; None when none is."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _total(done: list[ResultCell], name: str) -> int | None:
    """A count summed over the repeats that have it; None when none has."""
    return _sum(getattr(c, name) for c in done)


def _loss(done: list[ResultCell]) -> dict:
    """Loss classes summed over the repeats (None where no repeat could count that class)."""
    out = {name: _total(done, name) for name in LOSS_CLASSES if name != "unacknowledged"}
    out["unacknowledged"] = _sum(c.unacknowledged_count for c in done)
    out = {name: out[name] for name in LOSS_CLASSES}  # in the classes' order (report.json)
    for name in ("undelivered_or_lost", "residual"):  # unknown split of undelivered and lost; accounting errors
        out[name] = _total(done, name)
    # A repeat whose broker could not tell its backlog leaves undelivered and lost unknown for the configuration.
    out["backlog_unknown"] = any(c.undelivered_or_lost and c.lost is None for c in done)
    out["broker_count_difference"] = _sum(c.broker_count.difference for c in done if c.broker_count)
    return out


def _resources(typed: list[ResultCell]) -> dict | None:
    """Per process group (broker, workers) over the repeats that sampled it: the median of their mean CPU,
    the largest CPU and resident memory, and how many repeats that is. None when no repeat sampled any."""
    found = defaultdict(list)
    for c in typed:
        for name, figures in (c.resources or {}).items():
            if figures is not None:
                found[name].append(figures)
    return {name: {"cpu_pct_mean": round(statistics.median(r.cpu_pct_mean for r in rs), 1),
                   "cpu_pct_max": max(r.cpu_pct_max for r in rs), "rss_mb_max": max(r.rss_mb_max for r in rs),
                   "repeats": len(rs)} for name, rs in sorted(found.items())} or None


def _host(done: list[dict], typed: list[ResultCell]) -> dict:
    """The host under each repeat (brokerbench.host; None for repeats stored before it was read), the repeats it
    marked busy, and the highest CPU pressure and steal of any repeat. `done`: the completed cells' results, which
    figures.cell_result always gives a host, as stored."""
    seen = [c.host for c in typed if c.host is not None]
    highest = lambda key: max((v for h in seen if (v := getattr(h, key)) is not None), default=None)  # noqa: E731
    return {"repeats": [c["host"] for c in done], "busy_repeats": [c.repeat for c in typed if c.busy],
            "cpu_pressure_pct_max": highest("cpu_pressure_pct"), "steal_pct_max": highest("steal_pct"),
            "memory_pressure_pct_max": highest("memory_pressure_pct"),
            "reasons": sorted({r for h in seen if h.busy for r in h.reasons or []})}


def busy_repeats(config: dict) -> list[int]:
    """The repeats of a configuration measured on a busy host (its `host`, which _configuration always sets)."""
    return list(config["host"]["busy_repeats"])


def _limits(done: list[dict]) -> dict:
    """What limited each repeat (brokerbench.limit; None for repeats stored before it was kept: figures.cell_result
    always gives a completed cell its limit, as stored), and how many of them the load generator did (client-bound)."""
    limits = [c["limit"] for c in done]
    return {"by": [found["by"] if found else None for found in limits], "repeats": limits,
            "client_bound": sum(limit.client_bound(found) for found in limits),
            "consumer_bound": sum(limit.consumer_bound(found) for found in limits)}


def _configuration(cells: list[dict], completed_events: dict[str, dict], intervals: dict[str, list[dict]],
                   digests: dict[str, dict], cache: dict) -> dict:
    first = cells[0]
    done = [c for c in cells if c["status"] == "completed"]
    every = [result_cell(c) for c in cells]
    typed = [c for c in every if c.status == "completed"]
    # Each histogram is decoded once (`cache`): for the exact merge and for the sample counts.
    blobs = {c["cell_id"]: {f: b for f, b in completed_events[c["cell_id"]]["histograms"].items() if b} for c in done}
    counts = {cid: Counter({f: figures(b, cache).total for f, b in bs.items()}) for cid, bs in blobs.items()}
    per_cell = {c["cell_id"]: cell_verdict(c, intervals.get(c["cell_id"], []), digests.get(c["cell_id"]))
                for c in done}
    by_repeat = {name: [_read(c, name, counts[c["cell_id"]]) for c in done] for name in METRICS}
    by_repeat["max_sustainable_rate"] = [c.max_sustainable_rate for c in typed]  # a rate search's result
    metrics = {}
    for name in METRICS:
        metrics[name] = _median_ci(by_repeat[name])
        need = _withheld(name, done, counts)
        if need is not None and metrics[name]["median"] is None:
            metrics[name]["withheld"] = need
        bound = _lower_bound(name, done, typed, counts)
        if bound is not None:  # a repeat's figure is only a lower bound: so is the configuration's, never a value
            metrics[name].update(median=None, ci_low=None, ci_high=None, lower_bound=bound)
    metrics.update(_net_metrics(typed, by_repeat, metrics))
    loss = _loss(typed)
    publish_only = any(c.publish_only for c in typed)
    return {
        "key": config_key(first),
        "cell_ids": [c["cell_id"] for c in cells],
        **{f: first[f] for f in CONFIG_FIELDS},
        "status": "completed" if len(done) == len(cells) else ("failed" if not done else "partial"),
        "reasons": [c.reason for c in every if c.status != "completed" and c.reason],
        "repeats": len(cells),
        "completed_repeats": len(done),
        "repeat_numbers": [c["repeat"] for c in done],
        "order": [c.order for c in every],
        "send_loop": ", ".join(sorted({c.send_loop for c in typed if c.send_loop})) or None,
        "sender": ", ".join(sorted({c.sender for c in typed if c.sender})) or None,
        # how its repeats' acknowledgements and deliveries were stamped (figures.ARRIVAL, READ, client_stamps)
        "ack_stamps": joined_stamps(c.ack_stamps for c in typed),
        "delivery_stamps": joined_stamps(c.delivery_stamps for c in typed),
        "delivery_stamp_bound": merge_stamp_bounds(c.delivery_stamp_bound for c in typed),
        "priority": joined_priorities(c.priority for c in typed),
        "latency_basis": "enqueue" if first["rate_target"] == "max" else
                         (typed[0].latency_basis if typed else "intended"),
        "metrics": metrics,
        "codec_floor_ns": _codec_floor(typed),
        "values_by_repeat": by_repeat,
        "latency": _merged_latency(list(blobs.values()), cache, missing_in(typed)),
        "sent": sum(c["sent"] for c in done),
        # due and never sent (the producers fell behind: worker.outcome); None when no repeat counted it
        "not_sent": _total(typed, "not_sent"),
        "due": _total(typed, "due"),
        "received": None if publish_only else sum(c["received"] for c in done),
        "lost": None if publish_only else loss["lost"],
        "loss": loss,
        "has_loss": any(c.has_loss for c in typed) or any(loss[k] for k in LOSS_CLASSES),
        "resources": _resources(typed),
        "host": _host(done, typed),
        "limit": _limits(done),
        "sustainability": combined_verdict(cells, per_cell),
        # rates: ["sustainable"]: what each repeat's search found, and its steps.
        "max_sustainable_rate": _median_ci(by_repeat["max_sustainable_rate"]),
        "searches": [c["search"] for c in done if c["search"]],
        # a startup backlog or bursts (worker.outcome.startup and .bursts), per repeat
        **({"startups": [c["startup"] for c in done], "bursts": [c["bursts"] for c in done]}
           if any(c.shaped for c in typed) else {}),
        "intervals": [_series(c, intervals, digests) for c in typed],
    }


def _series(cell: ResultCell, intervals: dict[str, list[dict]], digests: dict[str, dict]) -> dict:
    """A completed cell's per-second series: from its digest when its intervals were not read."""
    if cell.cell_id in digests:
        return series_from_columns(digests[cell.cell_id], cell.publish_only, cell.measured_s)
    return interval_series(intervals.get(cell.cell_id, []), cell.publish_only, cell.measured_s)


def _median_ci(values: list) -> dict:
    """median_ci(values).as_dict(); a single value (no interval) without the arrays."""
    present = [v for v in values if v is not None]
    if len(present) > 1:
        return median_ci(present).as_dict()
    median = float(present[0]) if present else None
    return {"median": median, "ci_low": None, "ci_high": None, "n": len(present), "coverage": None, "method": None}


# -- comparisons ------------------------------------------------------------------------------------
def _eligible(config: dict, metric: Metric) -> bool:
    """May this configuration enter a claim on this metric? Latency: only a sustainable cell without loss."""
    if config["status"] == "failed":
        return False
    return not metric.latency or (config["sustainability"]["verdict"] == "sustainable" and not config["has_loss"])


def _compares_brokers(config: dict, metric: Metric) -> bool:
    """May this configuration enter a comparison across brokers on this metric? Not on throughput when a repeat was
    client-bound or consumer-bound (brokerbench.limit): its rate is the load generator's, not the broker's."""
    return _eligible(config, metric) and not (metric.field in THROUGHPUT_FIELDS
                                               and (_client_bound(config) or _consumer_bound(config)))


def _limit_of(config: dict) -> Limits:
    """What limited a configuration's repeats (its `limit`, which _configuration always sets), typed."""
    return convert(config["limit"], Limits)


def _client_bound(config: dict) -> bool:
    return bool(_limit_of(config).client_bound)


def _consumer_bound(config: dict) -> bool:
    return bool(_limit_of(config).consumer_bound)


def _logs(config: dict, name: str) -> dict[int, float]:
    """Per repeat number, the log of the metric's positive value; a repeat measured on a busy host is no evidence
    (host.RULE) and is left out."""
    busy = set(busy_repeats(config))
    return {r: math.log(v) for r, v in zip(config["repeat_numbers"], config["values_by_repeat"][name])
            if v is not None and v > 0 and r not in busy}


def _ratios(group: list[dict], references: dict) -> None:
    by_cell = {(c["broker"], c["format"]): c for c in group}
    for c in group:
        c["ratios"] = {}
        for axis, ref in _references(c, by_cell, references):
            c["ratios"][axis] = {name: _ratio(c["metrics"][name]["median"], ref["metrics"][name]["median"])
                                 for name in METRICS}


def _references(config: dict, by_cell: dict, references: dict):
    for axis, key in (("format", (config["broker"], references["format"])),
                      ("broker", (references["broker"], config["format"]))):
        ref = by_cell.get(key)
        if ref is not None and ref is not config:
            yield axis, ref


def _ratio(value, reference):
    if value is None or reference in (None, 0):
        return None
    return round(value / reference, 4)


def run_noise(configurations: list[dict]) -> dict[str, dict]:
    """Per metric, the repeats' noise pooled over the run's configurations that may claim on it: the variance
    of the log values about each configuration's mean, Σ Σ (ln x − mean)² / Σ (n − 1), its degrees of freedom,
    and `noise`, the typical per-repeat change it stands for (e^s − 1)."""
    out = {}
    for name, metric in METRICS.items():
        squares, df = 0.0, 0
        for config in configurations:
            logs = list(_logs(config, name).values()) if _eligible(config, metric) else []
            if len(logs) >= 2:
                squares += sum((x - statistics.fmean(logs)) ** 2 for x in logs)
                df += len(logs) - 1
        variance = squares / df if df else None
        out[name] = {"noise": round(math.expm1(math.sqrt(variance)), 4) if variance is not None else None,
                     "log_variance": variance, "df": df}
    return out


def paired_ratio(config: dict, reference: dict, name: str, noise: dict) -> dict | None:
    """Repeat r of a configuration against repeat r of another, on the log scale: the mean log ratio, its 95%
    interval and two-sided p from Student's t. Its variance is the larger of the pooled noise's (2·s², the
    difference of two repeats) and the pair's own scatter, with the pooled degrees of freedom."""
    mine, theirs = _logs(config, name), _logs(reference, name)
    differences = [mine[r] - theirs[r] for r in sorted(mine.keys() & theirs.keys())]
    n = len(differences)
    if n < MIN_CLAIM_REPEATS or not noise["df"]:
        return None
    mean = statistics.fmean(differences)
    variance = max(2 * noise["log_variance"], statistics.variance(differences))
    se = math.sqrt(variance / n)
    df = float(noise["df"])
    if se > 0:
        t = mean / se
    else:  # a deterministic figure (encoded bytes): any difference is real
        t = 0.0 if mean == 0 else math.copysign(math.inf, mean)
    half = t_quantile(1 - CLAIM_CONFIDENCE, df) * se
    medians = (statistics.median(math.exp(v) for v in mine.values()),
               statistics.median(math.exp(v) for v in theirs.values()))
    return {"ratio": math.exp(mean), "ci_low": math.exp(mean - half), "ci_high": math.exp(mean + half),
            "coverage": CLAIM_CONFIDENCE, "n": n, "df": df, "log_difference": mean, "p_raw": t_two_sided_p(t, df),
            "median_ratio": medians[0] / medians[1] if medians[1] else None}


def _large(test: dict, name: str, noise: dict) -> bool:
    """Beyond the effect floor and the run's noise, with the medians over repeats in the same order."""
    bar = max(CLAIM_FLOOR[name], noise["noise"] or 0.0)
    same_order = test["median_ratio"] is not None and (test["median_ratio"] - 1) * test["log_difference"] > 0
    return abs(test["log_difference"]) >= math.log1p(bar) and same_order


def _highlight_tests(groups: list[dict], references: dict, noise: dict) -> list[dict]:
    """Every highlight the report could make: each configuration against its references, each highlight metric."""
    out = []
    for group in groups:
        by_cell = {(c["broker"], c["format"]): c for c in group["cells"]}
        for config in group["cells"]:
            for axis, ref in _references(config, by_cell, references):
                for name, metric in claimed("highlight").items():
                    if axis not in metric.claim_axes:
                        continue
                    # Never a latency claim for a cell (or reference) that lost messages or did not keep up, nor
                    # for max-rate cells, whose latency runs from enqueue.
                    # Nor a throughput claim across brokers for a client-bound cell: its rate is the load generator's.
                    eligible = _compares_brokers if axis == "broker" else _eligible
                    if not (eligible(config, metric) and eligible(ref, metric)):
                        continue
                    test = paired_ratio(config, ref, name, noise[name])
                    if test is not None:
                        out.append({"kind": "highlight", "config": config, "ref": ref, "axis": axis, "name": name,
                                    "group": group, "test": test, "p_raw": test["p_raw"]})
    return out


def _best_tests(groups: list[dict], noise: dict) -> list[dict]:
    """Per group and metric, the configuration with the best median against each rival: "best" is one hypothesis
    whose p-value is the largest of those pairwise tests (it must beat every rival)."""
    out = []
    for group in groups:
        for name, metric in claimed("best").items():
            # "best" ranks every broker of the group: a client-bound cell's rate is not its broker's
            rivals = [c for c in group["cells"] if _compares_brokers(c, metric) and c["metrics"][name]["median"] is not None]
            if len(rivals) < 2 or any(len(_logs(c, name)) < MIN_CLAIM_REPEATS for c in rivals):
                continue
            pick = max if metric.higher_is_better else min
            best = pick(rivals, key=lambda c: c["metrics"][name]["median"])
            tests = [paired_ratio(best, c, name, noise[name]) for c in rivals if c is not best]
            if any(t is None for t in tests):
                continue
            out.append({"kind": "best", "config": best, "name": name, "tests": tests,
                        "p_raw": max(t["p_raw"] for t in tests)})
    return out


def _highlight(found: dict, noise: dict, p_value: float, comparisons: int) -> dict:
    config, ref, axis, name, est = found["config"], found["ref"], found["axis"], found["name"], found["test"]
    subject = (f"{config['broker']}: {config['format']}" if axis == "format"
               else f"{config['format']}: {config['broker']}")
    other = ref["format"] if axis == "format" else ref["broker"]
    what = METRICS[name].label
    behind = config["sustainability"]["verdict"] == "unsustainable"
    level = noise[name]["noise"] or 0.0
    text = (f"{subject} {what} {est['ratio']:.2f}× {other}'s ({est['ci_low']:.2f}–{est['ci_high']:.2f}, "
            f"{est['coverage']:.0%} interval over {est['n']} paired repeats; Holm p {p_value:.2g} among "
            f"{comparisons}; noise {level:.1%}){_size_text(config)} ({found['group']['title']})"
            + (" — could not keep up with the target rate" if behind and what == "throughput" else ""))
    return {"text": text, "metric": name, "axis": axis, "ratio": round(est["ratio"], 4),
            "ci": [round(est["ci_low"], 4), round(est["ci_high"], 4)], "coverage": est["coverage"],
            "repeats": est["n"], "noise": round(level, 4), "p_value": p_value, "comparisons": comparisons,
            "cell": config["key"], "reference": ref["key"]}


def _size_text(config: dict) -> str:
    size = config["metrics"]["encoded_bytes"]["median"]
    return "" if size is None else f" at {size:,.0f} B"


def claims(groups: list[dict], references: dict, noise: dict[str, dict]) -> tuple[list[dict], dict]:
    """Highlights and "best" marks, one family per report: Holm–Bonferroni at CLAIM_ALPHA over every comparison
    that could be claimed, and each claim beyond CLAIM_FLOOR and the run's noise. Marks "best" on the groups'
    configurations; returns the highlights and the family's size."""
    family = _highlight_tests(groups, references, noise) + _best_tests(groups, noise)
    adjusted = holm([f["p_raw"] for f in family])
    out = []
    for found, p_value in zip(family, adjusted):
        name = found["name"]
        if p_value >= CLAIM_ALPHA:
            continue
        if found["kind"] == "best":
            if all(_large(t, name, noise[name]) for t in found["tests"]):
                found["config"].setdefault("best", []).append(name)
        elif _large(found["test"], name, noise[name]):
            out.append(_highlight(found, noise, p_value, len(family)))
    return out, {"comparisons": len(family), "alpha": CLAIM_ALPHA}


def highlights(groups: list[dict], references: dict, noise: dict[str, dict]) -> list[dict]:
    """Claims in the published studies' form (see `claims`, which also marks "best")."""
    return claims(groups, references, noise)[0]


def send_loops(configurations: list[dict]) -> dict[str, int]:
    """How many configurations each send loop measured (a configuration whose repeats differ counts for each)."""
    return _configurations_per(configurations, "send_loop")


def _configurations_per(configurations: list[dict], field: str) -> dict[str, int]:
    """How many configurations have each value of `field` (its values joined by ', ' where repeats differ)."""
    counts: dict[str, int] = defaultdict(int)
    for c in configurations:
        for value in filter(None, (c[field] or "").split(", ")):
            counts[value] += 1
    return dict(sorted(counts.items()))


def send_loop_text(loop: str) -> str:
    """'native' -> 'native C loop'; 'native, python' (a configuration's repeats) -> 'native C and Python loops'."""
    names = [SEND_LOOP_NAMES.get(name, name) for name in loop.split(", ")]
    return f"{' and '.join(names)} loop{'s' if len(names) > 1 else ''}"


def senders(configurations: list[dict]) -> dict[str, int]:
    """How many configurations each native path measured, of those whose broker has two (Pulsar)."""
    return _configurations_per(configurations, "sender")


def sender_text(sender: str) -> str:
    """'native-pwire' -> 'Pulsar binary protocol'; both (a configuration's repeats) -> both, joined by 'and'."""
    return " and ".join(SENDER_NAMES.get(name, name) for name in sender.split(", "))


def send_loop_note(loops: dict[str, int]) -> str | None:
    """The words a report shows when its cells were measured by more than one send loop (or one cell by both)."""
    if len(loops) <= 1 and "mixed" not in loops:
        return None
    parts = ", ".join(f"{SEND_LOOP_NAMES.get(loop, loop)}: {n}" for loop, n in loops.items())
    return (f"these cells were measured by different send loops (configurations per loop: {parts}): the loop sets "
            "how fast a producer can send and where its publish timings are taken, so a difference between cells of "
            "different loops may be the loop's, not the broker's or the format's")


def host_busy_note(configurations: list[dict]) -> str | None:
    """The words a report shows when some repeats were measured on a busy host: how many, and that they claim
    nothing."""
    marked = [(c, busy_repeats(c)) for c in configurations if busy_repeats(c)]
    if not marked:
        return None
    repeats = sum(len(b) for _, b in marked)
    highest = max((c["host"]["cpu_pressure_pct_max"] for c, _ in marked
                   if c["host"]["cpu_pressure_pct_max"] is not None), default=None)
    pressure = f", CPU pressure up to {highest:.0f}%" if highest is not None else ""
    return (f"the host was busy during {repeats} repeat{'s' if repeats != 1 else ''} of {len(marked)} "
            f"configuration{'s' if len(marked) != 1 else ''}{pressure}: their figures measured the host as much as the "
            "broker, are marked \"host busy\", and enter no highlight, \"best\" or regression verdict (a comparison "
            "left with too few quiet repeats is not made)")


def claims_note(configurations: list[dict]) -> str | None:
    repeats = max((c["completed_repeats"] for c in configurations), default=0)
    if repeats <= 1:
        return "single run: no comparative claims"
    if repeats < MIN_CLAIM_REPEATS:
        return f"{repeats} repeats: no comparative claims, at least {MIN_CLAIM_REPEATS} are needed"
    return None


def reference_defaults() -> dict:
    """The run request's default references, for runs stored before references existed."""
    return {name: field["default"] for name, field in request_schema()["properties"]["references"]["properties"].items()}


def cost_estimate(events: list[dict]) -> dict:
    """The run's estimated AWS cost (brokerbench.cost), or the error that kept it from being made: an estimate
    never breaks a report. A digested cell's unread intervals are counted from its digest (cost.measured_usage)."""
    try:
        return cost.estimate(events)
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"}


def build_report(events: list[dict]) -> dict:
    cache: dict = {}  # each cumulative histogram's figures, decoded once
    results = build_results(events, cache)
    spec = results["spec"]
    references = {**reference_defaults(), **run_spec(spec).references}
    ends = {e["data"]["cell_id"]: e for e in events if e["type"] == "CellCompleted"}
    completed_events = {cid: e["data"] for cid, e in ends.items()}
    intervals = intervals_by_cell(events)
    # A cell none of whose intervals were read (events.read_report_events) is reported from its digest.
    measured = {e["data"]["cell_id"] for e in events if e["type"] == "IntervalMeasured"}
    digests = {cid: data["digest"] for cid, data in completed_events.items()
               if cid not in measured and has_digest(data)}
    cells = sorted(results["cells"], key=lambda c: (config_key(c), c["repeat"]))
    configurations = [_configuration(list(group), completed_events, intervals, digests, cache)
                      for _, group in groupby(cells, key=config_key)]
    group_key = lambda c: (c["size_bytes"], _rate_sort(c["rate_target"]), c["mode"])  # noqa: E731
    groups = []
    for (size, rate, mode), members in groupby(sorted(configurations, key=group_key), key=group_key):
        members = sorted(members, key=lambda c: (c["broker"], c["format"]))
        _ratios(members, references)
        target = members[0]["rate_target"]
        groups.append({"size_bytes": size, "rate_target": target, "mode": mode,
                       "title": f"{size:,} B · {rate_text(target)} · {mode}", "cells": members,
                       "note": MAX_RATE_NOTE if target == "max" else None})
    note = claims_note(configurations)
    noise = run_noise(configurations)
    found, family = ([], None) if note else claims(groups, references, noise)
    regressions = [e["data"] for e in events if e["type"] == "RegressionDetected"]
    loops = send_loops(configurations)
    guarantees = fault_rows(results["cells"], {e["data"]["cell_id"]: e["data"] for e in events
                                               if e["type"] in ("CellCompleted", "CellFailed")})
    return {
        "run_id": results["run_id"],
        "name": results["name"],
        "status": results["status"],
        "reason": results["reason"],
        "requested_at": results["requested_at"],
        "finished_at": results["finished_at"],
        "environment": results["environment"],
        "spec": spec,
        "durability": results["durability"],
        "references": references,
        "regressions": regressions,
        "claims_note": note,
        "send_loops": loops,
        "send_loop_note": send_loop_note(loops),
        "senders": senders(configurations),
        "host_note": host_busy_note(configurations),
        "configurations_host_busy": [c["key"] for c in configurations if busy_repeats(c)],
        "noise": noise,
        "highlights": found,
        "claims": family,
        "rules": {"sustainability": verdict.RULE, "claims": CLAIMS_RULE, "percentiles": PERCENTILE_RULE,
                  "missing": MISSING_RULE, "not_sent": NOT_SENT_RULE, "accounting": ACCOUNTING_RULE,
                  "max_rate": MAX_RATE_NOTE, "codec": CODEC_RULE, "send_loop": SEND_LOOP_RULE,
                  "durability": DURABILITY_RULE, "limit": limit.RULE, "host": host.RULE, "stamps": STAMP_RULE},
        "configurations_with_loss": [c["key"] for c in configurations if c["has_loss"]],
        "configurations_client_bound": [c["key"] for c in configurations if _client_bound(c)],
        "configurations_consumer_bound": [c["key"] for c in configurations if _consumer_bound(c)],
        "groups": groups,
        "guarantees": guarantees,
        "guarantees_by_setting": by_setting(guarantees, results["durability"]),
        "cost": cost_estimate(events),
    }
