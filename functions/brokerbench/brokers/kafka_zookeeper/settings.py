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
    },
    "default": {},
}
