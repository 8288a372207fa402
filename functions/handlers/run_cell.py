"""Lambda entry point of the workflow's run cell step."""

from brokerbench.observability import lambda_entry, logger
from brokerbench.workflow import steps


@lambda_entry
def lambda_handler(event, context):
    # The local workflow's context carries its Ctrl-C and cancel (`stop`); Lambda's has none: in AWS a cell stops
    # on its run's end (worker/run_end.py).
    outcome = steps.run_cell(event, stop=getattr(context, "stop", None))
    logger.info("cell ran", cell_id=outcome["cell_id"], status=outcome["status"], reason=outcome.get("reason"))
    return outcome
