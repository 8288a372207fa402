"""Lambda entry point of the workflow's plan cells step."""

from brokerbench.workflow import steps


def lambda_handler(event, context):
    return steps.plan_cells(event)
