"""The run's own events, as every way of running builds them: RunRequested (with the plan, or followed by
CellsPlanned chunks when it is large) and RunCompleted."""

from __future__ import annotations

import json

from .. import environment
from . import CELLS_PER_CHUNK, CHUNK_BYTES, INLINE_CELLS, make_event


def run_requested_events(run_id: str, spec: dict, cells: list[dict], suite: str | None) -> list[dict]:
    """RunRequested, holding the cells when the plan is small; a large plan follows it in CellsPlanned chunks."""
    data = {"spec": spec, "cell_count": len(cells), "environment": environment.collect()}
    if suite:
        data["suite"] = suite
    if len(cells) <= INLINE_CELLS:
        return [make_event(run_id, "RunRequested", {**data, "cells": cells})]
    chunks = plan_chunks(cells)
    return [make_event(run_id, "RunRequested", {**data, "cell_chunks": len(chunks)}),
            *(make_event(run_id, "CellsPlanned", {"chunk": i, "cells": chunk}, key=f"{i:05d}")
              for i, chunk in enumerate(chunks))]


def plan_chunks(cells: list[dict]) -> list[list[dict]]:
    """The cells in order, in chunks of at most CELLS_PER_CHUNK cells and CHUNK_BYTES of JSON each."""
    chunks: list[list[dict]] = [[]]
    size = 0
    for cell in cells:
        length = len(json.dumps(cell, separators=(",", ":")))
        if chunks[-1] and (len(chunks[-1]) >= CELLS_PER_CHUNK or size + length > CHUNK_BYTES):
            chunks.append([])
            size = 0
        chunks[-1].append(cell)
        size += length
    return chunks


def run_completed_event(run_id: str, status: str, completed: int, failed: int, reason: str | None = None) -> dict:
    data = {"status": status, "cells_completed": completed, "cells_failed": failed}
    if reason:
        data["reason"] = reason
    return make_event(run_id, "RunCompleted", data)
