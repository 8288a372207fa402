"""The broker's own view of a local RabbitMQ cluster (`rabbitmq@3`, brokers/rabbitmq/local.py), and starting one of its
nodes again: what a fault inside a cell picks its node by, and what tells its effect.

A cell's lane is a queue (rabbitmq-quorum) or a stream (rabbitmq-streams) named `<topic>-<n>` (amqp.lane_queue).
Which node leads it is asked of the management API (GET /api/queues/<vhost>/<name>), of any node that answers: the
record's `leader` (a quorum queue's Raft leader), or its `node` (3.10 gives a stream's writer there, with no
`leader`). The record is the broker's queue table, which a new leader updates once it is elected: until then it
still names the old one. So a leader the same record does not list `online` (its members whose Raft server runs),
or that the API does not list as a running node, leads nothing: `leader` answers None, as during an election.
"""

from __future__ import annotations

import time

from ...local.processes import StackError, port_answers
from . import management

POLL_S = 0.2


def node_entry(endpoint: dict, node: str) -> dict:
    """The endpoint's entry for `node` (its name as RabbitMQ gives it); StackError naming the nodes it has."""
    for entry in endpoint.get("nodes") or ():
        if entry["node"] == node:
            return entry
    known = ", ".join(entry["node"] for entry in endpoint.get("nodes") or ()) or "none: not a local cluster"
    raise StackError(f"no RabbitMQ node {node!r} in this endpoint (its nodes: {known})")


def leader_of(record: dict | None, running: list[str] | None) -> str | None:
    """The node that leads a queue or stream, from its API record and the running nodes; None while none does (no
    record, no leader named, or one that is not online or not running)."""
    if not record:
        return None
    leader = record.get("leader") or record.get("node")
    if not leader or leader not in (record.get("online") or [leader]):
        return None
    if running is not None and leader not in running:
        return None
    return leader


def leader(endpoint: dict, name: str, timeout_s: float = 5.0) -> str | None:
    """The node that leads queue or stream `name`, as the broker says (module docstring); None while none does, or
    when no node's API answers within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    try:
        record = management.queue(endpoint, name, timeout_s)
        running = management.running_nodes(endpoint, max(0.5, deadline - time.monotonic()))
    except management.ManagementError:
        return None
    return leader_of(record, running)


def members(endpoint: dict, name: str, timeout_s: float = 5.0) -> list[str] | None:
    """The nodes that hold a member (a Raft member, a stream replica) of queue or stream `name`, as the API says;
    None until it says (a stream's members come with its first statistics, about a second after it is declared)."""
    try:
        record = management.queue(endpoint, name, timeout_s)
    except management.ManagementError:
        return None
    return sorted(record["members"]) if record and record.get("members") else None


def wait_for_leader(endpoint: dict, name: str, timeout_s: float, other_than: str | None = None) -> str | None:
    """The leader of `name` once one (other than `other_than`) leads it, asked every POLL_S for up to timeout_s;
    None if none did by then."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = leader(endpoint, name, timeout_s=max(0.5, min(5.0, deadline - time.monotonic())))
        if found is not None and found != other_than:
            return found
        if time.monotonic() >= deadline:
            return None
        time.sleep(POLL_S)


def start_node(endpoint: dict, node: str) -> list[int]:
    """Start `node` of a running local cluster again (after it was killed or stopped) on its own ports, data and
    name, and return its new pids. It rejoins the cluster its data names by itself; rejoined(endpoint, node) tells
    when. StackError when it still runs (its AMQP listener answers): a paused node is resumed, not started."""
    from .local import spawn_node  # the local service (its Debian paths) only where a node is started

    entry = node_entry(endpoint, node)
    if port_answers(entry["port"]):
        raise StackError(f"RabbitMQ node {node} is still running (127.0.0.1:{entry['port']} answers)")
    return [spawn_node(entry)]


def rejoined(endpoint: dict, node: str) -> bool:
    """Whether the broker lists `node` as a running member of the cluster again."""
    return node in (management.running_nodes(endpoint) or ())
