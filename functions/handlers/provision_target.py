"""Lambda entry point of the workflow's provision target step."""

from brokerbench.observability import lambda_entry, logger
from brokerbench.workflow import steps


@lambda_entry
def lambda_handler(event, context):
    target = steps.provision_target(event)
    logger.info("target provisioning", broker=target["broker"], provider=target["provider"], ready=target["ready"])
    return target
