"""Kafka through confluent-kafka (librdkafka).

A cell's lanes (brokerbench.drivers.lanes) are the partitions of its topic; with client.topics N > 1 they
are those of N topics of P partitions each, <topic>-0000 to <topic>-(N-1): lane i is partition i // N of
topic i % N, so consecutive messages go to consecutive topics, and a lane is known from the topic count
alone (a consumer is given its lanes, not P). Consumers report each message under its lane.

librdkafka's own lines (a connection lost, "1/1 brokers are down": every network fault prints some) go to the
Python logger LIBRDKAFKA_LOG, never to the terminal: through confluent-kafka's `logger`, and its `error_cb` for the
errors it would otherwise log itself. The logger passes them on to brokerbench's (the run's log: functions.log
locally, CloudWatch in AWS) where the process has it, and drops them where it has none. The native send loop's
librdkafka keeps its own in a log callback, which the producer's loop logs (brokerbench.native.forward_logs).
"""

from __future__ import annotations

import logging
import os
import threading
import time

import confluent_kafka
from confluent_kafka import Consumer as _KafkaConsumer
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka import Producer as _KafkaProducer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from ... import native
from ...drivers import BrokerUnavailable, Message, OnAck, TargetRefused
from ...drivers.handoff import Handoff
from ...figures import client_stamps

# How a Kafka producer stamps its acknowledgements: at the kernel's receive time of their Produce response's read
# (ARRIVAL: librdkafka reads through the native extension's recvmsg, and an on_acknowledgement interceptor on its broker
# thread takes the time of the response being handled: the native loop's, and the Python loop's through the plugin),
# on that thread as it handles the response where the read had no kernel stamp (client:librdkafka), or, without the
# interceptor, as the thread serving librdkafka's delivery reports comes to each (the extension says which: AckStamps
# and the native sender's `stamps`)
REPORT_STAMPS = client_stamps("librdkafka-report")
# How a Kafka consumer stamps its deliveries: at the read of the latest Fetch response before its poll returned (an
# on_response_received interceptor on librdkafka's broker thread, through the plugin), or, without it, as the poll
# returns
FETCH_STAMPS = client_stamps("librdkafka-fetch")
# ... where that response's read carries the kernel's receive time (librdkafka reads through the native extension's
# recvmsg: native.rdkafka_reads_hooked)
FETCH_ARRIVAL_STAMPS = client_stamps("librdkafka-fetch-arrival")
POLL_STAMPS = client_stamps("librdkafka")

LIBRDKAFKA_LOG = logging.getLogger(f"{__name__}.librdkafka")
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())  # no handler up the chain: dropped, not printed (logging's last resort)


def _client_error(error) -> None:
    """librdkafka's error callback (a KafkaError): logged, as librdkafka would print it without one."""
    LIBRDKAFKA_LOG.log(logging.ERROR if error.fatal() else logging.WARNING, "%s: %s", error.name(), error.str())


# What every Python client of the driver is made with (not the native loop's settings: strings only)
LOGGED = {"logger": LIBRDKAFKA_LOG, "error_cb": _client_error}

PRODUCER_BUFFER_KB = 32 * 1024
PRODUCER_BUFFER_MESSAGES = 1_000_000  # librdkafka's queue.buffering.max.messages: the byte bound binds first
# The Python loop's delivery reports are served by a thread of their own that waits in librdkafka's poll, which
# returns as soon as one is queued: this long at most, so that closing the producer waits no longer for it.
REPORT_WAIT_S = 0.1
MAX_IN_FLIGHT = 5
DEFAULT_REPLICATION_FACTOR = 3  # or the number of brokers, when fewer
CREATE_TIMEOUT_S = 30  # creating a cell's topics: this, and CREATE_S_PER_REPLICA more per partition replica
CREATE_S_PER_REPLICA = 0.05
FIRST_OFFSET = 0  # of a new topic's partitions
CONSUME_BATCH = 1000  # messages a consumer takes from librdkafka's queue after the first of a poll


def topic_names(topic: str, topics: int) -> list[str]:
    """The Kafka topics of a cell's topic: its own name for one, else <topic>-0000, <topic>-0001, ..."""
    return [topic] if topics == 1 else [f"{topic}-{j:04d}" for j in range(topics)]


def lane_place(topic: str, lane: int, topics: int) -> tuple[str, int]:
    """(Kafka topic, partition) of a lane: partition lane // topics of topic lane % topics."""
    name = topic if topics == 1 else f"{topic}-{lane % topics:04d}"
    return name, lane // topics


def lane_places(topic: str, lanes: int, topics: int) -> list[tuple[str, int]]:
    """(Kafka topic, partition) of each of `lanes` lanes, which fill `topics` topics of equal partitions."""
    if topics < 1 or lanes % topics:
        raise ValueError(f"{lanes} lanes do not split into {topics} topics of equal partitions")
    return [lane_place(topic, lane, topics) for lane in range(lanes)]


def lane_of(topic_index: int, partition: int, topics: int) -> int:
    """The lane of partition `partition` of the cell's topic_index-th Kafka topic (lane_place's inverse)."""
    return partition * topics + topic_index


class KafkaDriver:
    name = "kafka"

    def __init__(self, endpoint: dict, client: dict) -> None:
        self.endpoint = endpoint
        self.client = client
        self._common = {"bootstrap.servers": endpoint["bootstrap_servers"], **_security(endpoint)}
        self._admin: AdminClient | None = None
        self.topics = int(client.get("topics", 1))  # Kafka topics per cell (client.topics)

    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient({**self._common, **LOGGED, "socket.timeout.ms": 5000, "log_level": 3})
        return self._admin

    def topic_admin(self) -> AdminClient:
        """An admin client for creating and deleting topics: librdkafka gives up on a request after
        socket.timeout.ms whatever its request_timeout, and a controller creating hundreds of partition
        replicas answers after seconds (the 5 s of `admin`, meant for a quick answer to `check`, failed
        the creation of 100 topics of 3 replicas on a local 3-node cluster that took 3.6 s)."""
        if getattr(self, "_topic_admin", None) is None:
            self._topic_admin = AdminClient({**self._common, **LOGGED, "socket.timeout.ms": 300_000,
                                             "log_level": 3})
        return self._topic_admin

    def check(self, timeout_s: float = 5.0) -> None:
        try:
            self._brokers = len(self.admin().list_topics(timeout=timeout_s).brokers)
        except KafkaException as exc:
            raise BrokerUnavailable(f"Kafka at {self._common['bootstrap.servers']} did not answer: {exc}") from None
        replicas, in_sync = self.replication_factor(), self.client.get("min_insync_replicas")
        if replicas > self._brokers:
            raise TargetRefused(f"client.replication_factor: {replicas} replicas, but Kafka at "
                                f"{self._common['bootstrap.servers']} has {self._brokers} broker(s)")
        if self.client.get("kafka_idempotence") and self.client["acks"] != "all":
            raise TargetRefused(f"client.kafka_idempotence: the idempotent producer needs acks all, not "
                                f"{self.client['acks']}")
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
        in_sync, flush = self.client.get("min_insync_replicas"), self.client.get("kafka_flush_messages")
        return {**({} if in_sync is None else {"min.insync.replicas": str(in_sync)}),
                **({} if flush is None else {"flush.messages": str(flush)})}

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
        """The cell's topic, or its client.topics topics (in one request), `partitions` lanes in all; returns
        once every partition has a leader and every replica is in sync."""
        names = topic_names(topic, self.topics)
        if partitions % self.topics:
            raise ValueError(f"{partitions} lanes do not split into {self.topics} topics of equal partitions")
        try:
            self._create_topics(names, partitions // self.topics)
        except BrokerUnavailable:
            if len(names) > 1:  # many topics left behind would weigh on the later cells' metadata
                self.delete_topic(topic, partitions)
            raise

    def _create_topics(self, names: list[str], partitions: int) -> None:
        # The controller creates the replicas one after another: hundreds of partitions take tens of seconds
        # (Downard measured over 10 s for 100 on Kafka 0.10). The request waits as long as the operation may.
        timeout_s = CREATE_TIMEOUT_S + CREATE_S_PER_REPLICA * len(names) * partitions * self.replication_factor()
        futures = self.topic_admin().create_topics(
            [NewTopic(name, partitions, self.replication_factor(), config=self.topic_config()) for name in names],
            operation_timeout=timeout_s, request_timeout=timeout_s + 5)
        for name in names:
            try:
                futures[name].result(timeout=timeout_s + 10)
            except KafkaException as exc:
                raise BrokerUnavailable(f"could not create topic {name}: {exc}") from None
        # Metadata reaches the partition leader a moment after the controller answers; the followers
        # join the in-sync replicas a moment later (acks=all waits for them). More topics take longer.
        waiting = names
        deadline = time.monotonic() + timeout_s
        while True:
            listed = self.admin().list_topics(names[0] if len(names) == 1 else None, timeout=5).topics
            waiting = [name for name in waiting if not _serving(listed.get(name), partitions)]
            if not waiting:
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        more = f" (and {len(waiting) - 1} more)" if len(waiting) > 1 else ""
        raise BrokerUnavailable(f"topic {waiting[0]}{more} has no leader, or not every replica in sync, after creation")

    def delete_topic(self, topic: str, partitions: int) -> None:
        # Best effort: a topic left behind does not change later cells (each has its own).
        names = topic_names(topic, self.topics)
        try:
            futures = self.topic_admin().delete_topics(names, operation_timeout=30, request_timeout=60)
        except KafkaException:
            return
        for name in names:
            try:
                futures[name].result(timeout=30)
            except KafkaException:
                pass

    def _offsets_client(self, group: str) -> _KafkaConsumer:
        """A consumer that never joins or reads: it asks the broker for offsets (end offsets, the group's
        committed positions), so the backlog and the message count are the broker's own figures."""
        clients = self.__dict__.setdefault("_offsets_clients", {})
        if group not in clients:
            clients[group] = _KafkaConsumer({**self._common, **LOGGED, "group.id": group,
                                             "enable.auto.commit": False, "log_level": 3})
        return clients[group]

    def _watermarks(self, client: _KafkaConsumer, topic: str, partitions: int) -> list[tuple[int, int]]:
        return [client.get_watermark_offsets(TopicPartition(name, p), timeout=5, cached=False)
                for name, p in lane_places(topic, partitions, self.topics)]

    def backlog(self, topic: str, group: str, partitions: int) -> int | None:
        """Messages in the topic (in all its topics) that the group has not consumed: end offsets minus
        committed offsets."""
        places = [TopicPartition(name, p) for name, p in lane_places(topic, partitions, self.topics)]
        for attempt in range(2):
            try:
                client = self._offsets_client(group)
                committed = client.committed(places, timeout=5)
                marks = self._watermarks(client, topic, partitions)
                break
            except KafkaException:
                if attempt:
                    return None
                # After the group's coordinator went down (a fault killed its node), the kept client kept asking it:
                # a 3-node acks=1 cell ended with its backlog unknown, so its losses could not be told from what was
                # undelivered (CI, test_kafka_cluster). A new client, asked once, finds the coordinator now.
                self.close()
        return sum(max(0, high - (tp.offset if tp.offset >= 0 else low)) for tp, (low, high) in zip(committed, marks))

    def message_count(self, topic: str, partitions: int) -> int | None:
        """How many messages the broker holds in the topic, or in all its topics (end offset minus start
        offset, summed)."""
        # End and start offsets are the partition's, whichever group asks: a client already connected (the backlog's)
        # serves, and a new one is made only when there is none.
        client = next(iter(self.__dict__.get("_offsets_clients", {}).values()), None)
        try:
            client = client or self._offsets_client(f"{topic}-count")
            return sum(high - low for low, high in self._watermarks(client, topic, partitions))
        except KafkaException:
            pass
        # After a node went down and came back (a fault's kill or stop, then its restart), the cell's count was missing
        # in 3 of 4 workflow runs on a loaded host, the kept client failing each request: a new one is asked once.
        self.close()
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
            "queue.buffering.max.messages": PRODUCER_BUFFER_MESSAGES,
            "queue.buffering.max.kbytes": self._buffer_kb(),
            "message.max.bytes": 16 * 1024 * 1024,
            # The Java client's default (librdkafka's is 1,000,000): with more in flight, a quota'd or slow
            # broker takes a burst of tens of MB before its first throttled answer, and pays it back later.
            "max.in.flight.requests.per.connection": MAX_IN_FLIGHT,
            **({"enable.idempotence": True} if client.get("kafka_idempotence") else {}),
        }

    def _buffer_kb(self) -> int:
        return max(PRODUCER_BUFFER_KB, 2 * self.client["batch_bytes"] // 1024)

    def in_flight_window(self, mode: str) -> int:
        """librdkafka holds a message from produce() until its delivery report is served, and refuses more (the
        loops then serve reports and retry) at queue.buffering.max.messages or queue.buffering.max.kbytes of payload
        (`in_flight_bounds`); single mode flushes after each send: one."""
        return PRODUCER_BUFFER_MESSAGES if mode == "batch" else 1

    def in_flight_bounds(self, mode: str) -> dict:
        """queue.buffering.max.kbytes counts each message's value (the payload; not its key, the header)."""
        return {"payload_bytes": self._buffer_kb() * 1024}

    def producer(self, topic: str, partitions: int, mode: str, on_ack: OnAck) -> KafkaProducer:
        producer, stamps = stamped_producer({**self.producer_config(mode), **LOGGED})
        if self.topics > 1:
            return SpreadProducer(producer, topic, on_ack, lane_places(topic, partitions, self.topics), stamps)
        return KafkaProducer(producer, topic, on_ack, stamps)

    def native_sender(self, topic: str, partitions: int, mode: str):
        """The native send loop over librdkafka, with the same settings as `producer`."""
        if self.endpoint.get("auth") == "iam":
            raise native.Unsupported("MSK IAM tokens come from a Python callback")
        if self.topics > 1:
            raise native.Unsupported("client.topics > 1: the native loop sends to one topic")
        return native.kafka_sender(self.producer_config(mode), topic, partitions, mode == "single")

    def consumer(self, topic: str, group: str, partitions: list[int]) -> KafkaConsumer:
        consumer, fetch = fetch_stamped_consumer({
            **self._common,
            **LOGGED,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
        })
        # Explicit assignment from the start of a fresh topic: no rebalance, nothing missed. A cell's topic is new, so
        # its start is offset 0. The logical OFFSET_BEGINNING would be looked up first, and right after assign
        # librdkafka does not know the partition's leader yet and looks it up 500 ms later (fixed): every cell's
        # readiness probe waited that long. (Were 0 ever out of range, auto.offset.reset=earliest starts at the start.)
        if self.topics > 1:
            consumer.assign([TopicPartition(*lane_place(topic, lane, self.topics), FIRST_OFFSET) for lane in partitions])
            return SpreadConsumer(consumer, topic_names(topic, self.topics), fetch)
        consumer.assign([TopicPartition(topic, p, FIRST_OFFSET) for p in partitions])
        return KafkaConsumer(consumer, fetch)


def stamped_producer(config: dict):
    """confluent-kafka's Producer with the native extension loaded as librdkafka's plugin, which stamps each
    acknowledgement on librdkafka's broker thread (native.kafka_ack_stamps), and its AckStamps; where the plugin cannot
    load (the extension not built, as in the Lambda package; a librdkafka without plugins or interceptors), the
    Producer alone and None: its reports are stamped as served, and the producer says so (REPORT_STAMPS)."""
    return _plugged(native.kafka_ack_stamps, _KafkaProducer, config, "Kafka acknowledgements stamped as their reports "
                    "are served, not on librdkafka's broker thread")


def fetch_stamped_consumer(config: dict):
    """confluent-kafka's Consumer with the native extension loaded as librdkafka's plugin, which notes when each Fetch
    response was read on librdkafka's broker thread (native.kafka_fetch_stamps), and its FetchStamps; where the plugin
    cannot load, the Consumer alone and None: its deliveries are stamped as its poll returns (POLL_STAMPS)."""
    return _plugged(native.kafka_fetch_stamps, _KafkaConsumer, config, "Kafka deliveries stamped as the consumer's "
                    "poll returns, not at the Fetch response on librdkafka's broker thread")


def _plugged(stamps_of, client, config: dict, without: str):
    """`client` made with the plugin's settings of the object stamps_of() makes, and that object; where the plugin
    cannot load, `client` alone and None, logged once per process and kind (`without` says what that costs)."""
    try:
        stamps = stamps_of()
        return client({**stamps.config, **config}), stamps
    except (native.Unsupported, KafkaException) as exc:
        if without not in _unstamped:
            _unstamped.append(without)
            LIBRDKAFKA_LOG.warning("%s: %s", without, exc)
        return client(config), None


_unstamped: list[str] = []  # what the plugin not loading cost, said once per process


def _serving(meta, partitions: int) -> bool:
    """Whether a topic's metadata shows all its partitions, each with a leader and every replica in sync."""
    return bool(meta) and not meta.error and len(meta.partitions) == partitions and all(
        p.leader >= 0 and len(p.isrs) == len(p.replicas) for p in meta.partitions.values())


def _security(endpoint: dict) -> dict:
    """TLS and MSK IAM authentication (OAUTHBEARER with a SigV4 token) when the endpoint asks for them. Over TLS the
    authorities trusted are the system's, or those of SSL_CERT_FILE where it is set (OpenSSL's own variable, which the
    OpenSSL that confluent-kafka's librdkafka holds within itself does not read)."""
    trusted = {"ssl.ca.location": os.environ["SSL_CERT_FILE"]} if os.environ.get("SSL_CERT_FILE") else {}
    if endpoint.get("auth") == "iam":
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider

        region = endpoint.get("region") or os.environ.get("AWS_REGION", "us-east-1")

        def oauth_cb(_config):
            token, expiry_ms = MSKAuthTokenProvider.generate_auth_token(region)
            return token, expiry_ms / 1000

        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb, **trusted}
    return {"security.protocol": "SSL", **trusted} if endpoint.get("tls") else {}


class KafkaProducer:
    """The Python loop's Kafka producer. Each acknowledgement is stamped on librdkafka's broker thread as it handles
    the produce response (the native extension as librdkafka's plugin: `stamped_producer`), as the native loop
    stamps it, with the kernel's receive time of that response's read (librdkafka reads through the extension's
    recvmsg); the delivery reports are served by a thread of its own that waits in librdkafka's poll (which
    releases the GIL and returns as soon as a report is queued) and reads each report's stamp back; the reports queue
    up and reach on_ack in poll and flush, on the worker's thread, with that stamp. Against the kernel's trace (one
    message in flight) the stamp is at the arrival, as the worker's own sockets' are, where the broker thread's own
    time came tens of µs after it at the median and hundreds at p99, and the report's as served later still
    (bench/client_stamp_lag.py, docs/performance.md). Without the plugin (`stamps` None), or for a report whose stamp another
    message's has replaced, the reports' thread stamps it as it is served. The send loop's own waits could not stamp
    on arrival: librdkafka's poll waits in whole milliseconds, and a report that came while the loop slept the rest
    of a wait, encoded or sent was stamped when the loop next polled (up to 250 µs late in 0.25 ms slices)."""

    def __init__(self, producer: _KafkaProducer, topic: str, on_ack: OnAck, stamps=None) -> None:
        self._producer = producer
        self._topic = topic
        self._on_ack = on_ack
        self._stamps = stamps
        self._results = Handoff()
        put, clock = self._results.put, time.monotonic_ns

        if stamps is None:
            def delivered(err, msg) -> None:  # on the reports' thread, as the report arrives: stamped here
                put((msg.key(), err is None, clock()))
        else:
            at = stamps.at

            def delivered(err, msg) -> None:  # the broker thread's stamp; a report without one stamped here
                key = msg.key()
                put((key, err is None, (err is None and at(key)) or clock()))

        self._delivered = delivered
        self._unreported = 0  # produced, not yet handed to on_ack
        self._stopping = threading.Event()
        self._reports = threading.Thread(target=self._serve_reports, name="kafka-delivery-reports", daemon=True)
        self._reports.start()

    @property
    def stamps(self) -> str:
        """How the acknowledgements were stamped (brokerbench.figures): `arrival` (the kernel's receive time of
        their Produce response's read, noted on librdkafka's broker thread), `client:librdkafka` (on that thread
        without the kernel's time), `client:librdkafka-report` (as the reports' thread served them), comma-separated
        where they differed; before any, what they would be."""
        return REPORT_STAMPS if self._stamps is None else self._stamps.stamps

    @property
    def handled_stamps(self) -> int | None:
        """The acknowledgements stamped on librdkafka's broker thread so far (the others as served); None without the
        plugin."""
        return None if self._stamps is None else self._stamps.handled

    def _serve_reports(self) -> None:
        poll, stopping = self._producer.poll, self._stopping
        while not stopping.is_set():
            poll(REPORT_WAIT_S)

    def send(self, header: bytes, payload: bytes, partition: int) -> None:
        self._produce(self._topic, header, payload, partition)

    def _produce(self, topic: str, header: bytes, payload: bytes, partition: int) -> None:
        while True:
            try:
                self._producer.produce(topic, payload, header, partition, self._delivered)
                self._unreported += 1
                return
            except BufferError:  # local queue full: wait for a report to free room
                self._serve(0.001)

    def _serve(self, timeout_s: float) -> None:
        """Hand the reports stamped so far to on_ack, waiting up to timeout_s for the first when there is none."""
        results, on_ack = self._results, self._on_ack
        if not results.wait(timeout_s):
            return
        while results:
            on_ack(*results.take())
            self._unreported -= 1

    def poll(self, timeout_s: float) -> None:
        """Hand over the delivery reports that arrived, waiting up to timeout_s for the first."""
        self._serve(timeout_s)

    def flush(self, timeout_s: float) -> int:
        """Wait until every message produced is reported, handing each report over as it comes from the reports'
        thread. Returns the messages still unreported. Not librdkafka's flush: while another thread serves the
        reports, its flush finds each one gone and waits out its 10 ms poll, so a single-mode cell (a flush after
        every send) sent 98 messages a second (bench/broker_tools.py, 2026-11-29)."""
        deadline = time.monotonic() + timeout_s
        self._serve(0)
        while self._unreported > 0 and (left := deadline - time.monotonic()) > 0:
            self._serve(left)
        return self._unreported

    def close(self) -> None:
        self.flush(5)
        self._stopping.set()
        self._reports.join()
        self._serve(0)


class SpreadProducer(KafkaProducer):
    """A producer over several topics: the lane it is given names the topic and the partition."""

    def __init__(self, producer: _KafkaProducer, topic: str, on_ack: OnAck, places: list[tuple[str, int]],
                 stamps=None) -> None:
        super().__init__(producer, topic, on_ack, stamps)
        self._places = places

    def send(self, header: bytes, payload: bytes, partition: int) -> None:
        topic, partition = self._places[partition]
        self._produce(topic, header, payload, partition)


class KafkaConsumer:
    """The Python loop's Kafka consumer. Each poll's deliveries are stamped at the arrival of the latest Fetch response
    read before the poll returned (`arrived_ns`, which the worker takes as their receipt, at most the poll's return):
    an on_response_received interceptor on librdkafka's broker thread (the native extension as librdkafka's plugin:
    `fetch_stamped_consumer`) notes when each Fetch response was read in full, before librdkafka parses it and queues
    its messages, at the kernel's receive time of the read that completed it (librdkafka reads through the extension's
    recvmsg; where that read had none, as the thread read it: `stamps` FETCH_STAMPS), so the stamp is never before the
    arrival of the response that carried a message. Where the poll's
    messages can have come from one response only (`arrival_responses` 1: one read since the previous poll, which
    left nothing queued) the stamp is that response's own read; where from several, it is the latest, at most
    `arrival_spread_ns` after the earliest of them. Against the kernel's trace (one message in flight) the Fetch
    response's read on the broker thread, before it carried the kernel's time, came tens of µs after the arrival at
    the median and about a millisecond at p99, the poll's return later still, and nearly every poll could have its
    messages from one response only (bench/client_stamp_lag.py, docs/performance.md). Without the plugin
    (`fetch` None) the deliveries are stamped as the poll returns (POLL_STAMPS) and `arrived_ns` is None."""

    def __init__(self, consumer: _KafkaConsumer, fetch=None) -> None:
        self._consumer = consumer
        self._held: list[TopicPartition] | None = None
        self._fetch = fetch
        self.arrived_ns: int | None = None
        self.arrival_responses: int | None = None
        self.arrival_spread_ns: int | None = None
        self._window = (0, 0)  # (responses, earliest read) the last poll's messages may have come from
        self._carry = False

    @property
    def stamps(self) -> str:
        """How the deliveries were stamped (brokerbench.figures): FETCH_ARRIVAL_STAMPS where every Fetch response so
        far was stamped at the kernel's receive time of its read (and before any), FETCH_STAMPS where one was stamped as
        the broker thread came to it, POLL_STAMPS without the plugin."""
        if self._fetch is None:
            return POLL_STAMPS
        return FETCH_ARRIVAL_STAMPS if self._fetch.arrival == self._fetch.responses else FETCH_STAMPS

    @property
    def fetch_responses(self) -> int | None:
        """The Fetch responses read without error so far; None without the plugin."""
        return None if self._fetch is None else self._fetch.responses

    def _fetched(self, messages: int) -> None:
        """After each poll: the latest Fetch response's read and the responses whose messages this poll's may be (those
        read since the previous poll; and the previous poll's too where it left messages queued, or where none was
        read since: its messages were left over from them)."""
        responses, first, last = self._fetch.take()
        if messages and (self._carry or not responses):
            before, earliest = self._window
            responses, first = responses + before, earliest if before else first
        self._window = (responses, first)
        self._carry = messages > CONSUME_BATCH  # consume() stopped at its limit: the rest stays queued
        if messages:
            self.arrived_ns = last or None
            self.arrival_responses = responses
            self.arrival_spread_ns = last - first if responses else None

    def _poll(self, timeout_s: float) -> list:
        # consume(n, timeout) waits for n messages or the whole timeout, which would add up to
        # `timeout` of latency at low rates: block for the first message, then take what is queued.
        first = self._consumer.poll(timeout_s)
        messages = [first, *self._consumer.consume(CONSUME_BATCH, 0)] if first is not None else []
        if self._fetch is not None:
            self._fetched(len(messages))
        return messages

    def poll(self, timeout_s: float) -> list[Message]:
        return [(m.key(), m.value(), m.partition()) for m in self._poll(timeout_s) if m.error() is None]

    def hold(self, on: bool) -> None:
        """Stop fetching by leaving the partitions, and take them again at the positions reached: librdkafka
        otherwise prefetches into its local queue while not polled. (pause/resume would do, but librdkafka
        2.x fetches again only up to a second after resume, which would show as the backlog's first delivery.)"""
        if on:
            self._held = self._consumer.position(self._consumer.assignment())
            self._consumer.unassign()
        elif self._held is not None:
            self._consumer.assign(self._held)
            self._held = None

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


class SpreadConsumer(KafkaConsumer):
    """A consumer over several topics: each message is reported under its lane, not its partition within
    its topic, so per-lane accounting (reordering, the readiness probe) never mixes topics."""

    def __init__(self, consumer: _KafkaConsumer, names: list[str], fetch=None) -> None:
        super().__init__(consumer, fetch)
        self._index = {name: j for j, name in enumerate(names)}
        self._topics = len(names)

    def poll(self, timeout_s: float) -> list[Message]:
        index, topics = self._index, self._topics
        return [(m.key(), m.value(), m.partition() * topics + index[m.topic()])  # lane_of, inline
                for m in self._poll(timeout_s) if m.error() is None]
