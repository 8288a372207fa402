"""A local Kafka cluster's fault hooks (brokerbench.faults): which node leads a cell's topic, as the cluster's own
metadata says, and starting one node again on its own ports and data."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AdminClient

from ...local.processes import spawn
from ...local.stack import cluster_nodes, node_restarted
from .driver import LOGGED, _security
from .local import broker_count


def _metadata(endpoint: dict, topic: str | None, timeout_s: float):
    """The cluster's metadata from any node that answers (TLS and MSK IAM auth as the endpoint asks); None when
    none answers within the timeout."""
    admin = AdminClient({"bootstrap.servers": endpoint["bootstrap_servers"], "socket.timeout.ms": 2000,
                         **_security(endpoint), **LOGGED})
    try:
        return admin.list_topics(topic, timeout=timeout_s)
    except Exception:  # noqa: BLE001 - no node answered within the timeout: nothing known
        return None


def leader(endpoint: dict, topic: str, timeout_s: float = 5.0) -> str | None:
    """The node.id leading the topic's first partition, from the metadata of any node that answers; None while
    no node leads it (an election) or when no node answers."""
    metadata = _metadata(endpoint, topic, timeout_s)
    if metadata is None:
        return None
    partitions = metadata.topics.get(topic).partitions if topic in metadata.topics else {}
    first = partitions.get(0)
    return str(first.leader) if first is not None and first.leader >= 0 else None


def broker_ids(endpoint: dict, timeout_s: float = 5.0) -> list[str]:
    """The node.ids the cluster's metadata lists now (an empty list when no node answers)."""
    metadata = _metadata(endpoint, None, timeout_s)
    return sorted((str(b) for b in metadata.brokers), key=int) if metadata is not None else []


def nodes(endpoint: dict) -> list[dict]:
    """The cluster's nodes as the stack records them now (a node started again has new pids)."""
    return cluster_nodes(endpoint)


def start_node(endpoint: dict, node: str) -> list[int]:
    """Starts the node again with the command it first ran (its own config: ports, node.id, log dirs), recorded in
    the stack in place of its old process; returns its pid."""
    [entry] = [n for n in nodes(endpoint) if n["node"] == node]
    folder = Path(entry["folder"])
    pids = [spawn(entry["command"], folder, folder / "kafka.log")]
    node_restarted(endpoint, node, pids)
    return pids


def whole(endpoint: dict) -> bool:
    """Whether every node of the cluster is registered and unfenced, as any node's metadata lists them."""
    members = nodes(endpoint)
    return any(broker_count(n["port"]) >= len(members) for n in members)
