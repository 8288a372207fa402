"""Kafka's part of the run request: its endpoint, what is provisioned for it, the client settings it reads."""

REPLICATION_FACTOR = 1  # each cell's topic is created with one replica

TARGET = {
    "type": "object",
    "additionalProperties": False,
    "required": ["bootstrap_servers"],
    "properties": {
        "bootstrap_servers": {"type": "string", "minLength": 1},
        "version": {"type": "string"},
    },
}

PROVISION = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "version": {
            "description": "Kafka version; omitted: the provider's default (MSK 3.9.x; locally whatever is installed). "
                           "Locally a given version must match the local Kafka's version prefix.",
            "type": "string",
        },
        "instance_type": {"type": "string", "default": "kafka.m7g.large"},
        "broker_nodes": {"type": "integer", "minimum": 1, "maximum": 30, "default": 3},
        "volume_gb": {"type": "integer", "minimum": 1, "maximum": 16384, "default": 100},
    },
    "default": {},
}

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
    "compression": {
        "description": "Kafka compression.type.",
        "enum": ["none", "gzip", "snappy", "lz4", "zstd"],
        "default": "none",
    },
}
