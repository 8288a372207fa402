"""What the CDK app deploys that the service's own code must agree with: the cell workers' sizes.

The app (cdk/constructs/functions.py, cdk/constructs/workers.py) builds the workers from these values and
the cost estimate (brokerbench/cost.py) prices them, so the two cannot drift apart. The RunCell memory is
a deploy-time choice (`-c brokerbench:workerMemoryMb`): the app sets BROKERBENCH_WORKER_MEMORY_MB on every
function to what it deployed, and the estimate reads it from there (locally: the default, or the variable).
"""

from __future__ import annotations

import os

# The RunCell Lambda function: memory buys vCPUs (1,769 MB = 1 vCPU); a cell runs its producers,
# consumers and parent as processes. x86_64: the dependency layer's wheels are built for it.
# 3,008 MB is the most a new account's Lambda quota allows: a larger default would make the first deploy
# roll back in such an account. 10,240 MB is Lambda's own ceiling (asked for with a quota increase).
DEFAULT_WORKER_LAMBDA_MEMORY_MB = 3008
LAMBDA_MEMORY_MB_RANGE = (128, 10240)
WORKER_MEMORY_ENV = "BROKERBENCH_WORKER_MEMORY_MB"
WORKER_LAMBDA_MEMORY_MB = DEFAULT_WORKER_LAMBDA_MEMORY_MB  # the default, as the app deploys it without context
WORKER_LAMBDA_ARCHITECTURE = "x86_64"
# The EC2 worker's launch template: 8 vCPUs, for the cells Lambda cannot take (> 4 processes, or long).
EC2_WORKER_INSTANCE_TYPE = "c7i.2xlarge"


def lambda_memory_mb(value, source: str) -> int:
    """A Lambda memory size in MB from text (context or environment), or a ValueError naming `source`."""
    low, high = LAMBDA_MEMORY_MB_RANGE
    try:
        memory = int(str(value).replace(",", "").replace("_", ""))
    except ValueError:
        raise ValueError(f"{source}={value!r}: a whole number of MB ({low} to {high})") from None
    if not low <= memory <= high:
        raise ValueError(f"{source}={memory}: Lambda memory is {low} to {high} MB")
    return memory


def worker_lambda_memory_mb() -> int:
    """The RunCell function's memory: BROKERBENCH_WORKER_MEMORY_MB (set by the CDK app), else the default."""
    value = os.environ.get(WORKER_MEMORY_ENV)
    if not value:
        return DEFAULT_WORKER_LAMBDA_MEMORY_MB
    return lambda_memory_mb(value, WORKER_MEMORY_ENV)

WORKER_INSTANCE_TYPE_ENV = "BROKERBENCH_WORKER_INSTANCE_TYPE"


def worker_instance_type() -> str:
    """The EC2 workers' instance type: BROKERBENCH_WORKER_INSTANCE_TYPE (set by the CDK app from
    `-c brokerbench:workerInstanceType`), else the default."""
    return os.environ.get(WORKER_INSTANCE_TYPE_ENV) or EC2_WORKER_INSTANCE_TYPE


# -- bounds on what a run may leave running (cdk/app.py's context; docs/deploy.md "Bounds") --------------------------
# keep_targets: true keeps a run's provisioned targets this many hours from their creation; a number of hours asks for
# that long, at most the maximum. Both are the deployer's (-c brokerbench:keepTargetsHours, keepTargetsMaxHours):
# a kept MSK cluster of 3 kafka.m7g.large with 100 GB each bills about $0.65 an hour (3 × $0.204 and storage), a
# forgotten one about $480 a month.
DEFAULT_KEEP_TARGETS_HOURS = 4.0
DEFAULT_KEEP_TARGETS_MAX_HOURS = 24.0
KEEP_TARGETS_HOURS_ENV = "BROKERBENCH_KEEP_TARGETS_HOURS"
KEEP_TARGETS_MAX_HOURS_ENV = "BROKERBENCH_KEEP_TARGETS_MAX_HOURS"
# Runs whose executions may be RUNNING at once (-c brokerbench:maxRunsInFlight): each may create up to six MSK
# brokers, an ElastiCache group and an Amazon MQ broker, and its EC2 workers.
DEFAULT_MAX_RUNS_IN_FLIGHT = 2
MAX_RUNS_IN_FLIGHT_ENV = "BROKERBENCH_MAX_RUNS_IN_FLIGHT"


def hours(value, source: str) -> float:
    """A positive number of hours from text (context or environment), or a ValueError naming `source`."""
    try:
        number = float(str(value).strip())
    except ValueError:
        raise ValueError(f"{source}={value!r}: a number of hours") from None
    if not 0 < number < float("inf"):
        raise ValueError(f"{source}={value!r}: a number of hours above 0")
    return number


def runs_in_flight(value, source: str) -> int:
    """The cap on runs in flight from text, or a ValueError naming `source`."""
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError(f"{source}={value!r}: a whole number of runs (1 or more)") from None
    if number < 1:
        raise ValueError(f"{source}={number}: at least 1 run (0 would refuse every run)")
    return number


def keep_targets_hours() -> float:
    """How long keep_targets: true keeps the targets: BROKERBENCH_KEEP_TARGETS_HOURS (set by the CDK app), else 4."""
    value = os.environ.get(KEEP_TARGETS_HOURS_ENV)
    return hours(value, KEEP_TARGETS_HOURS_ENV) if value else DEFAULT_KEEP_TARGETS_HOURS


def keep_targets_max_hours() -> float:
    """The most keep_targets may ask for: BROKERBENCH_KEEP_TARGETS_MAX_HOURS (set by the CDK app), else 24."""
    value = os.environ.get(KEEP_TARGETS_MAX_HOURS_ENV)
    return hours(value, KEEP_TARGETS_MAX_HOURS_ENV) if value else DEFAULT_KEEP_TARGETS_MAX_HOURS


def max_runs_in_flight() -> int:
    """BROKERBENCH_MAX_RUNS_IN_FLIGHT (set by the CDK app on the API and the schedules' trigger), else 2."""
    value = os.environ.get(MAX_RUNS_IN_FLIGHT_ENV)
    return runs_in_flight(value, MAX_RUNS_IN_FLIGHT_ENV) if value else DEFAULT_MAX_RUNS_IN_FLIGHT
