"""Lambda entry point of the workflow's run cell step."""

from brokerbench.observability import lambda_entry, logger
from brokerbench.workflow import steps


@lambda_entry
def lambda_handler(event, context):
    outcome = steps.run_cell(event)
    logger.info("cell ran", cell_id=outcome["cell_id"], status=outcome["status"], reason=outcome.get("reason"))
    return outcome
