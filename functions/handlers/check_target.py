"""Lambda entry point of the workflow's check target step."""

from brokerbench.observability import lambda_entry, logger
from brokerbench.workflow import steps


# The state's payload is the target alone: no run id to correlate with.
@lambda_entry(correlation_id_path=None)
def lambda_handler(event, context):
    target = steps.check_target(event)
    logger.info("target checked", broker=target["broker"], resource=target["resource"], ready=target["ready"],
                timed_out=target["timed_out"])
    return target
