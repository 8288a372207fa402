"""Kafka in ZooKeeper mode's part of the run request: the Kafka endpoint and client settings (the same
fields, shared by name with the kafka broker), and what the local stack is asked for."""

from ...targets.provision import nodes_property, provision_schema
from ..kafka import settings as kafka

TARGET = kafka.TARGET
CLIENT = kafka.CLIENT

PROVISION = provision_schema(
    "Kafka version; omitted: whatever the local stack has installed (3.9.x, the last line with ZooKeeper mode). A "
    "given version must match its version prefix.",
    nodes=nodes_property("Broker nodes locally: 1 (the default) or a cluster of 2 or 3 brokers sharing one ZooKeeper, "
                         "a JVM each (512 MB of heap), beside the single node.", 3),
)
