"""A whole run in this process, without the workflow: validate, expand, record the request, measure every cell
one after another, record the end. The integration tests use it to measure cells against brokers they started
(a run proper goes through the workflow's steps: brokerbench.workflow.steps, the local workflow or Step Functions)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from brokerbench import environment
from brokerbench.events import EventStore, make_event, new_run_id
from brokerbench.events.run import run_completed_event, run_requested_events
from brokerbench.spec import expand, validate
from brokerbench.worker.cell import CellOutcome, run_cell
from brokerbench.worker.cell import Progress
from brokerbench.workflow.steps import describe_targets


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


def _finish(store: EventStore, run_id: str, outcome: RunOutcome) -> None:
    completed = sum(1 for c in outcome.cells if c.status == "completed")
    store.append([run_completed_event(run_id, outcome.status, completed, len(outcome.cells) - completed)])
