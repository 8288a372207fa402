"""What the run's client settings mean on RabbitMQ, shared by its two rows: the in-flight window per mode and the
consumer's prefetch. Each row's own module adds what its acknowledgement means."""

from __future__ import annotations


def modes(client: dict, unit: str) -> dict:
    window = client["rabbitmq_in_flight"]
    return {
        "batch": {"in_flight": window, "meaning": f"up to {window:,} {unit} published and not yet confirmed"},
        "single": {"in_flight": 1, "meaning": f"one {unit[:-1]} in flight: each send waits for its confirm"},
    }


def members(nodes: int | None) -> str:
    """What a queue's or stream's members are on a cluster of `nodes` (unknown: said so)."""
    if nodes is None:
        return "one per node of the cluster (its size unknown: the management API did not answer)"
    return "1, on the one node" if nodes == 1 else f"{nodes}, one on each node of the cluster"


def replicated(recorded: dict) -> str:
    """A caption's note of the replication, where the target is a cluster: ", 3 replicas"."""
    nodes = recorded.get("nodes")
    return f", {nodes} replicas" if isinstance(nodes, int) and nodes > 1 else ""


def caption(mode: str, client: dict, durability: str) -> str:
    meaning = (f"batch = up to {client.get('rabbitmq_in_flight', '?')} unconfirmed" if mode == "batch"
               else "single = one unconfirmed at a time")
    return f"{meaning}, {durability}"


def failover(what: str, how: str, nodes: int) -> dict:
    """What RabbitMQ promises for a confirmed message when one node fails: on 3 nodes or more a confirm means a
    majority has it (`how`), so one node's loss keeps it; on fewer, no majority survives and nothing is promised."""
    if nodes >= 3:
        return {"promised": True, "text": f"{what} on {nodes} nodes: RabbitMQ promises that a confirmed message "
                                          f"survives the loss of one node (confirmed {how})"}
    return {"promised": False, "text": f"{what} on {nodes} node{'s' if nodes > 1 else ''}: no majority survives a "
                                       "node's loss; RabbitMQ promises nothing then"}
