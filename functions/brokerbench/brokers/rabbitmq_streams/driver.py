"""RabbitMQ streams: the Python loop's producer and the consumer speak the stream protocol on sockets of their own
(StreamsWireProducer, StreamsWireConsumer: wire.py), on one node reached directly and where a failover is followed
alike, and each confirm and delivery is stamped when the read that brought it arrived (the kernel's receive time).
The broker check speaks it too (wire.Session), and so do the count and the backlog on one node reached directly
(wire.Reader); where a failover is followed those two read through rstream (asyncio, on an event loop of its own
thread), which finds a node that serves each stream: they measure nothing, and a count waits for a node just
started again.

Each lane is one stream, `<topic>-<n>`, declared and counted over AMQP 0-9-1 (a stream is a queue of type
stream). A message's data is the worker's header (a fixed 20 bytes) followed by the payload. The producer has a
publisher per lane and writes a lane's due messages as one Publish frame. Batch mode keeps up to rabbitmq_in_flight
unconfirmed, single mode one. The consumer subscribes to each of its lanes from the first offset with a credit of
rabbitmq_prefetch chunks, and stores its offset (named after the group) on commit: the broker's committed messages
less that offset is the backlog.

On one node reached directly both connect to the endpoint's stream port, and a lost connection ends them. Where a
failover is followed (`_reconnect`: a local cluster, whose every cell follows one, faults or not; or a network
fault's proxies, where a reset closes connections a node still serves) they ask the stream protocol's Metadata of a
node whose stream listener answers where each stream lives, and connect there:
- the producer to each stream's leader (its leader alone writes: one connection per node that leads some of the
  cell's streams). A lost connection, a Close, or a MetadataUpdate (the leader moved) gives up
  every connection: what it had in flight is no longer waited for (no confirm came: unacknowledged, unless a
  consumer receives them), and at most every RECONNECT_EVERY_S it asks again and connects to the leaders as they are
  now, each try bounded by RECONNECT_TIMEOUT_S; sends due meanwhile fail at once.
- the consumer to one node that holds a member of every one of its streams, a replica at random as rstream's
  consumer picks (the leader where no replica holds them all). A lost connection, a Close, or a MetadataUpdate for
  one of its streams closes it, and at most every RECONNECT_EVERY_S a new connection subscribes each lane again from
  the offset after the last one delivered: nothing delivered twice, nothing skipped, and nothing of a dropped
  subscription read (its connection is closed).
Through a network fault's proxies (brokerbench.toxiproxy: the endpoint's `stream_addresses`), the address a node
advertises is reached through the proxy in front of it (`proxied`; `through_proxies` for rstream's count, as rstream
has no address resolver of its own).

TLS (a target's `tls`: the stream port is then a TLS listener, RabbitMQ's stream.listeners.ssl): the producer, the
consumer, the check, the count and the backlog speak it over their own sockets (socket_buffer.TlsSocket: what comes
still stamped by the kernel), rstream's count with an SSL context; the native loop does not speak TLS and leaves such
a cell to the Python loop. Tested on one node (the local stack's with setting rabbitmq_tls); on a cluster, the nodes
must advertise their TLS stream port (stream.advertised_tls_port) for a client that follows a failover.
"""

from __future__ import annotations

import asyncio
import os
import random
import select
import ssl
import struct
import threading
import time
from contextlib import closing
from functools import partial

from rstream import Consumer, ConsumerOffsetSpecification, OffsetNotFound, OffsetType
from rstream.client import Addr
from rstream.exceptions import LeaderNotAvailable, StreamNotAvailable

from ... import native, toxiproxy
from ...drivers import BrokerUnavailable, Message, OnAck
from ...figures import ARRIVAL
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
                "password": password, "tls": bool(self.endpoint.get("tls")),
                **({ADDRESSES: self.endpoint["stream_addresses"]}
                                         if self.endpoint.get("stream_addresses") else {})}

    def check(self, timeout_s: float = 5.0) -> None:
        """The AMQP port answers, and the stream port logs in to the virtual host (a stream-protocol session of
        this driver's own, closed at once: an rstream client's close sleeps 0.2 s, a cell's check took 0.21 s)."""
        amqp.check(self.endpoint, timeout_s)
        settings = self._stream_endpoint()
        try:
            wire.Session(settings["host"], settings["port"], settings["username"], settings["password"],
                         settings["vhost"], timeout_s, settings["tls"]).close()
        except (OSError, ValueError, struct.error) as exc:
            raise BrokerUnavailable(f"RabbitMQ's stream port {settings['host']}:{settings['port']} did not answer: "
                                    f"{exc!r}") from None

    def describe(self) -> dict:
        """client_library: the producer, the consumer and the check speak the stream protocol themselves (wire.py),
        and so do the count and the backlog on one node reached directly; where a failover is followed rstream
        serves those two (client_version: rstream's)."""
        import rstream

        library = "stream protocol (own socket)" + (" + rstream" if self._reconnect() is not None else "")
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
                           settings["vhost"], streams, CONNECT_TIMEOUT_S, settings["tls"])

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
    # through StreamsWireProducer, which connects again to the leaders a node that answers names (worker.producer)
    native_follows_failover = False

    def _reconnect(self):
        """On a cluster, where a client that lost its node connects again (the settings of a node whose stream
        listener answers now); the same through a network fault's proxies (a reset closes connections a node still
        serves); None on one node reached directly, where a lost connection ends the client."""
        return self._stream_endpoint if self.endpoint.get("nodes") or toxiproxy.routed(self.endpoint) else None

    def producer(self, topic: str, partitions: int, mode: str, on_ack: OnAck) -> StreamsWireProducer:
        """The Python loop's producer: the stream protocol spoken on sockets of its own (StreamsWireProducer:
        confirms stamped as they are read). Where a failover is followed (a cluster, or a network fault's proxies:
        `_reconnect`) it publishes to each stream's leader as Metadata names it, and connects again after a loss."""
        depth = self.in_flight_window(mode)
        streams = [lane_queue(topic, p) for p in range(partitions)]
        if self._reconnect() is None:
            return StreamsWireProducer(self._publishing(streams, CONNECT_TIMEOUT_S), partitions, depth, on_ack)
        deadline = time.monotonic() + LEADER_WAIT_S  # a stream's leader still being elected (a cell after a failover)
        while True:
            try:
                links = self._publishing(streams, RECONNECT_TIMEOUT_S)
                break
            except BrokerUnavailable as exc:
                if not passing(exc.__cause__) or time.monotonic() >= deadline:
                    raise
                time.sleep(RECONNECT_EVERY_S)
        return StreamsWireProducer(links, partitions, depth, on_ack,
                                   connect=partial(self._publishing, streams, RECONNECT_TIMEOUT_S))

    def _locate(self, settings: dict, streams: list[str], timeout_s: float) -> dict[str, wire.Placement]:
        """Where each of `streams` lives, as the node `settings` reach says (Metadata on a session closed at once);
        wire.Refused (code STREAM_NOT_AVAILABLE) naming a stream that has no leader now."""
        with closing(wire.Session(settings["host"], settings["port"], settings["username"], settings["password"],
                                  settings["vhost"], timeout_s, settings["tls"])) as locator:
            placements = locator.metadata(streams, timeout_s)
        for stream in streams:
            placement = placements.get(stream)
            if placement is None or placement.code != wire.OK:
                code = None if placement is None else placement.code
                raise wire.Refused(f"RabbitMQ's Metadata for stream {stream}: "
                                   f"{wire.REFUSALS.get(code, 'not answered')} (stream response code {code})", code)
            if placement.leader is None:
                raise wire.Refused(f"RabbitMQ: no node leads stream {stream} yet", wire.STREAM_NOT_AVAILABLE)
        return placements

    def _publishing(self, streams: list[str], timeout_s: float) -> list[tuple[wire.Connection, list[int]]]:
        """A producer's connections, each with the lanes it publishes to (a publisher per lane, its id the lane), made
        within about timeout_s: on one node reached directly, one to its stream port; where a failover is followed,
        one per node that leads some of `streams` as Metadata names it (asked of a node whose stream listener
        answers), reached at the address it advertises, or the proxy in front of it (`stream_addresses`): a stream's
        leader alone writes, and RabbitMQ's guide has a publisher connect to its node (docs/stream-connections). BrokerUnavailable naming the address where one is not made
        (its cause: what went wrong)."""
        settings = self._stream_endpoint()
        deadline = time.monotonic() + timeout_s
        host, port = settings["host"], settings["port"]
        made: list[tuple[wire.Connection, list[int]]] = []
        try:
            if self._reconnect() is None:
                groups = {(host, port): list(range(len(streams)))}
            else:
                placements = self._locate(settings, streams, timeout_s)
                groups = {}
                for lane, stream in enumerate(streams):
                    groups.setdefault(proxied(settings, placements[stream].leader), []).append(lane)
            for (host, port), lanes in groups.items():
                made.append((wire.Connection(host, port, settings["username"], settings["password"],
                                             settings["vhost"], [streams[lane] for lane in lanes],
                                             max(0.05, deadline - time.monotonic()), lanes, settings["tls"]), lanes))
        except (OSError, ValueError, struct.error) as exc:
            for connection, _ in made:
                connection.close()
            raise BrokerUnavailable(f"RabbitMQ's stream port {host}:{port}: {exc}") from exc
        return made

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

    def consumer(self, topic: str, group: str, partitions: list[int]) -> StreamsWireConsumer:
        """The stream protocol spoken on a socket of its own (StreamsWireConsumer). Where a failover is followed (a
        cluster, a network fault's proxies: `_reconnect`) it subscribes through the node `_subscriptions` picks, and
        again after a loss."""
        streams = {p: lane_queue(topic, p) for p in partitions}
        return StreamsWireConsumer(partial(self._subscriptions, list(streams.values()), list(streams)), streams,
                                   group, self.client["rabbitmq_prefetch"], follow=self._reconnect() is not None)

    def _subscriptions(self, streams: list[str], lanes: list[int], timeout_s: float) -> wire.Subscriptions:
        """A consumer's connection (no subscription made yet), within about timeout_s: on one node reached directly,
        to its stream port. Where a failover is followed, to a node that holds a member of every one of `streams`
        (Metadata, asked of a node whose stream listener answers), chosen as rstream's consumer chooses one for
        a stream: a replica at random, the leader where there is none; the leader where no replica holds them all.
        One connection serves every lane: each node of a local cluster holds a member of each stream (their group
        size is the cluster's), so one is found while the streams have leaders."""
        settings = self._stream_endpoint()
        deadline = time.monotonic() + timeout_s
        host, port = settings["host"], settings["port"]
        if self._reconnect() is not None:
            placements = self._locate(settings, streams, timeout_s)
            preferred = _common([p.replicas or [p.leader] for p in placements.values()]) or \
                _common([[p.leader, *p.replicas] for p in placements.values()])
            if not preferred:
                raise wire.Refused(f"RabbitMQ: no node holds a member of every stream of {streams}",
                                   wire.STREAM_NOT_AVAILABLE)
            host, port = proxied(settings, random.choice(preferred))
        return wire.Subscriptions(host, port, settings["username"], settings["password"], settings["vhost"],
                                  streams, lanes, HEADER_SIZE, max(0.05, deadline - time.monotonic()),
                                  settings["tls"])


def passing(exc: BaseException | None) -> bool:
    """Whether a connection's failure may pass by itself (a node down or not answering, a stream without a leader
    for now), not a refusal that stays (no such stream, the login refused) nor bad input."""
    if isinstance(exc, wire.Refused):
        return exc.code in (wire.STREAM_NOT_AVAILABLE, None)
    return isinstance(exc, (OSError, struct.error))


def _common(choices: list[list[tuple[str, int]]]) -> list[tuple[str, int]]:
    """The addresses every one of `choices` holds, in the first one's order."""
    return [address for address in choices[0] if all(address in choice for choice in choices[1:])]


def proxied(settings: dict, address: tuple[str, int]) -> tuple[str, int]:
    """A node's advertised stream address ("host", port), or the proxy port in front of it where the client's
    settings map it (`ADDRESSES`: a network fault's proxies), as through_proxies maps rstream's."""
    host, port = address
    return host, (settings.get(ADDRESSES) or {}).get(f"{host}:{port}", port)


def _version(distribution: str) -> str:
    from importlib.metadata import version

    return version(distribution)


ADDRESSES = "stream_addresses"  # in a client's settings: the proxy port for each node's advertised stream address


def made(kind, settings: dict, **options):
    """An rstream Producer or Consumer made with `settings` (through_proxies where they map addresses)."""
    settings = dict(settings)
    addresses = settings.pop(ADDRESSES, None)
    if settings.pop("tls", False):  # the stream port over TLS, the certificate checked by the default trust store
        settings["ssl_context"] = ssl.create_default_context()
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


class StreamsWireProducer(ConfirmedProducer):
    """The Python loop's producer, on stream-protocol connections it speaks itself (wire.py; `links`: each
    connection with the lanes it publishes to): a send that follows the one before by more than JOIN_WITHIN_NS (a
    loop on schedule) is written at once; sends back to back are kept per lane until a poll, a flush or a full window
    writes them, one Publish frame per lane. Each confirm is stamped when the read that brought it arrived (the
    kernel's receive time: socket_buffer.recv_stamped); with several connections (streams that lead on different
    nodes) a read waits on them all (select) and each read is stamped as its own.

    A lost connection (or a Close, or a MetadataUpdate: the stream's leader moved) gives up all of them: what was
    not written fails, what was in flight is no longer waited for (unacknowledged: no confirm came, and the broker
    may have stored it). Without `connect` (one node reached directly) later sends fail at once; with it (a failover
    followed) the producer calls it again at most every RECONNECT_EVERY_S, at a send or a poll, for new links to the
    leaders as they are now, and sends due until one is made fail at once."""

    stamps = ARRIVAL  # plain sockets of its own: the kernel's receive time

    def __init__(self, links: list[tuple[wire.Connection, list[int]]], lanes: int, depth: int, on_ack: OnAck,
                 connect=None) -> None:
        self._depth = depth
        self._on_ack = on_ack
        self._connect = connect
        self._pending: list[list[tuple[int, bytes]]] = [[] for _ in range(lanes)]  # not written yet
        self._in_flight: dict[int, bytes] = {}  # publishing id -> header
        self._next_id = 0
        self._last_send_ns = 0
        self._next_try = 0.0
        self._attach(links)

    def _attach(self, links: list[tuple[wire.Connection, list[int]]]) -> None:
        self._links = [connection for connection, _ in links]
        self._link_of = {lane: index for index, (_, lanes) in enumerate(links) for lane in lanes}
        self._connection = self._links[0]
        self._broken = False

    def _again(self) -> bool:
        """Whether the producer is connected: one that lost its connections and follows a failover connects again
        (`connect`), at most every RECONNECT_EVERY_S."""
        if not self._broken:
            return True
        if self._connect is None or time.monotonic() < self._next_try:
            return False
        self._next_try = time.monotonic() + RECONNECT_EVERY_S
        try:
            self._attach(self._connect())
        except BrokerUnavailable:  # no node answers yet, or no leader yet
            return False
        return True

    def send(self, header: bytes, payload: bytes, partition: int) -> None:
        if not self._again():
            self._on_ack(header, False, time.monotonic_ns())
            return
        now = time.monotonic_ns()
        self._next_id += 1
        self._in_flight[self._next_id] = header
        self._pending[partition].append((self._next_id, header + payload))
        alone, self._last_send_ns = now - self._last_send_ns > JOIN_WITHIN_NS, now
        if alone or len(self._in_flight) >= self._depth:  # on schedule, or the window is full: written now
            self._hand_over()
            while len(self._in_flight) >= self._depth and not self._broken:
                if not self._read(CALL_TIMEOUT_S):
                    self._lost()  # no confirm in that long: given up

    def _hand_over(self) -> None:
        if self._broken or not any(self._pending):
            return
        out: list[list[bytes]] = [[] for _ in self._links]
        for lane, pending in enumerate(self._pending):
            if pending:
                link = self._link_of[lane]
                out[link] += wire.publish_frames(lane, pending, self._links[link].frame_max)
        self._pending = [[] for _ in self._pending]
        try:
            for connection, frames in zip(self._links, out):
                if frames:
                    connection.write(b"".join(frames))
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

    def _read(self, timeout_s: float) -> bool:
        """One connection: as ConfirmedProducer's. Several: a read of each that has something within timeout_s."""
        links = self._links
        if len(links) == 1 or self._broken:
            return super()._read(timeout_s)
        try:
            ready = select.select([connection.sock for connection in links], [], [], max(0.0, timeout_s))[0]
        except (OSError, ValueError):
            self._lost()
            return True
        for connection in links:
            if connection.sock in ready and not self._broken:
                self._connection = connection
                super()._read(0)
        return bool(ready)

    def poll(self, timeout_s: float) -> None:
        self._again()
        super().poll(timeout_s)

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
        for connection in self._links:
            connection.close()

    def close(self) -> None:
        self.flush(5)
        if not self._broken:
            for connection in self._links:
                connection.close()


class StreamsWireConsumer:
    """The consumer, on a stream-protocol connection it speaks itself (wire.Subscriptions, made by `subscriptions(
    timeout_s)`): a subscription per lane with a credit of rabbitmq_prefetch chunks, made at the first poll after
    hold(False), from the first offset. A poll returns the messages of what one read of the socket held (waiting up
    to its timeout for one), parsed where they lie, each chunk's credit given back before it returns; `arrived_ns` is
    when that read's data arrived (the kernel's receive time, socket_buffer.recv_stamped): the worker's stamp of
    their receipt. rstream handed each message to a callback on its event loop's thread and through a queue to the
    worker's: 6.8 µs of CPU a message, a backlog read at 0.68 of the Java client's rate (docs/performance.md).
    `commit` stores each lane's last offset read under the group's name, where it moved; `close` commits and waits
    for the broker's answer to a Close, so the stored offsets are in when it returns.

    Without `follow` (one node reached directly) a lost connection is not made again (nothing more is delivered), and
    a stream the broker deleted delivers nothing more while the other lanes go on. With it (a failover followed), a
    lost connection, a Close, or a MetadataUpdate for one of its streams (the leader moved, or the member it read
    from went) closes the connection: what came before it is delivered, and at most every RECONNECT_EVERY_S a new one
    subscribes each lane from the offset after the last one delivered (the first where none was): nothing delivered
    twice, nothing skipped. A dropped subscription's deliveries are never read (its connection is closed)."""

    stamps = ARRIVAL  # a plain socket of its own: the kernel's receive time

    def __init__(self, subscriptions, streams: dict[int, str], group: str, credit: int, follow: bool = False) -> None:
        self._subscriptions = subscriptions
        self._streams = list(streams.values())
        self._group = group.encode()
        self._credit = credit
        self._follow = follow
        self._held = False
        self._connection: wire.Subscriptions | None = None
        self._ended = False  # the connection was lost and is not made again: nothing more comes
        self._next_try = 0.0
        self._subscribed = False  # subscriptions were made once (a failover followed: a refusal may pass)
        self._read: list[int | None] = [None] * len(streams)  # subscription -> last offset handed to the worker
        self._stored: dict[int, int] = {}

    def _subscribe(self, timeout_s: float) -> list[Message]:
        """A new connection with every lane subscribed from the offset after the last one delivered (the messages
        delivered meanwhile returned); the connection's and subscriptions' errors raised as they are."""
        deadline = time.monotonic() + timeout_s
        connection = self._subscriptions(timeout_s)
        try:
            out = connection.subscribe({subscription: None if last is None else last + 1
                                        for subscription, last in enumerate(self._read)}, self._credit,
                                       max(0.05, deadline - time.monotonic()))
        except BaseException:
            connection.close()
            raise
        self._connection = connection
        return out

    def poll(self, timeout_s: float) -> list[Message]:
        if self._held or self._ended:
            time.sleep(max(0.0, timeout_s))
            return []
        connection = self._connection
        try:
            if connection is None:
                out = self._again(timeout_s) if self._follow else self._first()
                if self._connection is None:
                    return out
                connection = self._connection
            else:
                deadline = time.monotonic() + timeout_s
                while not (out := connection.take()) and connection.ended is None and not self._dropped(connection) \
                        and connection.receive(deadline - time.monotonic()):
                    pass
        except OSError:
            self._lost()
            return []
        if out:
            self._read = [last if last is not None else before for last, before in zip(connection.last, self._read)]
            self.arrived_ns = connection.arrived_at
        if connection.ended is not None or self._dropped(connection):
            self._lost()
        return out

    def _dropped(self, connection: wire.Subscriptions) -> bool:
        """Whether the broker dropped a subscription the consumer makes again (a failover followed)."""
        return self._follow and bool(connection.dropped)

    def _first(self) -> list[Message]:
        """The subscriptions on one node reached directly: BrokerUnavailable where they are not made."""
        try:
            return self._subscribe(CONNECT_TIMEOUT_S + CALL_TIMEOUT_S)
        except (OSError, ValueError, struct.error) as exc:
            raise BrokerUnavailable(f"RabbitMQ stream consumer could not subscribe: {exc}") from None

    def _again(self, timeout_s: float) -> list[Message]:
        """Following a failover: the subscriptions made (again), at most every RECONNECT_EVERY_S, each try bounded
        by RECONNECT_TIMEOUT_S; until one is made, nothing (the poll waits up to timeout_s for the next try)."""
        wait = self._next_try - time.monotonic()
        if wait > 0:
            time.sleep(min(max(0.0, timeout_s), wait))
            return []
        self._next_try = time.monotonic() + RECONNECT_EVERY_S
        try:
            out = self._subscribe(RECONNECT_TIMEOUT_S)
        except (OSError, ValueError, struct.error) as exc:
            # no node answers yet, or no leader yet: tried again; the first subscriptions refused for good (no such
            # stream, the login refused) or asked for badly end the consumer
            if not self._subscribed and not passing(exc):
                raise BrokerUnavailable(f"RabbitMQ stream consumer could not subscribe: {exc}") from None
            return []
        except BrokerUnavailable:
            if not self._subscribed:
                raise
            return []
        self._subscribed = True
        return out

    def _lost(self) -> None:
        """The connection is gone (or given up): what was delivered stays delivered. Followed, a new one is made at
        a later poll; else nothing more comes, and its offsets are no longer stored."""
        connection = self._connection
        if self._follow:
            self._connection = None
        else:
            self._ended = True
        if connection is not None:
            connection.close()

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
