"""Lambda entry point of the workflow's aggregate step."""

from brokerbench.observability import count, lambda_entry, logger
from brokerbench.workflow import steps


@lambda_entry
def lambda_handler(event, context):
    summary = steps.aggregate(event)
    logger.info("run aggregated", status=summary["status"], cells_completed=summary["cells_completed"],
                cells_failed=summary["cells_failed"])
    count("RunsCompleted")
    if summary["cells_failed"]:
        count("CellsFailed", summary["cells_failed"])  # the one place failed cells are counted
    return summary
