"""Lambda entry point of the workflow's start ec2 worker step."""

from brokerbench.workflow import steps


def lambda_handler(event, context):
    return steps.start_ec2_worker(event)
