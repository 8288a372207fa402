"""Lambda entry point of the RunEnded rule: an execution of the run workflow ended FAILED, ABORTED or TIMED_OUT
(EventBridge "Step Functions Execution Status Change"). The run gets its end and its targets go to the teardown
state machine (brokerbench/workflow/stop.py run_ended)."""

from brokerbench.observability import lambda_entry, logger
from brokerbench.workflow import wiring
from brokerbench.workflow.stop import run_ended, teardowns


@lambda_entry(correlation_id_path="detail.name")
def lambda_handler(event, context):
    ended = run_ended(wiring.event_store(), event["detail"], teardowns())
    if ended.get("ignored"):
        logger.info("execution end ignored", reason=ended["ignored"], execution=event["detail"].get("executionArn"))
        return ended
    logger.info("run ended early: teardown handed over", run_id=ended["run_id"],
                execution_status=ended["execution_status"], status=ended["status"], teardown=ended["teardown"])
    return ended
