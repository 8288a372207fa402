"""Lambda entry point of the workflow's validate request step."""

from brokerbench.workflow import steps


def lambda_handler(event, context):
    return steps.validate_request(event)
