"""Lambda entry point of the RunEnded rule: an execution of the run workflow ended (EventBridge "Step Functions
Execution Status Change"). FAILED, ABORTED or TIMED_OUT: the run gets its end and its targets go to the teardown
state machine; every ending releases the run's slot among the runs in flight (brokerbench/workflow/stop.py
run_ended, workflow/admission.py). SUCCEEDED: a schedule still building its baseline (brokerbench/schedules.py
catch_up) gets its next run, through the schedule trigger function, as EventBridge Scheduler would invoke it."""

import json
from datetime import datetime, timezone

import boto3

from brokerbench import schedules, settings
from brokerbench.observability import lambda_entry, logger
from brokerbench.workflow import wiring
from brokerbench.workflow.admission import Slots
from brokerbench.workflow.stop import run_ended, teardowns

TRIGGER_FUNCTION_ENV = "BROKERBENCH_SCHEDULE_TRIGGER_FUNCTION"


@lambda_entry(correlation_id_path="detail.name")
def lambda_handler(event, context):
    store = wiring.event_store()
    ended = run_ended(store, event["detail"], teardowns(), Slots.of(store))
    if ended.get("ignored"):
        logger.info("execution end ignored", reason=ended["ignored"], execution=event["detail"].get("executionArn"))
        return ended
    if ended["status"] is None:
        logger.info("run ended: slot released", run_id=ended["run_id"], released_slots=ended["released_slots"])
        if event["detail"].get("status") == "SUCCEEDED":
            try:
                ended["baseline_runs"] = catch_up(store, ended["run_id"])
            except Exception as exc:  # noqa: BLE001 (the slot is released; the baseline goes on at the next cron time)
                logger.exception("baseline run not handed on", run_id=ended["run_id"])
                ended["baseline_runs_error"] = str(exc) or type(exc).__name__
        return ended
    logger.info("run ended early: teardown handed over", run_id=ended["run_id"],
                execution_status=ended["execution_status"], status=ended["status"], teardown=ended["teardown"],
                released_slots=ended["released_slots"])
    return ended


def catch_up(store, run_id: str) -> list[dict]:
    """Each schedule whose baseline run `run_id` was, and that needs another: its due time handed to the schedule
    trigger function (asynchronously: it claims the due time, so a second delivery starts nothing)."""
    handed = []
    for name, due_at in schedules.catch_ups_after(store, run_id, schedules.deployed(), datetime.now(timezone.utc)):
        payload = {"schedule": name, "due_at": schedules.iso(due_at)}
        boto3.client("lambda").invoke(FunctionName=settings.env(TRIGGER_FUNCTION_ENV), InvocationType="Event",
                                      Payload=json.dumps(payload).encode())
        logger.info("baseline run handed to the schedule trigger", run_id=run_id, **payload)
        handed.append(payload)
    return handed

