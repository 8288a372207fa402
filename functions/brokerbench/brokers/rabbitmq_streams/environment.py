"""What a run's settings mean on RabbitMQ streams: recorded with the targets (TargetsReady) and in report captions."""

from __future__ import annotations

from functools import partial
from importlib.metadata import version

from ..rabbitmq import environment, management

ACK = ("publish confirm: the stream's leader has written the message to its segment file and a majority of the "
       "stream's replicas have it (on one node: the leader's write alone); no fsync, the OS writes it to disk "
       "later")


def settings_in_force(endpoint: dict, client: dict) -> dict:
    return {
        "acks": "publish confirm",
        "acks_meaning": ACK,
        "compression": "none (no sub-entry batching)",
        "client_version": version("rstream"),
        "modes": environment.modes(client, "messages"),
        "consumer": {"credit_chunks": client["rabbitmq_prefetch"],
                     "offset": "from the first offset; the last offset read is stored under the group's name "
                               "on each commit (the backlog's basis)"},
        "persistence": {"queue_type": "stream", "fsync": False,
                        "replicas": environment.members(management.cluster_size(endpoint)),
                        "meaning": "written to the leader's segment file (page cache) and replicated to a majority "
                                   "before the confirm; streams do not fsync"},
        "lanes": "one stream per partition, <topic>-<n>",
    }

# What RabbitMQ's documentation promises for a confirmed message when a node fails (environment.failover).
FAILOVER = partial(environment.failover, "stream", "once a majority of the stream's replicas have written it, "
                   "not fsynced; RabbitMQ documentation, Streams: a whole cluster's power loss may lose it")


def durability(client: dict, recorded: dict) -> dict:
    """A confirm waits for a majority of the stream's replicas to have written the message, never for an fsync."""
    nodes = recorded.get("nodes") or 1
    return {"fsync": False, "replicas": nodes // 2, "memory_only": False, "text": ACK, "failover": FAILOVER(nodes)}


def caption(mode: str, client: dict, recorded: dict) -> str:
    return environment.caption(mode, client, "confirm after a majority of replicas wrote it, no fsync (stream"
                               f"{environment.replicated(recorded)})")
