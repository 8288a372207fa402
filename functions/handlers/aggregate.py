"""Lambda entry point of the workflow's aggregate step."""

from brokerbench.workflow import steps


def lambda_handler(event, context):
    return steps.aggregate(event)
