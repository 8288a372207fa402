"""Adapters chosen from the environment: the same handlers run in Lambda (AWS) and in the local workflow.

BROKERBENCH_MODE            aws (default in Lambda) or local
BROKERBENCH_EVENTS_TABLE    DynamoDB table of events (default brokerbench-events)
BROKERBENCH_DYNAMODB_ENDPOINT  DynamoDB Local's URL (local mode)
BROKERBENCH_REPORTS         a folder (local) or s3://bucket/prefix
BROKERBENCH_NOTIFY          an SNS topic ARN, or a folder for notifications.jsonl (local)
BROKERBENCH_STATE_DIR       the local stack's state folder (local mode)
BROKERBENCH_CALLBACK_URL    the local workflow bridge (local mode: where EC2-kind workers report)
BROKERBENCH_WORKER_LAUNCH_TEMPLATE, BROKERBENCH_WORKER_SUBNET   (AWS mode, set by the CDK app)
Each broker's cloud provider reads its own settings (brokers/<name>/cloud.py).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

PASS_TO_WORKERS = ("BROKERBENCH_MODE", "BROKERBENCH_EVENTS_TABLE", "BROKERBENCH_DYNAMODB_ENDPOINT",
                   "BROKERBENCH_CALLBACK_URL", "BROKERBENCH_STATE_DIR", "AWS_REGION", "AWS_DEFAULT_REGION")


def env(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None:
        raise RuntimeError(f"{name} is not set")
    return value


def local() -> bool:
    return env("BROKERBENCH_MODE", "aws") == "local"


def boto(service: str):
    import boto3

    return boto3.client(service)


def env_list(name: str) -> list[str]:
    """A comma-separated setting as a list."""
    return [item for item in env(name).split(",") if item]


def event_store():
    return _store(env("BROKERBENCH_EVENTS_TABLE", "brokerbench-events"), os.environ.get("BROKERBENCH_DYNAMODB_ENDPOINT"))


@cache
def _store(table: str, endpoint: str | None):
    from .events.dynamodb import DynamoEventStore

    return DynamoEventStore(table, endpoint_url=endpoint)


def local_stack():
    from .local.stack import LocalStack

    return LocalStack(Path(env("BROKERBENCH_STATE_DIR")) if os.environ.get("BROKERBENCH_STATE_DIR") else None)


def provider_problem(broker: str, spec: dict) -> str | None:
    """Why no provider can supply `broker` in this mode (None when one can): the run is refused, not started."""
    from .brokers import UnknownBroker, for_target

    if broker in spec.get("targets", {}):
        return None
    try:
        chosen = for_target(broker)
    except UnknownBroker as exc:
        return str(exc)
    if local() and chosen.local is None:
        return f"{broker} has no local service: give its endpoint in targets.{broker}"
    if not local() and chosen.cloud is None:
        return f"{broker} has no cloud provider: give its endpoint in targets.{broker}"
    return None


def target_provider(broker: str, spec: dict):
    """Where `broker`'s endpoint comes from: the request's targets, the local stack, or its cloud provider."""
    from .brokers import plugin
    from .targets import ExistingTargets, ProvisioningError

    problem = provider_problem(broker, spec)
    if problem:
        raise ProvisioningError(problem)
    if broker in spec.get("targets", {}):
        return ExistingTargets()
    if local():
        from .targets.local import LocalTargets

        return LocalTargets(local_stack())
    return plugin(broker).cloud_targets()


def worker_environment() -> dict[str, str]:
    return {name: os.environ[name] for name in PASS_TO_WORKERS if name in os.environ}


def fleet():
    from .workflow.fleet import Ec2Fleet, LocalProcessFleet

    if local():
        return LocalProcessFleet(worker_environment())
    return Ec2Fleet(boto("ec2"), launch_template=env("BROKERBENCH_WORKER_LAUNCH_TEMPLATE"),
                    subnet=env("BROKERBENCH_WORKER_SUBNET"), environment=worker_environment())


def task_callbacks():
    from .workflow.callbacks import LocalCallbacks, StepFunctionsCallbacks

    if local():
        return LocalCallbacks(env("BROKERBENCH_CALLBACK_URL"))
    return StepFunctionsCallbacks(boto("stepfunctions"))


def reports():
    from .workflow.outputs import FolderReports, S3Reports

    where = env("BROKERBENCH_REPORTS", "reports")
    if where.startswith("s3://"):
        bucket, _, prefix = where[5:].partition("/")
        return S3Reports(boto("s3"), bucket, prefix or "reports")
    return FolderReports(where)


def notifier():
    from .workflow.outputs import FileNotifier, SnsNotifier

    where = env("BROKERBENCH_NOTIFY", env("BROKERBENCH_REPORTS", "reports"))
    if where.startswith("arn:"):
        return SnsNotifier(boto("sns"), where)
    return FileNotifier(where)
