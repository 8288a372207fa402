"""Redis Streams: XADD, consumer groups, XREADGROUP and XACK, on bare RESP connections (hiredis packs the commands
and parses the replies) for the producer and the consumer, and redis-py for the control calls.

Partitions map to stream keys `<topic>-<n>`. Batch mode pipelines the XADDs that are due, as a
sliding window of up to `pipeline_depth` unanswered; single mode sends one XADD and waits for its
reply. The native send loop (`native_sender`) does the same on its own RESP connection. Both wait
for replies on the socket and stamp each with the kernel's receive time; the consumer stamps a read's entries so.

An endpoint with `sentinels` (the local `redis@2`/`redis@3`, or any Sentinel-watched Redis) is followed through
Sentinel: every connection goes to the master the Sentinels name at that moment (redis-py's Sentinel support for
the control calls, SENTINEL GET-MASTER-ADDR-BY-NAME for the producer's and the consumer's own connections). After
a lost connection (the master killed, or a READONLY answer from a master Sentinel has since made a replica) the
producer fails what was in flight and the sends that fall due until it reaches the master again, trying at most
every RECONNECT_EVERY_S; the consumer reads nothing until then. `redis_wait_replicas` makes each pipelined write
end with WAIT: its XADDs count as acknowledged once that many replicas have them.

An endpoint routed through proxies (a run with network faults: brokerbench.toxiproxy) is followed the same way at its
own address: a connection a reset closed is made again, not given up, and the native loop (one connection) is not
used. Behind Sentinel it connects to the proxy in front of the master the Sentinels name (ProxiedSentinel).
"""

from __future__ import annotations

import os
import select
import socket
import time
from collections import deque

import hiredis
import redis
from redis.exceptions import AuthenticationError, RedisError, ResponseError
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry
from redis.sentinel import Sentinel

from ... import native, toxiproxy
from ...drivers import BrokerUnavailable, Message, OnAck, TargetRefused
from ..socket_buffer import JOIN_WITHIN_NS, TlsSocket, recv_stamped, socket_stamps, stamp_arrivals

HEADER_FIELD = b"h"
PAYLOAD_FIELD = b"d"
# Behind a Sentinel, a producer whose connection was lost tries the master again at most this often: the sends
# due meanwhile fail at once (each one a send error of the failover window) instead of each waiting on a connect.
RECONNECT_EVERY_S = 0.05
SENTINEL_TIMEOUT_S = 1.0  # each question to one Sentinel (they run beside the nodes: an answer takes a millisecond)
# client.redis_wait_timeout_ms omitted: a WAIT gives up after a second (its XADDs then fail as sends).
WAIT_TIMEOUT_MS = 1000
# The local stack's AOF is rewritten before a cell once it is larger than this (compact_aof): about two Redis cells of
# the quick suite (1 KB at 1,000 msgs/s for 9 s: 10 MB), so a suite's AOF stays small without a rewrite per cell.
COMPACT_AOF_ABOVE_BYTES = 16 << 20
COMPACT_AOF_TIMEOUT_S = 30.0
_WAIT = object()  # in a producer's in-flight queue: the WAIT that ends a write, after that write's XADDs


def stream_key(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


_SECRETS: dict[str, str] = {}  # this process's AUTH tokens, by Secrets Manager ARN


class RedisStreamsDriver:
    name = "redis-streams"

    def __init__(self, endpoint: dict, client: dict) -> None:
        self.endpoint = endpoint
        self.client = client

    def _password(self) -> str | None:
        """ElastiCache's AUTH token stays in Secrets Manager; only its ARN travels in the endpoint, and each process
        fetches it once (not on every connect). A local Redis started with an AUTH password names the environment
        variable that holds it."""
        arn = self.endpoint.get("auth_secret_arn")
        if arn:
            if arn not in _SECRETS:
                import boto3

                _SECRETS[arn] = boto3.client("secretsmanager").get_secret_value(SecretId=arn)["SecretString"]
            return _SECRETS[arn]
        variable = self.endpoint.get("auth_env")
        if variable:
            if not os.environ.get(variable):
                raise BrokerUnavailable(f"Redis at {self.endpoint['host']}:{self.endpoint['port']} requires AUTH: "
                                        f"set {variable} to its password")
            return os.environ[variable]
        return None

    def sentinel(self) -> Sentinel | None:
        """The Sentinels that name this endpoint's master, when it has them."""
        if not self.endpoint.get("sentinels"):
            return None
        return ProxiedSentinel([(s["host"], int(s["port"])) for s in self.endpoint["sentinels"]],
                               self.endpoint.get("node_addresses") or {},
                               socket_timeout=SENTINEL_TIMEOUT_S, socket_connect_timeout=SENTINEL_TIMEOUT_S)

    def master(self) -> tuple[str, int]:
        """Where the master is now: the address the Sentinels name (through a network fault's proxies, the proxy in
        front of it), or the endpoint's own (one node)."""
        sentinel = self.sentinel()
        if sentinel is None:
            return self.endpoint["host"], int(self.endpoint["port"])
        return sentinel.discover_master(self.endpoint["master_name"])

    def connect(self, **options) -> redis.Redis:
        sentinel = self.sentinel()
        if sentinel is not None:  # a client that asks the Sentinels for the master each time it connects
            return sentinel.master_for(self.endpoint["master_name"], password=self._password(),
                                       ssl=bool(self.endpoint.get("tls", False)), socket_connect_timeout=5,
                                       socket_timeout=30, **options)
        return redis.Redis(
            host=self.endpoint["host"],
            port=int(self.endpoint["port"]),
            password=self._password(),
            ssl=bool(self.endpoint.get("tls", False)),
            socket_connect_timeout=5,
            socket_timeout=30,
            **options,
        )

    def check(self, timeout_s: float = 5.0) -> None:
        """Redis answers a PING within `timeout_s`, as Kafka's check waits for its broker: a refused connection or a
        server still loading its append-only file (BusyLoadingError) is asked again until then, so a Redis started
        again a moment before a cell serves it instead of failing it. A refused password fails at once. The client's
        own retries (3, backoff with jitter: 4 to 7 s) are off here: the wait is `timeout_s`, not theirs."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                connection = self.connect(retry=Retry(NoBackoff(), 0))
                connection.ping()
                break
            except AuthenticationError as exc:
                raise self._unavailable(exc) from None
            except RedisConnectionError as exc:
                if time.monotonic() >= deadline:
                    raise self._unavailable(exc) from None
                time.sleep(0.2)
            except RedisError as exc:
                raise self._unavailable(exc) from None
        self.apply_persistence(connection)
        self.check_replicas(connection)

    def check_replicas(self, connection: redis.Redis) -> None:
        """client.redis_wait_replicas, when the run sets it, needs that many replicas linked to the master now
        (INFO replication): with fewer, every WAIT would time out and every send fail."""
        wanted = self.client.get("redis_wait_replicas") or 0
        if not wanted:
            return
        try:
            linked = int(connection.info("replication").get("connected_slaves", 0))
        except RedisError as exc:
            raise self._unavailable(exc) from None
        if linked < wanted:
            raise TargetRefused(f"client.redis_wait_replicas: {wanted} replica(s) asked for, but the Redis master at "
                                f"{self.endpoint['host']}:{self.endpoint['port']} has {linked} connected: run it with "
                                "replicas (locally redis@2 or redis@3: provision.redis-streams.nodes) or omit the "
                                "setting")

    def apply_persistence(self, connection: redis.Redis) -> None:
        """client.redis_appendfsync, when the run sets it: AOF on with that fsync policy (CONFIG SET, for the
        server's whole life: a run that started the local Redis stops it; one started by hand keeps the policy).
        A server that refuses CONFIG (ElastiCache) cannot serve the run: TargetRefused names the setting."""
        policy = self.client.get("redis_appendfsync")
        if policy is None:
            return
        try:
            for name, value in (("appendfsync", policy), ("appendonly", "yes")):
                current = connection.config_get(name).get(name)
                if (current.decode() if isinstance(current, bytes) else current) != value:
                    connection.config_set(name, value)
        except ResponseError as exc:
            raise TargetRefused(f"client.redis_appendfsync: Redis at {self.endpoint['host']}:{self.endpoint['port']} "
                                f"refused CONFIG SET ({exc}); set its AOF policy on the server and omit the setting") from None
        except RedisError as exc:
            raise self._unavailable(exc) from None

    def describe(self) -> dict:
        try:
            version = self.connect().info("server")["redis_version"]
        except RedisError:
            version = self.endpoint.get("version", "unknown")
        return {
            "broker": "redis-streams",
            "broker_version": version,
            "client_library": "redis-py",
            "client_version": redis.__version__,
            "hiredis": bool(redis.utils.HIREDIS_AVAILABLE),
        }

    def create_topic(self, topic: str, partitions: int) -> None:
        self.apply_persistence(self.connect())
        try:
            connection = self.connect()
            connection.delete(*(stream_key(topic, p) for p in range(partitions)))
            if self.endpoint.get("aof_rewrite") == "between_cells":
                compact_aof(connection)
        except RedisError as exc:
            raise BrokerUnavailable(f"could not prepare streams for {topic}: {exc}") from None

    def delete_topic(self, topic: str, partitions: int) -> None:
        try:
            self.connect().delete(*(stream_key(topic, p) for p in range(partitions)))
        except RedisError:
            pass  # best effort: each cell has its own keys

    def backlog(self, topic: str, group: str, partitions: int) -> int | None:
        """Entries the group has not been delivered yet: XINFO GROUPS `lag`, summed over the stream keys."""
        try:
            connection = self.connect()
            total = 0
            for p in range(partitions):
                for info in connection.xinfo_groups(stream_key(topic, p)):
                    if info["name"] in (group, group.encode()):
                        if info.get("lag") is None:  # Redis cannot tell (entries were deleted)
                            return None
                        total += int(info["lag"])
            return total
        except RedisError:
            return None

    def message_count(self, topic: str, partitions: int) -> int | None:
        """How many entries the broker holds for the topic: XLEN, summed over the stream keys."""
        try:
            connection = self.connect()
            return sum(int(connection.xlen(stream_key(topic, p))) for p in range(partitions))
        except RedisError:
            return None

    def close(self) -> None:
        pass

    def producer(self, topic: str, partitions: int, mode: str, on_ack: OnAck) -> RedisStreamsProducer:
        try:
            connection = self.resp_connection()
        except (OSError, RedisError) as exc:
            raise self._unavailable(exc) from None
        return RedisStreamsProducer(connection, [stream_key(topic, p) for p in range(partitions)],
                                    self.in_flight_window(mode), on_ack,
                                    reconnect=self.resp_connection if self._follows() else None,
                                    wait=wait_command(self.client))

    def _follows(self) -> bool:
        """Whether the clients connect again after a lost connection: behind Sentinel (to the master it names now),
        and through proxies (to the same address: a network fault's reset closes connections the node still serves)."""
        return bool(self.endpoint.get("sentinels")) or toxiproxy.routed(self.endpoint)

    def resp_connection(self) -> RespConnection:
        """A producer's connection to the master as it is now."""
        host, port = self.master()
        return RespConnection(host, port, bool(self.endpoint.get("tls")), self._password())

    def in_flight_window(self, mode: str) -> int:
        """XADDs in flight at most (both loops write one, then wait while that many are unanswered): the pipeline
        depth in batch mode, one in single mode."""
        return self.client["pipeline_depth"] if mode == "batch" else 1

    def _unavailable(self, exc: Exception) -> BrokerUnavailable:
        return BrokerUnavailable(f"Redis at {self.endpoint['host']}:{self.endpoint['port']} did not answer: {exc}")

    def native_sender(self, topic: str, partitions: int, mode: str):
        """The native send loop on a plain RESP connection, with the same pipelining as `producer`."""
        if self.endpoint.get("tls"):
            raise native.Unsupported("the native loop speaks plain TCP, not TLS")
        if self._follows():
            raise native.Unsupported("the native loop keeps one connection; a master behind Sentinel, or a link a "
                                     "network fault may reset, is followed by the Python producer, which connects "
                                     "again")
        if wait_command(self.client):
            raise native.Unsupported("the native loop sends no WAIT (client.redis_wait_replicas)")
        try:
            return native.redis_sender(self.endpoint["host"], int(self.endpoint["port"]), self._password(),
                                       [stream_key(topic, p).encode() for p in range(partitions)], self.in_flight_window(mode))
        except OSError as exc:
            raise self._unavailable(exc) from None

    def consumer(self, topic: str, group: str, partitions: list[int]) -> RedisStreamsConsumer:
        connection = self.connect()
        keys = [stream_key(topic, p) for p in partitions]
        try:
            for key in keys:
                try:
                    connection.xgroup_create(key, group, id="0", mkstream=True)
                except ResponseError as exc:
                    if "BUSYGROUP" not in str(exc):
                        raise
        finally:
            connection.close()
        try:
            return RedisStreamsConsumer(self.resp_connection, keys, group, self.client["read_count"],
                                        follow=self._follows())
        except (OSError, RedisError) as exc:
            raise self._unavailable(exc) from None


class ProxiedSentinel(Sentinel):
    """Sentinel, with the master it names reached through the proxy in front of it where `addresses` ("host:port" ->
    the proxy's port) has one: a network fault's link (local.py). Every connection redis-py makes to the master
    (master_for's pool, a connection made again after a failover) asks discover_master first."""

    def __init__(self, sentinels, addresses: dict[str, int], **options) -> None:
        super().__init__(sentinels, **options)
        self.addresses = addresses

    def discover_master(self, service_name: str) -> tuple[str, int]:
        host, port = super().discover_master(service_name)
        return host, self.addresses.get(f"{host}:{port}", port)


class RespConnection:
    """A bare RESP connection for the producer's hot path: hiredis packs the commands and parses the
    replies of a whole pipeline from socket reads, with no Python layer per reply."""

    def __init__(self, host: str, port: int, tls: bool, password: str | None) -> None:
        sock = socket.create_connection((host, port), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stamp_arrivals(sock)  # over TLS too: TlsSocket reads the ciphertext with the kernel's stamp
        if tls:
            try:
                sock = TlsSocket(sock, host)
            except BaseException:
                sock.close()
                raise
        self.sock = sock
        self.reader = hiredis.Reader()
        if password:
            self.sock.sendall(hiredis.pack_command((b"AUTH", password)))
            reply = self.replies(1)[0]
            if isinstance(reply, Exception):
                raise BrokerUnavailable(f"Redis AUTH failed: {reply}")

    def replies(self, count: int) -> list:
        """The next `count` replies; an error reply comes back as an exception object, not raised."""
        out = []
        gets, feed, recv = self.reader.gets, self.reader.feed, self.sock.recv
        while len(out) < count:
            reply = gets()
            if reply is False:
                chunk = recv(1 << 16)
                if not chunk:
                    raise ConnectionError("Redis closed the connection")
                feed(chunk)
                continue
            out.append(reply)
        return out

    def stamped_replies(self, count: int) -> tuple[list, int]:
        """The next `count` replies (an error reply as an exception object, not raised), and when the read that
        completed them arrived (socket_buffer.recv_stamped: the kernel's receive time of its last segment)."""
        out, at = [], time.monotonic_ns()
        gets, feed, sock = self.reader.gets, self.reader.feed, self.sock
        while len(out) < count:
            reply = gets()
            if reply is False:
                chunk, at, _ = recv_stamped(sock, 1 << 16)
                if not chunk:
                    raise ConnectionError("Redis closed the connection")
                feed(chunk)
                continue
            out.append(reply)
        return out, at

    def close(self) -> None:
        self.sock.close()


class RedisStreamsProducer:
    """XADDs packed once by hiredis (redis-py's pipeline object costs more per command than the broker does, and
    would make the client the bottleneck), written as they fall due (one after a pause at once; sends back to back
    joined into one write at the loop's next poll: socket_buffer.JOIN_WITHIN_NS) and answered as a sliding window:
    at most `depth` unanswered, as the native loop does. Each reply is stamped when it arrived (the kernel's
    receive time, socket_buffer.recv_stamped), however late the loop reads it; `poll` waits on the socket, so that
    the window frees as replies come.

    `reconnect` (a master behind Sentinel): after a lost connection, the next send or poll at least
    RECONNECT_EVERY_S after the last attempt connects to the master the Sentinels name now; without it a lost
    connection fails every later send. `wait` (the packed WAIT of client.redis_wait_replicas): each write ends
    with it, and its XADDs are acknowledged when its reply comes, each as published only when it counts enough
    replicas."""

    def __init__(self, connection: RespConnection | None, keys: list[str], depth: int, on_ack: OnAck, *,
                 reconnect=None, wait: tuple[bytes, int] | None = None) -> None:
        self._connection = connection
        # its replies' stamps (socket_stamps): a reconnection reaches the same endpoint, TLS or not
        self.stamps = socket_stamps(connection.sock) if connection is not None else None
        self._keys = [key.encode() for key in keys]
        self._depth = depth
        self._on_ack = on_ack
        self._pack = hiredis.pack_command
        self._out: list[bytes] = []  # packed XADDs not written yet
        self._in_flight: deque = deque()  # headers of the XADDs not answered yet (and _WAIT marks), oldest first
        self._replied: list[tuple[bytes, bool]] = []  # XADDs answered, waiting for their WAIT's reply
        self._reconnect = reconnect
        self._next_attempt = 0.0
        self._wait, self._wait_replicas = wait or (None, 0)
        self._broken = connection is None
        self._last_send_ns = 0

    def _unanswered(self) -> int:
        return len(self._in_flight) + len(self._replied)

    def _usable(self) -> bool:
        """Whether the connection serves (after connecting again, when it was lost and may be)."""
        if self._broken and self._reconnect is not None and time.monotonic() >= self._next_attempt:
            self._next_attempt = time.monotonic() + RECONNECT_EVERY_S
            try:
                connection = self._reconnect()
            except (OSError, RedisError, BrokerUnavailable):
                return False
            if self._connection is not None:
                self._connection.close()
            self._connection, self._broken = connection, False
        return not self._broken

    def send(self, header: bytes, payload: bytes, partition: int) -> None:
        now = time.monotonic_ns()
        if not self._usable():
            self._on_ack(header, False, now)
            return
        self._out.append(self._pack((b"XADD", self._keys[partition], b"*", HEADER_FIELD, header,
                                     PAYLOAD_FIELD, payload)))
        self._in_flight.append(header)
        alone, self._last_send_ns = now - self._last_send_ns > JOIN_WITHIN_NS, now
        if alone or self._unanswered() >= self._depth:  # on schedule (written now), or the window is full (written,
            self._write()                                # then waited on until it has room)
            while self._unanswered() >= self._depth and not self._broken:
                self._read(None)

    def _write(self) -> None:
        if not self._out or self._broken:
            return
        data, self._out = b"".join(self._out), []
        if self._wait is not None:
            data += self._wait
            self._in_flight.append(_WAIT)
        try:
            self._connection.sock.sendall(data)
        except OSError:
            self._lost()

    def _read(self, timeout_s: float | None) -> bool:
        """Read the replies that arrive within timeout_s (None: wait for one, up to the socket's timeout); each
        acknowledges the oldest XADD in flight, stamped when it arrived (socket_buffer.recv_stamped). False when none
        came."""
        sock, reader = self._connection.sock, self._connection.reader
        pending = getattr(sock, "pending", None)  # TLS: bytes already decrypted wait in the SSL object
        if timeout_s is not None and not (pending and pending()):
            if not select.select([sock], [], [], max(0.0, timeout_s))[0]:
                return False
        try:
            chunk, at, _ = recv_stamped(sock, 1 << 16)
        except (OSError, ConnectionError):  # the socket's timeout, or the connection lost
            chunk, at = b"", 0
        if not chunk:
            self._lost()
            return False
        reader.feed(chunk)
        if self._wait is None and self._reconnect is None:
            on_ack, in_flight = self._on_ack, self._in_flight
            while in_flight and (reply := reader.gets()) is not False:
                on_ack(in_flight.popleft(), not isinstance(reply, Exception), at)
        else:
            self._replies(at)
        return True

    def _replies(self, at: int) -> None:
        """The replies read, with WAIT marks among them or behind Sentinel: a READONLY error (the node is a
        replica now) loses the connection, so the next send asks the Sentinels for the master."""
        readonly = False
        while self._in_flight and (reply := self._connection.reader.gets()) is not False:
            header = self._in_flight.popleft()
            if header is _WAIT:
                enough = isinstance(reply, int) and reply >= self._wait_replicas
                for replied, ok in self._replied:
                    self._on_ack(replied, ok and enough, at)
                self._replied = []
                continue
            failed = isinstance(reply, Exception)
            readonly |= failed and str(reply).startswith("READONLY")
            if self._wait is None:
                self._on_ack(header, not failed, at)
            else:
                self._replied.append((header, not failed))
        if readonly and self._reconnect is not None:
            self._lost()

    def _lost(self) -> None:
        """The connection is lost: what is in flight is unacknowledged, and so is whatever is sent before it
        connects again (never, without `reconnect`)."""
        self._broken, self._out = True, []
        at = time.monotonic_ns()
        for header, _ in self._replied:
            self._on_ack(header, False, at)
        self._replied = []
        while self._in_flight:
            header = self._in_flight.popleft()
            if header is not _WAIT:
                self._on_ack(header, False, at)
        if self._connection is not None:
            self._connection.reader = hiredis.Reader()  # a half-read reply of the old connection is dropped

    def poll(self, timeout_s: float) -> None:
        """Write what is buffered and serve the replies: those already here, then waiting up to timeout_s for
        more (returning once some came). With nothing in flight there is nothing to wait for: it sleeps."""
        self._write()
        if self._in_flight and not self._broken and self._read(0):
            return
        if timeout_s <= 0:
            return
        if self._in_flight and not self._broken:
            self._read(timeout_s)
        else:
            time.sleep(timeout_s)

    def flush(self, timeout_s: float) -> int:
        """Write everything and wait up to timeout_s for every reply; returns the XADDs still unanswered."""
        deadline = time.monotonic() + timeout_s
        self._write()
        while self._in_flight and not self._broken and (left := deadline - time.monotonic()) > 0:
            self._read(left)
        return sum(header is not _WAIT for header in self._in_flight) + len(self._replied)

    def close(self) -> None:
        self.flush(5)
        if self._connection is not None:
            self._connection.close()


def compact_aof(connection: redis.Redis, above_bytes: int | None = None, timeout_s: float = COMPACT_AOF_TIMEOUT_S) -> bool:
    """Rewrite the AOF (BGREWRITEAOF) when it has grown past `above_bytes`, and wait until the rewrite is done: on
    the local stack, whose Redis never rewrites it on its own (local.py), it is compacted before a cell rather than
    whenever a cell happens to push it over Redis's own threshold. Whether it rewrote; a rewrite still running after
    `timeout_s` (a rewrite of deleted streams takes about 0.1 s) is left to finish, not waited for."""
    above_bytes = COMPACT_AOF_ABOVE_BYTES if above_bytes is None else above_bytes
    info = connection.info("persistence")
    if not int(info.get("aof_enabled", 0)) or int(info.get("aof_current_size", 0)) <= above_bytes:
        return False
    if not (int(info.get("aof_rewrite_in_progress", 0)) or int(info.get("aof_rewrite_scheduled", 0))):
        connection.bgrewriteaof()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = connection.info("persistence")
        if not (int(info.get("aof_rewrite_in_progress", 0)) or int(info.get("aof_rewrite_scheduled", 0))):
            break
        time.sleep(0.02)
    return True


def wait_command(client: dict) -> tuple[bytes, int] | None:
    """client.redis_wait_replicas as (the packed WAIT that ends each write, the replicas it must count)."""
    replicas = client.get("redis_wait_replicas") or 0
    if not replicas:
        return None
    return hiredis.pack_command((b"WAIT", replicas, client.get("redis_wait_timeout_ms", WAIT_TIMEOUT_MS))), replicas


class RedisStreamsConsumer:
    """XREADGROUP in a consumer group, on a bare RESP connection of its own (RespConnection: hiredis packs and
    parses, the socket is read with recv_stamped). A batch's XACKs are not sent while the batch is being received:
    they go out in the same write as the next XREADGROUP (or at close), so the worker takes its receive timestamps
    before any acknowledgement round trip, as it does for Kafka (which commits nothing per message). Every
    delivered entry is acknowledged exactly once. A poll's entries are stamped with the arrival of the read that
    completed its reply (`arrived_ns`: the kernel's receive time of that read's last segment, socket_buffer), however
    late the worker's thread came to read it, where redis-py's parser had them stamped as its parse returned.

    `follow` (a master behind Sentinel, or a link a network fault may reset): a read that loses its connection
    returns nothing, and the next poll at least RECONNECT_EVERY_S after the last attempt connects to the master
    `connect` reaches then; the lost batch's XACKs are dropped (those entries stay pending, or are delivered again
    by a promoted replica that never had the XACK: duplicates)."""

    def __init__(self, connect, keys: list[str], group: str, count: int, follow: bool = False) -> None:
        self._connect = connect  # () -> a RespConnection to the master as it is now
        self._connection: RespConnection | None = connect()
        self.stamps = socket_stamps(self._connection.sock)  # a reconnection reaches the same endpoint, TLS or not
        self.arrived_ns: int | None = None  # when the last poll's entries arrived (None: it returned none)
        self._keys = [key.encode() for key in keys]
        self._group = group.encode()
        self._name = f"c{id(self)}".encode()
        self._count = count
        self._partition = {key.encode(): int(key.rsplit("-", 1)[1]) for key in keys}
        self._unacked: list[bytes] = []  # packed XACKs of the last batch, sent with the next read
        self._follow = follow
        self._next_attempt = 0.0
        self.ack_errors = 0

    def _read_command(self, timeout_s: float) -> bytes:
        return hiredis.pack_command((b"XREADGROUP", b"GROUP", self._group, self._name, b"COUNT", self._count,
                                     b"BLOCK", max(1, int(timeout_s * 1000)), b"STREAMS", *self._keys,
                                     *([b">"] * len(self._keys))))

    def _exchange(self, commands: list[bytes]) -> tuple[list, int]:
        """Write the pending XACKs followed by `commands` at once and read the replies: (those to `commands`, when
        the read that completed them arrived). The XACKs are handed over once, never sent twice; an XACK's error
        (e.g. the stream is gone: its entries stay pending, nothing else changes) is counted."""
        acks, self._unacked = self._unacked, []
        self._connection.sock.sendall(b"".join(acks + commands))
        replies, at = self._connection.stamped_replies(len(acks) + len(commands))
        self.ack_errors += sum(isinstance(reply, Exception) for reply in replies[:len(acks)])
        return replies[len(acks):], at

    def poll(self, timeout_s: float) -> list[Message]:
        self.arrived_ns = None
        if not self._follow:
            return self._poll(timeout_s)
        if self._connection is None and not self._reconnected():
            time.sleep(min(timeout_s, RECONNECT_EVERY_S))
            return []
        try:
            return self._poll(timeout_s)
        except (OSError, ResponseError) as exc:  # OSError: ConnectionError and the socket's timeout among them
            if isinstance(exc, ResponseError) and not str(exc).startswith(("READONLY", "LOADING", "MASTERDOWN")):
                raise
            self._unacked = []
            self._connection.close()
            self._connection = None
            time.sleep(min(timeout_s, RECONNECT_EVERY_S))
            return []

    def _reconnected(self) -> bool:
        """Connect again to the master as it is now, at most every RECONNECT_EVERY_S; whether it did."""
        if time.monotonic() < self._next_attempt:
            return False
        self._next_attempt = time.monotonic() + RECONNECT_EVERY_S
        try:
            self._connection = self._connect()
        except (OSError, RedisError, BrokerUnavailable):
            return False
        return True

    def _poll(self, timeout_s: float) -> list[Message]:
        # The reply, per stream key: [key, [[id, [b"h", header, b"d", payload]], ...]]; nil when BLOCK timed out.
        [response], at = self._exchange([self._read_command(timeout_s)])
        if isinstance(response, Exception):
            raise ResponseError(str(response))
        out: list[Message] = []
        if not response:
            return out
        group = self._group
        for key, entries in response:
            partition = self._partition[key]
            out += [(fields[1], fields[3], partition) for _id, fields in entries]
            self._unacked.append(hiredis.pack_command((b"XACK", key, group, *(entry[0] for entry in entries))))
        if out:
            self.arrived_ns = at
        return out

    def hold(self, on: bool) -> None:
        """Nothing to do: entries are only read when asked for (XREADGROUP)."""

    def commit(self) -> None:
        """Nothing to store: the group's last-delivered id is the broker's record of the position."""

    def close(self) -> None:
        if self._connection is None:
            return
        try:
            if self._unacked:  # the last batch's acknowledgements
                self._exchange([])
        except OSError:
            pass  # the broker is gone: its entries stay pending, as any unacknowledged delivery would
        finally:
            self._connection.close()
            self._connection = None

