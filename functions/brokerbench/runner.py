"""A whole run: validate, expand, record the request, measure every cell, record the end.

The core only sees the EventStore port and endpoint dicts; the CLI, the Lambda handlers and
the EC2 worker supply them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from . import environment
from .drivers import BrokerUnavailable, get_driver
from .events import CELLS_PER_CHUNK, INLINE_CELLS, EventStore, make_event, new_run_id
from .spec import expand, validate
from .worker import CellOutcome, run_cell
from .worker.cell import Progress


@dataclass
class RunOutcome:
    run_id: str
    status: str  # completed | completed_with_failures | interrupted
    cells: list[CellOutcome] = field(default_factory=list)

    @property
    def failed(self) -> list[CellOutcome]:
        return [c for c in self.cells if c.status != "completed"]


class RunHooks:
    """What a front end is told as the run goes (progress bars in the CLI)."""

    def run_started(self, run_id: str, cells: list[dict]) -> None: ...

    def cell_progress(self, progress: Progress) -> None: ...

    def cell_finished(self, outcome: CellOutcome) -> None: ...


def describe_targets(brokers: list[str], endpoints: dict, client: dict) -> dict:
    """Broker and client versions of each target that answers (a silent one is left out; one that cannot serve
    the client settings raises TargetRefused)."""
    targets = {}
    for broker in brokers:
        driver = get_driver(broker, endpoints[broker], client)
        try:
            driver.check(timeout_s=5)
        except BrokerUnavailable:
            continue
        targets[broker] = driver.describe()
    return targets


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


def execute_run(request: dict, endpoints: dict, store: EventStore, *, suite: str | None = None,
                hooks: RunHooks | None = None, run_id: str | None = None,
                on_run_id: Callable[[str], None] | None = None) -> RunOutcome:
    """Run every cell of `request` (raises SpecError before anything starts when it is invalid)."""
    spec = validate(request)
    cells = expand(spec)
    missing = [b for b in spec["brokers"] if b not in endpoints]
    if missing:
        raise ValueError(f"no endpoint for {', '.join(missing)}")
    hooks = hooks or RunHooks()
    run_id = run_id or new_run_id()
    if on_run_id:
        on_run_id(run_id)
    store.append(run_requested_events(run_id, spec, cells, suite))
    outcome = RunOutcome(run_id, "completed")
    try:
        described = describe_targets(spec["brokers"], endpoints, spec["client"])  # TargetRefused ends the run
        store.append([make_event(run_id, "TargetsReady",
                                 {"targets": environment.with_settings(described, endpoints, spec["client"])})])
        hooks.run_started(run_id, cells)
        for cell in cells:
            result = run_cell(run_id, cell, endpoints[cell["broker"]], store, hooks.cell_progress)
            outcome.cells.append(result)
            hooks.cell_finished(result)
    except KeyboardInterrupt:
        outcome.status = "interrupted"
        _finish(store, run_id, outcome)
        raise
    except Exception as exc:  # a failure outside any cell (e.g. the event store) ends the run
        store.append([make_event(run_id, "RunFailed", {"reason": f"{type(exc).__name__}: {exc}"})])
        raise
    outcome.status = "completed_with_failures" if outcome.failed else "completed"
    _finish(store, run_id, outcome)
    return outcome


def run_completed_event(run_id: str, status: str, completed: int, failed: int, reason: str | None = None) -> dict:
    data = {"status": status, "cells_completed": completed, "cells_failed": failed}
    if reason:
        data["reason"] = reason
    return make_event(run_id, "RunCompleted", data)


def _finish(store: EventStore, run_id: str, outcome: RunOutcome) -> None:
    completed = sum(1 for c in outcome.cells if c.status == "completed")
    store.append([run_completed_event(run_id, outcome.status, completed, len(outcome.cells) - completed)])
