"""Kafka's part of the run request: its endpoint, what is provisioned for it, the client settings it reads.

Spend guards on what a run may provision on Amazon MSK: the broker types are those priced in prices.json
beside this module (so every run's brokers are priced; add a price to allow another type), at most
MAX_NODES brokers of at most MAX_VOLUME_GB each. MSK has no IAM condition key for the broker type or count,
so this schema is the only guard there (docs/deploy.md).
"""

import json
from pathlib import Path

from ...targets.provision import nodes_property, provision_schema

INSTANCE_TYPES = sorted(json.loads(Path(__file__).with_name("prices.json").read_text())["broker_hour"])
MAX_NODES = 6  # two brokers per AZ over the VPC's three; locally at most 3 (a JVM each)
MAX_VOLUME_GB = 1000  # per broker: 6 x 1,000 GB is about $0.82 an hour of storage

NODES_DESCRIPTION = ("Broker nodes. Locally 1 (the default) or a cluster of 2 or 3 nodes on this host, a JVM "
                     "each (512 MB of heap), beside the single node. On Amazon MSK 3 by default, a multiple of "
                     f"the availability zones of the client subnets (3 or {MAX_NODES}); at most {MAX_NODES}, a spend "
                     "guard.")

TARGET = {
    "type": "object",
    "additionalProperties": False,
    "required": ["bootstrap_servers"],
    "properties": {
        "bootstrap_servers": {"type": "string", "minLength": 1},
        "version": {"type": "string"},
    },
}

PROVISION = provision_schema(
    "Kafka version; omitted: the provider's default (MSK 3.9.x; locally whatever is installed). Locally a given "
    "version must match the local Kafka's version prefix.",
    instance_type={"description": "Amazon MSK broker type: one priced in brokers/kafka/prices.json (a spend guard: "
                                  "every run's brokers are priced).",
                   "enum": INSTANCE_TYPES, "default": "kafka.m7g.large"},
    nodes=nodes_property(NODES_DESCRIPTION, MAX_NODES),
    volume_gb={"description": f"EBS storage per MSK broker in GB; at most {MAX_VOLUME_GB:,}, a spend guard.",
               "type": "integer", "minimum": 1, "maximum": MAX_VOLUME_GB, "default": 100},
)

CLIENT = {
    "acks": {
        "description": "Kafka acks (default all: the Kafka client's own default and OpenMessaging Benchmark's; every "
                       "replica in sync has the message before it counts as published). Redis has no equivalent: an "
                       "XADD is answered once the entry is in memory, and its persistence is Redis's own setting (AOF "
                       "and appendfsync, recorded in TargetsReady).",
        "enum": ["0", "1", "all"],
        "default": "all",
    },
    "linger_ms": {
        "description": "Kafka linger.ms in batch mode (single mode always uses 0).",
        "type": "number",
        "minimum": 0,
        "maximum": 60000,
        "default": 5,
    },
    "batch_bytes": {
        "description": "Kafka batch.size in batch mode.",
        "type": "integer",
        "minimum": 1,
        "maximum": 2147483647,
        "default": 1048576,
    },
    "replication_factor": {
        "description": "Replicas of each cell's topic. Omitted: 3, or the number of brokers when fewer (1 on a "
                       "single node, 3 on a 3-node cluster or Amazon MSK). More than the target's brokers is "
                       "refused before any cell runs.",
        "type": "integer",
        "minimum": 1,
        "maximum": 16,
    },
    "min_insync_replicas": {
        "description": "min.insync.replicas of each cell's topic: with acks=all a send fails unless this many "
                       "replicas have it. Omitted: the broker's own setting (1 unless the broker sets more; "
                       "Amazon MSK sets 2 on 3 nodes). More than the replication factor is refused.",
        "type": "integer",
        "minimum": 1,
        "maximum": 16,
    },
    "kafka_idempotence": {
        "description": "Kafka's idempotent producer (enable.idempotence): the broker drops a retried batch it already "
                       "wrote, so a send retried after a leader change is not stored twice, and per-partition order "
                       "holds. Needs acks all. Default false (librdkafka's own default).",
        "type": "boolean",
        "default": False,
    },
    "kafka_flush_messages": {
        "description": "flush.messages of each cell's topic: the partition leader fsyncs its log after this many "
                       "messages, before it answers the send that reached the count (1: every message is synced "
                       "before its acknowledgement). Omitted: the broker's log.flush.interval.messages (Kafka's "
                       "default never forces a sync: messages are acknowledged from the page cache, synced when a "
                       "segment rolls or the OS writes them back).",
        "type": "integer",
        "minimum": 1,
        "maximum": 1000000,
    },
    "topics": {
        "description": "Kafka topics per cell, each with the cell's partitions: every producer spreads its messages "
                       "round-robin over all topics x partitions, and the consumers read them all (one producer "
                       "fanning out over many topics). Omitted: 1, the cell's one topic. Kafka only: a run that asks "
                       "more with another broker is refused. Above 1 the producers use the Python send loop.",
        "type": "integer",
        "minimum": 1,
        "maximum": 1000,
    },
    "compression": {
        "description": "Kafka compression.type.",
        "enum": ["none", "gzip", "snappy", "lz4", "zstd"],
        "default": "none",
    },
}
