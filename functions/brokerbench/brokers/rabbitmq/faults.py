"""A local RabbitMQ cluster's fault hooks (brokerbench.faults), for quorum queues and streams alike: the node that
leads a cell's first queue or stream, as the management API names it, starting a node again, and whether every node
runs."""

from __future__ import annotations

from ...local.stack import cluster_nodes, current_endpoint, node_restarted
from . import cluster
from .amqp import lane_queue


def nodes(endpoint: dict) -> list[dict]:
    return cluster_nodes(endpoint)


def leader(endpoint: dict, topic: str) -> str | None:
    """The node leading the cell's first lane (its queue or stream: amqp.lane_queue), from the management API."""
    return cluster.leader(current_endpoint(endpoint), lane_queue(topic, 0))


def start_node(endpoint: dict, node: str) -> list[int]:
    """The node started again on its own ports, data and name (cluster.start_node), recorded in the stack."""
    pids = cluster.start_node(current_endpoint(endpoint), node)
    node_restarted(endpoint, node, pids)
    return pids


def whole(endpoint: dict) -> bool:
    """Every node of the cluster listed as running by the management API."""
    current = current_endpoint(endpoint)
    return all(cluster.rejoined(current, n["node"]) for n in current["nodes"])
