"""The comparison report: a projection of a run's events.

Cells that differ only by repeat form one configuration. Its percentiles come from the exact
merge of the repeats' cumulative histograms (never from averaging percentiles). Its headline
figures carry the median and a 95% bootstrap interval over the repeats. Each configuration also
gets a sustainability verdict, so the latency of a cell that could not keep up is flagged rather
than compared.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import groupby

import numpy as np

from .. import histogram
from .results import SUMMARY_FIELDS, build_results
from .stats import median_ci

SUSTAINED_RATE = 0.995
# metric -> (how to read it from a cell result, True when higher is better)
METRICS = {
    "throughput_msgs_per_s": (lambda c: c["throughput_msgs_per_s"], True),
    "throughput_mb_per_s": (lambda c: c["throughput_mb_per_s"], True),
    "end_to_end_p50_us": (lambda c: c["end_to_end_latency_us"]["p50"], False),
    "end_to_end_p99_us": (lambda c: c["end_to_end_latency_us"]["p99"], False),
    "end_to_end_p999_us": (lambda c: c["end_to_end_latency_us"]["p999"], False),
    "publish_latency_p99_us": (lambda c: c["publish_latency_us"]["p99"], False),
    "publish_delay_p99_us": (lambda c: c["publish_delay_us"]["p99"], False),
    "encode_p50_ns": (lambda c: c["encode_ns"]["p50"], False),
    "decode_p50_ns": (lambda c: c["decode_ns"]["p50"], False),
    "encoded_bytes": (lambda c: c["encoded_bytes"], False),
    "lost": (lambda c: c["lost"], False),
}
LATENCY_FIELDS = ("publish_latency_us", "publish_delay_us", "end_to_end_latency_us", "encode_ns", "decode_ns")
SPECTRUM = (50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 100.0)
CONFIG_FIELDS = ("broker", "format", "mode", "size_basis", "size_bytes", "rate_target", "producers", "consumers",
                 "partitions")


def config_key(cell: dict) -> str:
    """Identifies a configuration across repeats and across runs (what regression checks pair up)."""
    return "|".join(str(cell[f]) for f in CONFIG_FIELDS)


def _rate_sort(rate) -> float:
    return float("inf") if rate == "max" else float(rate)


def _intervals_by_cell(events: list[dict]) -> dict[str, list[dict]]:
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


def interval_series(intervals: list[dict], publish_only: bool = False) -> dict[str, list]:
    """Per-second figures of one cell: sent, received, throughput (msgs/s) and latency p99 (µs)."""
    series = {"interval": [], "sent": [], "received": [], "throughput": [], "end_to_end_p99_us": [],
              "publish_latency_p99_us": []}
    for data in sorted(intervals, key=lambda d: d["interval"]):
        summary = data.get("summary", {})
        series["interval"].append(data["interval"])
        series["sent"].append(data["counters"]["sent"])
        series["received"].append(data["counters"]["received"])
        series["throughput"].append(data["counters"]["sent" if publish_only else "received"])
        series["end_to_end_p99_us"].append(summary.get("end_to_end_latency_us", {}).get("p99"))
        series["publish_latency_p99_us"].append(summary.get("publish_latency_us", {}).get("p99"))
    return series


def sustainability(cells: list[dict], series: list[dict]) -> dict:
    """Could the configuration keep up? Rate reached, no growing backlog, no rising latency."""
    reasons = []
    completed = [c for c in cells if c["status"] == "completed"]
    if not completed:
        return {"verdict": "failed", "reasons": ["no repeat completed"]}
    target = completed[0]["rate_target"]
    if target != "max":
        worst = min(c["rate_achieved"] for c in completed)
        if worst < SUSTAINED_RATE * target:
            reasons.append(f"achieved {worst:,.0f} of {target:,} msgs/s ({worst / target:.1%})")
    for s in series:
        measured = [i for i, _ in enumerate(s["interval"]) if s["sent"][i] > 0]
        if len(measured) < 3 or completed[0].get("publish_only"):  # nothing consumed: no backlog to see
            continue
        backlog = np.cumsum(np.array(s["sent"]) - np.array(s["received"]))[measured]
        per_second = max(1.0, float(np.mean(np.array(s["sent"])[measured])))
        if backlog[-1] > per_second and backlog[-1] > backlog[len(backlog) // 2]:
            reasons.append(f"backlog grew to {backlog[-1]:,.0f} messages")
        p99 = [s["end_to_end_p99_us"][i] for i in measured if s["end_to_end_p99_us"][i] is not None]
        if len(p99) >= 6:
            third = len(p99) // 3
            first, last = float(np.median(p99[:third])), float(np.median(p99[-third:]))
            if last > 2 * first and last - first > 1000:
                reasons.append(f"end-to-end p99 rose from {first / 1000:.1f} to {last / 1000:.1f} ms")
    if target == "max":
        return {"verdict": "max-rate", "reasons": reasons or ["unthrottled: measures capacity"]}
    return {"verdict": "unsustainable" if reasons else "sustainable", "reasons": reasons}


def _configuration(cells: list[dict], completed_events: dict[str, dict], intervals: dict[str, list[dict]]) -> dict:
    first = cells[0]
    done = [c for c in cells if c["status"] == "completed"]
    merged = {}
    for field in LATENCY_FIELDS:
        blobs = [completed_events[c["cell_id"]]["histograms"].get(field) for c in done]
        hist = histogram.merge(b for b in blobs if b)
        summary = histogram.summary(hist)
        merged[field] = {k: summary[k] for k in SUMMARY_FIELDS}
        if field in ("end_to_end_latency_us", "publish_latency_us") and hist.get_total_count():
            merged[field]["spectrum"] = [list(pair) for pair in zip(SPECTRUM, histogram.percentiles(hist, SPECTRUM))]
    series = [interval_series(intervals.get(c["cell_id"], []), c.get("publish_only", False)) for c in done]
    return {
        "key": config_key(first),
        "cell_ids": [c["cell_id"] for c in cells],
        **{f: first[f] for f in CONFIG_FIELDS},
        "status": "completed" if len(done) == len(cells) else ("failed" if not done else "partial"),
        "reasons": [c["reason"] for c in cells if c["status"] != "completed" and c.get("reason")],
        "repeats": len(cells),
        "send_loop": ", ".join(sorted({c["send_loop"] for c in done if c.get("send_loop")})) or None,
        "metrics": {name: median_ci([read(c) for c in done]).as_dict() for name, (read, _) in METRICS.items()},
        "latency": merged,
        "sent": sum(c["sent"] for c in done),
        "received": None if any(c.get("publish_only") for c in done) else sum(c["received"] for c in done),
        "lost": None if any(c.get("publish_only") for c in done) else sum(c["lost"] for c in done),
        "sustainability": sustainability(cells, series),
        "intervals": series,
    }


def _mark_best_and_ratios(group: list[dict], references: dict) -> None:
    comparable = [c for c in group if c["status"] != "failed" and c["sustainability"]["verdict"] != "unsustainable"]
    for name, (_, higher) in METRICS.items():
        values = [(c["metrics"][name]["median"], c["key"]) for c in comparable if c["metrics"][name]["median"] is not None]
        if values:
            best = (max if higher else min)(values)[0]
            for c in comparable:
                if c["metrics"][name]["median"] == best:
                    c.setdefault("best", []).append(name)
    by_cell = {(c["broker"], c["format"]): c for c in group}
    for c in group:
        ratios = {}
        for axis, ref_key in (("format", (c["broker"], references["format"])),
                              ("broker", (references["broker"], c["format"]))):
            ref = by_cell.get(ref_key)
            if ref is None or ref is c:
                continue
            ratios[axis] = {name: _ratio(c["metrics"][name]["median"], ref["metrics"][name]["median"])
                            for name in METRICS}
        c["ratios"] = ratios


def _ratio(value, reference):
    if value is None or reference in (None, 0):
        return None
    return round(value / reference, 4)


def highlights(groups: list[dict], references: dict) -> list[str]:
    """Statements in the published studies' form: "msgpack 2.4× json throughput at 1,176 B"."""
    out = []
    for group in groups:
        for c in group["cells"]:
            behind = c["sustainability"]["verdict"] == "unsustainable"
            ratio = c.get("ratios", {}).get("format", {}).get("throughput_msgs_per_s")
            if ratio and abs(ratio - 1) >= 0.05 and c["format"] != references["format"]:
                out.append(f"{c['broker']}: {c['format']} {ratio:.2f}× {references['format']} throughput at "
                           f"{c['metrics']['encoded_bytes']['median']:,.0f} B ({group['title']})"
                           + (" — could not keep up with the target rate" if behind else ""))
            ratio = c.get("ratios", {}).get("format", {}).get("end_to_end_p99_us")
            if ratio and abs(ratio - 1) >= 0.2 and c["format"] != references["format"] and not behind:
                out.append(f"{c['broker']}: {c['format']} end-to-end p99 {ratio:.2f}× {references['format']}'s "
                           f"({group['title']})")
    return out


def build_report(events: list[dict]) -> dict:
    results = build_results(events)
    spec = results["spec"]
    references = {"format": "json", "broker": "kafka", **spec.get("references", {})}
    completed_events = {e["data"]["cell_id"]: e["data"] for e in events if e["type"] == "CellCompleted"}
    intervals = _intervals_by_cell(events)
    cells = sorted(results["cells"], key=lambda c: (config_key(c), c["repeat"]))
    configurations = [_configuration(list(group), completed_events, intervals)
                      for _, group in groupby(cells, key=config_key)]
    group_key = lambda c: (c["size_bytes"], _rate_sort(c["rate_target"]), c["mode"])  # noqa: E731
    groups = []
    for (size, rate, mode), members in groupby(sorted(configurations, key=group_key), key=group_key):
        members = sorted(members, key=lambda c: (c["broker"], c["format"]))
        _mark_best_and_ratios(members, references)
        rate_text = "max rate" if rate == float("inf") else f"{int(rate):,} msgs/s"
        groups.append({"size_bytes": size, "rate_target": "max" if rate == float("inf") else int(rate), "mode": mode,
                       "title": f"{size:,} B · {rate_text} · {mode}", "cells": members})
    regressions = [e["data"] for e in events if e["type"] == "RegressionDetected"]
    return {
        "run_id": results["run_id"],
        "name": results["name"],
        "status": results["status"],
        "reason": results["reason"],
        "requested_at": results["requested_at"],
        "finished_at": results["finished_at"],
        "environment": results["environment"],
        "spec": spec,
        "references": references,
        "regressions": regressions,
        "highlights": highlights(groups, references),
        "groups": groups,
    }
