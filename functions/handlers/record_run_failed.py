"""Lambda entry point of the workflow's record run failed step."""

from brokerbench.workflow import steps


def lambda_handler(event, context):
    return steps.record_run_failed(event)
