"""Lambda entry point of the workflow's notify step."""

from brokerbench.observability import lambda_entry, logger
from brokerbench.workflow import steps


@lambda_entry
def lambda_handler(event, context):
    sent = steps.notify(event)
    logger.info("notified", message_id=sent["message_id"], failed_cells=len(event["check"]["failed_cells"]),
                regressions=len(event["check"]["regressions"]))
    return sent
