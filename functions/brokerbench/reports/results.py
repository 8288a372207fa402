"""The results projection: a run's events → results.json (OpenMessaging Benchmark names in snake_case)."""

from __future__ import annotations

from ..events import planned_cells, run_status
from ..registry import NOT_STATED, UnknownBroker, for_target
from ..figures import (  # noqa: F401 (the old import paths)
    _RANGES,
    ACCOUNTING_RULE,
    LATENCY_METRICS,
    LOSS_CLASSES,
    MISSING_COUNTS_IN,
    MISSING_RULE,
    NOT_SENT_BOUNDS,
    NOT_SENT_COUNTS_IN,
    NOT_SENT_RULE,
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


DURABILITY_RULE = ("Durability, per broker: what a send's acknowledgement waited for with the run's settings in force "
                   "(its plug-in states it from the recorded settings): fsync true = a disk sync of the message, "
                   "\"interval\" = a sync on a timer or a count that the acknowledgement does not wait for, false = no "
                   "sync; replicas = copies on other nodes written before the acknowledgement; memory_only = in no file "
                   "at all; null = unknown. Rows are compared at equal durability only where these match.")


def durability(spec: dict, targets: dict) -> dict:
    """Each broker's durability statement (registry.durability), from the run's client settings and what
    TargetsReady recorded of its target; "not stated" for a broker no plug-in registers any more."""
    client, endpoints = spec.get("client") or {}, spec.get("targets") or {}
    out = {}
    for broker in spec.get("brokers") or list(targets):
        try:
            out[broker] = for_target(broker, endpoints.get(broker)).state_durability(client, targets.get(broker))
        except UnknownBroker:
            out[broker] = dict(NOT_STATED)
    return out


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
        "durability": durability(requested["data"]["spec"], targets),
        "cells": cells,
    }
