"""Starting, watching and cancelling workflow executions: Step Functions in AWS, the local workflow runner here.

The API only talks to the `Starter` port. An execution is named by its run id in both, so a run id is
all the API needs to find, describe or stop one.
"""

from __future__ import annotations

import json
import threading
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..events import EventStore, make_event
from ..workflow.stop import finish_stopped


class StarterBusy(RuntimeError):
    """The run cannot start now (locally: another run holds the stack)."""


@dataclass
class Execution:
    run_id: str
    state: str  # starting | running | ended
    error: str | None = None  # why an execution ended without a run end event (a workflow error)


class Starter(Protocol):
    def start(self, request: dict, suite: str | None, run_id: str) -> None: ...

    def execution(self, run_id: str) -> Execution | None:
        """What the executor knows of run_id; None when it never started it."""

    def cancel(self, run_id: str, request: dict) -> None:
        """Stop the execution; the run ends `cancelled`, its targets torn down, what it measured kept."""


class LocalStarter:
    """Runs the workflow in a background thread on the local stack, one run at a time (the stack's run lock)."""

    def __init__(self, stack, reports_dir: Path, store: EventStore) -> None:
        self.stack, self.reports_dir, self.store = stack, Path(reports_dir), store
        self._lock = threading.Lock()
        self._active: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self._ended: dict[str, Execution] = {}

    def start(self, request: dict, suite: str | None, run_id: str) -> None:
        from ..local.stack import StackBusy

        held = ExitStack()
        try:
            held.enter_context(self.stack.run_lock(run_id))
        except StackBusy as exc:
            if not self._finishing():
                raise StarterBusy(str(exc)) from None
            try:  # the previous run has ended and is only tearing down: this one waits for it
                held.enter_context(self.stack.run_lock(run_id))
            except StackBusy as again:
                raise StarterBusy(str(again)) from None
        cancel = threading.Event()
        thread = threading.Thread(target=self._execute, args=(held, request, suite, run_id, cancel),
                                  name=f"run-{run_id}", daemon=True)
        with self._lock:
            self._active[run_id] = (thread, cancel)
        thread.start()

    def _execute(self, held: ExitStack, request: dict, suite: str | None, run_id: str, cancel: threading.Event) -> None:
        from ..local.workflow import LocalWorkflow

        error = None
        with held:
            try:
                execution = LocalWorkflow(self.stack, self.reports_dir).execute(request, suite=suite, run_id=run_id,
                                                                               cancel=cancel)
                if execution.status == "ABORTED":
                    finish_stopped(self.store, run_id, request, "cancelled")
                elif execution.status != "SUCCEEDED":
                    error = f"{execution.error}: {execution.cause}"
            except Exception as exc:  # the workflow could not run at all: the run says so
                error = f"{type(exc).__name__}: {exc}"
                if self.store.read(run_id, prefix="00#"):
                    self.store.append([make_event(run_id, "RunFailed", {"reason": error})])
        with self._lock:
            self._active.pop(run_id, None)
            self._ended[run_id] = Execution(run_id, "ended", error)

    def _finishing(self, wait_s: float = 60) -> bool:
        """True once this server's run in progress, whose end is already stored, has finished its teardown."""
        from ..events import RUN_EVENTS

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
                return Execution(run_id, "running")
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
    """StartExecution / DescribeExecution / StopExecution on the deployed state machine."""

    def __init__(self, client, state_machine_arn: str, store: EventStore) -> None:
        self.client, self.state_machine_arn, self.store = client, state_machine_arn, store

    def _arn(self, run_id: str) -> str:
        # arn:aws:states:REGION:ACCOUNT:stateMachine:NAME -> arn:aws:states:REGION:ACCOUNT:execution:NAME:RUN
        prefix, _, name = self.state_machine_arn.rpartition(":stateMachine:")
        return f"{prefix}:execution:{name}:{run_id}"

    def start(self, request: dict, suite: str | None, run_id: str) -> None:
        self.client.start_execution(stateMachineArn=self.state_machine_arn, name=run_id,
                                    input=json.dumps({"request": request, "suite": suite, "run_id": run_id}))

    def execution(self, run_id: str) -> Execution | None:
        try:
            described = self.client.describe_execution(executionArn=self._arn(run_id))
        except self.client.exceptions.ExecutionDoesNotExist:
            return None
        if described["status"] == "RUNNING":
            return Execution(run_id, "running")
        error = None if described["status"] == "SUCCEEDED" else f"{described.get('error')}: {described.get('cause')}"
        return Execution(run_id, "ended", error)

    def cancel(self, run_id: str, request: dict) -> None:
        # StopExecution skips the workflow's own teardown, so the stop does what TeardownTargets would.
        self.client.stop_execution(executionArn=self._arn(run_id), error="Cancelled", cause="cancelled by request")
        finish_stopped(self.store, run_id, request, "cancelled")
