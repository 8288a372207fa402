"""A run that ended before its workflow did (Ctrl-C, a cancel through the API, or an execution that ended FAILED,
ABORTED or TIMED_OUT in AWS): it gets its end event, and its targets go to the teardown path. What was measured is
kept.

The teardown path is the workflow's own loop (statemachines: TeardownTargets): delete what can be deleted, wait
while a target still being created refuses, ask again until it is gone or the bound runs out
(targets.TEARDOWN_TIMEOUT_S). In AWS that loop runs in the teardown state machine (teardown_run.asl.json),
started by StepFunctionsTeardowns, so a cancel answers within the API's 29 s and the teardown goes on for as long
as it needs. Locally InlineTeardowns runs the same rounds in the process (a local target is gone at once).
"""

from __future__ import annotations

import json
import time

from ..events import RUN_EVENTS, EventStore, make_event
from ..events.run import run_completed_event
from ..settings import boto, env, local
from ..spec import SpecError, validate
from . import steps


REASONS = {"interrupted": "interrupted (Ctrl-C) before the workflow ended", "cancelled": "cancelled by request"}


class InlineTeardowns:
    """The teardown loop in this process: TeardownTarget's rounds for each broker, one after the other."""

    def __init__(self, sleep=time.sleep) -> None:
        self.sleep = sleep

    def start(self, run_id: str, spec: dict) -> list[dict]:
        """Each broker's rounds; one that fails is reported not deleted (as the Map's TargetNotTornDown) and the
        others still go."""
        done = []
        for broker in spec["brokers"]:
            try:
                done.append(self._until_done(run_id, broker, spec))
            except Exception as exc:  # noqa: BLE001 (one target's failure must not keep the others)
                done.append({"broker": broker, "action": "not deleted", "done": False,
                             "not_deleted": {"Error": type(exc).__name__, "Cause": str(exc)}})
        return done

    def _until_done(self, run_id: str, broker: str, spec: dict) -> dict:
        event = {"run_id": run_id, "broker": broker, "spec": spec}
        while True:
            answer = steps.teardown_target(event)
            if answer["done"] or answer["timed_out"]:
                return {"broker": broker, "action": answer["action"], "done": answer["done"]}
            self.sleep(answer["wait_s"])
            event["teardown"] = answer


class StepFunctionsTeardowns:
    """Starts the teardown state machine for a run, as an execution named `<run id>-teardown`: a second start for
    the same run (a cancel, then the ending rule) starts nothing new (Step Functions answers a start with the name
    and input of a running execution with that execution, and one of a closed execution ExecutionAlreadyExists)."""

    def __init__(self, client, state_machine_arn: str | None = None) -> None:
        self.client, self.state_machine_arn = client, state_machine_arn  # None: BROKERBENCH_TEARDOWN_MACHINE_ARN

    def start(self, run_id: str, spec: dict) -> dict:
        if all(broker in spec.get("targets", {}) for broker in spec["brokers"]):  # existing endpoints only
            return {"execution": None, "started": False, "reason": "nothing provisioned (existing endpoints only)"}
        machine_arn = self.state_machine_arn or env("BROKERBENCH_TEARDOWN_MACHINE_ARN")
        name = teardown_execution_name(run_id)
        prefix, _, machine = machine_arn.rpartition(":stateMachine:")
        arn = f"{prefix}:execution:{machine}:{name}"
        try:
            self.client.start_execution(stateMachineArn=machine_arn, name=name,
                                        input=json.dumps({"run": {"run_id": run_id, "spec": spec}}))
        except self.client.exceptions.ExecutionAlreadyExists:
            return {"execution": arn, "started": False}
        return {"execution": arn, "started": True}


def teardowns():
    """Where a run that ended early has its targets torn down: the teardown state machine in AWS
    (BROKERBENCH_TEARDOWN_MACHINE_ARN, set by the CDK app), the same rounds in this process locally."""
    if local():
        return InlineTeardowns()
    return StepFunctionsTeardowns(boto("stepfunctions"))


def teardown_execution_name(run_id: str) -> str:
    return f"{run_id}-teardown"[:80]  # Step Functions' limit on execution names


def record_end(store: EventStore, run_id: str, status: str, reason: str | None = None) -> str:
    """The run's end event, unless it has one (or stored nothing: it never started); returns its final status.

    `status`: interrupted | cancelled (RunCompleted with that status, what was measured kept) or failed
    (RunFailed with `reason`)."""
    events = store.read(run_id, interval_histograms=False)
    end = next((e for e in events if e["type"] in RUN_EVENTS), None)
    if end is not None:
        return "failed" if end["type"] == "RunFailed" else end["data"]["status"]
    if events and status == "failed":
        store.append([make_event(run_id, "RunFailed", {"reason": reason or "the workflow failed"})])
    elif events:
        completed = sum(1 for e in events if e["type"] == "CellCompleted")
        failed = sum(1 for e in events if e["type"] == "CellFailed")
        store.append([run_completed_event(run_id, status, completed, failed, reason or REASONS.get(status))])
    return status


def finish_stopped(store: EventStore, run_id: str, request: dict, status: str, teardowns=None,
                   reason: str | None = None) -> dict:
    """End the run `status` (interrupted | cancelled | failed) unless it already ended; hand its targets to
    `teardowns` (InlineTeardowns by default).

    Returns {"status": the run's final status, "teardown": what the teardown path answered}. Idempotent: a second
    call finds the end, and a teardown of targets already gone finds nothing to delete."""
    final = record_end(store, run_id, status, reason)
    try:
        spec = validate(request)
    except SpecError:  # an invalid request started nothing
        return {"status": final, "teardown": []}
    return {"status": final, "teardown": (teardowns or InlineTeardowns()).start(run_id, spec)}


# How the run ends when its execution ended this way before the workflow stored an end.
ENDINGS = {"FAILED": "failed", "TIMED_OUT": "failed", "ABORTED": "cancelled"}
SUCCEEDED = "SUCCEEDED"  # the workflow ended itself: only the run's slot is released


def run_ended(store: EventStore, detail: dict, teardowns, slots=None) -> dict:
    """An execution of the run workflow ended (the `detail` of EventBridge's "Step Functions Execution Status
    Change"). FAILED, ABORTED or TIMED_OUT: a stop from the console, an execution timeout, or an error no catcher
    takes (States.Runtime, States.DataLimitExceeded) skip the workflow's own TeardownTargets; this gives the run its
    end, if it has none, and hands its targets to the teardown path. For a run whose workflow did tear down, the
    teardown finds nothing left. SUCCEEDED: the workflow stored its end and tore down itself; nothing to do but what
    every ending does: the run's slot among the runs in flight (`slots`, workflow/admission.py) is released.

    The run id is the execution's input's (the API and the schedules always set it), else the execution's name;
    the targets come from the stored request (RunRequested), else the execution's input."""
    status = detail["status"]
    if "/" in detail.get("stateMachineArn", "").rpartition(":stateMachine:")[2]:
        # A Distributed Map's child execution (<machine>/<map run>): one cell of a run still going, not the run.
        return {"run_id": None, "execution_status": status, "status": None, "teardown": [],
                "ignored": "a Distributed Map child execution"}
    if status not in (*ENDINGS, SUCCEEDED):
        raise ValueError(f"detail.status: {status!r} is not one of {sorted((*ENDINGS, SUCCEEDED))}")
    started = json.loads(detail.get("input") or "{}")
    run_id = started.get("run_id") or detail["name"]
    if status == SUCCEEDED:
        ended = {"status": None, "teardown": []}
    else:
        requested = store.read(run_id, prefix="00#run")
        request = requested[0]["data"]["spec"] if requested else started.get("request") or {}
        why = f": {detail['error']}: {detail.get('cause') or 'no cause given'}" if detail.get("error") else ""
        ended = finish_stopped(store, run_id, request, ENDINGS[status], teardowns,
                               reason=f"the workflow's execution ended {status}{why}")
    released = slots.release(run_id) if slots is not None else []
    return {"run_id": run_id, "execution_status": status, **ended, "released_slots": released}
