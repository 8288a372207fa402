"""Lambda entry point of the workflow's notify step."""

from brokerbench.workflow import steps


def lambda_handler(event, context):
    return steps.notify(event)
