"""The results projection: a run's events → results.json (OpenMessaging Benchmark names in snake_case)."""

from __future__ import annotations

from ..events import planned_cells, run_status
from ..figures import (  # noqa: F401 (the old import paths)
    _RANGES,
    ACCOUNTING_RULE,
    LATENCY_METRICS,
    LOSS_CLASSES,
    MISSING_COUNTS_IN,
    MISSING_RULE,
    SPECTRUM,
    SUMMARY_FIELDS,
    Buckets,
    Figures,
    bucket_percentiles,
    bucket_summary,
    cell_result,
    decode_buckets,
    figures,
    figures_of,
    latency_object,
    merge_blobs,
    missing_of,
    with_missing,
)


def build_results(events: list[dict], cache: dict | None = None) -> dict:
    """Everything results.json holds, computed from the stored events only (`cache`: see `figures`)."""
    if not events:
        raise LookupError("no events for this run")
    by_type: dict[str, list[dict]] = {}
    for event in events:
        by_type.setdefault(event["type"], []).append(event)
    requested = by_type["RunRequested"][0]
    run_end = (by_type.get("RunCompleted") or by_type.get("RunFailed") or [None])[0]
    ends = {e["data"]["cell_id"]: e for e in by_type.get("CellCompleted", []) + by_type.get("CellFailed", [])}
    # In matrix order (index), whatever order they ran in; each cell says when it ran (`order`).
    cells = [cell_result(cell, ends.get(cell["cell_id"]), cache)
             for cell in sorted(planned_cells(events), key=lambda c: c["index"])]
    targets = by_type.get("TargetsReady", [{"data": {"targets": {}}}])[0]["data"]["targets"]
    status, reason = run_status(run_end, by_type.get("StepFailed", []))
    return {
        "run_id": requested["run_id"],
        "name": requested["data"]["spec"].get("name", "adhoc"),
        "status": status or "running",
        "reason": reason,
        "requested_at": requested["at"],
        "finished_at": run_end["at"] if run_end else None,
        "environment": {**requested["data"]["environment"], "brokers": targets},
        "spec": requested["data"]["spec"],
        "cells": cells,
    }
