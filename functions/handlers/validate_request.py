"""Lambda entry point of the workflow's validate request step."""

from brokerbench.observability import lambda_entry, logger, set_run
from brokerbench.workflow import steps


@lambda_entry
def lambda_handler(event, context):
    run = steps.validate_request(event)
    set_run(run["run_id"])  # the step gives the run its id when the request came without one
    logger.info("request valid", suite=run["suite"], brokers=run["spec"]["brokers"])
    return run
