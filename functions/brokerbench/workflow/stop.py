"""A run stopped before its workflow ended (Ctrl-C, or a cancel through the API): it gets its end event and
its targets are torn down, as the workflow's TeardownTargets would have done. What was measured is kept."""

from __future__ import annotations

from ..events import RUN_EVENTS, EventStore
from ..events.run import run_completed_event
from ..spec import SpecError, validate
from . import steps


REASONS = {"interrupted": "interrupted (Ctrl-C) before the workflow ended", "cancelled": "cancelled by request"}


def finish_stopped(store: EventStore, run_id: str, request: dict, status: str) -> dict:
    """End the run `status` (interrupted | cancelled) unless it already ended; tear its targets down.

    Returns {"status": the run's final status, "teardown": [...]}. Idempotent: a second call finds the end.
    """
    events = store.read(run_id, interval_histograms=False)
    end = next((e for e in events if e["type"] in RUN_EVENTS), None)
    final = status
    if events and end is None:
        completed = sum(1 for e in events if e["type"] == "CellCompleted")
        failed = sum(1 for e in events if e["type"] == "CellFailed")
        store.append([run_completed_event(run_id, status, completed, failed, REASONS.get(status))])
    elif end is not None:
        final = "failed" if end["type"] == "RunFailed" else end["data"]["status"]
    try:
        spec = validate(request)
    except SpecError:  # an invalid request started nothing
        return {"status": final, "teardown": []}
    return {"status": final,
            "teardown": [steps.teardown_target({"run_id": run_id, "broker": b, "spec": spec}) for b in spec["brokers"]]}
