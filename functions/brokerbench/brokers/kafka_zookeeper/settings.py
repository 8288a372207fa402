"""Kafka in ZooKeeper mode's part of the run request: the Kafka endpoint and client settings (the same
fields, shared by name with the kafka broker), and what the local stack is asked for."""

from ..kafka import settings as kafka

TARGET = kafka.TARGET
CLIENT = kafka.CLIENT

PROVISION = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "version": {
            "description": "Kafka version; omitted: whatever the local stack has installed (3.9.x, the last "
                           "line with ZooKeeper mode). A given version must match its version prefix.",
            "type": "string",
        },
        "nodes": {"description": "Broker nodes locally: 1 (the default) or a cluster of 2 or 3 brokers sharing one "
                                 "ZooKeeper, a JVM each (512 MB of heap), beside the single node.",
                  "type": "integer", "minimum": 1, "maximum": 3},
    },
    "default": {},
}
