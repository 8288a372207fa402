"""A local NATS JetStream cluster's fault hooks (brokerbench.faults): the server that leads a cell's stream, as the
cluster's stream info names it, starting a server again, and whether every server serves."""

from __future__ import annotations

from ...local.stack import cluster_nodes, current_endpoint, node_restarted
from . import cluster


def nodes(endpoint: dict) -> list[dict]:
    return cluster_nodes(endpoint)


def leader(endpoint: dict, topic: str) -> str | None:
    """The server leading the stream of the cell's topic (cluster.leader, asked of every server at once)."""
    return cluster.leader(current_endpoint(endpoint), topic)


def start_node(endpoint: dict, node: str) -> list[int]:
    """The server started again on its own ports and store (cluster.start_node), recorded in the stack."""
    pids = cluster.start_node(current_endpoint(endpoint), node)
    node_restarted(endpoint, node, pids)
    return pids


def whole(endpoint: dict) -> bool:
    """Every server answers and JetStream serves (cluster.serves)."""
    return cluster.serves(current_endpoint(endpoint))
