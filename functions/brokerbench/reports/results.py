"""The results projection: a run's events → results.json (OpenMessaging Benchmark names in snake_case)."""

from __future__ import annotations

from .. import histogram

LATENCY_METRICS = {  # result field -> (histogram, divisor to the field's unit)
    "publish_latency_us": ("publish_latency_us", 1),
    "publish_delay_us": ("publish_delay_us", 1),
    "end_to_end_latency_us": ("end_to_end_latency_us", 1),
    "encode_ns": ("encode_ns", 1),
    "decode_ns": ("decode_ns", 1),
}
SUMMARY_FIELDS = ("mean", "p50", "p75", "p95", "p99", "p999", "max")


def latency_object(blob: str | None) -> dict:
    if not blob:
        return dict.fromkeys(SUMMARY_FIELDS)
    summary = histogram.summary(histogram.decode(blob))
    return {k: (round(summary[k], 3) if summary[k] is not None else None) for k in SUMMARY_FIELDS}


def cell_result(cell: dict, end: dict | None) -> dict:
    base = {
        "cell_id": cell["cell_id"],
        "broker": cell["broker"],
        "format": cell["format"],
        "mode": cell["mode"],
        "size_basis": cell["size_basis"],
        "size_bytes": cell["size_bytes"],
        "rate_target": cell["rate"],
        "producers": cell["producers"],
        "consumers": cell["consumers"],
        "partitions": cell["partitions"],
        "repeat": cell["repeat"],
        "client": cell["client"],
    }
    if end is None:
        return {**base, "status": "incomplete", "reason": "no end event (the run was stopped)"}
    if end["type"] == "CellFailed":
        return {**base, "status": "failed", "reason": end["data"]["reason"]}
    data = end["data"]
    totals, seconds = data["totals"], data["measured_s"]
    consumed = totals["received"] is not None  # publish-only cells: throughput is what was published
    delivered = totals["received"] if consumed else totals["sent"]
    delivered_bytes = totals["bytes_received"] if consumed else totals["bytes_sent"]
    return {
        **base,
        "status": "completed",
        "encoded_bytes": round(data["encoded_bytes"], 1),
        "send_loop": data.get("send_loop", "python"),  # runs stored before the native loop ran Python
        "measured_s": seconds,
        "rate_achieved": round(totals["sent"] / seconds, 3),
        "sent": totals["sent"],
        "received": totals["received"],
        "lost": totals["lost"],
        "duplicated": totals["duplicated"],
        "out_of_order": totals["out_of_order"],
        "send_errors": totals["send_errors"],
        "publish_only": not consumed,
        "throughput_msgs_per_s": round(delivered / seconds, 3),
        "throughput_mb_per_s": round(delivered_bytes / seconds / 1e6, 4),
        "intervals": data["intervals"],
        **{field: latency_object(data["histograms"].get(hist)) for field, (hist, _) in LATENCY_METRICS.items()},
    }


def build_results(events: list[dict]) -> dict:
    """Everything results.json holds, computed from the stored events only."""
    if not events:
        raise LookupError("no events for this run")
    by_type: dict[str, list[dict]] = {}
    for event in events:
        by_type.setdefault(event["type"], []).append(event)
    requested = by_type["RunRequested"][0]
    run_end = (by_type.get("RunCompleted") or by_type.get("RunFailed") or [None])[0]
    ends = {e["data"]["cell_id"]: e for e in by_type.get("CellCompleted", []) + by_type.get("CellFailed", [])}
    cells = [cell_result(cell, ends.get(cell["cell_id"])) for cell in requested["data"]["cells"]]
    targets = by_type.get("TargetsReady", [{"data": {"targets": {}}}])[0]["data"]["targets"]
    if run_end is None:
        status = "running"
    elif run_end["type"] == "RunFailed":
        status = "failed"
    else:
        status = run_end["data"]["status"]
    return {
        "run_id": requested["run_id"],
        "name": requested["data"]["spec"].get("name", "adhoc"),
        "status": status,
        "reason": run_end["data"].get("reason") if run_end else None,
        "requested_at": requested["at"],
        "finished_at": run_end["at"] if run_end else None,
        "environment": {**requested["data"]["environment"], "brokers": targets},
        "spec": requested["data"]["spec"],
        "cells": cells,
    }
