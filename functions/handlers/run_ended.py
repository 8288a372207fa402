"""Lambda entry point of the RunEnded rule: an execution of the run workflow ended (EventBridge "Step Functions
Execution Status Change"). FAILED, ABORTED or TIMED_OUT: the run gets its end and its targets go to the teardown
state machine; every ending releases the run's slot among the runs in flight (brokerbench/workflow/stop.py
run_ended, workflow/admission.py)."""

from brokerbench.observability import lambda_entry, logger
from brokerbench.workflow import wiring
from brokerbench.workflow.admission import Slots
from brokerbench.workflow.stop import run_ended, teardowns


@lambda_entry(correlation_id_path="detail.name")
def lambda_handler(event, context):
    store = wiring.event_store()
    ended = run_ended(store, event["detail"], teardowns(), Slots.of(store))
    if ended.get("ignored"):
        logger.info("execution end ignored", reason=ended["ignored"], execution=event["detail"].get("executionArn"))
        return ended
    if ended["status"] is None:
        logger.info("run ended: slot released", run_id=ended["run_id"], released_slots=ended["released_slots"])
        return ended
    logger.info("run ended early: teardown handed over", run_id=ended["run_id"],
                execution_status=ended["execution_status"], status=ended["status"], teardown=ended["teardown"],
                released_slots=ended["released_slots"])
    return ended
