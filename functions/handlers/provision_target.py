"""Lambda entry point of the workflow's provision target step."""

from brokerbench.workflow import steps


def lambda_handler(event, context):
    return steps.provision_target(event)
