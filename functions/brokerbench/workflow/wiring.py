"""The composition root: the adapters the settings (brokerbench.settings) choose, for the workflow's steps,
the API and the EC2 worker's entry point. Only the application layer and the entry points import it; the
adapters it puts together import settings, never this module."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from .. import faults
from ..registry import UnknownBroker, for_target, plugin
from ..events.dynamodb import from_environment
from ..local.stack import LocalStack
from ..settings import boto, env, local, worker_environment
from ..targets import ExistingTargets, ProvisioningError
from ..targets.local import LocalTargets
from .callbacks import LocalCallbacks, StepFunctionsCallbacks
from .fleet import Ec2Fleet, LocalProcessFleet, TokenParameters
from .outputs import FileNotifier, FolderReports, S3Reports, SnsNotifier


def event_store():
    """The DynamoDB event store the settings name (one per table and endpoint)."""
    return from_environment()


def local_stack() -> LocalStack:
    return LocalStack(Path(env("BROKERBENCH_STATE_DIR")) if os.environ.get("BROKERBENCH_STATE_DIR") else None)


def provider_problem(broker: str, spec: dict) -> str | None:
    """Why no provider can supply `broker` in this mode (None when one can): the run is refused, not started."""
    if not local() and (missing := missing_client(broker, spec)):
        return missing
    if found := fault_problems(broker, spec):
        return "; ".join(f"{field}: {message}" for field, message in found)
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


def fault_problems(broker: str, spec: dict) -> list[tuple[str, str]]:
    """What this mode refuses of the request's faults for `broker` (brokerbench.faults): a reboot locally; in AWS
    every kind but reboot, and a reboot on a broker whose managed service offers none (or whose clients do not
    follow a failover: the same rule as a local cluster's hooks)."""
    if not spec.get("faults"):
        return []
    if local():
        return faults.local_problems(spec)
    try:
        chosen = for_target(broker)
    except UnknownBroker:
        return []  # provider_problem names it
    offer = chosen.cloud.fault if chosen.cloud and chosen.cluster else None
    return faults.aws_problems({**spec, "brokers": [broker]}, {broker: (chosen.cloud.service, offer) if offer else None})


def missing_client(broker: str, spec: dict) -> str | None:
    """Why `broker`'s driver cannot load here (None when it can): in AWS, a client library the Lambda layer and the
    EC2 worker leave out (cdk/bundling.py LAYER_LEAVES_OUT: pulsar-client), even for an existing endpoint."""
    try:
        chosen = for_target(broker, spec.get("targets", {}).get(broker))
    except UnknownBroker:
        return None  # provider_problem names it
    try:
        importlib.import_module(chosen.driver.partition(":")[0])
    except ImportError as exc:
        return (f"{broker} cannot run in AWS: its client library is not deployed with the workers "
                f"(requirements-lambda.txt leaves it out; {exc})")
    return None


def target_provider(broker: str, spec: dict):
    """Where `broker`'s endpoint comes from: the request's targets, the local stack, or its cloud provider."""
    problem = provider_problem(broker, spec)
    if problem:
        raise ProvisioningError(problem)
    if broker in spec.get("targets", {}):
        return ExistingTargets()
    if local():
        return LocalTargets(local_stack())
    return plugin(broker).cloud_targets()


def fleet():
    if local():
        return LocalProcessFleet(worker_environment())
    return Ec2Fleet(boto("ec2"), launch_template=env("BROKERBENCH_WORKER_LAUNCH_TEMPLATE"),
                    subnet=env("BROKERBENCH_WORKER_SUBNET"), environment=worker_environment(),
                    tokens=TokenParameters(boto("ssm"), env("BROKERBENCH_TOKEN_PARAMETERS")),
                    worker_asset=os.environ.get("BROKERBENCH_WORKER_ASSET") or None)


def task_callbacks():
    if local():
        return LocalCallbacks(env("BROKERBENCH_CALLBACK_URL"))
    return StepFunctionsCallbacks(boto("stepfunctions"))


def reports():
    where = env("BROKERBENCH_REPORTS", "reports")
    if where.startswith("s3://"):
        bucket, _, prefix = where[5:].partition("/")
        return S3Reports(boto("s3"), bucket, prefix or "reports")
    return FolderReports(where)


def api_url() -> str | None:
    """The API's base URL, for the links a notification gives (BROKERBENCH_API_URL; None: the links are paths)."""
    return os.environ.get("BROKERBENCH_API_URL") or None


def notifier():
    where = env("BROKERBENCH_NOTIFY", env("BROKERBENCH_REPORTS", "reports"))
    if where.startswith("arn:"):
        return SnsNotifier(boto("sns"), where)
    return FileNotifier(where)
