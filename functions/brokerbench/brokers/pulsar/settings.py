"""Pulsar's part of the run request: its endpoint, what the local stack is asked for, the client settings it reads.

Kafka's linger_ms and batch_bytes are not shared: Pulsar's batch delay is whole milliseconds (linger_ms may
be a fraction), its batches are also bounded by a message count, and they must fit the broker's largest
message (5 MB by default), where Kafka's batch_bytes goes to 2 GiB.
"""

from ...targets.provision import provision_schema

TARGET = {
    "type": "object",
    "additionalProperties": False,
    "required": ["service_url", "admin_url"],
    "properties": {
        "service_url": {"description": "The binary protocol's URL, pulsar://HOST:6650, or pulsar+ssl://HOST:6651 "
                                       "over TLS (the server's certificate checked against the system's trust "
                                       "store, or the file SSL_CERT_FILE names).", "type": "string",
                        "pattern": "^pulsar(\\+ssl)?://"},
        "admin_url": {"description": "The web service (admin REST API), http://HOST:8080: topics are created "
                                     "and counted through it.", "type": "string", "pattern": "^https?://"},
        "listener_name": {"description": "The broker listener (advertisedListeners) whose addresses the client "
                                         "connects to after a topic lookup; omitted: the broker's internal one. "
                                         "Where the broker advertises a proxy or another network under a name.",
                          "type": "string", "pattern": "^[A-Za-z0-9_-]+$"},
        "namespace": {"description": "tenant/namespace the cells' topics are created in.", "type": "string",
                      "pattern": "^[^/]+/[^/]+$", "default": "public/default"},
        "journal_sync_data": {"description": "Whether the bookies fsync their journal before they acknowledge "
                                             "(BookKeeper journalSyncData), when known: no broker API reports it, so "
                                             "the durability statement says unknown without it. The local stack sets "
                                             "it (false).", "type": "boolean"},
        "version": {"type": "string"},
    },
}

PROVISION = provision_schema(
    "Pulsar version; locally it must match the local standalone's version prefix (Pulsar has no cloud provider: "
    "elsewhere give its endpoint in targets.pulsar).",
)

CLIENT = {
    "pulsar_topic_type": {
        "description": "Pulsar: persistent topics (stored in BookKeeper before they are acknowledged) or "
                       "non-persistent ones (never stored: delivered to the consumers connected at that moment, "
                       "dropped when none is or it cannot keep up).",
        "enum": ["persistent", "non-persistent"],
        "default": "persistent",
    },
    "pulsar_batch_delay_ms": {
        "description": "Pulsar batchingMaxPublishDelayMs in batch mode: how long a batch waits for more messages "
                       "(single mode does not batch). The default is linger_ms's, so Kafka and Pulsar hold batches "
                       "alike unless told otherwise (the client's own default is 10).",
        "type": "integer",
        "minimum": 1,
        "maximum": 60000,
        "default": 5,
    },
    "pulsar_batch_bytes": {
        "description": "Pulsar batchingMaxAllowedSizeInBytes in batch mode; the default is batch_bytes's (the "
                       "broker refuses messages over its maxMessageSize, 5 MB by default).",
        "type": "integer",
        "minimum": 1024,
        "maximum": 5242880,
        "default": 1048576,
    },
    "pulsar_batch_messages": {
        "description": "Pulsar batchingMaxMessages in batch mode: most messages in one batch (at least 2: the "
                       "client refuses 1).",
        "type": "integer",
        "minimum": 2,
        "maximum": 1000000,
        "default": 1000,
    },
}
