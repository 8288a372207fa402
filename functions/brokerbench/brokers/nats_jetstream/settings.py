"""NATS JetStream's part of the run request: its endpoint, what the local stack is asked for, the client settings
it reads.

Durability on JetStream is set in two places: the stream's (storage file or memory, replicas; per cell, from the
client settings) and the server's (how often a file stream is synced to disk: `sync_interval`, every 2 minutes by
default, or `always`: each PubAck waits for an fsync). The server's policy is fixed when the server starts: the
local stack starts it with the policy BROKERBENCH_NATS_SYNC names (local.py), and an external target says which
policy it runs with in `sync_interval`, so that the run records it.

A cluster is given by every server's URL in `url`, comma-separated (as the nats tools take it): the clients connect
to any of them and move to another when theirs goes. Locally `provision.nats-jetstream.nodes: 3` runs the cells on
the stack's 3-server cluster (`nats@3`).
"""

from ...targets.provision import nodes_property, provision_schema

SYNC_POLICIES = ["2m", "always"]
MAX_NODES = 3  # locally: the stack's nats@3 (local.py)
URL = "(nats|tls)://[^,\\s]+"

TARGET = {
    "type": "object",
    "additionalProperties": False,
    "required": ["url"],
    "properties": {
        "url": {"description": "The server's client URL, nats://HOST:4222 (tls:// for TLS); a cluster's servers' "
                               "URLs, comma-separated: nats://a:4222,nats://b:4222,nats://c:4222.",
                "type": "string", "pattern": f"^{URL}(,{URL})*$"},
        "sync_interval": {"description": "The server's JetStream sync_interval as it runs (the client cannot ask it): "
                                         "\"2m\" (the server's default: file streams are synced to disk every 2 "
                                         "minutes) or \"always\" (every write is synced before its PubAck). Omitted: "
                                         "recorded as not known.",
                          "enum": SYNC_POLICIES},
        "version": {"type": "string"},
    },
}

PROVISION = provision_schema(
    "nats-server version; locally it must match the local server's version prefix (NATS has no AWS managed service: "
    "in AWS mode give its endpoint in targets.nats-jetstream).",
    nodes=nodes_property("Servers locally: 1 (the default) or a JetStream cluster of 2 or 3 servers on this host "
                         "(nats@3), each its own process, beside the single server.", MAX_NODES),
)

CLIENT = {
    "nats_storage": {
        "description": "NATS JetStream: the cell's stream storage. file: written to the server's store files (synced "
                       "to disk per the server's sync_interval); memory: held in the server's memory only, lost when "
                       "it stops.",
        "enum": ["file", "memory"],
        "default": "file",
    },
    "nats_replicas": {
        "description": "NATS JetStream: replicas of the cell's stream (a PubAck waits for a quorum of them). Omitted: "
                       "3, or the cluster's servers when fewer (1 on a single server, 3 on the local nats@3). More "
                       "than the target's servers is refused before any cell runs.",
        "type": "integer",
        "minimum": 1,
        "maximum": 5,
    },
    "nats_max_in_flight": {
        "description": "NATS JetStream: most publishes awaiting their PubAck in batch mode (single mode: 1). A full "
                       "window makes the next send wait, so a producer that outruns the server shows as publish "
                       "delay.",
        "type": "integer",
        "minimum": 1,
        "maximum": 100000,
        "default": 1000,
    },
    "nats_fetch_batch": {
        "description": "NATS JetStream: most messages one pull request of the consumer fetches.",
        "type": "integer",
        "minimum": 1,
        "maximum": 100000,
        "default": 1000,
    },
}
