"""Redis Streams through redis-py with hiredis: XADD, consumer groups, XREADGROUP and XACK.

Partitions map to stream keys `<topic>-<n>`. Batch mode pipelines the XADDs that are due, as a
sliding window of up to `pipeline_depth` unanswered; single mode sends one XADD and waits for its
reply. The native send loop (`native_sender`) does the same on its own RESP connection. Both wait
for replies on the socket and stamp each when it is read.
"""

from __future__ import annotations

import os
import select
import socket
import ssl
import time
from collections import deque

import hiredis
import redis
from redis.exceptions import AuthenticationError, RedisError, ResponseError
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from ... import native
from ...drivers import BrokerUnavailable, Message, OnAck, TargetRefused

HEADER_FIELD = b"h"
PAYLOAD_FIELD = b"d"


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

    def connect(self, **options) -> redis.Redis:
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
            self.connect().delete(*(stream_key(topic, p) for p in range(partitions)))
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
            connection = RespConnection(self.endpoint, self._password())
        except OSError as exc:
            raise self._unavailable(exc) from None
        return RedisStreamsProducer(connection, [stream_key(topic, p) for p in range(partitions)], self.in_flight_window(mode),
                                    on_ack)

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
        try:
            return native.redis_sender(self.endpoint["host"], int(self.endpoint["port"]), self._password(),
                                       [stream_key(topic, p).encode() for p in range(partitions)], self.in_flight_window(mode))
        except OSError as exc:
            raise self._unavailable(exc) from None

    def consumer(self, topic: str, group: str, partitions: list[int]) -> RedisStreamsConsumer:
        connection = self.connect()
        keys = [stream_key(topic, p) for p in partitions]
        for key in keys:
            try:
                connection.xgroup_create(key, group, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        return RedisStreamsConsumer(connection, keys, group, self.client["read_count"])


class RespConnection:
    """A bare RESP connection for the producer's hot path: hiredis packs the commands and parses the
    replies of a whole pipeline from socket reads, with no Python layer per reply."""

    def __init__(self, endpoint: dict, password: str | None) -> None:
        host, port = endpoint["host"], int(endpoint["port"])
        sock = socket.create_connection((host, port), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if endpoint.get("tls"):
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
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

    def close(self) -> None:
        self.sock.close()


class RedisStreamsProducer:
    """XADDs packed once by hiredis (redis-py's pipeline object costs more per command than the broker does, and
    would make the client the bottleneck), written as they fall due and answered as a sliding window: at most
    `depth` unanswered, as the native loop does. `poll` waits on the socket, so each reply is stamped as it is
    read, not when the worker next looks."""

    def __init__(self, connection: RespConnection, keys: list[str], depth: int, on_ack: OnAck) -> None:
        self._connection = connection
        self._keys = [key.encode() for key in keys]
        self._depth = depth
        self._on_ack = on_ack
        self._pack = hiredis.pack_command
        self._out: list[bytes] = []  # packed XADDs not written yet
        self._in_flight: deque[bytes] = deque()  # headers of the XADDs not answered yet, oldest first
        self._broken = False

    def send(self, header: bytes, payload: bytes, partition: int) -> None:
        if self._broken:
            self._on_ack(header, False, time.monotonic_ns())
            return
        self._out.append(self._pack((b"XADD", self._keys[partition], b"*", HEADER_FIELD, header,
                                     PAYLOAD_FIELD, payload)))
        self._in_flight.append(header)
        if len(self._in_flight) >= self._depth:  # the window is full: write, then wait until it has room
            self._write()
            while len(self._in_flight) >= self._depth and not self._broken:
                self._read(None)

    def _write(self) -> None:
        if not self._out or self._broken:
            return
        data, self._out = b"".join(self._out), []
        try:
            self._connection.sock.sendall(data)
        except OSError:
            self._lost()

    def _read(self, timeout_s: float | None) -> bool:
        """Read the replies that arrive within timeout_s (None: wait for one, up to the socket's timeout); each
        acknowledges the oldest XADD in flight, stamped when read. False when none came."""
        sock, reader = self._connection.sock, self._connection.reader
        pending = getattr(sock, "pending", None)  # TLS: bytes already decrypted wait in the SSL object
        if timeout_s is not None and not (pending and pending()):
            if not select.select([sock], [], [], max(0.0, timeout_s))[0]:
                return False
        try:
            chunk = sock.recv(1 << 16)
        except (OSError, ConnectionError):  # the socket's timeout, or the connection lost
            chunk = b""
        at = time.monotonic_ns()
        if not chunk:
            self._lost()
            return False
        reader.feed(chunk)
        on_ack, in_flight = self._on_ack, self._in_flight
        while in_flight and (reply := reader.gets()) is not False:
            on_ack(in_flight.popleft(), not isinstance(reply, Exception), at)
        return True

    def _lost(self) -> None:
        """The connection is lost: what is in flight is unacknowledged, and so is whatever is sent later."""
        self._broken, self._out = True, []
        at = time.monotonic_ns()
        while self._in_flight:
            self._on_ack(self._in_flight.popleft(), False, at)

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
        return len(self._in_flight)

    def close(self) -> None:
        self.flush(5)
        self._connection.close()


class RedisStreamsConsumer:
    """XREADGROUP in a consumer group. A batch's XACKs are not sent while the batch is being received:
    they go out in the same write as the next XREADGROUP (or at close), so the worker takes its receive
    timestamps before any acknowledgement round trip, as it does for Kafka (which commits nothing
    per message). Every delivered entry is acknowledged exactly once."""

    def __init__(self, connection: redis.Redis, keys: list[str], group: str, count: int) -> None:
        self._client = connection
        self._connection = connection.connection_pool.get_connection()
        self._keys = keys
        self._group = group
        self._name = f"c{id(self)}"
        self._count = count
        self._partition = {key.encode(): int(key.rsplit("-", 1)[1]) for key in keys}
        self._unacked: list[bytes] = []  # packed XACKs of the last batch, sent with the next read
        self.ack_errors = 0

    def _read_command(self, timeout_s: float) -> bytes:
        return hiredis.pack_command((b"XREADGROUP", b"GROUP", self._group, self._name, b"COUNT", self._count,
                                     b"BLOCK", max(1, int(timeout_s * 1000)), b"STREAMS", *self._keys,
                                     *([b">"] * len(self._keys))))

    def _send(self, commands: list[bytes]) -> int:
        """Write the pending XACKs followed by `commands` at once; returns how many XACK replies to read."""
        acks, self._unacked = self._unacked, []  # handed over once: never sent twice
        self._connection.send_packed_command([b"".join(acks + commands)], check_health=False)
        return len(acks)

    def _read_ack_replies(self, count: int) -> None:
        for _ in range(count):
            try:
                self._connection.read_response()
            except ResponseError:  # e.g. the stream is gone: the entries stay pending, nothing else changes
                self.ack_errors += 1

    def poll(self, timeout_s: float) -> list[Message]:
        # The raw reply (no redis-py response callback, which builds a dict per entry): per stream key
        # [[id, [b"h", header, b"d", payload]], ...], as a mapping or as [key, entries] pairs.
        self._read_ack_replies(self._send([self._read_command(timeout_s)]))
        response = self._connection.read_response()
        out: list[Message] = []
        if not response:
            return out
        group = self._group.encode()
        for key, entries in (response.items() if isinstance(response, dict) else response):
            partition = self._partition[key]
            out += [(fields[1], fields[3], partition) for _id, fields in entries]
            self._unacked.append(hiredis.pack_command((b"XACK", key, group, *(entry[0] for entry in entries))))
        return out

    def hold(self, on: bool) -> None:
        """Nothing to do: entries are only read when asked for (XREADGROUP)."""

    def commit(self) -> None:
        """Nothing to store: the group's last-delivered id is the broker's record of the position."""

    def close(self) -> None:
        try:
            if self._unacked:  # the last batch's acknowledgements
                self._read_ack_replies(self._send([]))
        except (RedisError, OSError):
            pass  # the broker is gone: its entries stay pending, as any unacknowledged delivery would
        finally:
            self._client.connection_pool.release(self._connection)
            self._client.close()
