"""Settings read from the environment: the same handlers run in Lambda (AWS) and in the local workflow.

This module reads the environment and imports nothing of brokerbench: every layer may use it. What the
settings choose (which event store, fleet, report sink) is put together in brokerbench.workflow.wiring.

BROKERBENCH_MODE            aws (default in Lambda) or local
BROKERBENCH_EVENTS_TABLE    DynamoDB table of events (default brokerbench-events)
BROKERBENCH_DYNAMODB_ENDPOINT  DynamoDB Local's URL (local mode)
BROKERBENCH_REPORTS         a folder (local) or s3://bucket/prefix
BROKERBENCH_NOTIFY          an SNS topic ARN, or a folder for notifications.jsonl (local)
BROKERBENCH_STATE_DIR       the local stack's state folder (local mode)
BROKERBENCH_CALLBACK_URL    the local workflow bridge (local mode: where EC2-kind workers report)
BROKERBENCH_WORKER_LAUNCH_TEMPLATE, BROKERBENCH_WORKER_SUBNET   (AWS mode, set by the CDK app)
BROKERBENCH_WORKER_ASSET    s3://bucket/key.zip of the functions/ folder, the layer's lock and its wheels, which an EC2
                            worker's user data installs (AWS mode, set by the CDK app for StartEc2Worker;
                            unset: the instance's image already has /opt/brokerbench/.venv and the code)
BROKERBENCH_TOKEN_PARAMETERS  the SSM parameter path under which StartEc2Worker leaves each EC2 worker's task
                            token for its boot script (AWS mode, set by the CDK app)
BROKERBENCH_TASK_TOKEN      an EC2-kind worker's task token (set for the worker process by its launcher)
BROKERBENCH_LOCAL_HEARTBEAT_S  local mode: the heartbeat window the local bridge enforces on task-token tasks
                            instead of their HeartbeatSeconds (tests use a few seconds); workers beat 4 times in it
Each broker's cloud provider reads the settings its declaration names (brokers/<name>/cloud_access.py,
CloudAccess.environment), which the CDK app sets.
"""

from __future__ import annotations

import os

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
    import boto3  # AWS mode only: reading a setting needs no AWS SDK

    return boto3.client(service)


def env_list(name: str) -> list[str]:
    """A comma-separated setting as a list."""
    return [item for item in env(name).split(",") if item]


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
