"""A local Redis cluster's fault hooks (brokerbench.faults): the master as the Sentinels name it (it leads every
stream key), a node started again, and whether every node is back in its place (a master the Sentinels agree on,
with every other node its connected replica)."""

from __future__ import annotations

from ...local.stack import cluster_nodes, current_endpoint, node_restarted
from . import cluster


def nodes(endpoint: dict) -> list[dict]:
    return cluster_nodes(endpoint)


def leader(endpoint: dict, topic: str) -> str | None:
    """The master a majority of the Sentinels name without seeing it down (cluster.leader); None in a failover."""
    return cluster.leader(current_endpoint(endpoint), topic)


def start_node(endpoint: dict, node: str) -> list[int]:
    """The node started again with its own config and data (cluster.start_node), recorded in the stack; Sentinel
    makes a returning master a replica of the one it promoted."""
    pids = cluster.start_node(current_endpoint(endpoint), node)
    node_restarted(endpoint, node, pids)
    return pids


def whole(endpoint: dict) -> bool:
    """A master the Sentinels agree on, and every other node its replica with the link up (each node's ROLE)."""
    current = current_endpoint(endpoint)
    master = cluster.leader(current, "")
    if master is None:
        return False
    try:
        roles = [cluster.role(current, n["node"]) for n in current["nodes"] if n["node"] != master]
    except (OSError, ValueError):
        return False
    return all(r == ("slave", master, "connected") for r in roles)
