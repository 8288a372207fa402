"""What the API shows of runs, built from their stored events (and, for a run with no end yet, from the
executor: a run whose execution is gone without an end event is `incomplete`, not `running`)."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime

from ..events import RUN_EVENTS, cell_count, cell_prefix, planned_cells, read_report_events, run_status
from ..reports.results import build_results, stamps_note
from ..series import interval_series, intervals_by_cell
from ..spec import SpecError, expand, validate
from ..workflow.starter import Starter
from .errors import ApiError

SUMMARY_FIELDS = ("run_id", "name", "suite", "status", "requested_at", "finished_at", "cells", "links")
# A listing with a status filter reads at most this many runs per page before it answers with what it has.
MAX_EXAMINED = 500


def links(run_id: str) -> dict:
    base = f"/runs/{run_id}"
    return {"self": base, "events": f"{base}/events", "report": f"{base}/report?format=html", "cancel": f"{base}/cancel"}


def encode_token(value) -> str:
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_token(token: str, field: str = "next"):
    try:
        return json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ApiError(422, "not a token this API gave out", field) from None


def _status(end: dict | None, execution, tail: list[dict] = ()) -> str:
    """`tail`: the run's events from its end on (90#), where a step that failed after the end is stored."""
    if end is not None:
        return run_status(end, [e for e in tail if e["type"] == "StepFailed"])[0]
    if execution is not None and execution.state != "ended":
        return "running"
    return "incomplete"  # the execution ended (or is unknown) and the run has no end event


def _end_and_execution(store, starter: Starter, run_id: str, end: dict | None):
    """The run's end event and, when it has none, its execution. The execution is asked after the events
    were read, so one that has ended since may have stored its end in between: the tail is read again."""
    if end is not None:
        return end, None
    execution = starter.execution(run_id)
    if execution is not None and execution.state == "ended":
        end = next((e for e in store.read(run_id, prefix="90#") if e["type"] in RUN_EVENTS), None)
    return end, (None if end else execution)


def _cell_counts(events: list[dict]) -> dict:
    ends = [e for e in events if e["type"] in ("CellCompleted", "CellFailed")]
    completed = sum(1 for e in ends if e["type"] == "CellCompleted")
    return {"completed": completed, "failed": len(ends) - completed}


def summary(store, starter: Starter, requested: dict) -> dict:
    """A run's line in a listing, from its RunRequested event and its end (or its cells so far)."""
    run_id = requested["run_id"]
    tail = store.read(run_id, prefix="90#")
    end, execution = _end_and_execution(store, starter, run_id,
                                        next((e for e in tail if e["type"] in RUN_EVENTS), None))
    if end is not None and end["type"] == "RunCompleted":
        counts = {"completed": end["data"]["cells_completed"], "failed": end["data"]["cells_failed"]}
    else:
        counts = _cell_counts(store.read(run_id, prefix="10#", interval_histograms=False))
    data = requested["data"]
    return {
        "run_id": run_id,
        "name": data["spec"].get("name", "adhoc"),
        "suite": data.get("suite"),
        "status": _status(end, execution, tail),
        "requested_at": requested["at"],
        "finished_at": end["at"] if end else None,
        "cells": {"total": cell_count(data), **counts},
        "links": links(run_id),
    }


def run_page(store, starter: Starter, *, suite: str | None, status: str | None, since: str | None, limit: int,
             token: str | None) -> dict:
    start = decode_token(token) if token else None
    if start is not None and not (isinstance(start, dict) and all(isinstance(v, str) for v in start.values())):
        raise ApiError(422, "not a token this API gave out", "next")
    runs, examined = [], 0
    if start is None:  # the first page also shows runs accepted but not stored yet
        for execution in starter.pending():
            line = {k: v for k, v in unrecorded(execution).items() if k in SUMMARY_FIELDS}
            if (status in (None, line["status"]) and suite in (None, line["suite"], line["name"])
                    and (since is None or (line["requested_at"] or "") >= since)):
                runs.append(line)
    while True:
        page, last = store.runs_page(limit=limit, suite=suite, since=since, start=start)
        for requested in page:
            examined += 1
            line = summary(store, starter, requested)
            if status is None or line["status"] == status:
                runs.append(line)
            if len(runs) == limit or examined >= MAX_EXAMINED:
                more = requested is not page[-1] or last is not None
                return {"runs": runs, "next": encode_token(store.run_key(requested, suite)) if more else None}
        if last is None:
            return {"runs": runs, "next": None}
        start = last


def run_detail(store, starter: Starter, run_id: str) -> dict:
    events = read_report_events(store, run_id)  # the cells' ends and results: no interval is needed
    if not any(e["type"] == "RunRequested" for e in events):
        execution = starter.execution(run_id)
        if execution is None:
            raise ApiError(404, f"no run {run_id}", "run_id")
        return unrecorded(execution)
    results = build_results(events)
    requested = next(e for e in events if e["type"] == "RunRequested")
    end, execution = _end_and_execution(store, starter, run_id,
                                        next((e for e in events if e["type"] in RUN_EVENTS), None))
    if end is not None and end not in events:  # the run ended while it was being read: read it whole
        events = read_report_events(store, run_id)
        results = build_results(events)
    total = len(results["cells"])
    counts = _cell_counts(events)
    done = counts["completed"] + counts["failed"]
    finished = results["finished_at"]
    return {
        "run_id": run_id,
        "name": results["name"],
        "suite": requested["data"].get("suite"),
        "status": _status(end, execution, events),
        "reason": results["reason"] or (execution.error if execution else None),
        "requested_at": results["requested_at"],
        "finished_at": finished,
        "cells": {"total": total, **counts},
        "links": links(run_id),
        "progress": {"total": total, **counts, "fraction": round(done / total, 4) if total else 1.0},
        "timings": {"requested_at": results["requested_at"], "finished_at": finished,
                    "duration_s": _seconds(results["requested_at"], finished)},
        "spec": results["spec"],
        "cells_detail": [{"cell_id": c["cell_id"], "broker": c["broker"], "format": c["format"],
                          "size_bytes": c["size_bytes"], "rate_target": c["rate_target"], "status": c["status"],
                          "throughput_msgs_per_s": c.get("throughput_msgs_per_s"), "verdict": c.get("verdict"),
                          "reason": c.get("reason"), "limit": c.get("limit"), "not_sent": c.get("not_sent"),
                          "host": c.get("host"), "ack_stamps": c.get("ack_stamps"),
                          "delivery_stamps": c.get("delivery_stamps")}
                         for c in results["cells"]],
        "stamps_note": stamps_note(results),
    }


def unrecorded(execution) -> dict:
    """A run its executor knows of that has stored nothing yet: starting, or ended before it was recorded."""
    if execution.state != "ended":
        status, reason = "starting", None
    elif execution.cancelled:
        status, reason = "cancelled", "cancelled before it started: nothing was measured"
    else:
        status, reason = "failed", execution.error or "the workflow ended before the run was recorded"
    request = execution.request if isinstance(execution.request, dict) else None
    try:
        total = len(expand(validate(request))) if request else 0
    except SpecError:
        total = 0
    return {"run_id": execution.run_id, "name": (request or {}).get("name", "adhoc") if request else None,
            "suite": execution.suite, "status": status, "reason": reason, "requested_at": execution.started_at,
            "finished_at": None, "cells": {"total": total, "completed": 0, "failed": 0},
            "links": links(execution.run_id),
            "progress": {"total": total, "completed": 0, "failed": 0, "fraction": 0.0},
            "timings": {"requested_at": execution.started_at, "finished_at": None, "duration_s": None},
            "spec": request, "cells_detail": [], "stamps_note": None}


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 3)


def cell_detail(store, run_id: str, cell_id: str) -> dict:
    """A cell's result and per-second series: from the run's header, the cell's own events and the run's end."""
    header = store.read(run_id, prefix="0", interval_histograms=False)
    if not any(e["type"] == "RunRequested" for e in header):
        raise ApiError(404, f"no run {run_id}", "run_id")
    index = next((c["index"] for c in planned_cells(header) if c["cell_id"] == cell_id), None)
    if index is None:
        raise ApiError(404, f"run {run_id} has no cell {cell_id}", "cell_id")
    events = (header + store.read(run_id, prefix=cell_prefix(index), interval_histograms=False)
              + store.read(run_id, prefix="9", interval_histograms=False))
    cell = next(c for c in build_results(events)["cells"] if c["cell_id"] == cell_id)
    intervals = intervals_by_cell(events).get(cell_id, [])
    columns = interval_series(intervals, cell.get("publish_only", False), cell.get("measured_s")) if intervals else {}
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())] if columns else []
    return {"cell": cell, "series": rows}


def events_page(store, run_id: str, *, limit: int, token: str | None, histograms: bool) -> dict:
    after = decode_token(token) if token else None
    if after is not None and not isinstance(after, str):
        raise ApiError(422, "not a token this API gave out", "next")
    events, last = store.events_page(run_id, limit=limit, after=after, interval_histograms=histograms)
    if not events and after is None:
        raise ApiError(404, f"no run {run_id}", "run_id")
    return {"events": events, "next": encode_token(last) if last else None}
