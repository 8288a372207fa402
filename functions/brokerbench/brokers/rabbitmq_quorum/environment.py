"""What a run's settings mean on RabbitMQ quorum queues: recorded with the targets (TargetsReady) and in report
captions."""

from __future__ import annotations

from functools import partial

import pika

from ..rabbitmq import environment, management

ACK = ("publisher confirm: the message is in the queue's Raft log on a majority of its members, each having "
       "fsynced its write-ahead log first (on one node: this node's log, fsynced)")


def settings_in_force(endpoint: dict, client: dict) -> dict:
    return {
        "acks": "publisher confirm",
        "acks_meaning": ACK,
        "compression": "none (AMQP 0-9-1 does not compress)",
        "client_version": pika.__version__,
        "modes": environment.modes(client, "messages"),
        "consumer": {"prefetch": client["rabbitmq_prefetch"],
                     "acknowledgement": "manual; a poll's deliveries in one multiple ack, sent with the next poll"},
        "persistence": {"queue_type": "quorum", "fsync": True,
                        "replicas": environment.members(management.cluster_size(endpoint)),
                        "meaning": "quorum queues are always durable: every write is fsynced to the Raft log before "
                                   "it counts toward the majority that confirms it"},
        "lanes": "one quorum queue per partition, <topic>-<n>, through the default exchange",
    }

# What RabbitMQ's documentation promises for a confirmed message when a node fails (environment.failover).
FAILOVER = partial(environment.failover, "quorum queue", "once a majority of the queue's members have written "
                   "and fsynced it; RabbitMQ documentation, Quorum Queues")


def durability(client: dict, recorded: dict) -> dict:
    """A confirm waits for a majority of the queue's Raft members to fsync the message: the other members of that
    majority are the replicas waited for (none on one node; one of Amazon MQ's 3-node cluster)."""
    nodes = recorded.get("nodes") or 1
    return {"fsync": True, "replicas": nodes // 2, "memory_only": False, "text": ACK, "failover": FAILOVER(nodes)}


def caption(mode: str, client: dict, recorded: dict) -> str:
    return environment.caption(mode, client, "confirm after fsync on a Raft majority (quorum queue"
                               f"{environment.replicated(recorded)})")
