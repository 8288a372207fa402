"""A cell's interval series, pure: the per-second figures the worker digests into its CellCompleted and
the reports chart and judge (the verdict's inputs, in columns), and what a stored verdict was judged on.

The worker and the reports both use these; this module imports only the core (verdict) and the standard library.
"""

from __future__ import annotations

import json
from collections import defaultdict

from . import verdict

# CellCompleted's `digest` (interval_digest): what reports read of the cell's intervals, so a report can leave
# the intervals themselves unread. A digest of another version is not relied on (events.has_digest).
DIGEST_VERSION = 1


def intervals_by_cell(events: list[dict]) -> dict[str, list[dict]]:
    """Per cell, the interval events of the attempt that ended the cell."""
    attempts = {e["data"]["cell_id"]: e["data"].get("attempt", 0) for e in events
                if e["type"] in ("CellCompleted", "CellFailed")}
    out: dict[str, list[dict]] = defaultdict(list)
    for event in events:
        if event["type"] == "IntervalMeasured":
            data = event["data"]
            if data.get("attempt", 0) == attempts.get(data["cell_id"], data.get("attempt", 0)):
                out[data["cell_id"]].append(data)
    return out


SERIES_FIELDS = ("interval", "in_schedule", "sent", "acked", "received", "backlog", "throughput", "end_to_end_p99_us",
                 "end_to_end_max_us", "end_to_end_count", "publish_latency_p99_us", "publish_delay_p99_us")
# A cell's digest keeps its intervals up to this many (a 20-minute cell); a longer cell's report reads them.
DIGEST_MAX_INTERVALS = 1200


def interval_columns(intervals: list[dict]) -> dict[str, list]:
    """What reports read of a cell's intervals (IntervalMeasured data), in columns in interval order: the
    verdict's inputs (verdict.INPUT_FIELDS) and the end-to-end maximum and count the charts show."""
    rows = sorted(intervals, key=lambda d: d["interval"])
    inputs = verdict.interval_inputs(rows, None)
    columns = {key: [item[key] for item in inputs] for key in verdict.INPUT_FIELDS}
    e2e = [data.get("summary", {}).get("end_to_end_latency_us", {}) for data in rows]
    columns["end_to_end_max_us"] = [e.get("max") for e in e2e]
    columns["end_to_end_count"] = [e.get("count") for e in e2e]
    return columns


def interval_digest(intervals: list[dict], judged: dict | None = None) -> dict | None:
    """A cell's intervals as its CellCompleted carries them, so a report need not read them: their columns
    (interval_columns), each interval event's size as stored (its data without histograms, as JSON: what a
    cost estimate counts), whether any sampled a local broker, and `judged`: what the cell's stored verdict
    was judged on (verdict_basis). None for a cell longer than DIGEST_MAX_INTERVALS."""
    if len(intervals) > DIGEST_MAX_INTERVALS:
        return None
    rows = sorted(intervals, key=lambda d: d["interval"])
    digest = {"version": DIGEST_VERSION, **interval_columns(rows),
              "bytes": [len(json.dumps({k: v for k, v in data.items() if k != "histograms"})) for data in rows],
              "broker_sampled": any("broker" in (data.get("resources") or {}) for data in rows)}
    if judged is not None:
        digest["judged"] = judged
    return digest


def verdict_basis(rate, measured_s: float | None, publish_only: bool, shaped: bool = False) -> dict:
    """What a cell's verdict is judged on besides its intervals, and by which rules (verdict.FINGERPRINT), with
    each rule's minimum n (verdict.MIN_N: the fewest intervals at which it can fail)."""
    return {"target": rate_target(rate), "measured_s": measured_s, "publish_only": bool(publish_only),
            "rules": verdict.FINGERPRINT, "min_n": dict(verdict.MIN_N), **({"shaped": True} if shaped else {})}


def series_from_columns(columns: dict[str, list], publish_only: bool = False, measured_s: float | None = None) -> dict:
    """interval_series from interval_columns (or a digest)."""
    schedule = verdict.schedule_end(measured_s)
    interval, sent, acked, received = columns["interval"], columns["sent"], columns["acked"], columns["received"]
    if publish_only:
        throughput = [a if a is not None else s for a, s in zip(acked, sent)]
    else:
        throughput = list(received)
    series = {"interval": list(interval),
              "in_schedule": [verdict.in_schedule(i, n, schedule) for i, n in zip(interval, sent)],
              "sent": list(sent), "acked": list(acked), "received": list(received), "backlog": list(columns["backlog"]),
              "throughput": throughput}
    for key in ("end_to_end_p99_us", "end_to_end_max_us", "end_to_end_count", "publish_latency_p99_us",
                "publish_delay_p99_us"):
        series[key] = list(columns[key])
    return {key: series[key] for key in SERIES_FIELDS}


def interval_series(intervals: list[dict], publish_only: bool = False, measured_s: float | None = None) -> dict:
    """Per-second figures of one cell (the verdict's input, the charts' and the regression samples)."""
    return series_from_columns(interval_columns(intervals), publish_only, measured_s)


def rate_target(rate):
    """A fixed rate's target in msgs/s; None for max rate and a rate search."""
    return float(rate) if isinstance(rate, (int, float)) else None
