"""RabbitMQ's shared parts: the local service (Debian's rabbitmq-server run as our own node on 127.0.0.1), the
endpoint's shape and the client settings, and the AMQP 0-9-1 helpers both RabbitMQ plug-ins use.

No PLUGIN here: RabbitMQ is two rows, `rabbitmq-streams` (brokers/rabbitmq_streams: the stream protocol, a
Kafka-like log) and `rabbitmq-quorum` (brokers/rabbitmq_quorum: quorum queues over AMQP 0-9-1). They are two
plug-ins, not one with a mode setting, because a run has one row per broker: two names put a stream and a quorum
queue side by side in one report, each with its own caption saying what its acknowledgement means. Both are served
by one local node (the stack's service `rabbitmq`), started once when a run names either or both.

Its cloud provider, Amazon MQ for RabbitMQ, is here too (cloud.py, prices.py, prices.json): the endpoint it hands over
is the AMQP one over TLS (host, amqp_port 5671, tls, username, password_secret_arn: the password stays in Secrets
Manager).
"""

STATS_INTERVAL_MS = 250  # the local node's collect_statistics_interval: a quorum queue's count comes from it


def stats_interval_s(endpoint: dict) -> float | None:
    """The node's collect_statistics_interval as its endpoint gives it (`stats_interval_ms`: the local stack's
    nodes, or a named target that says it), in seconds; None where it is not given."""
    interval = endpoint.get("stats_interval_ms")
    return None if interval is None else interval / 1000


def in_flight_window(client: dict, mode: str) -> int:
    """Messages a producer of either plug-in keeps published and not yet confirmed: it adds each send to them, and
    waits for confirms while they number rabbitmq_in_flight (batch mode) or one (single mode)."""
    return client["rabbitmq_in_flight"] if mode == "batch" else 1
