"""The worker's native loops (`_sendloop.c`): the producer's send loop and the consumer's timed decode.

`BROKERBENCH_SEND_LOOP` chooses: `auto` (the default: native where it is built and the endpoint
allows it, else the Python loop), `native` (fail rather than fall back) or `python`.
The native loop needs its extension built (`make setup` does) and, for Kafka, the librdkafka that
confluent-kafka loaded (Pulsar: the libpulsar that pulsar-client loaded); it does not do Redis TLS, MSK IAM tokens, NATS TLS and authentication, or AMQP over TLS
(they stay on the Python loop).
"""

from __future__ import annotations

import logging
import os

try:
    from . import _sendloop
except ImportError:  # not built: the Python loop runs
    _sendloop = None

CHOICES = ("auto", "native", "python")


class Unsupported(RuntimeError):
    """The native loop cannot serve this producer; the Python loop can."""


def _python_timed_decode(decode, messages: list, headers: list) -> bytes:
    """timed_decode in Python: the same records, for where the native module is not built."""
    from array import array
    from time import monotonic_ns as clock

    records = array("q")
    keep, keep_header = records.extend, headers.append
    for header, payload, partition in messages:
        t0 = clock()
        decode(payload)
        t1 = clock()
        keep_header(header)
        keep((t0, t1, partition, len(payload)))
    return records.tobytes()


def timed_decode_function():
    """The consumer's per-message step around decode: native unless BROKERBENCH_SEND_LOOP=python."""
    if choice() == "python" or _sendloop is None:
        if choice() == "native":
            module()  # raises Unsupported
        return _python_timed_decode
    return _sendloop.timed_decode


def choice() -> str:
    value = os.environ.get("BROKERBENCH_SEND_LOOP", "auto")
    if value not in CHOICES:
        raise ValueError(f"BROKERBENCH_SEND_LOOP: {value!r} is not one of {', '.join(CHOICES)}")
    return value


def module():
    if _sendloop is None:
        raise Unsupported("the native send loop is not built (make setup builds it; it needs librdkafka-dev)")
    return _sendloop


def loaded_library(fragment: str) -> str:
    """The file of the shared library whose name holds `fragment`, as mapped into this process."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if fragment in path and ".so" in path:
                return path
    raise Unsupported(f"no {fragment} is mapped in this process")


def rdkafka_path() -> str:
    """The file of the librdkafka that confluent-kafka's extension loaded into this process."""
    import confluent_kafka.cimpl  # noqa: F401  (loads librdkafka)

    return loaded_library("librdkafka")


def pulsar_path() -> str:
    """The file of the libpulsar that pulsar-client's extension loaded into this process (its C API is exported)."""
    import _pulsar  # noqa: F401  (loads libpulsar)

    return loaded_library("libpulsar")


# librdkafka's own lines from a Kafka sender (its log callback keeps them; `forward_logs` hands them over): passed on to
# brokerbench's logger (the run's log) where the process has it, dropped where it has none, never printed on stderr
LIBRDKAFKA_LOG = logging.getLogger(f"{__name__}.librdkafka")
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())


def syslog_level(level: int) -> int:
    """Python's logging level for librdkafka's (syslog's: 0 emergency to 7 debug)."""
    return (logging.CRITICAL if level <= 2 else logging.ERROR if level == 3 else logging.WARNING if level == 4
            else logging.INFO if level <= 6 else logging.DEBUG)


def forward_logs(sender) -> int:
    """librdkafka's lines a Kafka sender kept since the last call, logged (LIBRDKAFKA_LOG); returns how many. Senders
    of other brokers keep none."""
    text, dropped = sender.logs()
    lines = text.splitlines()
    for line in lines:
        level, facility, message = (line.split("\t", 2) + ["", ""])[:3]
        LIBRDKAFKA_LOG.log(syslog_level(int(level) if level.isdigit() else 3), "%s: %s", facility, message)
    if dropped:
        LIBRDKAFKA_LOG.warning("%d more of librdkafka's lines dropped (its buffer between two intervals was full)",
                               dropped)
    return len(lines)


def kafka_ack_stamps():
    """A ring for the Python loop's Kafka producer (the extension's AckStamps): its `config`, passed to confluent-kafka's
    Producer, makes librdkafka load this extension as its plugin and stamp each acknowledgement on its broker thread;
    `at(key)` reads a report's stamp back. Raises Unsupported where the extension is not built or the librdkafka that
    confluent-kafka loaded has no interceptors."""
    native = module()
    try:
        native.load_rdkafka(rdkafka_path())
        return native.AckStamps()
    except (ImportError, NotImplementedError, MemoryError) as exc:  # no librdkafka to resolve, no interceptors, no ring
        raise Unsupported(f"Kafka's broker-thread stamps: {exc}") from None


def kafka_fetch_stamps():
    """A log for the Python loop's Kafka consumer (the extension's FetchStamps): its `config`, passed to confluent-kafka's
    Consumer, makes librdkafka load this extension as its plugin and note on its broker threads when each Fetch response
    was read; `take()` after each poll reads those since the last. Raises Unsupported as kafka_ack_stamps does."""
    native = module()
    try:
        native.load_rdkafka(rdkafka_path())
        return native.FetchStamps()
    except (ImportError, NotImplementedError, MemoryError) as exc:
        raise Unsupported(f"Kafka's Fetch response stamps: {exc}") from None


def kafka_sender(config: dict, topic: str, partitions: int, single: bool):
    native = module()
    native.load_rdkafka(rdkafka_path())
    return native.kafka_sender({key: str(value) for key, value in config.items()}, topic, partitions, single)


def redis_sender(host: str, port: int, password: str | None, keys: list[bytes], depth: int, timeout_s: float = 30.0):
    return module().redis_sender(host, port, password, keys, depth, timeout_s)


NATS_SERVERS = 8  # the most servers of a cluster a NATS sender moves between (sendloop.c)


def nats_sender(host: str, port: int, subjects: list[bytes], depth: int, timeout_s: float = 5.0,
                others: list[tuple[str, int]] = ()):
    """`others`: a cluster's other servers (the first NATS_SERVERS - 1), where a lost connection is made again,
    the next one each time."""
    return module().nats_sender(host, port, subjects, depth, timeout_s, list(others)[:NATS_SERVERS - 1])


def pulsar_sender(service_url: str, listener_name: str | None, topics: list[str], settings: dict, single: bool,
                  timeout_s: int = 30):
    native = module()
    native.load_pulsar(pulsar_path())
    return native.pulsar_sender(service_url, listener_name, topics, settings, single, timeout_s)


def pulsar_wire_sender(host: str, port: int, topics: list[str], settings: dict, single: bool, depth: int,
                       timeout_s: float = 30.0):
    """The loop speaking Pulsar's binary protocol itself, to the one broker at host:port that serves every topic."""
    return module().pulsar_wire_sender(host, port, topics, settings, single, depth, timeout_s)


def amqp_sender(host: str, port: int, user: str, password: str, vhost: str, queues: list[bytes], depth: int,
                timeout_s: float = 30.0):
    return module().amqp_sender(host, port, user, password, vhost, queues, depth, timeout_s)


def stream_sender(host: str, port: int, user: str, password: str, vhost: str, streams: list[bytes], depth: int,
                  timeout_s: float = 30.0):
    return module().stream_sender(host, port, user, password, vhost, streams, depth, timeout_s)
