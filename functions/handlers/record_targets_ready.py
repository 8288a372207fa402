"""Lambda entry point of the workflow's record targets ready step."""

from brokerbench.observability import lambda_entry, logger
from brokerbench.workflow import steps


@lambda_entry
def lambda_handler(event, context):
    ready = steps.record_targets_ready(event)
    logger.info("targets ready", brokers=sorted(ready["endpoints"]))
    return ready
