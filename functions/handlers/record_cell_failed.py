"""Lambda entry point of the workflow's record cell failed step."""

from brokerbench.observability import lambda_entry, logger
from brokerbench.workflow import steps


@lambda_entry
def lambda_handler(event, context):
    # Failed cells are counted once, by Aggregate: most fail inside RunCell and never come here.
    recorded = steps.record_cell_failed(event)
    logger.warning("cell failed", cell_id=recorded["cell_id"], error=(event.get("error") or {}).get("Error"),
                   topics_removed=recorded["topics_removed"])
    return recorded
