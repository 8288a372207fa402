"""Lambda entry point of the workflow's teardown target step."""

from brokerbench.observability import lambda_entry, logger
from brokerbench.workflow import steps


@lambda_entry
def lambda_handler(event, context):
    done = steps.teardown_target(event)
    logger.info("target teardown round", broker=done["broker"], state=done["state"], action=done["action"],
                done=done["done"], timed_out=done["timed_out"])
    return done
