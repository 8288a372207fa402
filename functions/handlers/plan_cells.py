"""Lambda entry point of the workflow's plan cells step."""

from brokerbench.observability import lambda_entry, logger
from brokerbench.workflow import steps


@lambda_entry
def lambda_handler(event, context):
    planned = steps.plan_cells(event)
    logger.info("cells planned", cells=len(planned["cells"]), brokers=planned["brokers"],
                max_concurrency=planned["max_concurrency"])
    return planned
