"""Kafka through confluent-kafka (librdkafka)."""

from __future__ import annotations

import os
import time

import confluent_kafka
from confluent_kafka import Consumer as _KafkaConsumer
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka import Producer as _KafkaProducer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from ... import native
from ...drivers import BrokerUnavailable, Message, OnAck, TargetRefused

PRODUCER_BUFFER_KB = 32 * 1024
MAX_IN_FLIGHT = 5
DEFAULT_REPLICATION_FACTOR = 3  # or the number of brokers, when fewer


class KafkaDriver:
    name = "kafka"

    def __init__(self, endpoint: dict, client: dict) -> None:
        self.endpoint = endpoint
        self.client = client
        self._common = {"bootstrap.servers": endpoint["bootstrap_servers"], **_security(endpoint)}
        self._admin: AdminClient | None = None

    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient({**self._common, "socket.timeout.ms": 5000, "log_level": 3})
        return self._admin

    def check(self, timeout_s: float = 5.0) -> None:
        try:
            self._brokers = len(self.admin().list_topics(timeout=timeout_s).brokers)
        except KafkaException as exc:
            raise BrokerUnavailable(f"Kafka at {self._common['bootstrap.servers']} did not answer: {exc}") from None
        replicas, in_sync = self.replication_factor(), self.client.get("min_insync_replicas")
        if replicas > self._brokers:
            raise TargetRefused(f"client.replication_factor: {replicas} replicas, but Kafka at "
                                f"{self._common['bootstrap.servers']} has {self._brokers} broker(s)")
        if in_sync is not None and in_sync > replicas:
            raise TargetRefused(f"client.min_insync_replicas: {in_sync} is more than the replication factor "
                                f"({replicas}): no send with acks=all could succeed")

    def brokers(self) -> int:
        """How many brokers the cluster's metadata lists."""
        if getattr(self, "_brokers", None) is None:
            self.check()
        return self._brokers

    def replication_factor(self) -> int:
        """Replicas of each cell's topic: client.replication_factor, else 3 or the number of brokers when fewer."""
        given = self.client.get("replication_factor")
        return given if given is not None else min(DEFAULT_REPLICATION_FACTOR, self.brokers())

    def topic_config(self) -> dict[str, str]:
        in_sync = self.client.get("min_insync_replicas")
        return {} if in_sync is None else {"min.insync.replicas": str(in_sync)}

    def describe(self) -> dict:
        return {
            "broker": "kafka",
            "broker_version": self.endpoint.get("version", "unknown"),
            "client_library": "confluent-kafka",
            "client_version": confluent_kafka.__version__,
            "librdkafka_version": confluent_kafka.libversion()[0],
            "nodes": self.brokers(),
            "replication_factor": self.replication_factor(),
            "min_insync_replicas": self.min_insync_replicas(),
        }

    def min_insync_replicas(self) -> int | None:
        """min.insync.replicas in force for the run's topics: the client setting, else the broker's own
        (asked of the first broker the metadata lists); None when the broker does not say."""
        if self.client.get("min_insync_replicas") is not None:
            return self.client["min_insync_replicas"]
        try:
            node = min(self.admin().list_topics(timeout=5).brokers)
            resource = ConfigResource(ConfigResource.Type.BROKER, str(node))
            entry = self.admin().describe_configs([resource])[resource].result(timeout=10).get("min.insync.replicas")
        except (KafkaException, ValueError):
            return None
        return int(entry.value) if entry is not None and entry.value is not None else None

    def create_topic(self, topic: str, partitions: int) -> None:
        futures = self.admin().create_topics(
            [NewTopic(topic, partitions, self.replication_factor(), config=self.topic_config())], operation_timeout=30)
        try:
            futures[topic].result(timeout=30)
        except KafkaException as exc:
            raise BrokerUnavailable(f"could not create topic {topic}: {exc}") from None
        # Metadata reaches the partition leader a moment after the controller answers; the followers
        # join the in-sync replicas a moment later (acks=all waits for them).
        for _ in range(100):
            meta = self.admin().list_topics(topic, timeout=5).topics.get(topic)
            if meta and not meta.error and len(meta.partitions) == partitions and all(
                p.leader >= 0 and len(p.isrs) == len(p.replicas) for p in meta.partitions.values()
            ):
                return
            time.sleep(0.05)
        raise BrokerUnavailable(f"topic {topic} has no leader, or not every replica in sync, after creation")

    def delete_topic(self, topic: str, partitions: int) -> None:
        try:
            self.admin().delete_topics([topic], operation_timeout=30)[topic].result(timeout=30)
        except KafkaException:
            pass  # best effort: a topic left behind does not change later cells (each has its own)

    def _offsets_client(self, group: str) -> _KafkaConsumer:
        """A consumer that never joins or reads: it asks the broker for offsets (end offsets, the group's
        committed positions), so the backlog and the message count are the broker's own figures."""
        clients = self.__dict__.setdefault("_offsets_clients", {})
        if group not in clients:
            clients[group] = _KafkaConsumer({**self._common, "group.id": group, "enable.auto.commit": False,
                                             "log_level": 3})
        return clients[group]

    def _watermarks(self, client: _KafkaConsumer, topic: str, partitions: int) -> list[tuple[int, int]]:
        return [client.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)
                for p in range(partitions)]

    def backlog(self, topic: str, group: str, partitions: int) -> int | None:
        """Messages in the topic that the group has not consumed: end offsets minus committed offsets."""
        try:
            client = self._offsets_client(group)
            committed = client.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=5)
            marks = self._watermarks(client, topic, partitions)
        except KafkaException:
            return None
        return sum(max(0, high - (tp.offset if tp.offset >= 0 else low)) for tp, (low, high) in zip(committed, marks))

    def message_count(self, topic: str, partitions: int) -> int | None:
        """How many messages the broker holds in the topic (end offset minus start offset, summed)."""
        try:
            return sum(high - low for low, high in self._watermarks(self._offsets_client(f"{topic}-count"), topic,
                                                                   partitions))
        except KafkaException:
            return None

    def close(self) -> None:
        for client in self.__dict__.pop("_offsets_clients", {}).values():
            client.close()

    def producer_config(self, mode: str) -> dict:
        client = self.client
        return {
            **self._common,
            "acks": client["acks"],
            "compression.type": client["compression"],
            "linger.ms": client["linger_ms"] if mode == "batch" else 0,
            "batch.size": client["batch_bytes"],
            # A bounded buffer, like the Java client's buffer.memory (32 MB): a producer that outruns the
            # broker waits (publish delay shows it) instead of queueing a gigabyte that the measured
            # messages would sit behind; at max rate the enqueue rate then follows the delivery rate.
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": max(PRODUCER_BUFFER_KB, 2 * client["batch_bytes"] // 1024),
            "message.max.bytes": 16 * 1024 * 1024,
            # The Java client's default (librdkafka's is 1,000,000): with more in flight, a quota'd or slow
            # broker takes a burst of tens of MB before its first throttled answer, and pays it back later.
            "max.in.flight.requests.per.connection": MAX_IN_FLIGHT,
        }

    def producer(self, topic: str, partitions: int, mode: str, on_ack: OnAck) -> KafkaProducer:
        return KafkaProducer(_KafkaProducer(self.producer_config(mode)), topic, on_ack)

    def native_sender(self, topic: str, partitions: int, mode: str):
        """The native send loop over librdkafka, with the same settings as `producer`."""
        if self.endpoint.get("auth") == "iam":
            raise native.Unsupported("MSK IAM tokens come from a Python callback")
        return native.kafka_sender(self.producer_config(mode), topic, partitions, mode == "single")

    def consumer(self, topic: str, group: str, partitions: list[int]) -> KafkaConsumer:
        consumer = _KafkaConsumer({
            **self._common,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
        })
        # Explicit assignment from the start of a fresh topic: no rebalance, nothing missed.
        consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in partitions])
        return KafkaConsumer(consumer)


def _security(endpoint: dict) -> dict:
    """TLS and MSK IAM authentication (OAUTHBEARER with a SigV4 token) when the endpoint asks for them."""
    if endpoint.get("auth") == "iam":
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider

        region = endpoint.get("region") or os.environ.get("AWS_REGION", "us-east-1")

        def oauth_cb(_config):
            token, expiry_ms = MSKAuthTokenProvider.generate_auth_token(region)
            return token, expiry_ms / 1000

        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb}
    return {"security.protocol": "SSL"} if endpoint.get("tls") else {}


class KafkaProducer:
    def __init__(self, producer: _KafkaProducer, topic: str, on_ack: OnAck) -> None:
        self._producer = producer
        self._topic = topic

        def delivered(err, msg) -> None:
            on_ack(msg.key(), err is None)

        self._delivered = delivered

    def send(self, header: bytes, payload: bytes, partition: int) -> None:
        while True:
            try:
                self._producer.produce(self._topic, payload, header, partition, self._delivered)
                return
            except BufferError:  # local queue full: serve deliveries, then retry
                self._producer.poll(0.001)

    def poll(self, timeout_s: float) -> None:
        self._producer.poll(timeout_s)

    def flush(self, timeout_s: float) -> int:
        return self._producer.flush(timeout_s)

    def close(self) -> None:
        self._producer.flush(5)


class KafkaConsumer:
    def __init__(self, consumer: _KafkaConsumer) -> None:
        self._consumer = consumer

    def poll(self, timeout_s: float) -> list[Message]:
        # consume(n, timeout) waits for n messages or the whole timeout, which would add up to
        # `timeout` of latency at low rates: block for the first message, then take what is queued.
        first = self._consumer.poll(timeout_s)
        if first is None:
            return []
        messages = [first, *self._consumer.consume(1000, 0)]
        return [(m.key(), m.value(), m.partition()) for m in messages if m.error() is None]

    def commit(self) -> None:
        """Store the positions reached with the broker (asynchronously), for the broker-side backlog."""
        try:
            self._consumer.commit(asynchronous=True)
        except KafkaException:  # nothing consumed yet: no offsets to store
            pass

    def close(self) -> None:
        try:  # the last position, stored before leaving: the backlog read after the drain is exact
            self._consumer.commit(asynchronous=False)
        except KafkaException:
            pass
        self._consumer.close()
