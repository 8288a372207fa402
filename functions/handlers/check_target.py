"""Lambda entry point of the workflow's check target step."""

from brokerbench.workflow import steps


def lambda_handler(event, context):
    return steps.check_target(event)
