"""The results projection: a run's events → results.json (OpenMessaging Benchmark names in snake_case)."""

from __future__ import annotations

from .. import histogram
from ..events import planned_cells

LATENCY_METRICS = {  # result field -> (histogram, divisor to the field's unit)
    "publish_latency_us": ("publish_latency_us", 1),
    "publish_delay_us": ("publish_delay_us", 1),
    "end_to_end_latency_us": ("end_to_end_latency_us", 1),
    "encode_ns": ("encode_ns", 1),
    "decode_ns": ("decode_ns", 1),
}
SUMMARY_FIELDS = ("mean", "p50", "p75", "p95", "p99", "p999", "max")
# Every way a measured message can miss being received in time (see worker.outcome).
LOSS_CLASSES = ("lost", "late", "undelivered", "send_errors", "unacknowledged")


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
        "order": cell.get("order", cell["index"]),
        "client": cell["client"],
    }
    if end is None:
        return {**base, "status": "incomplete", "reason": "no end event (the run was stopped)"}
    if end["type"] == "CellFailed":
        data = end["data"]
        failed = {**base, "status": "failed", "reason": data["reason"]}
        if "totals" in data:  # a cell that measured nothing usable keeps its counts as evidence
            failed.update(_counts(data["totals"]), broker_count=data.get("broker_count"), warmup=data.get("warmup"))
        return failed
    data = end["data"]
    totals, seconds = data["totals"], data["measured_s"]
    consumed = totals["received"] is not None  # publish-only cells: throughput is what was acknowledged
    # Delivered over the time it took to deliver it; events from before the delivery window was
    # recorded fall back to what was measured over the schedule's seconds.
    delivered = totals.get("delivered", totals["received"] if consumed else totals["sent"])
    delivered_bytes = totals.get("bytes_delivered", totals["bytes_received"] if consumed else totals["bytes_sent"])
    window = data.get("delivery_window_s") or seconds
    counts = _counts(totals)
    return {
        **base,
        "status": "completed",
        "encoded_bytes": round(data["encoded_bytes"], 1),
        "send_loop": data.get("send_loop", "python"),  # runs stored before the native loop ran Python
        "measured_s": seconds,
        "delivery_window_s": round(window, 6),
        "latency_basis": data.get("latency_basis", "intended"),
        "warmup": data.get("warmup"),
        "resources": data.get("resources"),  # CPU and memory of the workers and a local broker (worker/resources.py)
        "send_rate": round(totals["sent"] / seconds, 3),
        "rate_achieved": round(delivered / window, 3),
        **counts,
        "has_loss": any(counts.get(k) for k in LOSS_CLASSES),
        "broker_count": data.get("broker_count"),
        "max_sustainable_rate": (data.get("search") or {}).get("max_sustainable_rate"),
        "search": data.get("search"),
        "verdict": (data.get("verdict") or {}).get("verdict"),
        "verdict_reasons": (data.get("verdict") or {}).get("reasons", []),
        "publish_only": not consumed,
        "throughput_msgs_per_s": round(delivered / window, 3),
        "throughput_mb_per_s": round(delivered_bytes / window / 1e6, 4),
        "intervals": data["intervals"],
        **{field: latency_object(data["histograms"].get(hist)) for field, (hist, _) in LATENCY_METRICS.items()},
    }


def _counts(totals: dict) -> dict:
    """The message accounting of a cell: sent = received + late + undelivered + lost + send_errors +
    unacknowledged."""
    return {"sent": totals["sent"], "acked": totals.get("acked"), "received": totals["received"],
            "late": totals.get("late"), "undelivered": totals.get("undelivered"), "lost": totals["lost"],
            "duplicated": totals["duplicated"],
            "out_of_order": totals["out_of_order"], "send_errors": totals["send_errors"],
            "unacknowledged": totals.get("unacked")}


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
    # In matrix order (index), whatever order they ran in; each cell says when it ran (`order`).
    cells = [cell_result(cell, ends.get(cell["cell_id"]))
             for cell in sorted(planned_cells(events), key=lambda c: c["index"])]
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
