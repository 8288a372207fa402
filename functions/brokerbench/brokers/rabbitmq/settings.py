"""RabbitMQ's part of the run request, shared by rabbitmq-streams and rabbitmq-quorum: the endpoint, what the local
stack (or Amazon MQ) is asked for, and the client settings both read (one meaning each, so the two rows can share
them)."""

from ...targets.provision import provision_schema
from .cloud import PROVISION_PROPERTIES

TARGET = {
    "type": "object",
    "additionalProperties": False,
    "required": ["host", "amqp_port"],
    "properties": {
        "host": {"type": "string", "minLength": 1},
        "amqp_port": {"description": "AMQP 0-9-1 port (5672): queues are declared, counted and (quorum) used "
                                     "through it.", "type": "integer", "minimum": 1, "maximum": 65535},
        "stream_port": {"description": "The stream protocol's port (5552; rabbitmq-streams needs it).",
                        "type": "integer", "minimum": 1, "maximum": 65535},
        "vhost": {"type": "string", "default": "/"},
        "username": {"type": "string", "default": "guest"},
        "password_env": {"description": "The environment variable that holds the user's password (omitted: "
                                        "guest's, which RabbitMQ accepts from loopback only).",
                         "type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "tls": {"description": "AMQP over TLS (amqps; Amazon MQ's endpoint, port 5671), and the stream protocol "
                               "over TLS on stream_port (RabbitMQ's stream.listeners.ssl, 5551 by convention), the "
                               "server's certificate verified against the system's trust store (or the file "
                               "SSL_CERT_FILE names).", "type": "boolean", "default": False},
        "password_secret_arn": {"description": "A Secrets Manager secret holding the user's password (a JSON "
                                               "object's `password`, or the string itself): Amazon MQ's endpoint "
                                               "names the one its provider stored; the password itself never "
                                               "travels in an endpoint or an event.", "type": "string"},
        "management_url": {"description": "The management HTTP API (rabbitmq_management; the local node's on "
                                           "127.0.0.1, Amazon MQ's console URL): a quorum queue's count of what it "
                                           "took in comes from it. Omitted: that count is not given.",
                           "type": "string", "pattern": "^https?://"},
        "stats_interval_ms": {"description": "The node's collect_statistics_interval (rabbitmq.conf; RabbitMQ's "
                                             "default is 5000), where the management API counts: a quorum cell's "
                                             "producer and consumer keep their channel open 5 of these after their "
                                             "last operation, so the count has it. Omitted: 2.5 s.",
                              "type": "integer", "minimum": 10, "maximum": 600000},
        "version": {"type": "string"},
    },
}

# The version is Amazon MQ's engine version (cloud.py); locally it must match the installed Debian rabbitmq-server's
# prefix (3.10), as for every broker.
_CLOUD = dict(PROVISION_PROPERTIES)
PROVISION = provision_schema(_CLOUD.pop("version")["description"], **_CLOUD)

CLIENT = {
    "rabbitmq_in_flight": {
        "description": "RabbitMQ (streams and quorum queues): most messages published and not yet confirmed in "
                       "batch mode (single mode: one).",
        "type": "integer",
        "minimum": 1,
        "maximum": 100000,
        "default": 1000,
    },
    "rabbitmq_prefetch": {
        "description": "RabbitMQ: a quorum-queue consumer's prefetch (basic.qos, unacknowledged deliveries), and "
                       "a stream consumer's credit in chunks (each chunk a batch of messages).",
        "type": "integer",
        "minimum": 1,
        "maximum": 65535,
        "default": 1000,
    },
}
