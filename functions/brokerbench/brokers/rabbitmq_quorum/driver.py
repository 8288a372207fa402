"""RabbitMQ quorum queues over AMQP 0-9-1 through pika: publisher confirms, consumer acknowledgements.

Each lane is one quorum queue, `<topic>-<n>`, published to through the default exchange. A message's body is the
worker's header (a fixed 20 bytes) followed by the payload. The producer publishes on a channel in confirm mode
without waiting (pika's own blocking publish waits for each confirm): batch mode keeps up to rabbitmq_in_flight
unconfirmed, single mode one. A confirm is stamped in pika's callback, as the frame is read from the socket, and
may confirm many at once (`multiple`). The consumer takes deliveries with a prefetch of rabbitmq_prefetch and
acknowledges a poll's deliveries (one `multiple` ack) with the next poll, after their receive timestamps.
The native send loop (`native_sender`, brokerbench.native) publishes the same way on an AMQP connection of its own.

A channel refused once is replaced (on a cluster). RabbitMQ 3.10's channel keeps, per quorum queue, a client state
made at its first publish there from the queue's record: the leader the record names first among its members. Its
first publish asks that node (an RPC) for the queue's machine version; a node that is down answers `nodedown`, and
the publish is refused (basic.nack) with the state unchanged, so every later publish on the channel asks the same
dead node and is refused too, until that node runs again (the state is never made again from a newer record:
rabbit_quorum_queue:update/2 keeps it). A producer that loses the leader's node and publishes on a new channel
before the new leader has written itself into the record (here it publishes 0.01 to 0.15 s after a kill, and the
management API names the new leader 0.2 to 0.5 s after it) is refused for as long as the old leader is down.
RabbitMQ removed that RPC in 2023 (rabbitmq-server pull request 9221, backported to 3.11.x and 3.12.x). A new
channel takes the record as it is then: once it names the new leader, its publishes are confirmed (docs/faults.md).
"""

from __future__ import annotations

import time
from collections import OrderedDict

import pika
from pika.exceptions import AMQPError

from ... import native, toxiproxy
from ...drivers import BrokerUnavailable, Message, OnAck
from ...worker.framing import HEADER
from ..rabbitmq import amqp, in_flight_window, management
from ..rabbitmq.amqp import lane_queue

HEADER_SIZE = HEADER.size


class RabbitMQQuorumDriver:
    name = "rabbitmq-quorum"

    def __init__(self, endpoint: dict, client: dict) -> None:
        self.endpoint = endpoint
        self.client = client
        self._nodes: dict[str, str] | None = None  # the nodes' pids when the cell's queues were made

    def check(self, timeout_s: float = 5.0) -> None:
        amqp.check(self.endpoint, timeout_s)

    def describe(self) -> dict:
        return {"broker": self.name,
                "broker_version": amqp.server_version(self.endpoint) or self.endpoint.get("version", "unknown"),
                "client_library": "pika", "client_version": pika.__version__,
                **management.described_size(self.endpoint)}

    def create_topic(self, topic: str, partitions: int) -> None:
        amqp.declare_lanes(self.endpoint, topic, partitions, "quorum")
        if self.endpoint.get("management_url"):
            self._nodes = management.node_pids(self.endpoint)

    def delete_topic(self, topic: str, partitions: int) -> None:
        amqp.delete_lanes(self.endpoint, topic, partitions)

    def backlog(self, topic: str, group: str, partitions: int) -> int | None:
        """Messages ready in the cell's queues (the passive declare's count): delivered-but-unacknowledged ones
        are not counted, as a consumer group's lag does not count fetched messages."""
        counts = amqp.counts(self.endpoint, topic, partitions)
        return None if counts is None else sum(counts)

    def message_count(self, topic: str, partitions: int) -> int | None:
        """Messages routed into the cell's queues: the management API's publish counter, summed over the lanes
        (rabbitmq.management: AMQP tells only what a queue holds now, and a queue removes what its consumers
        acknowledge). None without the API (`management_url`), and where the counter cannot be trusted: it lives
        in the node's memory, so a node started again since the queues were made gives none."""
        if not self.endpoint.get("management_url"):
            return None
        if not self._nodes or management.node_pids(self.endpoint, wait_s=0) != self._nodes:
            return None
        return management.published(self.endpoint, topic, partitions,
                                    lambda: amqp.counts(self.endpoint, topic, partitions))

    def close(self) -> None:
        pass

    def in_flight_window(self, mode: str) -> int:
        return in_flight_window(self.client, mode)

    # The native AMQP loop keeps the one connection it made: a cell with faults publishes through QuorumProducer,
    # which connects again to whichever node answers (worker.producer)
    native_follows_failover = False

    def producer(self, topic: str, partitions: int, mode: str, on_ack: OnAck) -> QuorumProducer:
        depth = self.in_flight_window(mode)
        return QuorumProducer(amqp.connect(self.endpoint), [lane_queue(topic, p) for p in range(partitions)],
                              depth, on_ack, self._reconnect())

    def _reconnect(self):
        """On a cluster, how a producer or consumer connects again after losing its node (any node that answers); the
        same through a network fault's proxies (a reset closes connections the node still serves); None on one node
        reached directly, where a lost connection ends the client (its sends fail, the consumer's cell fails)."""
        if "nodes" not in self.endpoint and not toxiproxy.routed(self.endpoint):
            return None
        return lambda: amqp.connect(self.endpoint, timeout_s=2.0)

    def native_sender(self, topic: str, partitions: int, mode: str):
        """The native send loop on an AMQP 0-9-1 connection of its own: a channel in confirm mode, the same queues,
        body and window as `producer`, each confirm read (and stamped) as it arrives on the loop's socket. On a
        cluster it connects to the first node that answers (any node hands a publish to the queue's leader)."""
        if self.endpoint.get("tls"):
            raise native.Unsupported("the native loop speaks AMQP over plain TCP, not TLS")
        user, password = amqp.credentials(self.endpoint)
        host, port = amqp.first_answering(self.endpoint)  # a cluster's any node serves its quorum queues
        try:
            return native.amqp_sender(host, port, user, password,
                                      self.endpoint.get("vhost", "/"),
                                      [lane_queue(topic, p).encode() for p in range(partitions)],
                                      self.in_flight_window(mode))
        except OSError as exc:
            raise BrokerUnavailable(f"RabbitMQ at {host}:{port}: {exc}") from None

    def consumer(self, topic: str, group: str, partitions: list[int]) -> QuorumConsumer:
        return QuorumConsumer(amqp.connect(self.endpoint), [lane_queue(topic, p) for p in partitions],
                              self.client["rabbitmq_prefetch"], self._reconnect())


class _Reconnecting:
    """What the producer and the consumer share: connecting again after their connection was lost."""

    RECONNECT_EVERY_S = 0.05  # how often a client that lost its node (or its proxied link) tries to connect again
    _reconnect = None
    _next_try = 0.0

    def _attach(self, connection) -> None:
        raise NotImplementedError

    def _connect_again(self) -> bool:
        """A new connection (`_reconnect`), at most every RECONNECT_EVERY_S, attached: whether it is made."""
        if self._reconnect is None or time.monotonic() < self._next_try:
            return False
        self._next_try = time.monotonic() + self.RECONNECT_EVERY_S
        try:
            self._attach(self._reconnect())
        except (AMQPError, OSError, BrokerUnavailable):
            return False
        return True


class QuorumProducer(_Reconnecting):
    """Publishes without waiting and counts confirms as they come. pika's BlockingChannel waits for each confirm
    in basic_publish, so this publishes on the channel's asynchronous half (`_impl`, pika's Channel) in confirm
    mode; the blocking connection still reads the socket (process_data_events), and a confirm wakes it
    (add_callback_threadsafe) so that a wait ends as soon as one arrives. On a cluster, a channel that had a
    publish refused is replaced by a new one before the next publish (module docstring)."""

    RENEW_WAIT_S = 0.05  # a refused channel's publishes in flight, waited for before it is closed
    _refused = False  # a publish on the current channel was refused (basic.nack): it is replaced before the next

    def __init__(self, connection, queues: list[str], depth: int, on_ack: OnAck, reconnect=None) -> None:
        self._queues = queues
        self._depth = depth
        self._on_ack = on_ack
        self._reconnect = reconnect
        self._next_try = 0.0
        self._next_renewal = 0.0
        self._woken = False
        self._attach(connection)

    def _attach(self, connection) -> None:
        """Publishes from now on over `connection`, on a channel of its own."""
        self._connection = connection
        self._broken = False
        self._open_channel()

    def _open_channel(self) -> None:
        """A new channel on the connection, in confirm mode, with nothing in flight."""
        self._in_flight: OrderedDict[int, bytes] = OrderedDict()  # delivery tag -> header, oldest first
        self._tag = 0
        self._refused = False
        self._blocking_channel = self._connection.channel()  # kept: its asynchronous half is the one published on
        self._channel = self._blocking_channel._impl
        selected = []
        self._channel.confirm_delivery(self._confirmed, callback=lambda _frame: selected.append(True))
        while not selected:
            self._connection.process_data_events(0.1)

    def _renew_refused_channel(self) -> None:
        """Replaces a channel RabbitMQ refused a publish on (module docstring: a channel that first published to a
        quorum queue while the queue's record still named its dead leader is refused until that node is back), at
        most every RECONNECT_EVERY_S. Its publishes in flight are waited for up to RENEW_WAIT_S; what is still in
        flight then stays unacknowledged, as on a lost connection."""
        if time.monotonic() < self._next_renewal:
            return
        self._next_renewal = time.monotonic() + self.RECONNECT_EVERY_S
        self.flush(self.RENEW_WAIT_S)
        if self._broken:
            return
        try:
            self._blocking_channel.close()
            self._open_channel()
        except (AMQPError, OSError):
            self._lost()

    def _again(self) -> bool:
        """A producer that lost its node connects again (on a cluster, at most every RECONNECT_EVERY_S): whether it
        is connected now."""
        return not self._broken or self._connect_again()

    def _confirmed(self, frame) -> None:
        """Basic.Ack or Basic.Nack for one delivery tag, or every tag up to it (`multiple`)."""
        at = time.monotonic_ns()
        method = frame.method
        ok = method.NAME == "Basic.Ack"
        if not ok:
            self._refused = True
        if method.multiple:
            while self._in_flight and next(iter(self._in_flight)) <= method.delivery_tag:
                self._on_ack(self._in_flight.popitem(last=False)[1], ok, at)
        elif (header := self._in_flight.pop(method.delivery_tag, None)) is not None:
            self._on_ack(header, ok, at)
        if not self._woken:
            self._woken = True
            self._connection.add_callback_threadsafe(self._wake)

    def _wake(self) -> None:
        self._woken = False

    def send(self, header: bytes, payload: bytes, partition: int) -> None:
        if self._refused and self._reconnect is not None:  # on a cluster: a refused channel is replaced
            self._renew_refused_channel()
        if not self._again():
            self._on_ack(header, False, time.monotonic_ns())
            return
        try:
            self._channel.basic_publish("", self._queues[partition], header + payload)
        except (AMQPError, OSError):
            self._on_ack(header, False, time.monotonic_ns())
            self._lost()
            return
        self._tag += 1
        self._in_flight[self._tag] = header
        while len(self._in_flight) >= self._depth and not self._broken:  # the window is full: wait for room
            self._events(None)

    def _events(self, timeout_s: float | None) -> None:
        try:
            self._connection.process_data_events(timeout_s)
        except (AMQPError, OSError):
            self._lost()

    def _lost(self) -> None:
        """The connection is lost: what is in flight is no longer waited for and stays unacknowledged (no confirm
        came, and the broker may have stored it); whatever is sent later fails at once, until a producer on a cluster
        has connected to another node."""
        self._broken = True
        self._in_flight.clear()
        try:
            self._connection.close()
        except Exception:  # noqa: BLE001 - the connection is gone already
            pass

    def poll(self, timeout_s: float) -> None:
        """Write what is published and serve the confirms: waiting up to timeout_s while any are due."""
        if self._broken:
            time.sleep(max(0.0, timeout_s))
            return
        if not self._in_flight:
            self._events(0)
            time.sleep(max(0.0, timeout_s))
            return
        self._events(max(0.0, timeout_s))

    def flush(self, timeout_s: float) -> int:
        """Wait up to timeout_s for every confirm; returns the messages still unconfirmed."""
        deadline = time.monotonic() + timeout_s
        while self._in_flight and not self._broken and (left := deadline - time.monotonic()) > 0:
            self._events(left)
        return len(self._in_flight)

    def close(self) -> None:
        self.flush(5)
        try:
            self._connection.close()
        except (AMQPError, OSError):
            pass


class QuorumConsumer(_Reconnecting):
    """basic.consume on each of its lanes' queues on one channel (prefetch shared by them). A poll's deliveries
    are acknowledged in one `multiple` ack with the next poll (or at close), after their receive timestamps."""

    def __init__(self, connection, queues: list[str], prefetch: int, reconnect=None) -> None:
        self._queues = queues
        self._lane = {queue: int(queue.rsplit("-", 1)[1]) for queue in queues}
        self._prefetch = prefetch
        self._reconnect = reconnect
        self._held = False
        self._received: list[Message] = []
        self._next_try = 0.0
        self._attach(connection)

    def _attach(self, connection) -> None:
        self._connection = connection
        self._channel = connection.channel()
        self._channel.basic_qos(prefetch_count=self._prefetch)
        self._consuming = False
        self._last_tag = 0  # the last delivery tag not acknowledged yet
        self._broken = False  # the connection was lost and no new one made yet

    def _deliver(self, _channel, method, _properties, body: bytes) -> None:
        self._received.append((body[:HEADER_SIZE], body[HEADER_SIZE:], self._lane[method.routing_key]))
        self._last_tag = method.delivery_tag

    def _start(self) -> None:
        for queue in self._queues:
            self._channel.basic_consume(queue, self._deliver)
        self._consuming = True

    def _ack(self) -> None:
        if self._last_tag:
            self._channel.basic_ack(self._last_tag, multiple=True)
            self._last_tag = 0

    def poll(self, timeout_s: float) -> list[Message]:
        if self._held:
            time.sleep(timeout_s)
            return []
        if self._broken and not self._connect_again():  # its old connection is not touched (pika's fails every call)
            time.sleep(min(timeout_s, self.RECONNECT_EVERY_S))
            return []
        try:
            if not self._consuming:
                self._start()
            self._ack()
            self._connection.process_data_events(timeout_s)
        except (AMQPError, OSError) as exc:
            if self._reconnect is None:
                raise BrokerUnavailable(f"RabbitMQ consumer lost its connection: {exc!r}") from None
            # On a cluster (or through a proxy a network fault resets): what was delivered and not acknowledged goes
            # back to the queue and comes again (counted as duplicates where it was received here); the consumer
            # connects again (to another node on a cluster) and reads on.
            self._broken, self._next_try = True, 0.0
            if not self._connect_again():
                time.sleep(min(timeout_s, self.RECONNECT_EVERY_S))
        out, self._received = self._received, []
        return out

    def hold(self, on: bool) -> None:
        """Consuming starts at the first poll after hold(False): until then the queues keep everything."""
        self._held = on

    def commit(self) -> None:
        """Nothing to store: acknowledged deliveries leave the queue, the rest stays there."""

    def close(self) -> None:
        try:
            if not self._broken:
                self._ack()
            self._connection.close()
        except (AMQPError, OSError, ValueError):  # ValueError: pika's connection lost before (its timers closed)
            pass  # the broker is gone: unacknowledged deliveries go back to the queue, as RabbitMQ requeues them
