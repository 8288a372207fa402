"""RabbitMQ streams through rstream (the stream protocol, asyncio), run on an event loop of its own thread, and, on
one node reached directly, a producer and a consumer that speak the stream protocol on a socket of their own
(StreamsWireProducer, StreamsWireConsumer: wire.py), as the broker check, the count and the backlog do there
(wire.Session, wire.Reader).

Each lane is one stream, `<topic>-<n>`, declared and counted over AMQP 0-9-1 (a stream is a queue of type
stream). A message's data is the worker's header (a fixed 20 bytes) followed by the payload. The producer hands
what is due to the loop as one publish frame per lane (rstream's send_batch, which does not wait: its `send`
would hold messages for up to half a second); each publish confirm is stamped in rstream's confirm callback, on
the loop's thread, as it is read, and the worker takes the stamps from a queue while it polls. The producer connects
through the address given (rstream's load-balancer mode), not the one the node advertises. Batch mode keeps up
to rabbitmq_in_flight unconfirmed, single mode one. The consumer subscribes to each of its lanes from the first
offset with a credit of rabbitmq_prefetch chunks, and stores its offset (named after the group) on commit: the
broker's committed messages less that offset is the backlog.

On a local cluster both follow a failover, as the quorum queues' clients do (rstream's own recovery is off: it asks
the node it first reached, which may be the one that went, and waits seconds between tries). A producer whose
connection or publisher is lost stops waiting for what it had in flight (no confirm came: unacknowledged, unless a
consumer receives them) and, at most every RECONNECT_EVERY_S, connects again through a node that answers, which
points it to the stream's leader now; sends due meanwhile fail at once. A consumer told its connection closed or its
stream's leader moved (a metadata update) drops that subscription and subscribes again through a node that answers,
each lane from the offset after the last one it was delivered: nothing delivered twice, nothing skipped. Deliveries
of a subscription it dropped are ignored from that moment on (they are tagged with the subscription's generation).

Through a network fault's proxies (brokerbench.toxiproxy: the endpoint's `stream_addresses`), a client that connects
where a node says a stream's leader or replica is connects to the proxy in front of that address instead
(`through_proxies`: rstream has no address resolver of its own), and both connect again after a lost connection on
a single node too (a reset closes connections the node still serves).
"""

from __future__ import annotations

import asyncio
import os
import queue
import struct
import threading
import time
from contextlib import closing
from functools import partial

from rstream import Consumer, ConsumerOffsetSpecification, OffsetNotFound, OffsetType, Producer
from rstream.client import Addr
from rstream.exceptions import LeaderNotAvailable, StreamNotAvailable
from rstream.recovery import BackOffRecoveryStrategy
from rstream.utils import RawMessage

from ... import native, toxiproxy
from ...drivers import BrokerUnavailable, Message, OnAck
from ...figures import ARRIVAL, client_stamps
from ...worker.framing import HEADER
from ..rabbitmq import amqp, cluster, in_flight_window, management
from ..rabbitmq.amqp import lane_queue
from ..socket_buffer import JOIN_WITHIN_NS, ConfirmedProducer
from . import wire

HEADER_SIZE = HEADER.size
CALL_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0  # a direct producer's connection, login and publishers made within this
COUNT_TIMEOUT_S = 60.0  # reading a cell's streams through to count them
EDGE_WAIT_S = 1.0  # a stream that delivers nothing from its last chunk within this holds no message
RECOVERY_S = 30.0  # a node started again: its streams' writers are back within this
LEADER_WAIT_S = 15.0  # a cluster's stream without a leader (an election after a node failed) is waited for this long
RECONNECT_EVERY_S = 0.1  # on a cluster, how often a client that lost its node tries to connect again
# How long one such try may take before it is given up (and made again RECONNECT_EVERY_S later). rstream waits for the
# answer to its handshake without end: a connection reset at its first bytes (a network fault's reset) left a
# producer's start waiting until this ran out, 10 s a try, every send due meanwhile held up (measured here). A
# handshake and a publisher's or subscription's declaration take milliseconds on this host; 3 s allows for a loaded
# one and for a stream whose new leader is still being elected after a failover.
RECONNECT_TIMEOUT_S = 3.0
CONNECTION_LOST = -1  # rstream's response code for a publish it stops waiting for (its connection went)


class Loop:
    """An asyncio event loop on a daemon thread of this process (a forked worker makes its own)."""

    _current: Loop | None = None

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="rstream-loop", daemon=True).start()

    @classmethod
    def get(cls) -> Loop:
        if cls._current is None or cls._current.pid != os.getpid():
            cls._current = Loop()
        return cls._current

    def run(self, coroutine, timeout_s: float = CALL_TIMEOUT_S):
        """Run a coroutine on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def submit(self, coroutine) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self.loop)


class RabbitMQStreamsDriver:
    name = "rabbitmq-streams"

    def __init__(self, endpoint: dict, client: dict) -> None:
        self.endpoint = endpoint
        self.client = client

    def _stream_endpoint(self) -> dict:
        """What an rstream client is made with (on a local cluster: the first node whose stream listener answers; the
        client asks it where each stream's leader and replicas are); BrokerUnavailable naming the field when the
        endpoint has none."""
        if not self.endpoint.get("stream_port"):
            raise BrokerUnavailable(f"targets.{self.name}.stream_port: the stream protocol's port is not given")
        user, password = amqp.credentials(self.endpoint)
        host, port = amqp.first_answering(self.endpoint, "stream_port")  # a cluster's node that is up
        return {"host": host, "port": port, "vhost": self.endpoint.get("vhost", "/"), "username": user,
                "password": password, **({ADDRESSES: self.endpoint["stream_addresses"]}
                                         if self.endpoint.get("stream_addresses") else {})}

    def check(self, timeout_s: float = 5.0) -> None:
        """The AMQP port answers, and the stream port logs in to the virtual host (a stream-protocol session of
        this driver's own, closed at once: an rstream client's close sleeps 0.2 s, a cell's check took 0.21 s)."""
        amqp.check(self.endpoint, timeout_s)
        settings = self._stream_endpoint()
        try:
            wire.Session(settings["host"], settings["port"], settings["username"], settings["password"],
                         settings["vhost"], timeout_s).close()
        except (OSError, ValueError, struct.error) as exc:
            raise BrokerUnavailable(f"RabbitMQ's stream port {settings['host']}:{settings['port']} did not answer: "
                                    f"{exc!r}") from None

    def describe(self) -> dict:
        """client_library: on one node reached directly the producer, the consumer, the check, the count and the
        backlog speak the stream protocol themselves (wire.py); where a failover is followed, rstream serves them."""
        import rstream

        library = "rstream" if self._reconnect() is not None else "stream protocol (own socket)"
        return {"broker": self.name, "broker_version": amqp.server_version(self.endpoint)
                or self.endpoint.get("version", "unknown"), "client_library": library,
                "client_version": rstream.__version__ if hasattr(rstream, "__version__") else _version("rstream"),
                **management.described_size(self.endpoint)}

    def create_topic(self, topic: str, partitions: int) -> None:
        amqp.declare_lanes(self.endpoint, topic, partitions, "stream")

    def delete_topic(self, topic: str, partitions: int) -> None:
        amqp.delete_lanes(self.endpoint, topic, partitions)

    def message_count(self, topic: str, partitions: int) -> int | None:
        """The messages the streams hold, as the broker serves them: each stream read from its first offset to its
        last, the messages counted, summed over the lanes (streams keep what is read, so this is everything the
        broker took in). Offsets are not a count: the offsets a consumer group stores take offsets of their own
        (a cell's stream read 121 messages over offsets 0 to 121), and a passive declare's message count follows
        the offsets (and RabbitMQ 3.10 refreshes it about once a second). None when the broker does not answer.
        On one node reached directly the streams are read on a stream-protocol connection of this driver's own
        (wire.Counting: 0.02 s for a cell's 200 messages, where rstream's subscriptions took 0.5 s); where a failover
        is followed (`_reconnect`), through rstream, which finds a node that serves each stream."""
        streams = [lane_queue(topic, p) for p in range(partitions)]
        deadline = time.monotonic() + RECOVERY_S
        while True:
            try:
                if self._reconnect() is None:
                    return self._wire_count(streams)
                return self._on_reader(lambda client: _count(client, streams), COUNT_TIMEOUT_S + 15)
            except wire.Refused as exc:
                if exc.code != wire.STREAM_NOT_AVAILABLE or time.monotonic() >= deadline:
                    return None
                time.sleep(0.5)  # as below: a node just started again
            except (StreamNotAvailable, LeaderNotAvailable):
                # a node just started again answers before its streams are back (seen: "stream not available" for
                # a few seconds): asked again until RECOVERY_S
                if time.monotonic() >= deadline:
                    return None
                time.sleep(0.5)
            except Exception:  # noqa: BLE001 (not answering, or not read to the end in time)
                return None

    def _wire_reader(self, streams: list[str]) -> wire.Reader:
        settings = self._stream_endpoint()
        return wire.Reader(settings["host"], settings["port"], settings["username"], settings["password"],
                           settings["vhost"], streams, CONNECT_TIMEOUT_S)

    def _wire_count(self, streams: list[str]) -> int:
        with closing(self._wire_reader(streams)) as reader:
            goal = reader.edge(wire.LAST, EDGE_WAIT_S)
        with closing(self._wire_reader(streams)) as reader:
            return reader.count_to(goal, COUNT_TIMEOUT_S)

    def _wire_backlog_parts(self, streams: list[str], group: str):
        """As _backlog_parts, on connections of this driver's own (wire.Reader)."""
        with closing(self._wire_reader(streams)) as reader:
            firsts = reader.edge(None, EDGE_WAIT_S)
        with closing(self._wire_reader(streams)) as reader:
            lasts = reader.edge(wire.LAST, EDGE_WAIT_S)
        with closing(self._wire_reader(streams)) as reader:
            stored = reader.stored(group)
        return list(zip(firsts, lasts)), stored

    def backlog(self, topic: str, group: str, partitions: int) -> int | None:
        """Offsets after the one the group stored, summed over the lanes (a lane with no stored offset: from its
        first). Offsets, not messages: a stored offset takes one too, so while the consumers are behind it may read
        a few high; once they have read everything it is 0."""
        streams = [lane_queue(topic, p) for p in range(partitions)]
        try:
            if self._reconnect() is None:  # one node reached directly: read on connections of the driver's own
                bounds, stored = self._wire_backlog_parts(streams, group)
            else:
                bounds, stored = self._on_reader(lambda client: _backlog_parts(client, streams, group), 20)
        except Exception:  # noqa: BLE001 (not answering: no backlog this time)
            return None
        # A lane whose stored offset is past the last offset the broker served holds nothing unread (seen after a
        # node was started again: its last chunk served lagged the offset a consumer had stored by 63)
        return sum(max(0, last - (first - 1 if offset is None else offset))
                   for (first, last), offset in zip(bounds, stored) if last is not None)

    def _on_reader(self, work, timeout_s: float):
        """Run work(client) on the loop with the driver's reading client, kept open between calls: the backlog is
        asked about once a second while a cell runs, and a client's close alone takes rstream 0.2 s per connection
        (a sleep of its own), which a new client per call paid three times over. A kept client that fails (its node
        was started again) is dropped and a new one tried once."""
        for fresh in (False, True):
            kept = self.__dict__.get("_reader")
            if kept is None or kept[0] != os.getpid() or fresh:
                self._drop_reader()
                kept = self._reader = (os.getpid(), Loop.get().run(_open_reader(self._stream_endpoint())))
            try:
                return Loop.get().run(work(kept[1]), timeout_s)
            except Exception:
                self._drop_reader()
                if fresh:
                    raise
        raise AssertionError("unreachable")

    def _drop_reader(self) -> None:
        pid, client = self.__dict__.pop("_reader", (None, None))
        if client is not None and pid == os.getpid():
            Loop.get().submit(_close_quietly(client))  # not waited for (rstream sleeps in it)

    def close(self) -> None:
        self._drop_reader()

    def in_flight_window(self, mode: str) -> int:
        return in_flight_window(self.client, mode)

    # The native stream loop keeps the one connection it made to the streams' leader: a cell with faults publishes
    # through StreamsProducer, which connects again through a node that answers (worker.producer)
    native_follows_failover = False

    def _reconnect(self):
        """On a cluster, where a client that lost its node connects again (the settings of a node whose stream
        listener answers now); the same through a network fault's proxies (a reset closes connections a node still
        serves); None on one node reached directly, where a lost connection ends the client."""
        return self._stream_endpoint if self.endpoint.get("nodes") or toxiproxy.routed(self.endpoint) else None

    def producer(self, topic: str, partitions: int, mode: str,
                 on_ack: OnAck) -> StreamsProducer | StreamsWireProducer:
        """The Python loop's producer: on one node reached directly, the stream protocol spoken on a socket of its
        own (StreamsWireProducer: confirms stamped as they are read); where a failover is followed (a cluster, or
        a network fault's proxies: `_reconnect`), rstream's (StreamsProducer)."""
        depth = self.in_flight_window(mode)
        streams = [lane_queue(topic, p) for p in range(partitions)]
        if self._reconnect() is None:
            settings = self._stream_endpoint()
            try:
                connection = wire.Connection(settings["host"], settings["port"], settings["username"],
                                             settings["password"], settings["vhost"], streams, CONNECT_TIMEOUT_S)
            except (OSError, ValueError, struct.error) as exc:
                raise BrokerUnavailable(f"RabbitMQ's stream port {settings['host']}:{settings['port']}: "
                                        f"{exc}") from None
            return StreamsWireProducer(connection, partitions, depth, on_ack)
        try:
            return StreamsProducer(self._stream_endpoint(), streams, depth, on_ack,
                                   balanced=not self.endpoint.get("nodes"), reconnect=self._reconnect())
        except BrokerUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001
            raise BrokerUnavailable(f"RabbitMQ stream producer could not start: {exc!r}") from None

    def native_sender(self, topic: str, partitions: int, mode: str):
        """The native send loop on a stream-protocol connection of its own: a publisher per lane, the same data and
        window as `producer`, a lane's due publishes in one Publish frame, each confirm read (and stamped) as it
        arrives on the loop's socket. It connects to one node, which must lead every stream it publishes to: the
        endpoint's own on a single node, the streams' leader on a local cluster (leader_address)."""
        if self.endpoint.get("tls"):
            raise native.Unsupported("the native loop speaks the stream protocol over plain TCP, not TLS")
        settings = self._stream_endpoint()
        if self.endpoint.get("nodes"):
            settings["host"], settings["port"] = self.leader_address([lane_queue(topic, p) for p in range(partitions)])
        try:
            return native.stream_sender(settings["host"], settings["port"], settings["username"],
                                        settings["password"], settings["vhost"],
                                        [lane_queue(topic, p).encode() for p in range(partitions)],
                                        self.in_flight_window(mode))
        except OSError as exc:
            raise BrokerUnavailable(f"RabbitMQ's stream port {settings['host']}:{settings['port']}: {exc}") from None

    def leader_address(self, streams: list[str]) -> tuple[str, int]:
        """The stream listener of the cluster node that leads every one of `streams`, as the broker says
        (rabbitmq.cluster.leader, waited for up to LEADER_WAIT_S while one is elected); native.Unsupported when
        they lead on different nodes (the native loop publishes on one connection) and BrokerUnavailable when one
        has no leader."""
        leaders = {stream: cluster.wait_for_leader(self.endpoint, stream, LEADER_WAIT_S) for stream in streams}
        if None in leaders.values():
            missing = ", ".join(stream for stream, node in leaders.items() if node is None)
            raise BrokerUnavailable(f"RabbitMQ: no node leads stream(s) {missing}")
        if len(set(leaders.values())) > 1:
            raise native.Unsupported(f"the cell's streams lead on different nodes ({leaders}); the native loop "
                                     "publishes to one")
        entry = cluster.node_entry(self.endpoint, next(iter(leaders.values())))
        return entry["host"], int(entry["stream_port"])

    def consumer(self, topic: str, group: str, partitions: list[int]) -> StreamsConsumer | StreamsWireConsumer:
        """On one node reached directly, the stream protocol spoken on a socket of its own (StreamsWireConsumer);
        where a failover is followed (a cluster, a network fault's proxies: `_reconnect`), rstream's
        (StreamsConsumer), which finds each stream's leader or replica through the broker's metadata."""
        streams = {p: lane_queue(topic, p) for p in partitions}
        if self._reconnect() is None:
            return StreamsWireConsumer(self._stream_endpoint, streams, group, self.client["rabbitmq_prefetch"])
        return StreamsConsumer(self._stream_endpoint(), streams, group, self.client["rabbitmq_prefetch"],
                               reconnect=self._reconnect())


def _version(distribution: str) -> str:
    from importlib.metadata import version

    return version(distribution)


ADDRESSES = "stream_addresses"  # in a client's settings: the proxy port for each node's advertised stream address


def made(kind, settings: dict, **options):
    """An rstream Producer or Consumer made with `settings` (through_proxies where they map addresses)."""
    settings = dict(settings)
    addresses = settings.pop(ADDRESSES, None)
    client = kind(**settings, **options)
    if addresses:
        through_proxies(client, addresses)
    return client


def through_proxies(client, addresses: dict[str, int]) -> None:
    """Every connection the rstream client makes to a node's advertised stream address ("host:port", where it is
    told a stream's leader or replica is) goes to the proxy port `addresses` gives for it (its other connections,
    to the address it was made with, are a proxy's already). rstream 1.1 has no address resolver (the Java client's
    addressResolver): its connection pool's `new`, which every connection is made by, is wrapped on this client's
    pool alone. Its pool still keys the connection by the advertised address, as it compares the leader's."""
    pool = client._pool
    new = pool.new

    async def new_through_proxy(*, addr: Addr, **options):
        port = addresses.get(f"{addr.host}:{addr.port}")
        return await new(addr=Addr(addr.host, port) if port else addr, **options)

    pool.new = new_through_proxy


async def _open_reader(settings: dict) -> Consumer:
    client = made(Consumer, settings, connection_name="brokerbench-count")
    await client.start()
    return client


async def _close_quietly(client: Consumer) -> None:
    try:
        await client.close()
    except Exception:  # noqa: BLE001 (its node is gone)
        pass


async def _read(client: Consumer, streams: list[str], which: OffsetType, credit: int, on_message,
                until, wait_s: float, settle_s: float = 0.0) -> None:
    """Subscribe to each stream from `which`, call on_message(stream, offset) for what is delivered until `until()`
    holds or wait_s has passed, and settle_s more, then unsubscribe."""
    ids = []
    try:
        for stream in streams:
            ids.append(await client.subscribe(
                stream, lambda _data, context, stream=stream: on_message(stream, context.offset),
                initial_credit=credit, offset_specification=ConsumerOffsetSpecification(which, None)))
        deadline = asyncio.get_running_loop().time() + wait_s
        while not until() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.002)
        await asyncio.sleep(settle_s)
    finally:
        for subscriber in ids:
            await client.unsubscribe(subscriber)


async def _edge(client: Consumer, streams: list[str], which: OffsetType, wait_s: float) -> list[int | None]:
    """The offset of the first message delivered from each stream's `which` end (FIRST: its first message;
    LAST: the first of its last chunk, read to the chunk's end), None for a stream that delivers none in wait_s."""
    seen: dict[str, int] = {}

    def on_message(stream: str, offset: int) -> None:
        if which is OffsetType.FIRST:
            seen.setdefault(stream, offset)
        else:
            seen[stream] = max(seen.get(stream, -1), offset)

    # LAST: the rest of a last chunk already received comes within a moment
    await _read(client, streams, which, 1, on_message, lambda: len(seen) >= len(streams), wait_s,
                0.005 if which is OffsetType.LAST else 0.0)
    return [seen.get(stream) for stream in streams]


async def _count(client: Consumer, streams: list[str]) -> int:
    """Messages delivered from each stream's first offset up to its last (found first), summed."""
    goal = dict(zip(streams, await _edge(client, streams, OffsetType.LAST, EDGE_WAIT_S)))
    counted = dict.fromkeys(streams, 0)
    reached = {stream for stream, last in goal.items() if last is None}  # empty streams

    def on_message(stream: str, offset: int) -> None:
        if offset <= goal[stream]:
            counted[stream] += 1
        if offset >= goal[stream]:
            reached.add(stream)

    await _read(client, [s for s in streams if goal[s] is not None], OffsetType.FIRST, 10, on_message,
                lambda: len(reached) >= len(streams), COUNT_TIMEOUT_S)
    if len(reached) < len(streams):
        raise TimeoutError(f"streams not read to their last offset in {COUNT_TIMEOUT_S} s")
    return sum(counted.values())


async def _backlog_parts(client: Consumer, streams: list[str], group: str):
    """Each stream's (first offset, last offset) as the broker serves them ((None, None) when empty), and the
    offset the group stored on it (None where it stored none)."""
    firsts = await _edge(client, streams, OffsetType.FIRST, EDGE_WAIT_S)
    lasts = await _edge(client, streams, OffsetType.LAST, EDGE_WAIT_S)
    stored = []
    for stream in streams:
        try:
            stored.append(await client.query_offset(stream, group))
        except OffsetNotFound:
            stored.append(None)
    return list(zip(firsts, lasts)), stored


class StreamsProducer:
    """Sends buffered per lane until a poll, a flush or a full window hands them to the loop. Confirms come back
    through a queue, each with the time its callback ran and the generation of the rstream producer it came from
    (one per connection made: `reconnect`, module docstring)."""

    stamps = client_stamps("rstream")  # a confirm in rstream's callback, on its asyncio loop's thread

    def __init__(self, settings: dict, streams: list[str], depth: int, on_ack: OnAck, balanced: bool = True,
                 reconnect=None) -> None:
        self._loop = Loop.get()
        self._streams = streams
        self._depth = depth
        self._on_ack = on_ack
        self._balanced = balanced
        self._reconnect = reconnect
        self._next_try = 0.0
        # (generation, publishing id, ok, at_ns); id None: that generation's connection is lost; ok None: no answer
        self._confirms: queue.SimpleQueue = queue.SimpleQueue()
        self._pending: list[list[RawMessage]] = [[] for _ in streams]  # not handed to the loop yet
        self._in_flight: dict[int, bytes] = {}  # publishing id -> header
        self._next_id = 0
        self._broken = False
        self._generation = 0
        self._producer = self._loop.run(self._open(settings, balanced, reconnect is None))

    @staticmethod
    async def _open(settings: dict, balanced: bool, recovering: bool = True) -> Producer:
        # Publishes go through the address the target gives, as the native loop's do: rstream would otherwise look
        # the stream's leader up and connect to the address the node advertises, around a proxy or load balancer
        # in front of it (and around Toxiproxy's delay: test_latency_truth). In load-balancer mode it connects
        # through the given address and keeps the connection that reached the leader. A local cluster's nodes each
        # have their own address (no balancer in front): there it connects to the address the leader advertises.
        # Following a failover (a cluster), rstream's own recovery is off: the producer connects again itself.
        producer = made(Producer, settings, connection_name="brokerbench", load_balancer_mode=balanced,
                        recovery_strategy=BackOffRecoveryStrategy(enable=recovering))
        await producer.start()
        return producer

    def _confirmed(self, generation: int, status) -> None:  # on the loop's thread
        # a publish rstream gave up on when its connection or publisher went was never answered by the broker
        ok = None if not status.is_confirmed and status.response_code == CONNECTION_LOST else status.is_confirmed
        self._confirms.put((generation, status.message_id, ok, time.monotonic_ns()))

    async def _publish(self, generation: int, producer: Producer,
                       batches: list[tuple[str, list[RawMessage]]]) -> None:
        try:
            for stream, messages in batches:
                await producer.send_batch(stream, messages, on_publish_confirm=partial(self._confirmed, generation))
        except Exception:  # noqa: BLE001 (the connection is lost: what is in flight stays unconfirmed)
            self._confirms.put((generation, None, False, time.monotonic_ns()))

    def _again(self) -> bool:
        """A producer that lost its node connects again (on a cluster, at most every RECONNECT_EVERY_S), through a
        node that answers: whether it is connected now."""
        if not self._broken:
            return True
        if self._reconnect is None or time.monotonic() < self._next_try:
            return False
        self._next_try = time.monotonic() + RECONNECT_EVERY_S
        try:
            producer = self._loop.run(self._open(self._reconnect(), self._balanced, False), RECONNECT_TIMEOUT_S)
        except Exception:  # noqa: BLE001 (no node answers yet, or rstream's own error)
            return False
        self._loop.submit(_close_quietly(self._producer))  # not waited for (rstream sleeps in it)
        self._producer, self._generation, self._broken = producer, self._generation + 1, False
        return True

    def send(self, header: bytes, payload: bytes, partition: int) -> None:
        if not self._again():
            self._on_ack(header, False, time.monotonic_ns())
            return
        self._next_id += 1
        self._in_flight[self._next_id] = header
        self._pending[partition].append(RawMessage(header + payload, publishing_id=self._next_id))
        if len(self._in_flight) >= self._depth:  # the window is full: hand it over, then wait for room
            self._hand_over()
            while len(self._in_flight) >= self._depth and not self._broken:
                self._serve(CALL_TIMEOUT_S)

    def _hand_over(self) -> None:
        batches = [(stream, pending) for stream, pending in zip(self._streams, self._pending) if pending]
        if batches and not self._broken:
            self._pending = [[] for _ in self._streams]
            self._loop.submit(self._publish(self._generation, self._producer, batches))

    def _serve(self, timeout_s: float) -> bool:
        """Take the confirms that came, waiting up to timeout_s for the first; False when none came."""
        try:
            item = self._confirms.get(timeout=timeout_s) if timeout_s > 0 else self._confirms.get_nowait()
        except queue.Empty:
            if timeout_s >= CALL_TIMEOUT_S:
                self._lost()
            return False
        while True:
            generation, publishing_id, ok, at = item
            if generation != self._generation:
                pass  # from a connection given up on: what it had in flight is no longer waited for
            elif publishing_id is None:
                self._lost()
            elif (header := self._in_flight.pop(publishing_id, None)) is not None:
                if ok is not None or self._reconnect is None:
                    self._on_ack(header, bool(ok), at)  # (on one node, as before: a failed send)
                else:  # rstream lost the publisher (its node went, or the stream's leader moved): no answer
                    self._lost()
            try:
                item = self._confirms.get_nowait()
            except queue.Empty:
                return True

    def _lost(self) -> None:
        """The connection is lost: what was never handed to the loop failed; what was is no longer waited for and
        stays unacknowledged (no confirm came, and the broker may have stored it)."""
        self._broken = True
        at = time.monotonic_ns()
        for pending in self._pending:
            for message in pending:
                self._on_ack(self._in_flight[message.publishing_id], False, at)
        self._pending = [[] for _ in self._streams]
        self._in_flight.clear()

    def poll(self, timeout_s: float) -> None:
        self._again()
        self._hand_over()
        if self._in_flight and not self._broken:
            if not self._serve(0) and timeout_s > 0:
                self._serve(timeout_s)
        elif timeout_s > 0:
            time.sleep(timeout_s)

    def flush(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        self._hand_over()
        while self._in_flight and not self._broken and (left := deadline - time.monotonic()) > 0:
            self._serve(min(left, CALL_TIMEOUT_S - 1))
        return len(self._in_flight)

    def close(self) -> None:
        self.flush(5)
        try:
            self._loop.run(self._producer.close(), 10)
        except Exception:  # noqa: BLE001 (the broker is gone)
            pass


class StreamsWireProducer(ConfirmedProducer):
    """The Python loop's producer on one node reached directly (no failover to follow), on a stream-protocol
    connection it speaks itself (wire.py): a send that follows the one before by more than JOIN_WITHIN_NS (a loop on
    schedule) is written at once; sends back to back are kept per lane until a poll, a flush or a full window writes
    them, one Publish frame per lane (as StreamsProducer hands them to rstream). Each confirm is stamped when the read
    that brought it arrived (the kernel's receive time: socket_buffer.recv_stamped). A lost connection is not made
    again (as StreamsProducer's on one node): what was not written fails, what was in flight is no longer waited for
    (unacknowledged), and later sends fail at once."""

    stamps = ARRIVAL  # a plain socket of its own: the kernel's receive time

    def __init__(self, connection: wire.Connection, lanes: int, depth: int, on_ack: OnAck) -> None:
        self._connection = connection
        self._depth = depth
        self._on_ack = on_ack
        self._pending: list[list[tuple[int, bytes]]] = [[] for _ in range(lanes)]  # not written yet
        self._in_flight: dict[int, bytes] = {}  # publishing id -> header
        self._next_id = 0
        self._broken = False
        self._last_send_ns = 0

    def send(self, header: bytes, payload: bytes, partition: int) -> None:
        now = time.monotonic_ns()
        if self._broken:
            self._on_ack(header, False, now)
            return
        self._next_id += 1
        self._in_flight[self._next_id] = header
        self._pending[partition].append((self._next_id, header + payload))
        alone, self._last_send_ns = now - self._last_send_ns > JOIN_WITHIN_NS, now
        if alone or len(self._in_flight) >= self._depth:  # on schedule, or the window is full: written now
            self._hand_over()
            while len(self._in_flight) >= self._depth and not self._broken:
                if not self._read(CALL_TIMEOUT_S):
                    self._lost()  # no confirm in that long: given up, as StreamsProducer gives its connection up

    def _hand_over(self) -> None:
        if self._broken or not any(self._pending):
            return
        frame_max = self._connection.frame_max
        out = [frame for lane, pending in enumerate(self._pending) if pending
               for frame in wire.publish_frames(lane, pending, frame_max)]
        self._pending = [[] for _ in self._pending]
        try:
            self._connection.write(b"".join(out))
        except OSError:
            self._lost()

    def _take(self) -> tuple[list, object]:
        """PublishConfirm and PublishError as read, and what ended the connection."""
        return self._connection.take()

    def _answered(self, answers: list, at: int) -> None:
        in_flight, on_ack = self._in_flight, self._on_ack
        for publishing_id, ok in answers:
            if (header := in_flight.pop(publishing_id, None)) is not None:
                on_ack(header, ok, at)

    def _lost(self) -> None:
        if self._broken:
            return
        self._broken = True
        at = time.monotonic_ns()
        for pending in self._pending:
            for publishing_id, _ in pending:
                self._on_ack(self._in_flight[publishing_id], False, at)
        self._pending = [[] for _ in self._pending]
        self._in_flight.clear()
        self._connection.close()


class StreamsConsumer:
    """One subscription per lane, from the first offset, made at the first poll after hold(False). Deliveries
    come through a queue; `commit` stores each lane's last offset read under the group's name. With `reconnect` (a
    cluster) it subscribes again after losing its node or its stream's leader (module docstring)."""

    stamps = client_stamps("rstream")  # a message as rstream's callback handed it over, through a queue

    def __init__(self, settings: dict, streams: dict[int, str], group: str, credit: int, reconnect=None) -> None:
        self._loop = Loop.get()
        self._settings = settings
        self._streams = streams
        self._group = group
        self._credit = credit
        self._reconnect = reconnect
        self._deliveries: queue.SimpleQueue = queue.SimpleQueue()  # (data, lane, offset)
        self._held = False
        self._consumer: Consumer | None = None
        self._read: dict[int, int] = {}  # lane -> last offset read
        self._stored: dict[int, int] = {}
        # changed on the loop's thread only: the subscription deliveries are taken from, and each lane's last offset
        # delivered by it or an earlier one (where a new subscription starts)
        self._generation = 0
        self._delivered: dict[int, int] = {}
        self._lost = False
        self._next_try = 0.0

    def _deliver(self, generation: int, lane: int, data: bytes, context) -> None:  # on the loop's thread
        if generation != self._generation:
            return  # a subscription dropped after a failover: its lane is read again from where it stopped
        self._delivered[lane] = context.offset
        self._deliveries.put((data, lane, context.offset))

    def _closed(self, generation: int, _info) -> None:  # on the loop's thread
        """rstream says a connection closed or a stream's leader moved: the subscriptions of that generation are
        dropped (their deliveries ignored from now on) and made again at the next poll."""
        if generation == self._generation and self._reconnect is not None:
            self._generation += 1
            self._lost = True

    async def _subscribe(self, settings: dict) -> Consumer:
        generation = self._generation  # on the loop's thread: no delivery of the new subscription comes before
        options = {} if self._reconnect is None else {"on_close_handler": partial(self._closed, generation)}
        consumer = made(Consumer, settings, connection_name="brokerbench", **options)
        try:
            await consumer.start()
            for lane, stream in self._streams.items():
                after = self._delivered.get(lane)
                where = ConsumerOffsetSpecification(OffsetType.FIRST, None) if after is None else \
                    ConsumerOffsetSpecification(OffsetType.OFFSET, after + 1)
                await consumer.subscribe(stream, partial(self._deliver, generation, lane), subscriber_name=self._group,
                                         offset_specification=where, initial_credit=self._credit)
        except BaseException:
            self._generation += 1  # what the part made delivers nothing
            await _close_quietly(consumer)
            raise
        return consumer

    def _again(self) -> None:
        """After a failover (on a cluster), the subscriptions made again through a node that answers, at most every
        RECONNECT_EVERY_S; until then the poll delivers what came before."""
        if not self._lost or time.monotonic() < self._next_try:
            return
        self._next_try = time.monotonic() + RECONNECT_EVERY_S
        old, self._consumer = self._consumer, None
        if old is not None:
            self._loop.submit(_close_quietly(old))
        try:
            self._lost = False  # before subscribing: a close during it counts against the new subscription
            self._consumer = self._loop.run(self._subscribe(self._reconnect()), RECONNECT_TIMEOUT_S)
        except Exception:  # noqa: BLE001 (no node answers yet, or no leader yet)
            self._lost = True
            # one still subscribing after the wait delivers nothing: its generation retired before the next begins
            self._loop.submit(self._retire())

    async def _retire(self) -> None:
        self._generation += 1

    def poll(self, timeout_s: float) -> list[Message]:
        if self._held:
            time.sleep(timeout_s)
            return []
        self._again()
        if self._consumer is None and not self._lost:
            try:
                self._consumer = self._loop.run(self._subscribe(self._settings))
            except Exception as exc:  # noqa: BLE001
                if self._reconnect is None:
                    raise BrokerUnavailable(f"RabbitMQ stream consumer could not subscribe: {exc!r}") from None
                self._lost = True  # a cluster: tried again through another node
                self._loop.submit(self._retire())
        try:
            first = self._deliveries.get(timeout=timeout_s) if timeout_s > 0 else self._deliveries.get_nowait()
        except queue.Empty:
            return []
        out: list[Message] = []
        item, read = first, self._read
        while True:
            data, lane, offset = item
            out.append((data[:HEADER_SIZE], data[HEADER_SIZE:], lane))
            read[lane] = offset
            try:
                item = self._deliveries.get_nowait()
            except queue.Empty:
                return out

    def hold(self, on: bool) -> None:
        self._held = on

    def commit(self) -> None:
        """Store each lane's last offset read, where it moved (the broker's record of the group's position)."""
        moved = {lane: offset for lane, offset in self._read.items() if self._stored.get(lane) != offset}
        if not moved or self._consumer is None:
            return
        try:
            self._loop.run(self._store(moved), 10)
            self._stored.update(moved)
        except Exception:  # noqa: BLE001 (the broker is gone: the backlog is then counted from the last stored)
            pass

    async def _store(self, offsets: dict[int, int]) -> None:
        for lane, offset in offsets.items():
            await self._consumer.store_offset(self._streams[lane], self._group, offset)

    def close(self) -> None:
        self.commit()
        if self._consumer is not None:
            try:
                self._loop.run(self._consumer.close(), 10)
            except Exception:  # noqa: BLE001
                pass


class StreamsWireConsumer:
    """The consumer on one node reached directly, on a stream-protocol connection it speaks itself
    (wire.Subscriptions): a subscription per lane from the first offset with a credit of rabbitmq_prefetch chunks,
    made at the first poll after hold(False), as StreamsConsumer's. A poll returns the messages of what one read of
    the socket held (waiting up to its timeout for one), parsed where they lie, each chunk's credit given back before
    it returns; `arrived_ns` is when that read's data arrived (the kernel's receive time,
    socket_buffer.recv_stamped): the worker's stamp of their receipt. rstream handed each message to a callback on its event loop's thread and through a queue to the
    worker's: 6.8 µs of CPU a message, a backlog read at 0.68 of the Java client's rate (docs/performance.md).
    `commit` stores each lane's last offset read under the group's name, where it moved; `close` commits and waits
    for the broker's answer to a Close, so the stored offsets are in when it returns. As StreamsConsumer's on one
    node, a lost connection is not made again (nothing more is delivered), and a stream the broker deleted delivers
    nothing more while the other lanes go on."""

    stamps = ARRIVAL  # a plain socket of its own: the kernel's receive time

    def __init__(self, settings, streams: dict[int, str], group: str, credit: int) -> None:
        self._settings = settings  # called at the first poll: the endpoint's stream address and login
        self._lanes = list(streams)
        self._streams = list(streams.values())
        self._group = group.encode()
        self._credit = credit
        self._held = False
        self._connection: wire.Subscriptions | None = None
        self._ended = False  # the connection was lost: nothing more comes
        self._read: list[int | None] = [None] * len(streams)  # subscription -> last offset handed to the worker
        self._stored: dict[int, int] = {}

    def _subscribe(self) -> list[Message]:
        settings = self._settings()
        try:
            self._connection = wire.Subscriptions(settings["host"], settings["port"], settings["username"],
                                                  settings["password"], settings["vhost"], self._streams,
                                                  self._lanes, HEADER_SIZE, CONNECT_TIMEOUT_S)
        except (OSError, ValueError, struct.error) as exc:
            raise BrokerUnavailable(f"RabbitMQ stream consumer could not connect to {settings['host']}:"
                                    f"{settings['port']}: {exc}") from None
        try:
            return self._connection.subscribe(dict.fromkeys(range(len(self._streams))), self._credit,
                                              CALL_TIMEOUT_S)
        except (OSError, struct.error) as exc:
            self._connection.close()
            raise BrokerUnavailable(f"RabbitMQ stream consumer could not subscribe: {exc}") from None

    def poll(self, timeout_s: float) -> list[Message]:
        if self._held or self._ended:
            time.sleep(max(0.0, timeout_s))
            return []
        connection = self._connection
        try:
            if connection is None:
                out = self._subscribe()
                connection = self._connection
            else:
                deadline = time.monotonic() + timeout_s
                while not (out := connection.take()) and connection.ended is None \
                        and connection.receive(deadline - time.monotonic()):
                    pass
        except OSError:
            self._lost()
            return []
        if connection.ended is not None:
            self._lost()
        if out:
            self._read, self.arrived_ns = connection.last.copy(), connection.arrived_at
        return out

    def _lost(self) -> None:
        """The connection is gone: what was delivered stays delivered, and its offsets are no longer stored."""
        self._ended = True
        if self._connection is not None:
            self._connection.close()

    def hold(self, on: bool) -> None:
        self._held = on

    def commit(self) -> None:
        """Store each lane's last offset read, where it moved (the broker's record of the group's position)."""
        moved = {subscription: offset for subscription, offset in enumerate(self._read)
                 if offset is not None and self._stored.get(subscription) != offset}
        if not moved or self._connection is None or self._ended:
            return
        try:
            self._connection.store(self._group, moved)
            self._stored.update(moved)
        except OSError:  # the broker is gone: the backlog is then counted from the last stored
            self._lost()

    def close(self) -> None:
        self.commit()
        if self._connection is not None and not self._ended:
            self._ended = True
            self._connection.close_after(10)
