"""The run's own events, as every way of running builds them: RunRequested (with the plan, or followed by
CellsPlanned chunks when it is large) and RunCompleted."""

from __future__ import annotations

from .. import environment
from . import CELLS_PER_CHUNK, INLINE_CELLS, make_event


def run_requested_events(run_id: str, spec: dict, cells: list[dict], suite: str | None) -> list[dict]:
    """RunRequested, holding the cells when the plan is small; a large plan follows it in CellsPlanned chunks."""
    data = {"spec": spec, "cell_count": len(cells), "environment": environment.collect()}
    if suite:
        data["suite"] = suite
    if len(cells) <= INLINE_CELLS:
        return [make_event(run_id, "RunRequested", {**data, "cells": cells})]
    chunks = [cells[start:start + CELLS_PER_CHUNK] for start in range(0, len(cells), CELLS_PER_CHUNK)]
    return [make_event(run_id, "RunRequested", {**data, "cell_chunks": len(chunks)}),
            *(make_event(run_id, "CellsPlanned", {"chunk": i, "cells": chunk}, key=f"{i:05d}")
              for i, chunk in enumerate(chunks))]


def run_completed_event(run_id: str, status: str, completed: int, failed: int, reason: str | None = None) -> dict:
    data = {"status": status, "cells_completed": completed, "cells_failed": failed}
    if reason:
        data["reason"] = reason
    return make_event(run_id, "RunCompleted", data)
