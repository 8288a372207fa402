"""A cell's faults in AWS mode (brokerbench.faults kind reboot): the managed service's own call on the run's target,
made by the cell's supervisor at the spec's time, as the local faults are (worker/faults.py CellFaults, whose clock
and records these share).

The target's endpoint names the managed resource (`managed`, set by the broker's cloud provider when it is ready:
the MSK cluster's ARN, the ElastiCache replication group, the Amazon MQ broker id); the broker's plug-in names the
call and its hooks (registry.CloudFault). Each action records when the request went out (at_s, from the measured
start, the planned time beside it), when the answer came (answered_s), the request and the answer (HTTP status,
request id, the service's own fields), and the node it hit with the leader the broker named before. A call the
service refuses (a reboot while the last one is still under way, a quota, missing permissions) or that cannot be
made is recorded in `failed` with the error's code and message, and the cell goes on measuring: its figures are
then those of a cell without that fault, and say so. The node comes back by the service's own doing: at the end
the cell asks the leader again and waits, up to WHOLE_TIMEOUT_S, until the service's state says it serves again
(MSK ACTIVE, the replication group available with one primary, the Amazon MQ broker RUNNING), read no sooner than
SETTLE_S after the last call, since a service shows a reboot in its state some time after accepting it.

Never run against real AWS (no account here): the calls are checked with botocore's Stubber
(tests/unit/test_cloud_faults.py).
"""

from __future__ import annotations

import time

from .. import faults
from ..registry import plugin
from .faults import SECOND_NS, CellFaults, FaultError

WHOLE_TIMEOUT_S = faults.MANAGED_WHOLE_TIMEOUT_S  # then the cell goes on, cluster_whole_at_end false
SETTLE_S = faults.MANAGED_SETTLE_S
POLL_S = 5.0  # between two reads of the service's state (its API's request rate is limited)
LEADER_WAIT_S = 15.0


def _answer(response: dict) -> dict:
    meta = response.get("ResponseMetadata") or {}
    return {"http_status": meta.get("HTTPStatusCode"), "request_id": meta.get("RequestId"),
            **{k: v for k, v in response.items() if k != "ResponseMetadata"}}


def _error(exc: Exception) -> dict:
    """A botocore ClientError's code, message and status; any other failure by its type and text."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        return {"code": response["Error"].get("Code"), "message": response["Error"].get("Message", ""),
                "http_status": (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")}
    return {"code": type(exc).__name__, "message": str(exc)}


class ManagedFaults(CellFaults):
    """The faults of one cell on a managed target. `client`: the service's boto3 client (made by the hooks at the
    measured start when not given)."""

    whole_timeout_s, settle_s, poll_s, leader_wait_s = WHOLE_TIMEOUT_S, SETTLE_S, POLL_S, LEADER_WAIT_S

    def __init__(self, cell: dict, endpoint: dict, topic: str, client=None) -> None:
        self.client = client
        cloud = plugin(cell["broker"]).cloud
        self.offer = cloud.fault if cloud else None
        super().__init__(cell, endpoint, topic)
        self.failed: list[dict] = []
        self._last_call: float | None = None  # monotonic s of the last accepted call

    @staticmethod
    def _hooks_reference(cell: dict) -> str | None:
        cloud = plugin(cell["broker"]).cloud
        return cloud.fault.hooks if cloud and cloud.fault else None

    def _prepare(self) -> None:
        if self.hooks is None:
            raise FaultError("the target's managed service offers no fault (brokerbench.faults: AWS takes reboot on "
                             "Amazon MSK, ElastiCache and Amazon MQ only)")
        if self.client is None:
            self.client = self.hooks.client()

    def _ask(self, hook, *args, default=None):
        """A hook's answer, or `default` when the service or the broker does not give one now."""
        try:
            return hook(self.client, self.endpoint, *args)
        except Exception:  # noqa: BLE001 - an unanswered question (a node down, an API error) is no answer
            return default

    def _node(self, target: str, leader: str | None) -> str:
        if not self.offer.targets:  # the call acts on the whole broker
            return self.hooks.nodes(self.client, self.endpoint)[0]
        if target == "leader":
            if leader is None:
                raise FaultError(f"no node led {self.topic} when the fault came (the broker named none)")
            return leader
        if target == "follower":
            others = [n for n in self._ask(self.hooks.nodes, default=[]) if n != leader]
            if not others:
                raise FaultError(f"no follower of {self.topic} is listed to fault")
            return others[0]
        return target

    def _run(self, step: faults.Step) -> None:
        if step.kind not in faults.MANAGED:
            raise FaultError(f"{step.kind} is not a managed service's fault (in AWS a fault is kind reboot)")
        leader = self._ask(self.hooks.leader, self.topic)
        node = self._node(step.target, leader)
        at = time.monotonic_ns()  # the request goes out
        try:
            request, response = self.hooks.reboot(self.client, self.endpoint, node)
        except Exception as exc:  # noqa: BLE001 - refused or not made: recorded, and the cell goes on
            self._record(step, at, leader, nodes=[node])
            failed = self.records.pop()
            self.failed.append({**failed, "call": self.offer.call, "error": _error(exc)})
            return
        answered = time.monotonic_ns()
        self._last_call = time.monotonic()
        self._record(step, at, leader, nodes=[node])
        self.records[-1].update(call=self.offer.call, request=request, response=_answer(response),
                                answered_s=round((answered - self.measure_start) / SECOND_NS, 6))

    def finish(self) -> dict | None:
        """The leader the fault left, and the service serving again (module docstring); nothing to restore: the
        service brings its node back itself. None for a cell without faults."""
        if not self._stop_clock():
            return None
        leader = self._ask(self.hooks.leader, self.topic)
        deadline = time.monotonic() + (self.leader_wait_s if self.offer.targets else 0)
        while leader is None and time.monotonic() < deadline:
            time.sleep(min(0.5, self.poll_s))
            leader = self._ask(self.hooks.leader, self.topic)
        whole = None
        if self.client is not None and self._last_call is None:  # no call accepted: nothing to wait for
            whole = self._ask(self.hooks.whole, default=False)
        elif self.client is not None:
            deadline = time.monotonic() + self.whole_timeout_s
            while True:
                settled = time.monotonic() >= self._last_call + self.settle_s
                whole = settled and self._ask(self.hooks.whole, default=False)
                if whole or time.monotonic() >= deadline:
                    break
                time.sleep(self.poll_s)
        return {"applied": self.records, "failed": self.failed, "restored_at_end": [], "leader_at_end": leader,
                "cluster_whole_at_end": whole}


def for_cell(cell: dict, endpoint: dict, topic: str):
    """The cell's faults: a managed service's calls on a managed target (its endpoint names it), else the local
    cluster's signals."""
    if endpoint.get("managed"):
        return ManagedFaults(cell, endpoint, topic)
    return CellFaults(cell, endpoint, topic)
