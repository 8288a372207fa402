"""Lambda entry point of the workflow's start ec2 worker step."""

from brokerbench.observability import lambda_entry, logger
from brokerbench.workflow import steps


@lambda_entry
def lambda_handler(event, context):
    launched = steps.start_ec2_worker(event)
    logger.info("worker launched", cell_id=event["cell"]["cell_id"], worker=launched)
    return launched
