"""Adapters chosen from the environment: the same handlers run in Lambda (AWS) and in the local workflow.

BROKERBENCH_MODE            aws (default in Lambda) or local
BROKERBENCH_EVENTS_TABLE    DynamoDB table of events (default brokerbench-events)
BROKERBENCH_DYNAMODB_ENDPOINT  DynamoDB Local's URL (local mode)
BROKERBENCH_REPORTS         a folder (local) or s3://bucket/prefix
BROKERBENCH_NOTIFY          an SNS topic ARN, or a folder for notifications.jsonl (local)
BROKERBENCH_STATE_DIR       the local stack's state folder (local mode)
BROKERBENCH_CALLBACK_URL    the local workflow bridge (local mode: where EC2-kind workers report)
BROKERBENCH_WORKER_LAUNCH_TEMPLATE, BROKERBENCH_WORKER_SUBNET   (AWS mode, set by the CDK app)
BROKERBENCH_WORKER_ASSET    s3://bucket/key.zip of the functions/ folder and requirements.txt, which an EC2
                            worker's user data installs (AWS mode, set by the CDK app for StartEc2Worker;
                            unset: the instance's image already has /opt/brokerbench/.venv and the code)
BROKERBENCH_TASK_TOKEN      an EC2-kind worker's task token (set for the worker process by its launcher)
BROKERBENCH_LOCAL_HEARTBEAT_S  local mode: the heartbeat window the local bridge enforces on task-token tasks
                            instead of their HeartbeatSeconds (tests use a few seconds); workers beat 4 times in it
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

    # In Lambda the function's own region (AWS_REGION); DynamoDB Local takes any.
    return DynamoEventStore(table, endpoint_url=endpoint, region=os.environ.get("AWS_REGION", "us-east-1"))


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


HEARTBEAT_INTERVAL_S = 60.0  # an EC2 worker's heartbeats; RunCellOnEc2's HeartbeatSeconds (300) allows 4 misses


def local_heartbeat_s() -> float | None:
    """BROKERBENCH_LOCAL_HEARTBEAT_S, when set: the local bridge's heartbeat window for task-token tasks."""
    value = os.environ.get("BROKERBENCH_LOCAL_HEARTBEAT_S")
    if not value:
        return None
    seconds = float(value)
    if seconds <= 0:
        raise RuntimeError(f"BROKERBENCH_LOCAL_HEARTBEAT_S must be positive, not {value!r}")
    return seconds


def heartbeat_interval_s() -> float:
    """How often an EC2-kind worker sends its heartbeat: every 60 s, or 4 times per local heartbeat window."""
    window = local_heartbeat_s() if local() else None
    return min(HEARTBEAT_INTERVAL_S, window / 4) if window else HEARTBEAT_INTERVAL_S


def worker_environment() -> dict[str, str]:
    return {name: os.environ[name] for name in PASS_TO_WORKERS if name in os.environ}


def fleet():
    from .workflow.fleet import Ec2Fleet, LocalProcessFleet

    if local():
        return LocalProcessFleet(worker_environment())
    return Ec2Fleet(boto("ec2"), launch_template=env("BROKERBENCH_WORKER_LAUNCH_TEMPLATE"),
                    subnet=env("BROKERBENCH_WORKER_SUBNET"), environment=worker_environment(),
                    worker_asset=os.environ.get("BROKERBENCH_WORKER_ASSET") or None)


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
