"""Benchmark targets: where a run's brokers come from, and how they go away again.

A provider provisions a broker for a run (or takes one that exists), reports when it is ready
and tears it down after the run. Resource names derive from the run id, so teardown finds what
provisioning created even when provisioning failed halfway.

Teardown is asked again until it is done (the workflow's TeardownTarget loop): each call answers with the
target's teardown state, one of
  GONE          nothing of the run's is left (deleted, never created, or stopped)
  KEPT          left on purpose (keep_targets, an existing endpoint)
  DELETING      the delete was accepted and the resource is going away
  NOT_DELETABLE the resource is still being created or changed and refuses a delete now: ask again later
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from collections.abc import Callable
from typing import Protocol

from ..spec import kept_hours


class ProvisioningError(RuntimeError):
    """The target cannot be provisioned (bad settings, failed creation): the run fails."""


class TransientProvisioningError(RuntimeError):
    """Worth retrying (throttling, a conflict with a resource still changing state)."""


GONE, KEPT, DELETING, NOT_DELETABLE = "gone", "kept", "deleting", "not deletable yet"
TEARDOWN_DONE = (GONE, KEPT)
# How long the workflow keeps asking, and how often. The bound covers the slowest case: a run that failed or was
# cancelled just after CreateClusterV2. MSK takes 20 to 30 minutes to create a 3-broker cluster (longer at
# times), refusing DeleteCluster until it is ACTIVE, then 10 to 15 minutes to delete it: 90 minutes is about
# twice that. A teardown still not done then fails the run's teardown (StepFailed), and the hourly sweeper
# deletes what is left. Checking once a minute costs about 3 state transitions a minute.
TEARDOWN_TIMEOUT_S = 90 * 60
TEARDOWN_WAIT_S = 60


def torn_down(broker: str, state: str, action: str) -> dict:
    """A provider's answer to teardown: the state (above) and what it did, in words."""
    return {"broker": broker, "state": state, "action": action}


def teardown_found(broker: str, name: str, spec: dict, found: Callable[[], list[tuple[str, str]]],
                   delete: Callable[[str, str], str], *, gone: Callable[[], None] = lambda: None,
                   state_shown: bool = False) -> dict:
    """A cloud provider's teardown, the same for each: KEPT with keep_targets; else every resource of the run that
    `found()` lists, as (id, its provider's state), is deleted with `delete(id, state)` (which answers GONE, DELETING
    or NOT_DELETABLE). The answer is GONE when nothing is left to delete, NOT_DELETABLE while any one refuses a delete
    (the workflow asks again later; `state_shown` adds the provider's states to the words), else DELETING. `gone()`
    runs once the resources are gone or going (what the provider made beside them: a secret)."""
    if spec.get("keep_targets"):
        return torn_down(broker, KEPT, f"kept {name} (keep_targets)")
    resources = found()
    answers = [(delete(resource, state), state) for resource, state in resources]
    refused = [state for answer, state in answers if answer == NOT_DELETABLE]
    if refused:
        return torn_down(broker, NOT_DELETABLE,
                         f"{name} {NOT_DELETABLE}" + (f" ({', '.join(refused)})" if state_shown else ""))
    gone()
    if all(answer == GONE for answer, _ in answers):  # none, or each went away while it was listed
        return torn_down(broker, GONE, "nothing to delete")
    return torn_down(broker, DELETING, f"deleting {name}")


class TargetProvider(Protocol):
    def provision(self, run_id: str, broker: str, spec: dict) -> dict: ...

    def check(self, target: dict) -> dict: ...

    def teardown(self, run_id: str, broker: str, spec: dict) -> dict: ...


class CloudTargetProvider(TargetProvider, Protocol):
    """A provider that creates resources in AWS also lets the hourly sweeper (workflow/sweep.py) find and delete
    what a run left behind."""

    kind: str  # what the sweeper calls its resources ("msk", "elasticache")

    def leftovers(self) -> list[dict]:
        """Its bb-* resources tagged with a run, not being deleted: {kind, name, resource, state, run_id,
        keep_until} each (`leftover`); one whose tags could not be read is listed as `unreadable` (the sweeper reports
        it and goes on)."""

    def delete(self, resource: str, state: str) -> str:
        """Delete one if it can be deleted now: DELETING, GONE or NOT_DELETABLE."""


def unreadable(kind: str, name: str, resource: str, doing: str, exc: Exception) -> dict:
    """A leftover the sweeper lists but could not read (its tags, say): reported with why, never deleted."""
    return {"kind": kind, "name": name, "resource": resource, "state": None, "run_id": None,
            "problem": f"{doing} failed: {type(exc).__name__}: {exc}"}


RUN_TAG = "brokerbench:run"
# On a kept target (keep_targets): when its keep ends, an ISO 8601 UTC time (the hours asked for, counted from its
# creation). The hourly sweeper deletes a kept target once this time has passed and its run has ended
# (workflow/sweep.py); the tag is on the resource, so the bound holds whatever becomes of the run's events.
KEEP_UNTIL_TAG = "brokerbench:keep-until"


def run_tags(run_id: str, spec: dict, now: datetime | None = None) -> dict[str, str]:
    """The tags a provider puts on what it creates for a run: the run, and for kept targets the end of their keep."""
    tags = {RUN_TAG: run_id}
    hours = kept_hours(spec)
    if hours is not None:
        until = (now or datetime.now(timezone.utc)) + timedelta(hours=hours)
        tags[KEEP_UNTIL_TAG] = until.astimezone(timezone.utc).isoformat(timespec="seconds")
    return tags


def leftover(kind: str, name: str, resource: str, state: str, tags: dict) -> dict:
    """One resource a provider's `leftovers` lists for the sweeper (its run from the run tag, its keep-until if any)."""
    return {"kind": kind, "name": name, "resource": resource, "state": state, "run_id": tags[RUN_TAG],
            "keep_until": tags.get(KEEP_UNTIL_TAG)}


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
        return torn_down(broker, KEPT, "kept (existing endpoint)")
