"""Starting, watching and cancelling workflow executions: Step Functions in AWS, the local workflow runner here.

The API and a schedule's trigger only talk to the `Starter` port. An execution is named by its run id in both, so
a run id is all the API needs to find, describe or stop one.
"""

from __future__ import annotations

import json
import threading
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from ..events import RUN_EVENTS, EventStore, make_event
from ..local.stack import StackBusy
from ..local.workflow import LocalWorkflow
from .stop import finish_stopped, teardowns


class StarterBusy(RuntimeError):
    """The run cannot start now (locally: another run holds the stack, `run_id`)."""

    def __init__(self, message: str, run_id: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id


@dataclass
class Execution:
    run_id: str
    state: str  # running | ended
    error: str | None = None  # why an execution ended without a run end event (a workflow error)
    request: dict | None = None  # what it was started with: shown while the run has stored nothing yet
    suite: str | None = None
    started_at: str | None = None  # ISO time
    cancelled: bool = False  # ended by a cancel before the run stored anything


class Starter(Protocol):
    def start(self, request: dict, suite: str | None, run_id: str) -> None: ...

    def execution(self, run_id: str) -> Execution | None:
        """What the executor knows of run_id; None when it never started it."""

    def cancel(self, run_id: str, request: dict) -> None:
        """Stop the execution; the run ends `cancelled`, its targets torn down, what it measured kept."""

    def pending(self) -> list[Execution]:
        """Runs started that have stored nothing yet."""

    def preview(self, request: dict) -> dict:
        """Whether a run of `request` would start now, and why not ({admitted, reasons, ...}); nothing reserved."""


class LocalStarter:
    """Runs the workflow in a background thread on the local stack, one run at a time (the stack's run lock)."""

    def __init__(self, stack, reports_dir: Path, store: EventStore) -> None:
        self.stack, self.reports_dir, self.store = stack, Path(reports_dir), store
        self._lock = threading.Lock()
        self._active: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self._started: dict[str, Execution] = {}  # every run this server started, as it was started
        self._ended: dict[str, Execution] = {}

    def start(self, request: dict, suite: str | None, run_id: str) -> None:
        held = ExitStack()
        try:
            held.enter_context(self.stack.run_lock(run_id))
        except StackBusy as exc:
            if not self._finishing():
                raise self._busy() from None
            try:  # the previous run has ended and is only tearing down: this one waits for it
                held.enter_context(self.stack.run_lock(run_id))
            except StackBusy:
                raise self._busy() from None
        cancel = threading.Event()
        started = Execution(run_id, "running", request=request, suite=suite,
                            started_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"))
        thread = threading.Thread(target=self._execute, args=(held, request, suite, run_id, cancel),
                                  name=f"run-{run_id}", daemon=True)
        with self._lock:
            self._active[run_id] = (thread, cancel)
            self._started[run_id] = started
        thread.start()

    def _busy(self) -> StarterBusy:
        holder = self.stack.run_holder() or {}
        run_id = holder.get("run_id")
        return StarterBusy(f"the local stack runs one run at a time, and run {run_id or '?'} is using it: wait for it "
                           "to end or cancel it, then start this one again", run_id)

    def _execute(self, held: ExitStack, request: dict, suite: str | None, run_id: str, cancel: threading.Event) -> None:
        error, cancelled = None, False
        with held:
            try:
                execution = LocalWorkflow(self.stack, self.reports_dir).execute(request, suite=suite, run_id=run_id,
                                                                               cancel=cancel)
                if execution.status == "ABORTED":
                    finish_stopped(self.store, run_id, request, "cancelled")
                    cancelled = True
                elif execution.status != "SUCCEEDED":
                    error = f"{execution.error}: {execution.cause}"
            except Exception as exc:  # the workflow could not run at all: the run says so
                error = f"{type(exc).__name__}: {exc}"
                if self.store.read(run_id, prefix="00#"):
                    self.store.append([make_event(run_id, "RunFailed", {"reason": error})])
        with self._lock:
            self._active.pop(run_id, None)
            self._ended[run_id] = replace(self._started[run_id], state="ended", error=error, cancelled=cancelled)

    def _finishing(self, wait_s: float = 60) -> bool:
        """True once this server's run in progress, whose end is already stored, has finished its teardown."""
        with self._lock:
            active = list(self._active.items())
        for run_id, (thread, _) in active:
            if not any(e["type"] in RUN_EVENTS for e in self.store.read(run_id, prefix="90#")):
                return False
            thread.join(wait_s)
            if thread.is_alive():
                return False
        return bool(active)

    def execution(self, run_id: str) -> Execution | None:
        with self._lock:
            if run_id in self._active:
                return self._started[run_id]
            if run_id in self._ended:
                return self._ended[run_id]
        holder = self.stack.run_holder()  # a run started from the command line on the same stack
        if holder and holder.get("run_id") == run_id:
            return Execution(run_id, "running")
        return None

    def cancel(self, run_id: str, request: dict) -> None:
        with self._lock:
            active = self._active.get(run_id)
        if active is None:
            raise LookupError(f"run {run_id} is not running in this server (a run started from the command line "
                              "is stopped with Ctrl-C there)")
        active[1].set()

    def preview(self, request: dict) -> dict:
        """The local stack runs one run at a time: admitted while no run holds it."""
        holder = self.stack.run_holder()
        if holder is None:
            return {"admitted": True, "reasons": [], "runs_in_flight": [], "max_runs_in_flight": 1}
        return {"admitted": False, "reasons": [str(self._busy())], "runs_in_flight": [holder.get("run_id") or "?"],
                "max_runs_in_flight": 1}

    def pending(self) -> list[Execution]:
        """Runs started here that have stored nothing yet (their workflow is validating and planning)."""
        with self._lock:
            active = [self._started[run_id] for run_id in self._active]
        return [e for e in active if not self.store.read(e.run_id, prefix="00#")]

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for the runs in progress (shutting down)."""
        with self._lock:
            threads = [thread for thread, _ in self._active.values()]
        for thread in threads:
            thread.join(timeout_s)

    def cancel_all(self) -> None:
        with self._lock:
            for _, cancel in self._active.values():
                cancel.set()


class StepFunctionsStarter:
    """StartExecution / DescribeExecution / StopExecution on the deployed state machine. With an `admission`
    (workflow/admission.py: the cap on runs in flight, the account's quotas), a run starts only once it agrees."""

    def __init__(self, client, state_machine_arn: str, store: EventStore, teardowns=None, admission=None) -> None:
        self.client, self.state_machine_arn, self.store = client, state_machine_arn, store
        self.teardowns = teardowns  # StepFunctionsTeardowns (the teardown state machine); built when first needed
        self.admission = admission

    def _arn(self, run_id: str) -> str:
        # arn:aws:states:REGION:ACCOUNT:stateMachine:NAME -> arn:aws:states:REGION:ACCOUNT:execution:NAME:RUN
        prefix, _, name = self.state_machine_arn.rpartition(":stateMachine:")
        return f"{prefix}:execution:{name}:{run_id}"

    def start(self, request: dict, suite: str | None, run_id: str) -> None:
        if self.admission is not None:
            self.admission.admit(request, run_id)  # a slot taken, or RunsInFlight / QuotaTooLow: nothing started
        try:
            self.client.start_execution(stateMachineArn=self.state_machine_arn, name=run_id,
                                        input=json.dumps({"request": request, "suite": suite, "run_id": run_id}))
        except BaseException:
            if self.admission is not None:
                self.admission.release(run_id)  # nothing started: the slot is free again at once
            raise

    def preview(self, request: dict) -> dict:
        if self.admission is None:
            return {"admitted": True, "reasons": [], "runs_in_flight": [], "max_runs_in_flight": None}
        return self.admission.preview(request)

    def execution(self, run_id: str) -> Execution | None:
        try:
            described = self.client.describe_execution(executionArn=self._arn(run_id))
        except self.client.exceptions.ExecutionDoesNotExist:
            return None
        started = json.loads(described.get("input") or "{}")
        common = {"request": started.get("request"), "suite": started.get("suite"),
                  "started_at": described["startDate"].isoformat(timespec="milliseconds")}
        if described["status"] == "RUNNING":
            return Execution(run_id, "running", **common)
        error = None if described["status"] == "SUCCEEDED" else f"{described.get('error')}: {described.get('cause')}"
        return Execution(run_id, "ended", error, cancelled=described["status"] == "ABORTED", **common)

    def pending(self) -> list[Execution]:
        return []  # in AWS the workflow stores the run's request within a second of its start

    def cancel(self, run_id: str, request: dict) -> None:
        # StopExecution skips the workflow's own teardown: the run's end is stored here, and its targets go to the
        # teardown state machine, which waits for a target still being created and deletes it once it can (for as
        # long as that takes, not within this request's 29 s). The ending rule (ABORTED) would start it too.
        self.client.stop_execution(executionArn=self._arn(run_id), error="Cancelled", cause="cancelled by request")
        finish_stopped(self.store, run_id, request, "cancelled", teardowns=self.teardowns or teardowns())
