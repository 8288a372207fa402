"""NATS JetStream: a stream per cell, PubAcks as the acknowledgements, durable pull consumers.

The admin requests go through nats-py (asyncio only): the driver's admin connection runs an event loop on a thread of
its own (`Loop`), behind the synchronous Driver interface; a call from the worker hands its work to that loop and
waits for its answer. The consumer and the Python loop's producer speak NATS's protocol themselves on a blocking
socket (wire.py): nats-py's parsing and dispatch of each delivery (an event loop, a Msg and a callback per message, a
thread hop per poll) held the consumer to 0.67 of `nats bench`'s, and its producer stamped each PubAck in a callback
that waited for its loop and the GIL, 387 µs late at the median (bench/stamp_lag.py). A TLS endpoint (tls://) is
spoken to the same way, TLS over the socket (socket_buffer.TlsSocket: its replies stamped at arrival too). A websocket
URL is refused by the run request's schema (nats-py, the admin connection's client, would need aiohttp for it).

A cell's stream is named after its topic and holds the subjects `<topic>.<lane>`, one per lane. On a cluster (the
endpoint's `url` names every server, comma-separated) the stream has `nats_replicas` replicas, 3 by default or as
many as the cluster has servers when fewer; the clients are given every server and reconnect to another when theirs
goes (the native send loop too: to the next in the endpoint's list). The worker's
header travels at the start of the message body, after one byte with its length (NATS headers are text, parsed per
message). Batch mode keeps up to `nats_max_in_flight` publishes awaiting their PubAck, single mode one; a full
window makes the next send wait. The native send loop (`native_sender`, brokerbench.native) publishes the same way on
a plain NATS connection of its own (PUB with a reply subject per message, the PubAck read from its socket): nats-py's
asyncio publish path reached about a fifth of `nats bench` on the same server.

Each consumer process creates a durable pull consumer on the stream for its lanes (filter subjects), named after
the group and the lanes, acknowledgement policy "explicit": the consumer acknowledges each message of a poll with
its next poll (after the worker took the poll's receive timestamps), the acknowledgements written out together. Not policy "all" (one acknowledgement per batch, for every earlier message too): a delivery that a
connection reset lost on its way to the client would be acknowledged by the next batch's, and a message the stream
still holds would read as lost. Explicitly, it stays pending for the group (the backlog counts it: undelivered) and
is delivered again after ack_wait.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import threading
import time
from urllib.parse import urlsplit

import nats
from nats.errors import Error as NatsError
from nats.js import api

from ... import native
from ...drivers import BrokerUnavailable, OnAck, TargetRefused
from .wire import WireConsumer, WireProducer, frame

CONNECT_TIMEOUT_S = 5.0
ADMIN_TIMEOUT_S = 10.0
# A publish whose PubAck has not come within this long is no longer waited for: the client never sends it again and
# the server will not answer it (its connection was lost, or the server stopped). It frees its place in the window
# and stays unacknowledged in the accounting; a PubAck that comes later still is ignored. 5 s: what NATS's own
# clients wait for a JetStream publish's PubAck by default (nats.go's and nats-py's 5 s), after which an application
# has a timeout too. (At 10 s, a stream leader killed 1.5 s into the guarantees suite's 6 s cell at scale 0.15 held
# the producers' end 5.7 to 6.1 s past the schedule, waiting for PubAcks the election, 4 to 9 s by the servers'
# fixed raft timers, did not give.) The native send loop's ACK_TIMEOUT_NS is the same.
ACK_TIMEOUT_S = 5.0
RECONNECT_WAIT_S = 0.5
MAX_RECONNECTS = 120  # about a minute of attempts, RECONNECT_WAIT_S apart
# While disconnected the client keeps what is published in its buffer (up to this many bytes) and sends it once it
# has reconnected; past it a publish fails (a send error).
RECONNECT_BUFFER_BYTES = 8 * 1024 * 1024
ERRORS = (NatsError, asyncio.TimeoutError, concurrent.futures.TimeoutError, OSError)
# A consumer's pull request is held by the server up to this long for its batch; then the server ends it (status
# 408) with what it had, and the consumer asks again. When no request was filled nor ended PULL_LOST_S after that,
# they were lost with a connection (the server ends none it no longer has), or the server stopped answering: they
# are asked again with a PING, and the connection is made again when the PING goes unanswered as long.
PULL_EXPIRES_S = 1.0
PULL_LOST_S = 1.0
# A delivery the consumer never acknowledged is delivered again this long after it was sent (JetStream's ack_wait).
# The consumer acknowledges each message with its next poll (milliseconds later); one it never got (a server killed
# as it sent it, or a connection reset) waits this long. At 60 s it came back after the drain had given up on it
# (the guarantees suite's 30 s): 1 to 4 messages the stream held, delivered before a leader kill and lost on the
# way, kept every such cell draining its full 30 s (a run of 45 to 50 s for a 6 s cell). At 10 s they come back
# within the drain (the default waits 10 s after the last delivery), and are counted where they belong.
ACK_WAIT_S = 10.0
DEFAULT_REPLICAS = 3  # a cell's stream on a cluster, as JetStream's own guidance for durable streams (R3)


def servers(endpoint: dict) -> list[str]:
    """The server URLs of an endpoint: its `url`, one server or a cluster's, comma-separated."""
    return [url.strip() for url in endpoint["url"].split(",") if url.strip()]


def stream_name(topic: str) -> str:
    """A stream name from a topic: JetStream allows no '.', '*', '>', spaces or path separators."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", topic)


def subject(topic: str, lane: int) -> str:
    return f"{stream_name(topic)}.{lane}"


def durable_name(group: str, lanes: list[int]) -> str:
    """One durable consumer per consumer process: the group's name and its lanes."""
    return f"{stream_name(group)}_{'-'.join(map(str, lanes))}"


def unframe(body: bytes) -> tuple[bytes, bytes]:
    end = body[0] + 1
    return body[1:end], body[end:]


async def _quiet(_error) -> None:
    """The client's errors reach the caller through the calls that meet them; nats-py's default prints each."""


async def _connect(urls: list[str], reconnect: bool = True, reconnected=None, give_up: bool = False):
    """`reconnected`: a coroutine function called once the client has reconnected (nats-py's reconnected_cb).
    `give_up`: a server that refuses the connection is tried once more (RECONNECT_WAIT_S later), then the connect
    fails (NoServersError). Without it the first connect tries the servers in turn until the caller's timeout:
    nats-py's max_reconnect_attempts 0 sets no limit, and a check that waits so for a server started again (a
    cell's `check` after a kill) keeps it."""
    return await nats.connect(servers=urls, connect_timeout=CONNECT_TIMEOUT_S, allow_reconnect=reconnect,
                              max_reconnect_attempts=MAX_RECONNECTS if reconnect else int(give_up),
                              reconnect_time_wait=RECONNECT_WAIT_S, pending_size=RECONNECT_BUFFER_BYTES,
                              error_cb=_quiet, **({"reconnected_cb": reconnected} if reconnected else {}))


class Loop:
    """An asyncio event loop on a daemon thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self.loop.run_forever, name="bb-nats-loop", daemon=True)
        self.thread.start()

    def run(self, coroutine, timeout_s: float = ADMIN_TIMEOUT_S):
        """Run `coroutine` on the loop and wait up to timeout_s for its result."""
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coroutine, timeout_s), self.loop)
        try:
            return future.result(timeout_s + 1)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


_ADMIN_LOOP: Loop | None = None


def admin_loop() -> Loop:
    """This process's loop for admin requests (made again in a forked child: a parent's thread is not there)."""
    global _ADMIN_LOOP
    if _ADMIN_LOOP is None or _ADMIN_LOOP.pid != os.getpid():
        _ADMIN_LOOP = Loop()
    return _ADMIN_LOOP


class NatsJetStreamDriver:
    name = "nats-jetstream"

    def __init__(self, endpoint: dict, client: dict) -> None:
        self.endpoint = endpoint
        self.client = client

    # -- admin requests -------------------------------------------------------------------------------------
    def _admin(self, call, timeout_s: float = ADMIN_TIMEOUT_S):
        """Run `call(jsm)` (a coroutine function of the JetStream manager) on a connection of its own, made on the
        process's shared admin loop and closed again: a driver holds no connection or thread between calls, so
        one that is never closed leaves nothing behind (a sample per interval costs a loopback connect)."""

        async def go():
            nc = await _connect(servers(self.endpoint), reconnect=False)
            try:
                return await call(nc.jsm())
            finally:
                await nc.close()

        return admin_loop().run(go(), timeout_s)

    def check(self, timeout_s: float = 5.0) -> None:
        """JetStream answers, and the stream's replicas are ones the servers can place (a single server: 1; a
        cluster: one per server at most)."""
        try:
            self._admin(lambda jsm: jsm.account_info(), timeout_s)
            count = self.server_count()
        except ERRORS as exc:
            raise BrokerUnavailable(f"NATS JetStream at {self.endpoint['url']} did not answer: {exc!r}") from None
        replicas = self.replicas()
        if replicas > count:
            raise TargetRefused(f"client.nats_replicas: {replicas} replicas, but " + (
                f"the NATS server at {self.endpoint['url']} is not clustered (it can hold 1)" if count == 1 else
                f"the NATS cluster at {self.endpoint['url']} has {count} servers (one replica each at most)"))

    def server_count(self) -> int:
        """The servers of the cluster the driver reaches (1 when the server is not clustered): the local stack's
        cluster as it was started (its endpoint's nodes: a server a fault stopped still counts, so that a cell's
        stream is not made with fewer replicas than the run recorded), else the client URLs the server announces
        (INFO connect_urls: its own and those of the servers routed to it)."""
        if getattr(self, "_servers", None) is None:
            nodes = self.endpoint.get("nodes")
            self._servers = len(nodes) if nodes else servers_announced(self._admin(lambda jsm: _server_info(jsm)))
        return self._servers

    def replicas(self) -> int:
        """Replicas of each cell's stream: client.nats_replicas, else 3 or the cluster's servers when fewer."""
        given = self.client.get("nats_replicas")
        return given if given is not None else min(DEFAULT_REPLICAS, self.server_count())

    def describe(self) -> dict:
        try:
            version = self._admin(lambda jsm: _server_info(jsm)).get("version") or self.endpoint.get("version")
            nodes, replicas = self.server_count(), self.replicas()
        except ERRORS:
            version = self.endpoint.get("version", "unknown")
            nodes, replicas = None, self.client.get("nats_replicas")
        return {"broker": "nats-jetstream", "broker_version": version or "unknown", "client_library": "nats-py",
                "client_version": client_version(), "nodes": nodes,
                "storage": self.client["nats_storage"], "replicas": replicas,
                "sync_interval": self.endpoint.get("sync_interval")}

    def create_topic(self, topic: str, partitions: int) -> None:
        """The cell's stream (any left from an earlier attempt is replaced), one subject per lane."""
        name = stream_name(topic)
        storage = api.StorageType.FILE if self.client["nats_storage"] == "file" else api.StorageType.MEMORY
        config = api.StreamConfig(name=name, subjects=[subject(topic, p) for p in range(partitions)], storage=storage,
                                  num_replicas=self.replicas(), retention=api.RetentionPolicy.LIMITS,
                                  discard=api.DiscardPolicy.OLD)

        async def create(jsm):
            try:
                await jsm.delete_stream(name)
            except nats.js.errors.NotFoundError:
                pass
            return await jsm.add_stream(config)

        try:
            self._admin(create)
        except ERRORS as exc:
            raise BrokerUnavailable(f"could not create stream {name}: {exc!r}") from None

    def delete_topic(self, topic: str, partitions: int) -> None:
        try:
            self._admin(lambda jsm: jsm.delete_stream(stream_name(topic)))
        except ERRORS:
            pass  # best effort: each cell has its own stream

    def message_count(self, topic: str, partitions: int) -> int | None:
        """The messages the stream holds (its state's count): every one the server stored and acknowledged."""
        try:
            return int(self._admin(lambda jsm: jsm.stream_info(stream_name(topic))).state.messages)
        except ERRORS:
            return None

    def backlog(self, topic: str, group: str, partitions: int) -> int | None:
        """Messages the group has not acknowledged: each of its consumers' num_pending (not delivered yet) plus
        num_ack_pending (delivered, not acknowledged). None before the group has a consumer, or when the server
        does not answer."""
        prefix = f"{stream_name(group)}_"
        try:
            consumers = self._admin(lambda jsm: jsm.consumers_info(stream_name(topic)))
        except ERRORS:
            return None
        mine = [c for c in consumers if (c.name or "").startswith(prefix)]
        if not mine:
            return None
        return sum(int(c.num_pending or 0) + int(c.num_ack_pending or 0) for c in mine)

    def close(self) -> None:
        pass

    # -- producers and consumers ------------------------------------------------------------------------------
    def in_flight_window(self, mode: str) -> int:
        """How many publishes a producer keeps awaiting their PubAck: `nats_max_in_flight`, single mode one."""
        return self.client["nats_max_in_flight"] if mode == "batch" else 1

    def producer(self, topic: str, partitions: int, mode: str, on_ack: OnAck) -> WireProducer:
        """The Python loop's producer: one that speaks the protocol on a socket of its own (nats:// or tls://,
        credentials or none) and stamps each PubAck when it arrived (wire.py)."""
        urls, subjects = servers(self.endpoint), [subject(topic, p) for p in range(partitions)]
        window = self.in_flight_window(mode)
        return WireProducer(urls, subjects, window, on_ack, connect_timeout_s=CONNECT_TIMEOUT_S,
                            reconnect_wait_s=RECONNECT_WAIT_S, ack_timeout_s=ACK_TIMEOUT_S,
                            buffer_bytes=RECONNECT_BUFFER_BYTES)

    def native_sender(self, topic: str, partitions: int, mode: str):
        """The native send loop on a plain NATS connection of its own: the same subjects, body and window as
        `producer`, each PubAck read (and stamped) as it arrives on the loop's own socket. On a cluster it connects
        to the first of the endpoint's servers that answers; a connection it loses is made again to the next one
        (in turn round the list), as the Python producer moves to another server."""
        urls = [urlsplit(url) for url in servers(self.endpoint)]
        if any(url.scheme not in ("nats", "") or url.username or url.password for url in urls):
            raise native.Unsupported("the native loop speaks plain NATS without credentials")
        addresses = [(url.hostname or "127.0.0.1", url.port or 4222) for url in urls]
        subjects = [subject(topic, p).encode() for p in range(partitions)]
        refused = []
        for at, (host, port) in enumerate(addresses):
            try:
                return native.nats_sender(host, port, subjects, self.in_flight_window(mode), CONNECT_TIMEOUT_S,
                                          addresses[at + 1:] + addresses[:at])
            except OSError as exc:
                refused.append(str(exc))
        raise BrokerUnavailable(f"NATS at {self.endpoint['url']}: {'; '.join(refused)}")

    def consumer(self, topic: str, group: str, partitions: list[int]) -> WireConsumer:
        """The durable pull consumer, on a NATS connection of its own that it speaks itself (wire.py)."""
        durable, batch = durable_name(group, partitions), self.client["nats_fetch_batch"]
        lanes = {subject(topic, p): p for p in partitions}
        return WireConsumer(servers(self.endpoint), stream_name(topic), durable,
                            consumer_config(durable, list(lanes), batch).as_dict(), lanes, batch,
                            connect_timeout_s=CONNECT_TIMEOUT_S, admin_timeout_s=ADMIN_TIMEOUT_S,
                            expires_s=PULL_EXPIRES_S, lost_s=PULL_LOST_S, reconnect_wait_s=RECONNECT_WAIT_S)


async def _server_info(jsm) -> dict:
    """What the server said of itself when the connection was made (INFO): version, cluster, connect_urls."""
    return dict(jsm._nc._server_info)


def servers_announced(info: dict) -> int:
    """The servers of a cluster as one server's INFO tells them: the client URLs in connect_urls (the server's own
    among them, once its routes are up) and its own; 1 for a server that is not clustered."""
    if not info.get("cluster"):
        return 1
    own = f"{info.get('host')}:{info.get('port')}"
    return len({*info.get("connect_urls", []), own})


def client_version() -> str:
    from nats.aio.client import __version__

    return __version__


def consumer_config(durable: str, subjects: list[str], batch: int) -> api.ConsumerConfig:
    """A cell's durable pull consumer: every message of its subjects, each acknowledged (see the module's notes)."""
    return api.ConsumerConfig(durable_name=durable, ack_policy=api.AckPolicy.EXPLICIT,
                              deliver_policy=api.DeliverPolicy.ALL, filter_subjects=subjects,
                              max_ack_pending=max(10 * batch, 10_000), ack_wait=ACK_WAIT_S)


def jetstream_answers(endpoint: dict, timeout_s: float = 3.0) -> bool:
    """Whether a client connects and JetStream answers the account's info request."""

    async def ask() -> bool:
        nc = await _connect(servers(endpoint), reconnect=False)
        try:
            await nc.jetstream().account_info()
            return True
        finally:
            await nc.close()

    try:
        return asyncio.run(asyncio.wait_for(ask(), timeout_s))
    except (*ERRORS, Exception):  # noqa: BLE001 (not ready yet, whatever the reason)
        return False
