"""Lambda entry point of the workflow's record targets ready step."""

from brokerbench.workflow import steps


def lambda_handler(event, context):
    return steps.record_targets_ready(event)
