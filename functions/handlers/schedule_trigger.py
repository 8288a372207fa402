"""Lambda entry point of a schedule's due time: EventBridge Scheduler invokes it with
{"schedule": NAME, "due_at": "<aws.scheduler.scheduled-time>"}; it claims the due time, starts the run
(an execution named by the run id, as the API starts one) and stores the outcome."""

from datetime import datetime

import boto3

from brokerbench import schedules, settings
from brokerbench.workflow import wiring
from brokerbench.workflow.admission import Admission
from brokerbench.workflow.starter import StepFunctionsStarter
from brokerbench.observability import lambda_entry, logger


@lambda_entry
def lambda_handler(event, context):
    store = wiring.event_store()
    sfn, machine = boto3.client("stepfunctions"), settings.env("BROKERBENCH_STATE_MACHINE_ARN")
    # The cap on runs in flight and the quota checks (workflow/admission.py): a refused start is stored as the due
    # time's outcome not_started, with the refusal (the runs in flight, or the quota) as its reason.
    starter = StepFunctionsStarter(sfn, machine, store, admission=Admission.from_environment(sfn, machine, store))
    due_at = datetime.fromisoformat(event["due_at"].replace("Z", "+00:00"))
    result = schedules.trigger(event["schedule"], due_at, store, starter.start)
    logger.info("schedule triggered", **result)
    if result["outcome"] == "not_started":  # the schedule's retry policy and its alarm hear of it
        raise RuntimeError(f"schedule {event['schedule']} at {result['due_at']}: run not started: {result['reason']}")
    return result
