"""RabbitMQ quorum queues over AMQP 0-9-1: publisher confirms, consumer acknowledgements.

Each lane is one quorum queue, `<topic>-<n>`, published to through the default exchange. A message's body is the
worker's header (a fixed 20 bytes) followed by the payload. The Python loop's producer speaks AMQP itself on a
connection of its own (rabbitmq.wire): it publishes on a channel in confirm mode without waiting, batch mode
keeping up to rabbitmq_in_flight unconfirmed, single mode one, and stamps a confirm when the read that brought it
arrived (the kernel's receive time, socket_buffer.recv_stamped; on TLS, when the read returned); a confirm may
confirm many at once (`multiple`). The consumer speaks AMQP itself too (wire.Consuming): it takes deliveries with a
prefetch of rabbitmq_prefetch, parsed in bulk from each read, and acknowledges a poll's deliveries (one `multiple`
ack) with the next poll, after their receive timestamps. pika declares, counts and deletes
the queues (rabbitmq.amqp). The native send loop (`native_sender`, brokerbench.native) publishes the same way on an
AMQP connection of its own.

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

import functools
import time
from collections import OrderedDict

import pika
from pika.exceptions import AMQPError

from ... import native, toxiproxy
from ...drivers import BrokerUnavailable, Message, OnAck
from ...worker.framing import HEADER
from ..rabbitmq import amqp, in_flight_window, management, stats_interval_s, wire
from ..rabbitmq.amqp import lane_queue
from ..socket_buffer import ConfirmedProducer

HEADER_SIZE = HEADER.size
# The management API's count of a queue's publishes and acknowledgements (message_count) is built from what each
# channel reports every collect_statistics_interval (250 ms on the local node), collected on the same period. A
# channel that closes reports its last figures and deletes them in the same step (rabbit_channel:terminate/2), before
# they are collected, so a channel closed within a period of its last publish or acknowledgement leaves them out of
# the count for good: CI runs read a cell's count 74 short (publishes and acknowledgements both lost) or never
# settled. Reported within a period and collected within the next, they are in the count two periods after the last
# operation: a channel is kept open STATS_SETTLE_PERIODS of them (1.25 s on the local node), and STATS_SETTLE_S where
# the endpoint does not give its node's period. Both the producer and the consumer wait after their "done" (where
# every publish was answered: worker.producer.close_after_settle, QuorumConsumer.finish), so the two waits go on
# together and beside the cell's drain and count: a local quorum cell's fixed cost read 4.5 s with them one after
# the other before the count, 2.6 s so (100 msgs/s, 1.5 s measured; bench/results/cell_overhead.json).
STATS_SETTLE_PERIODS = 5
STATS_SETTLE_S = 2.5


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
                # publish and consume speak AMQP themselves (rabbitmq.wire); pika declares and counts the queues
                "client_library": "rabbitmq.wire (AMQP spoken itself) + pika", "client_version": pika.__version__,
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
                                    lambda: amqp.counts(self.endpoint, topic, partitions), self.count_stable_s())

    def count_stable_s(self) -> float:
        """How long the count's figures must read the same (management.published). The consumer acknowledges its
        last, says "done" and keeps its channel open count_settle_s after (QuorumConsumer.finish), so the count
        starts as that wait starts rather than after it. Where the node's statistics period is given, the figures
        are in two periods after the last operation, within management.STABLE_S, which stays. Where it is not (an
        Amazon MQ broker: RabbitMQ's default period is 5 s), the wait the count no longer follows is added to it,
        so that no figure is given sooner after the last acknowledgement than before."""
        if stats_interval_s(self.endpoint) is not None:
            return management.STABLE_S
        return management.STABLE_S + STATS_SETTLE_S

    def close(self) -> None:
        pass

    def count_settle_s(self) -> float:
        """How long a cell's producer and consumer keep their channel open, idle, after their last publish or
        acknowledgement, so that message_count sees them: where the management API counts (its `management_url`),
        STATS_SETTLE_PERIODS of the node's statistics period (`stats_interval_ms`), or STATS_SETTLE_S where the
        endpoint does not give it; else 0."""
        if not self.endpoint.get("management_url"):
            return 0.0
        interval = stats_interval_s(self.endpoint)
        return STATS_SETTLE_S if interval is None else STATS_SETTLE_PERIODS * interval

    def in_flight_window(self, mode: str) -> int:
        return in_flight_window(self.client, mode)

    # The native AMQP loop keeps the one connection it made: a cell with faults publishes through QuorumProducer,
    # which connects again to whichever node answers (worker.producer)
    native_follows_failover = False

    def producer(self, topic: str, partitions: int, mode: str, on_ack: OnAck) -> QuorumProducer:
        depth = self.in_flight_window(mode)
        return QuorumProducer(wire.connect(self.endpoint), [lane_queue(topic, p) for p in range(partitions)],
                              depth, on_ack, self._reconnect(wire.connect))

    def _reconnect(self, connect=amqp.connect):
        """On a cluster, how a producer or consumer connects again after losing its node (any node that answers); the
        same through a network fault's proxies (a reset closes connections the node still serves); None on one node
        reached directly, where a lost connection ends the client (its sends fail, the consumer's cell fails)."""
        if "nodes" not in self.endpoint and not toxiproxy.routed(self.endpoint):
            return None
        return lambda: connect(self.endpoint, timeout_s=2.0)

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
        connect = functools.partial(wire.connect, kind=wire.Consuming)
        return QuorumConsumer(connect(self.endpoint), [lane_queue(topic, p) for p in partitions],
                              self.client["rabbitmq_prefetch"], self._reconnect(connect), self.count_settle_s())


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


class QuorumProducer(_Reconnecting, ConfirmedProducer):
    """Publishes without waiting and counts confirms as they come, on an AMQP connection it speaks itself
    (rabbitmq.wire): each publish written as it is made, the confirms parsed from each read of the socket (at every
    send, and while it waits) and stamped when what it brought arrived (on TLS, when the read returned). pika wrote a
    publish when its I/O loop next ran and stamped a confirm after its own decoding and dispatch: 282 µs above the
    native loop at the median (bench/stamp_lag.py). On a cluster, a channel that had a publish refused is replaced by
    a new one before the next publish (module docstring)."""

    RENEW_WAIT_S = 0.05  # a refused channel's publishes in flight, waited for before it is closed
    CHANNEL_TIMEOUT_S = 5.0  # a channel closed or opened: the broker's answer waited for this long
    WAIT_SLICE_S = 1.0  # a full window waits for confirms in slices this long (the broker answers every publish)
    _refused = False  # a publish on the current channel was refused (basic.nack): it is replaced before the next

    @property
    def stamps(self) -> str:
        """Its own socket's stamps: the kernel's receive time, over TLS too (socket_stamps)."""
        return self._connection.stamps

    def __init__(self, connection: wire.Connection, queues: list[str], depth: int, on_ack: OnAck,
                 reconnect=None) -> None:
        self._queues = [queue.encode() for queue in queues]
        self._depth = depth
        self._on_ack = on_ack
        self._reconnect = reconnect
        self._next_try = 0.0
        self._next_renewal = 0.0
        self._attach(connection)

    def _attach(self, connection: wire.Connection) -> None:
        """Publishes from now on over `connection` (its channel in confirm mode), with nothing in flight."""
        self._connection = connection
        self._broken = False
        self._fresh_channel()

    def _fresh_channel(self) -> None:
        self._in_flight: OrderedDict[int, bytes] = OrderedDict()  # delivery tag -> header, oldest first
        self._tag = 0
        self._refused = False

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
            self._connection.close_channel(self.CHANNEL_TIMEOUT_S)
            self._connection.open_channel(self.CHANNEL_TIMEOUT_S)
        except OSError:
            self._lost()
            return
        self._fresh_channel()

    def _again(self) -> bool:
        """A producer that lost its node connects again (on a cluster, at most every RECONNECT_EVERY_S): whether it
        is connected now."""
        return not self._broken or self._connect_again()

    def _take(self) -> tuple[list, object]:
        """Basic.Ack and Basic.Nack as read, and the broker's Channel.Close or Connection.Close (given up, as a lost
        connection)."""
        return self._connection.confirms()

    def _answered(self, answers: list, at: int) -> None:
        for tag, multiple, ok in answers:
            self._confirmed(tag, multiple, ok, at)

    def _confirmed(self, tag: int, multiple: bool, ok: bool, at: int) -> None:
        """Basic.Ack or Basic.Nack for one delivery tag, or every tag up to it (`multiple`)."""
        if not ok:
            self._refused = True
        in_flight = self._in_flight
        if multiple:
            while in_flight and next(iter(in_flight)) <= tag:
                self._on_ack(in_flight.popitem(last=False)[1], ok, at)
        elif (header := in_flight.pop(tag, None)) is not None:
            self._on_ack(header, ok, at)

    def send(self, header: bytes, payload: bytes, partition: int) -> None:
        if self._refused and self._reconnect is not None:  # on a cluster: a refused channel is replaced
            self._renew_refused_channel()
        if not self._broken and not self._connection.read_lately():
            self._read(0)  # the confirms that came meanwhile, and a connection the broker closed found before writing
        if not self._again():
            self._on_ack(header, False, time.monotonic_ns())
            return
        try:
            self._connection.publish(self._queues[partition], header, payload)
        except OSError:
            self._on_ack(header, False, time.monotonic_ns())
            self._lost()
            return
        self._tag += 1
        self._in_flight[self._tag] = header
        while len(self._in_flight) >= self._depth and not self._broken:  # the window is full: wait for room
            self._read(self.WAIT_SLICE_S)

    def _lost(self) -> None:
        """The connection is lost: what is in flight is no longer waited for and stays unacknowledged (no confirm
        came, and the broker may have stored it); whatever is sent later fails at once, until a producer on a cluster
        has connected to another node."""
        self._broken = True
        self._in_flight.clear()
        self._connection.close()


class QuorumConsumer(_Reconnecting):
    """Basic.Consume on each of its lanes' queues on one channel (prefetch per queue), on an AMQP connection it
    speaks itself (rabbitmq.wire.Consuming), as the producer does: a poll returns the messages complete in what one
    read of the socket brought (at least one, or none after timeout_s), parsed in one pass with the worker's header
    and payload sliced out, and acknowledges the poll before it (one `multiple` Basic.Ack, written as the poll
    starts; at close the last poll's). `arrived_ns` is when that read's data arrived (the kernel's receive time,
    socket_buffer.recv_stamped, over TLS too): the worker's stamp of their receipt. pika spent about 31 µs
    of CPU a message on its frame objects, callbacks and dispatch, and read a backlog at 0.60 of amqp-client's
    (docs/performance.md). A connection lost (or a channel the broker closed) on a cluster or through a proxy is
    made again (any node that answers); what was delivered on it and not acknowledged comes again, counted as
    duplicates where it was received. On one node reached directly the poll raises BrokerUnavailable."""

    CONNECT_TIMEOUT_S = 5.0  # Basic.Qos answered within this long

    @property
    def stamps(self) -> str:
        """Its own socket's stamps: the kernel's receive time, over TLS too (socket_stamps)."""
        return self._connection.stamps

    def __init__(self, connection: wire.Consuming, queues: list[str], prefetch: int, reconnect=None,
                 settle_s: float = 0.0) -> None:
        self._queues = [queue.encode() for queue in queues]
        self._settle_s = settle_s  # kept open this long after the last acknowledgement (count_settle_s)
        # consumer tag (the queue's index, wire.Consuming.consume) -> lane
        self._lanes = {b"%d" % n: int(queue.rsplit("-", 1)[1]) for n, queue in enumerate(queues)}
        self._prefetch = prefetch
        self._reconnect = reconnect
        self._held = False
        self._next_try = 0.0
        self._finished_at: float | None = None  # when `finish` acknowledged the last poll
        self._attach(connection)

    def _attach(self, connection: wire.Consuming) -> None:
        self._connection = connection
        self._consuming = False
        self._last_tag = 0  # the last delivery tag not acknowledged yet
        self._broken = False  # the connection was lost and no new one made yet

    def _start(self) -> None:
        self._connection.consume(self._queues, self._prefetch, self.CONNECT_TIMEOUT_S)
        self._consuming = True

    def _ack(self) -> None:
        if self._last_tag:
            self._connection.ack(self._last_tag)
            self._last_tag = 0

    def poll(self, timeout_s: float) -> list[Message]:
        if self._held:
            time.sleep(timeout_s)
            return []
        if self._broken and not self._connect_again():
            time.sleep(min(timeout_s, self.RECONNECT_EVERY_S))
            return []
        deadline = time.monotonic() + timeout_s
        connection = self._connection
        try:
            if not self._consuming:
                self._start()
            self._ack()
            lanes = self._lanes
            while True:
                out, tag = connection.take(lanes, HEADER_SIZE)
                if out:
                    self._last_tag, self.arrived_ns = tag, connection.arrived_at
                    return out
                if not connection.receive(deadline - time.monotonic()):
                    return []
        except OSError as exc:  # wire.Closed too: the broker closed the channel or the connection
            connection.sock.close()
            if self._reconnect is None:
                raise BrokerUnavailable(f"RabbitMQ consumer lost its connection: {exc!r}") from None
            # On a cluster (or through a proxy a network fault resets): what was delivered and not acknowledged goes
            # back to the queue and comes again (counted as duplicates where it was received here); the consumer
            # connects again (to another node on a cluster) and reads on.
            self._broken, self._next_try = True, 0.0
            if not self._connect_again():
                time.sleep(min(timeout_s, self.RECONNECT_EVERY_S))
            return []

    def hold(self, on: bool) -> None:
        """Consuming starts at the first poll after hold(False): until then the queues keep everything."""
        self._held = on

    def commit(self) -> None:
        """Nothing to store: acknowledged deliveries leave the queue, the rest stays there."""

    def finish(self) -> None:
        """The last poll acknowledged (the worker says "done" after this, and closes after that)."""
        if self._broken or self._finished_at is not None:
            return
        try:
            self._ack()
        except OSError:
            pass  # the broker is gone: unacknowledged deliveries go back to the queue, as RabbitMQ requeues them
        self._finished_at = time.monotonic()

    def close(self) -> None:
        """The last poll acknowledged (`finish`, unless done already); the channel kept open settle_s after it
        (count_settle_s), then the connection closed once the broker answers its close (it has then taken the
        acknowledgement)."""
        if self._broken:
            return
        self.finish()
        time.sleep(max(0.0, self._settle_s - (time.monotonic() - self._finished_at)))
        self._connection.close(timeout_s=5.0)
