"""Lambda entry point of the workflow's record run failed step."""

from brokerbench.observability import count, lambda_entry, logger
from brokerbench.workflow import steps


@lambda_entry
def lambda_handler(event, context):
    if event.get("step"):  # a step after the run's end failed (Notify, TeardownTargets): not the run
        recorded = steps.record_step_failed(event)
        logger.warning("step failed", step=event["step"], error=(event.get("failure") or {}).get("Error"),
                       recorded=recorded["recorded"])
        return recorded
    recorded = steps.record_run_failed(event)
    logger.warning("run failed", error=(event.get("failure") or {}).get("Error"), recorded=recorded["recorded"])
    if recorded["recorded"]:  # a retried step, or a run that already ended, is not a new failure
        count("RunsFailed")
    return recorded
