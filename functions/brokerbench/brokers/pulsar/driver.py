"""Apache Pulsar through pulsar-client (the C++ client's Python binding); topics and stats over the admin REST API.

A cell's topic is a partitioned topic; a partition is its `<topic>-partition-<n>` topic. Producers and
consumers attach to those partition topics directly, so a message goes to exactly the partition the
worker names and each consumer reads exactly its assigned partitions. The worker's header travels at the
start of the message body, after one byte with its length (a property would have to be text: hex or base64
per message).
Batch mode turns the client's batching on (per partition, bounded by time, bytes and count); single mode
turns it off, and the worker keeps one message in flight.
The native send loop (`native_sender`, brokerbench.native) speaks Pulsar's binary protocol itself where one broker
serves every partition of the cell (the admin API's lookup says which): a producer per partition on one connection,
batches bounded as the client bounds them (delay, bytes, messages), each batch's receipt stamped when it arrived. The
C++ client spends about 4 µs of CPU per message on its own objects (a message, its callbacks copied into the batch,
a message id per receipt), where the Java client spends about 2.5: on a machine whose cores the broker shares, that
set the worker's maximum. Elsewhere (partitions on several brokers, a connection the loop cannot make) and where a
cell injects faults (the client reconnects and resends; the loop's one connection does not), the native loop sends
through the C API of the same libpulsar the Python binding loaded (`native_failover_sender`), with the same settings.
The Python loop's producer (`producer`) speaks the protocol itself too where one broker serves every partition, at
a plain address or over TLS (pulsar+ssl://: TLS spoken over its socket, socket_buffer.TlsSocket; the native loop
does not speak TLS and leaves such a cell to the Python loop) (wire.py: each receipt stamped when the read that
brought it arrived, where pulsar-client's callback waited for the GIL); elsewhere it is pulsar-client's. The consumers, on both loops, speak the protocol themselves on
the same condition (wire_consumer.py: each delivery stamped when the read that brought it arrived, where pulsar-client
handed it over as the worker's receive returned); elsewhere they are pulsar-client's.
"""

from __future__ import annotations

import ssl
import time
from functools import partial

import pulsar

from ... import native
from ...drivers import BrokerUnavailable, Message, OnAck
from ...drivers.handoff import Handoff
from ...figures import client_stamps
from . import wire
from .admin import Admin, AdminError, partition_topic
from .wire_consumer import WireConsumer, wire_consumer

LENGTHS = [bytes((n,)) for n in range(256)]  # the header's length byte, made once
# Messages each partition's producer keeps unacknowledged before send blocks (the client's default is 1000):
# enough for full batches in flight, bounded so a producer that outruns the broker waits (publish delay shows it).
MAX_PENDING_PER_PARTITION = 10_000
RECEIVER_QUEUE = 10_000  # messages each partition's consumer prefetches (the client's default is 1000)
POLL_MAX = 1000  # messages one consumer poll returns at most
SEND_TIMEOUT_MS = 30_000
CONNECT_TIMEOUT_S = 10.0  # the Python loop's own connection and its producers made within this
# Backlog counts (see PulsarDriver.backlog): how large a backlog is read while consumers are attached (entries and
# bytes), and how long a count may take then and after they have left. An entry is a whole batch, up to
# pulsar_batch_bytes: bounded by entries alone, a sample read up to a gigabyte back from storage once a second. Reading
# 500,000 1 KB messages (batches of ~800) so sampled, one consumer took 20.1k and 21.2k msgs/s, unsampled 95.5k and
# 83.9k (2026-11-29, load average 10.5-11.5): the sample, not the consumer, was the cell's limit.
SAMPLE_MAX_ENTRIES = 1000
SAMPLE_MAX_BYTES = 4 << 20
SAMPLE_TIMEOUT_S = 5.0
COUNT_TIMEOUT_S = 60.0
OK = pulsar.Result.Ok
TLS_SCHEME = "pulsar+ssl://"


def _client(endpoint: dict, timeout_s: int = 30) -> pulsar.Client:
    """A client that connects to the addresses the broker advertises for the endpoint's listener_name (its
    internal listener when none is named)."""
    try:
        return pulsar.Client(endpoint["service_url"], operation_timeout_seconds=timeout_s,
                             listener_name=endpoint.get("listener_name"),
                             logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    except pulsar.PulsarException as exc:
        raise BrokerUnavailable(f"Pulsar at {endpoint['service_url']}: {exc}") from None


class PulsarDriver:
    name = "pulsar"

    def __init__(self, endpoint: dict, client: dict) -> None:
        self.endpoint = endpoint
        self.client = client
        self.admin = Admin(endpoint["admin_url"])
        self.topic_type = client["pulsar_topic_type"]
        # A non-persistent topic drops what is published while no consumer is subscribed (the worker then sends
        # its readiness probe only once the consumers are ready).
        self.keeps_unread = self.topic_type == "persistent"
        self.namespace = endpoint.get("namespace", "public/default")
        # pulsar+ssl://: the worker's own connections speak TLS over their socket (socket_buffer.TlsSocket), to the
        # broker's TLS address (the lookup's brokerUrlTls)
        self.tls = endpoint["service_url"].startswith(TLS_SCHEME)
        self._started_at: int | None = None  # the broker's start when the cell's topic was created

    def full_name(self, topic: str) -> str:
        return f"{self.topic_type}://{self.namespace}/{topic}"

    def partitions_of(self, topic: str, partitions) -> list[str]:
        return [partition_topic(self.full_name(topic), p) for p in partitions]

    def check(self, timeout_s: float = 5.0) -> None:
        """The admin API answers and the namespace the topics go in exists."""
        try:
            self.admin.call("GET", f"/admin/v2/namespaces/{self.namespace}", timeout_s=timeout_s)
        except AdminError as exc:
            raise BrokerUnavailable(f"Pulsar at {self.endpoint['admin_url']}, namespace {self.namespace}: "
                                    f"{exc}") from None
        except OSError as exc:
            raise BrokerUnavailable(f"Pulsar admin API at {self.endpoint['admin_url']} did not answer: {exc}") from None

    def describe(self) -> dict:
        try:
            version = self.admin.version()
        except (AdminError, OSError):
            version = self.endpoint.get("version", "unknown")
        described = {"broker": "pulsar", "broker_version": version, "client_library": "pulsar-client",
                     "client_version": pulsar.__version__, "topic_type": self.topic_type}
        if self.endpoint.get("listener_name"):
            described["listener_name"] = self.endpoint["listener_name"]
        return described

    def create_topic(self, topic: str, partitions: int) -> None:
        try:
            self.admin.create_partitioned(self.full_name(topic), partitions)
            self._started_at = self._broker_start()
        except (AdminError, OSError) as exc:
            raise BrokerUnavailable(f"could not create topic {self.full_name(topic)}: {exc}") from None
        if self.endpoint.get("listener_name"):
            self._check_listener(partition_topic(self.full_name(topic), 0))

    def _check_listener(self, topic: str) -> None:
        """The broker advertises the listener the client names: asked through the admin API's lookup, which
        answers at once, where the client's own lookup retries until its operation timeout (30 s) is over."""
        name = self.endpoint["listener_name"]
        try:
            self.admin.lookup(topic, name)
        except AdminError as exc:
            if f"{name} listener" in str(exc):
                raise BrokerUnavailable(f"listener_name {name!r}: the broker at {self.endpoint['admin_url']} "
                                        "advertises no such listener (its advertisedListeners)") from None
            raise BrokerUnavailable(f"could not look {topic} up for listener {name!r}: {exc}") from None
        except OSError as exc:
            raise BrokerUnavailable(f"could not look {topic} up for listener {name!r}: {exc}") from None

    def delete_topic(self, topic: str, partitions: int) -> None:
        try:
            self.admin.delete_partitioned(self.full_name(topic))
        except (AdminError, OSError):
            pass  # best effort: a topic left behind does not change later cells (each has its own)

    def _partition_stats(self, topic: str, partitions: int) -> list[dict] | None:
        try:
            return [self.admin.stats(name) for name in self.partitions_of(topic, range(partitions))]
        except (AdminError, OSError):
            return None

    def backlog(self, topic: str, group: str, partitions: int) -> int | None:
        """Messages the group has not acknowledged. A subscription's msgBacklog counts entries, and an entry
        is a whole batch, so where it is not zero the broker counts the entries' messages (analyzeBacklog).
        That reads the backlog back from storage: while the group's consumers are attached it is done only for
        a backlog of up to SAMPLE_MAX_ENTRIES entries and SAMPLE_MAX_BYTES (the subscription's backlogSize) per
        partition, so sampling does not load the broker the cell measures; once they have left (the count after
        the drain), in full.
        None when the broker cannot tell: a non-persistent topic keeps no backlog, a sampled backlog is larger
        than that (or its size is not given), or the count was cut short by the broker's scan limits."""
        if self.topic_type != "persistent":
            return None
        stats = self._partition_stats(topic, partitions)
        if stats is None:
            return None
        total = 0
        for name, partition in zip(self.partitions_of(topic, range(partitions)), stats):
            subscription = (partition.get("subscriptions") or {}).get(group)
            entries = int((subscription or {}).get("msgBacklog") or 0)
            if not entries:
                continue
            attached = bool(subscription.get("consumers"))
            size = subscription.get("backlogSize")
            if attached and (entries > SAMPLE_MAX_ENTRIES or not isinstance(size, int) or size > SAMPLE_MAX_BYTES):
                return None
            try:
                counted = self.admin.analyze_backlog(name, group, timeout_s=SAMPLE_TIMEOUT_S if attached
                                                     else COUNT_TIMEOUT_S)
            except (AdminError, OSError):
                return None
            if counted.get("aborted"):
                return None
            total += int(counted["messages"])
        return total

    def message_count(self, topic: str, partitions: int) -> int | None:
        """Messages the broker has stored in the topic and acknowledged: msgInCounter, summed over the
        partitions (it counts each message of a batch). None for a non-persistent topic, which stores none, and
        where the counter cannot be trusted: it lives in the broker's memory and starts again at 0 with the
        broker, so a broker restarted since the topic was created (its JVM's start time changed) gives none."""
        if self.topic_type != "persistent":
            return None
        stats = self._partition_stats(topic, partitions)
        if stats is None or self._started_at is None or self._broker_start() != self._started_at:
            return None
        return sum(int(s.get("msgInCounter", 0)) for s in stats)

    def _broker_start(self) -> int | None:
        try:
            return self.admin.started_at()
        except (AdminError, OSError, ValueError):
            return None

    def close(self) -> None:
        pass

    def producer_settings(self, mode: str) -> dict:
        settings = {"block_if_queue_full": True, "max_pending_messages": MAX_PENDING_PER_PARTITION,
                    "send_timeout_millis": SEND_TIMEOUT_MS, "batching_enabled": mode == "batch"}
        if mode == "batch":
            settings.update(batching_max_publish_delay_ms=self.client["pulsar_batch_delay_ms"],
                            batching_max_allowed_size_in_bytes=self.client["pulsar_batch_bytes"],
                            batching_max_messages=self.client["pulsar_batch_messages"])
        return settings

    def in_flight_window(self, mode: str) -> int | None:
        """Single mode: one (the worker flushes after each send). Batch mode has no bound in all: each partition's
        producer blocks its send_async at max_pending_messages unacknowledged (`in_flight_bounds`), and the client's
        memory limit is off (the C++ client's default, which the Python client does not change)."""
        return None if mode == "batch" else 1

    def in_flight_bounds(self, mode: str) -> dict:
        return {"per_lane": MAX_PENDING_PER_PARTITION}

    def producer(self, topic: str, partitions: int, mode: str, on_ack: OnAck) -> PulsarProducer | wire.WireProducer:
        """The Python loop's producer: where one broker serves every partition at a pulsar:// address (the
        admin API's lookup, as `native_sender` asks it) Pulsar's binary protocol spoken on a socket of its own
        (wire.WireProducer: receipts stamped as they are read); elsewhere, and where that connection cannot be made
        or a producer on it is refused (authentication: what it does not speak), pulsar-client's
        (PulsarProducer)."""
        names = self.partitions_of(topic, range(partitions))
        address = self._one_broker(names)
        if address is not None:
            try:
                connection = wire.Connection(*address, names, CONNECT_TIMEOUT_S, self.tls)
            except ssl.SSLError as exc:  # a certificate not trusted: pulsar-client's handshake would fail the same way
                raise BrokerUnavailable(wire.tls_failed(address, exc)) from None
            except (OSError, ValueError):
                pass  # pulsar-client connects as configured
            else:
                return wire.WireProducer(connection, self.producer_settings(mode), mode == "single", on_ack)
        client = _client(self.endpoint)
        try:
            producers = [client.create_producer(name, **self.producer_settings(mode))
                         for name in self.partitions_of(topic, range(partitions))]
        except pulsar.PulsarException as exc:
            client.close()
            raise BrokerUnavailable(f"could not create producers for {self.full_name(topic)}: {exc}") from None
        return PulsarProducer(client, producers, on_ack)

    def native_sender(self, topic: str, partitions: int, mode: str):
        """The native send loop speaking Pulsar's binary protocol to the broker that serves every partition, with
        `producer_settings` (at most max_pending_messages unanswered per partition, counted over all of them); the C
        API loop where no one broker does or the connection cannot be made. Over TLS (pulsar+ssl://) the native loop
        does not speak to one broker: the Python loop's producer does, its receipts stamped at arrival, where the C
        API's are stamped in its callback (on several brokers both are the client library's, and the C API's loop
        is kept)."""
        names = self.partitions_of(topic, range(partitions))
        address = self._one_broker(names)
        if address is not None and self.tls:
            raise native.Unsupported("the native loop speaks plain TCP, not TLS (the Python loop speaks TLS to the "
                                     "broker itself, its receipts stamped at arrival)")
        if address is not None:
            settings = self.producer_settings(mode)
            try:
                return native.pulsar_wire_sender(*address, names, settings, mode == "single",
                                                 settings["max_pending_messages"] * partitions)
            except OSError:
                pass  # the C API's client connects as configured (it may need what the loop does not speak)
        return self.native_failover_sender(topic, partitions, mode)

    def _one_broker(self, topics: list[str]) -> tuple[str, int] | None:
        """(host, port) of the broker that serves every topic, at the endpoint's listener, by the admin API's
        lookup (its TLS address for a pulsar+ssl:// endpoint); None when they are on several brokers, the broker
        names no such address, or the lookup fails."""
        key, scheme = ("brokerUrlTls", TLS_SCHEME) if self.tls else ("brokerUrl", "pulsar://")
        urls = set()
        for name in topics:
            try:
                urls.add(self.admin.lookup(name, self.endpoint.get("listener_name")).get(key))
            except (AdminError, OSError, AttributeError):
                return None
        if len(urls) != 1:
            return None
        url = urls.pop()
        if not isinstance(url, str) or not url.startswith(scheme):
            return None
        host, _, port = url[len(scheme):].rstrip("/").rpartition(":")
        return (host.strip("[]"), int(port)) if host and port.isdigit() else None

    def native_failover_sender(self, topic: str, partitions: int, mode: str):
        """The native send loop over Pulsar's C API, from the same libpulsar the Python client loaded: a producer
        per lane with `producer_settings`, each receipt stamped in the client's callback as in `producer`."""
        try:
            return native.pulsar_sender(self.endpoint["service_url"], self.endpoint.get("listener_name"),
                                        self.partitions_of(topic, range(partitions)), self.producer_settings(mode),
                                        mode == "single")
        except OSError as exc:
            raise BrokerUnavailable(f"could not create producers for {self.full_name(topic)}: {exc}") from None

    def consumer(self, topic: str, group: str, partitions: list[int]) -> PulsarConsumer | WireConsumer:
        """Where one broker serves every partition at a pulsar:// address, Pulsar's binary protocol spoken on a
        socket of its own (wire_consumer.WireConsumer: each delivery stamped when the read that brought it arrived);
        elsewhere, and where that connection or a subscription cannot be made, pulsar-client's (PulsarConsumer)."""
        names = self.partitions_of(topic, partitions)
        address = self._one_broker(names)
        if address is not None:
            own = wire_consumer(address, names, group, list(partitions), RECEIVER_QUEUE, CONNECT_TIMEOUT_S, self.tls)
            if own is not None:
                return own
        client = _client(self.endpoint)
        try:
            # One consumer for the group on each partition: Exclusive, so a second one would be refused rather
            # than silently share it. From the earliest message: nothing sent before it attached is missed.
            consumer = client.subscribe(names, group, consumer_type=pulsar.ConsumerType.Exclusive,
                                        initial_position=pulsar.InitialPosition.Earliest,
                                        receiver_queue_size=RECEIVER_QUEUE,
                                        max_total_receiver_queue_size_across_partitions=RECEIVER_QUEUE * len(names))
        except pulsar.PulsarException as exc:
            client.close()
            raise BrokerUnavailable(f"could not subscribe {group} to {self.full_name(topic)}: {exc}") from None
        return PulsarConsumer(client, consumer, {name: p for name, p in zip(names, partitions)})


class PulsarProducer:
    """send_async per partition producer. The client calls back from its own thread, which stamps the time the
    acknowledgement arrived; the results queue up and reach on_ack in poll and flush, on the worker's thread, as
    the Driver interface promises (with the callback's time, not the time the worker took them)."""

    stamps = client_stamps("pulsar-client")  # a receipt in the send callback, on the C++ client's thread

    def __init__(self, client: pulsar.Client, producers: list, on_ack: OnAck) -> None:
        self._client = client
        self._producers = producers
        self._on_ack = on_ack
        self._results = Handoff()
        self._callback = partial(_queue_result, self._results.put)
        self._pending = 0

    def send(self, header: bytes, payload: bytes, partition: int) -> None:
        self._producers[partition].send_async(b"".join((LENGTHS[len(header)], header, payload)),
                                              partial(self._callback, header))
        self._pending += 1

    def _serve(self, timeout_s: float) -> None:
        results, on_ack = self._results, self._on_ack
        if not results.wait(timeout_s):
            return
        while results:
            header, result, at_ns = results.take()
            self._pending -= 1
            on_ack(header, result == OK, at_ns)

    def poll(self, timeout_s: float) -> None:
        self._serve(timeout_s)

    def flush(self, timeout_s: float) -> int:
        """Wait for the acknowledgements of everything sent (a batch goes out when its delay is over)."""
        deadline = time.monotonic() + timeout_s
        self._serve(0)
        while self._pending and (left := deadline - time.monotonic()) > 0:
            self._serve(left)
        return self._pending

    def close(self) -> None:
        self.flush(5)
        self._client.close()


def _queue_result(put, header: bytes, result, _message_id) -> None:
    put((header, result, time.monotonic_ns()))  # on the client's thread, as the acknowledgement arrives


class PulsarConsumer:
    """Receives from the partitions it was given. A batch's acknowledgements (cumulative, per partition: the
    last message received) are made with the next poll, after the worker took its receive timestamps; the
    client groups them and sends them within 100 ms."""

    stamps = client_stamps("pulsar-client")  # a message as the client's receive returns it

    def __init__(self, client: pulsar.Client, consumer, partitions: dict[str, int]) -> None:
        self._client = client
        self._consumer = consumer
        self._partition = partitions
        self._last: dict[str, object] = {}  # partition topic -> the last message received, not yet acknowledged

    def _acknowledge(self) -> None:
        last, self._last = self._last, {}
        for message in last.values():
            self._consumer.acknowledge_cumulative(message)

    def poll(self, timeout_s: float) -> list[Message]:
        self._acknowledge()
        receive = self._consumer.receive
        try:
            first = receive(max(1, int(timeout_s * 1000)))
        except pulsar.Timeout:
            return []
        messages = [first]
        try:
            while len(messages) < POLL_MAX:
                messages.append(receive(0))
        except pulsar.Timeout:
            pass
        out: list[Message] = []
        partition, last = self._partition, self._last
        if len(partition) == 1:  # one partition (a cell's usual consumer): every message is its, no name to ask
            (topic, lane), = partition.items()
            for message in messages:
                body = message.data()
                end = body[0] + 1
                out.append((body[1:end], body[end:], lane))
            last[topic] = messages[-1]
            return out
        for message in messages:
            body = message.data()
            topic = message.topic_name()
            end = body[0] + 1
            out.append((body[1:end], body[end:], partition[topic]))
            last[topic] = message
        return out

    def hold(self, on: bool) -> None:
        """Nothing to stop: the client's receiver queue (RECEIVER_QUEUE messages per partition) fills from a
        backlog and waits there, the rest stays at the broker until received."""

    def commit(self) -> None:
        """Acknowledge what was received, for the broker-side backlog."""
        self._acknowledge()

    def close(self) -> None:
        try:
            self._acknowledge()  # closing sends the acknowledgements the client still groups
            self._consumer.close()
        except pulsar.PulsarException:
            pass  # the broker is gone: what was not acknowledged stays in its backlog
        finally:
            self._client.close()


def produce_one(endpoint: dict, topic: str, timeout_s: int = 10) -> bool:
    """Create `topic` (non-partitioned) if needed and produce one message to it: the broker serves producers."""
    try:
        Admin(endpoint["admin_url"], timeout_s=timeout_s).create_topic(topic)
    except AdminError as exc:
        if exc.status != 409:  # 409: it exists
            return False
    except OSError:
        return False
    try:
        client = _client(endpoint, timeout_s)
    except BrokerUnavailable:
        return False
    try:
        client.create_producer(topic, send_timeout_millis=timeout_s * 1000).send(b"ready")
        return True
    except pulsar.PulsarException:
        return False
    finally:
        client.close()
