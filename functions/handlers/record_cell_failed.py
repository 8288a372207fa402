"""Lambda entry point of the workflow's record cell failed step."""

from brokerbench.workflow import steps


def lambda_handler(event, context):
    return steps.record_cell_failed(event)
