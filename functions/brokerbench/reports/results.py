"""The results projection: a run's events → results.json (OpenMessaging Benchmark names in snake_case).

results.json is a format others read: schemas/results.schema.json describes it (docs/results.md field by field) and
`schema_version` says which version of it a file is. The version rises when a field changes meaning or goes away;
a new optional field keeps it, so a reader written for version N reads every file of version N.
"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import cache

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from ..eventdata import given, run_requested
from ..events import planned_cells, run_status
from ..paths import SCHEMAS_DIR
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
from ..figures import stamp_note
from .rows import result_cell, run_spec


SCHEMA_VERSION = 1  # results.json's format version (schemas/results.schema.json `schema_version`)
RESULTS_SCHEMA = SCHEMAS_DIR / "results.schema.json"
# The results schema takes the shapes it shares with the events and the run request from their schemas, by reference.
SHARED_SCHEMAS = ("events.schema.json", "run-request.schema.json")

DURABILITY_RULE = ("Durability, per broker: what a send's acknowledgement waited for with the run's settings in force "
                   "(its plug-in states it from the recorded settings): fsync true = a disk sync of the message, "
                   "\"interval\" = a sync on a timer or a count that the acknowledgement does not wait for, false = no "
                   "sync; replicas = copies on other nodes written before the acknowledgement; memory_only = in no file "
                   "at all; null = unknown. Rows are compared at equal durability only where these match.")


def durability(spec: dict, targets: dict) -> dict:
    """Each broker's durability statement (registry.durability), from the run's client settings and what
    TargetsReady recorded of its target; "not stated" for a broker no plug-in registers any more."""
    typed = run_spec(spec)
    client, endpoints = typed.client or {}, typed.targets or {}
    out = {}
    for broker in typed.brokers or list(targets):
        try:
            out[broker] = for_target(broker, endpoints.get(broker)).state_durability(client, targets.get(broker))
        except UnknownBroker:
            out[broker] = dict(NOT_STATED)
    return out


def build_results(events: list[dict], cache: dict | None = None) -> dict:
    """Everything results.json holds, computed from the stored events only (`cache`: see `figures`)."""
    if not events:
        raise LookupError("no events for this run")
    by_type: defaultdict[str, list[dict]] = defaultdict(list)
    for event in events:
        by_type[event["type"]].append(event)
    requested = by_type["RunRequested"][0]
    run_end = (by_type["RunCompleted"] or by_type["RunFailed"] or [None])[0]
    ends = {e["data"]["cell_id"]: e for e in by_type["CellCompleted"] + by_type["CellFailed"]}
    # In matrix order (index), whatever order they ran in; each cell says when it ran (`order`).
    cells = [cell_result(cell, ends.get(cell["cell_id"]), cache)
             for cell in sorted(planned_cells(events), key=lambda c: c["index"])]
    targets = by_type["TargetsReady"][0]["data"]["targets"] if by_type["TargetsReady"] else {}
    status, reason = run_status(run_end, by_type["StepFailed"])
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": requested["run_id"],
        "name": given(run_requested(events)[0].name, "adhoc"),
        "status": status or "running",
        "reason": reason,
        "requested_at": requested["at"],
        "finished_at": run_end["at"] if run_end else None,
        "environment": {**requested["data"]["environment"], "brokers": targets},
        "spec": requested["data"]["spec"],
        "durability": durability(requested["data"]["spec"], targets),
        "cells": cells,
    }


def stamps_note(results: dict) -> str | None:
    """The footnote of the rows marked STAMP_MARK (figures.stamped_late) in a run's tables, the terminal's and the
    console's: their publish or end-to-end latency was not stamped at arrival (figures.stamp_note)."""
    return stamp_note((f"{c.broker} {c.format}", c.ack_stamps, c.delivery_stamps, c.delivery_stamp_bound)
                      for c in map(result_cell, results["cells"]) if c.status == "completed")


@cache
def _validator() -> Draft202012Validator:
    schema = json.loads(RESULTS_SCHEMA.read_text())
    shared = [json.loads((SCHEMAS_DIR / name).read_text()) for name in SHARED_SCHEMAS]
    registry = Registry().with_resources((doc["$id"], Resource.from_contents(doc)) for doc in shared)
    return Draft202012Validator(schema, registry=registry)


def problems(results: dict) -> list[str]:
    """Where a results document departs from schemas/results.schema.json: one line per problem, with its place
    (e.g. "cells/3/end_to_end_latency_us/p99: 'x' is not of type 'number', 'null'"); [] when it conforms."""
    found = sorted(_validator().iter_errors(results), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(document)'}: {e.message}" for e in found]
