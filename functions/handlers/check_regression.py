"""Lambda entry point of the workflow's check regression step."""

from brokerbench.observability import count, lambda_entry, logger
from brokerbench.workflow import steps


@lambda_entry
def lambda_handler(event, context):
    check = steps.check_regression(event)
    logger.info("regressions checked", baseline_run_id=check["baseline_run_id"],
                regressions=len(check["regressions"]), failed_cells=len(check["failed_cells"]), notify=check["notify"])
    if check["regressions"]:
        count("RegressionsFound", len(check["regressions"]))
    return check
