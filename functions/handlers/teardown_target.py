"""Lambda entry point of the workflow's teardown target step."""

from brokerbench.workflow import steps


def lambda_handler(event, context):
    return steps.teardown_target(event)
