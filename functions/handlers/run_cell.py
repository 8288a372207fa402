"""Lambda entry point of the workflow's run cell step."""

from brokerbench.workflow import steps


def lambda_handler(event, context):
    return steps.run_cell(event)
