"""Benchmark targets: where a run's brokers come from, and how they go away again.

A provider provisions a broker for a run (or takes one that exists), reports when it is ready
and tears it down after the run. Resource names derive from the run id, so teardown finds what
provisioning created even when provisioning failed halfway.
"""

from __future__ import annotations

import time
from typing import Protocol


class ProvisioningError(RuntimeError):
    """The target cannot be provisioned (bad settings, failed creation): the run fails."""


class TransientProvisioningError(RuntimeError):
    """Worth retrying (throttling, a conflict with a resource still changing state)."""


class TargetProvider(Protocol):
    def provision(self, run_id: str, broker: str, spec: dict) -> dict: ...

    def check(self, target: dict) -> dict: ...

    def teardown(self, run_id: str, broker: str, spec: dict) -> dict: ...


def raise_client_error(exc, transient_codes, doing: str):
    """A provider's AWS error as ours: transient ones are retried by the workflow, the rest fail the run."""
    code = exc.response["Error"]["Code"]
    message = f"{doing}: {code}: {exc.response['Error'].get('Message', '')}"
    if code in transient_codes:
        raise TransientProvisioningError(message) from None
    raise ProvisioningError(message) from None


def resource_name(run_id: str, broker: str) -> str:
    """Valid for MSK clusters and ElastiCache replication groups (lowercase, starts with a letter, ≤ 40): the
    broker's first word ("redis" of "redis-streams") keeps it short."""
    return f"bb-{run_id.lower()}-{broker.split('-')[0]}"


def target(broker: str, provider: str, *, ready: bool, endpoint: dict | None = None, resource: str | None = None,
           timeout_s: float = 0, started_at: float | None = None) -> dict:
    started_at = time.time() if started_at is None else started_at
    return {"broker": broker, "provider": provider, "resource": resource, "ready": ready, "timed_out": False,
            "endpoint": endpoint, "started_at": started_at, "deadline": started_at + timeout_s}


def still_waiting(current: dict) -> dict:
    return {**current, "ready": False, "timed_out": time.time() > current["deadline"]}


class ExistingTargets:
    """Endpoints given in the request: used as they are, never created or deleted."""

    def provision(self, run_id: str, broker: str, spec: dict) -> dict:
        return target(broker, "existing", ready=True, endpoint=spec["targets"][broker])

    def check(self, current: dict) -> dict:
        return {**current, "ready": True}

    def teardown(self, run_id: str, broker: str, spec: dict) -> dict:
        return {"broker": broker, "action": "kept (existing endpoint)"}
