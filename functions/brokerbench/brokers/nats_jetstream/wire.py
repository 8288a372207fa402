"""A JetStream durable pull consumer that speaks NATS's client protocol itself, on a blocking socket of its own (for a
tls:// server, TLS spoken over it after the server's INFO: socket_buffer.TlsSocket, what comes still stamped by the
kernel).

The consumer's messages are read in bulk: one recv of what the socket holds, the protocol's lines found with
bytes.find and each message's body sliced out, with no event loop, no object or callback per message and no
hand-over between threads. nats-py (asyncio) spent about half of the consumer's CPU per message on that parsing and
dispatch, and the consumer read a backlog at 0.67 of `nats bench js fetch` through it (docs/performance.md).

What it speaks (the NATS client protocol, https://docs.nats.io/reference/reference-protocols/nats-protocol):
- INFO from the server, then CONNECT with headers on (JetStream's status messages are headers) and no_responders,
  and a PING whose PONG says the server took it (or -ERR, why not);
- SUB to an inbox of its own, where the pull requests' messages come;
- the pull request: PUB `$JS.API.CONSUMER.MSG.NEXT.<stream>.<durable>` with that inbox as its reply subject and
  `{"batch": N, "expires": ns}`; the server sends up to N messages, each a MSG (or an HMSG when it was published
  with headers) whose reply subject is its acknowledgement subject, and ends a request it could not fill in time
  with a status message (an HMSG without a reply: `NATS/1.0 408 Request Timeout`; 409 when it ended it otherwise,
  100 an idle heartbeat);
- an acknowledgement: an empty PUB to the message's reply subject (what every client's `ack` sends), a poll's
  acknowledgements joined into one write with a PING after them: the server's PONG says it has read them. Those
  not confirmed so when a connection is given up are written again on the next (acknowledging a message twice is
  harmless; one that a reset discarded in the server's socket would be delivered again);
- PING from the server answered with PONG; a PING of its own when a pull request went unanswered too long, and the
  connection dropped when that PING is not answered either (a server that stopped answering).

A connection it loses (an error, the server closing it) is made again at the next poll, to the next server of the
endpoint's list in turn (a cluster's servers; the same one when there is one), one attempt per `reconnect_wait_s`
(the driver's RECONNECT_WAIT_S): the inbox is subscribed again, the acknowledgements not confirmed are written, and
new pull requests asked. The consumer's durable state is the server's: what was delivered on the lost connection and not acknowledged
stays pending and is delivered again after ack_wait."""

from __future__ import annotations

import json
import os
import socket
import time
from collections import deque
from urllib.parse import urlsplit

from ...drivers import BrokerUnavailable, Message
from ...figures import ARRIVAL
from ..socket_buffer import SocketBuffer, TlsSocket, stamp_arrivals

SCHEMES = ("nats", "tls")  # plain NATS, and NATS over TLS (socket_buffer.TlsSocket)
# The socket's receive buffer asked of the kernel: room for a few batches while the worker is between polls.
SOCKET_BUFFER_BYTES = 4 << 20
# A connection made again while the consumer polls (a fault's outage) waits this long at most for the server's
# INFO and PONG: the worker's poll is held that long, and a server that does not answer by then is tried again
# RECONNECT_WAIT_S later (the next one of a cluster's).
RECONNECT_TIMEOUT_S = 1.0
# Pull requests kept outstanding: the next one waits at the server while the one before is filled, so the server
# never waits for the consumer's next request (a round trip, and the worker's handling of a poll).
PULL_REQUESTS = 2
# ARRIVED_FIRST: a poll reads what the socket holds before it writes its acknowledgements (with their PING) and pull
# requests, unless the socket was read within socket_buffer.RECENT_READ_NS. The kernel stamps a read with its last
# segment's arrival, and a segment that comes while earlier ones wait unread is joined to them (TCP's receive
# coalescing takes the newer time): a delivery that waited 40 ms in the socket, read after the poll's PING was
# answered, was stamped with the PONG's arrival, 40 ms late; read first, 0.3 ms after its publish.
ACK_PREFIX, ACK_SUFFIX = b"PUB ", b" 0\r\n\r\n"  # an empty message to an acknowledgement subject
ACK_JOIN = ACK_SUFFIX + ACK_PREFIX
STATUS_LINE = b"NATS/1.0"
LENGTHS = [bytes((n,)) for n in range(256)]  # a body's first byte: the worker's header's length, made once
PENDING = b"Nats-Pending-Messages: "  # a status's header: what its pull request did not bring
EXPIRED, HEARTBEAT = b"408", b"100"  # a pull request ended unfilled; an idle heartbeat (asked for by no request here)


class ProtocolError(OSError):
    """The server answered outside the protocol, or with -ERR: the connection is given up (and made again)."""


def frame(header: bytes, payload: bytes) -> bytes:
    """A message's body: one byte with the header's length, the header, the payload (NATS headers are text, parsed
    per message: the worker's header travels in the body)."""
    return b"".join((LENGTHS[len(header)], header, payload))


def addresses(urls: list[str]) -> list[tuple[str, int, str | None, str | None, bool]]:
    """(host, port, user, password, tls) of each server URL (nats:// or tls://); another scheme is refused by name."""
    out = []
    for url in urls:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        if parts.scheme not in SCHEMES:
            raise BrokerUnavailable(f"endpoint.url: {url!r}: the NATS client speaks nats:// and tls:// (no "
                                    f"websocket)")
        out.append((parts.hostname or "127.0.0.1", parts.port or 4222, parts.username, parts.password,
                    parts.scheme == "tls"))
    return out


def status_of(headers: bytes) -> tuple[bytes, int | None] | None:
    """The status code of a message's header block (`NATS/1.0 408 Request Timeout\r\n...`) and, where it says
    so, how many messages its pull request still had to bring (Nats-Pending-Messages); None for a block without
    a status (a message published with headers of its own)."""
    line = headers[:headers.find(b"\r\n")]
    if len(line) <= len(STATUS_LINE):
        return None
    at = headers.find(PENDING)
    pending = int(headers[at + len(PENDING):headers.find(b"\r\n", at)]) if at >= 0 else None
    return line[len(STATUS_LINE) + 1:len(STATUS_LINE) + 4], pending


def parse(buffer: bytes, start: int) -> tuple[list, list, int]:
    """The complete protocol items of buffer from `start`: (deliveries, controls, where the first incomplete item
    begins). A delivery is (subject, reply or None, status or None, body); a control is the line of anything else
    (PING, PONG, +OK, -ERR ..., INFO ...)."""
    deliveries, controls = [], []
    append = deliveries.append
    find, size = buffer.find, len(buffer)
    at = start
    while True:
        eol = find(b"\r\n", at)
        if eol < 0:
            return deliveries, controls, at
        op = buffer[at:at + 4]
        if op == b"MSG ":
            args = buffer[at + 4:eol].split(b" ")
            end = eol + 2 + int(args[-1])
            if end + 2 > size:
                return deliveries, controls, at
            append((args[0], args[2] if len(args) == 4 else None, None, buffer[eol + 2:end]))
        elif op == b"HMSG":
            args = buffer[at + 5:eol].split(b" ")
            end = eol + 2 + int(args[-1])
            if end + 2 > size:
                return deliveries, controls, at
            body_at = eol + 2 + int(args[-2])
            append((args[0], args[2] if len(args) == 5 else None, status_of(buffer[eol + 2:body_at]),
                    buffer[body_at:end]))
        else:
            controls.append(buffer[at:eol])
            end = eol
        at = end + 2


class Connection(SocketBuffer):
    """One NATS client connection: the handshake, whole writes, and reads parsed in bulk."""

    def __init__(self, address: tuple, timeout_s: float) -> None:
        host, port, user, password, tls = address
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
            stamp_arrivals(self.sock)  # over TLS too: TlsSocket reads the ciphertext with the kernel's stamp
            self.buffer, self.at = b"", 0
            info = self._line(timeout_s)
            if not info.startswith(b"INFO "):
                raise ProtocolError(f"the server at {host}:{port} did not begin with INFO: {info[:100]!r}")
            self.info = json.loads(info[5:])
            if self.info.get("tls_required") and not tls:
                raise ProtocolError(f"the server at {host}:{port} requires TLS: its URL is tls://{host}:{port}")
            if tls:  # the server's INFO is plain; TLS begins after it, the CONNECT the first thing sent in it
                if not (self.info.get("tls_required") or self.info.get("tls_available")):
                    raise ProtocolError(f"the server at {host}:{port} does not speak TLS (its INFO offers none)")
                if self.at < len(self.buffer):
                    raise ProtocolError(f"the server at {host}:{port} sent more than its INFO before TLS")
                self.sock.settimeout(timeout_s)
                self.sock = TlsSocket(self.sock, host)
            if not self.info.get("headers"):
                raise ProtocolError(f"the server at {host}:{port} has no headers support (JetStream needs it)")
            options = {"verbose": False, "pedantic": False, "tls_required": tls, "lang": "python",
                       "version": "brokerbench", "protocol": 1, "headers": True, "no_responders": True,
                       **({"user": user, "pass": password} if user else {})}
            self.write(b"CONNECT %s\r\nPING\r\n" % json.dumps(options).encode())
            answer = self._line(timeout_s)
            if answer != b"PONG":
                raise ProtocolError(f"the server at {host}:{port} refused the connection: {answer[:200]!r}")
        except BaseException:
            self.sock.close()
            raise

    def _line(self, timeout_s: float) -> bytes:
        """The next control line (the handshake's), waiting up to timeout_s for it."""
        deadline = time.monotonic() + timeout_s
        while (eol := self.buffer.find(b"\r\n", self.at)) < 0:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer within {timeout_s} s")
            self.receive(left)
        line, self.at = self.buffer[self.at:eol], eol + 2
        return line

    def take(self) -> tuple[list, list]:
        """The deliveries and control lines complete in the buffer (see `parse`), taken off it."""
        deliveries, controls, self.at = parse(self.buffer, self.at)
        return deliveries, controls

    def request(self, subject: str, payload: bytes, inbox: bytes, timeout_s: float) -> bytes:
        """A request's one reply (the JetStream API's): SUB to an inbox, PUB, the reply's body. A status instead
        (503: no responders, JetStream not enabled) raises ProtocolError."""
        self.write(b"SUB %s 2\r\nUNSUB 2 1\r\nPUB %s %s %d\r\n%s\r\n"
                   % (inbox, subject.encode(), inbox, len(payload), payload))
        deadline = time.monotonic() + timeout_s
        while True:
            deliveries, controls = self.take()
            self.answer(controls)
            for where, _, status, body in deliveries:
                if where == inbox:
                    if status is not None:
                        raise ProtocolError(f"{subject}: status {status.decode()} (no JetStream responded)")
                    return body
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{subject}: no reply within {timeout_s} s")
            self.receive(left)

    def answer(self, controls: list) -> int:
        """PONG to each PING, -ERR raised; returns how many PONGs came."""
        pongs = 0
        for line in controls:
            if line == b"PING":
                self.write(b"PONG\r\n")
            elif line == b"PONG":
                pongs += 1
            elif line.startswith(b"-ERR"):
                raise ProtocolError(f"the server: {line.decode(errors='replace')}")
        return pongs


class WireConsumer:
    """A durable pull consumer for the lanes given (the driver's consumer: see the driver module's notes).

    PULL_REQUESTS pull requests of up to `batch` messages each are kept outstanding: as soon as a poll reads the last
    message of one (or its end, 408), another is asked for, before the poll returns, so the server sends on while
    the worker handles what came and never waits for the consumer's next request. A poll returns what one read of the
    socket held (at least one message, or nothing after timeout_s), and `arrived_ns`, when that read's data arrived
    (the kernel's receive time, socket_buffer.recv_stamped): the worker's stamp of their receipt. Each message is acknowledged (an empty
    PUB to its reply subject) at the next poll, at commit or at close: a delivery a lost connection took stays
    pending, and is delivered again after ack_wait."""

    stamps = ARRIVAL  # a socket of its own (TLS spoken over it for tls://): the kernel's receive time

    def __init__(self, urls: list[str], stream: str, durable: str, config: dict, lanes: dict[str, int],
                 batch: int, connect_timeout_s: float, admin_timeout_s: float, expires_s: float,
                 lost_s: float, reconnect_wait_s: float) -> None:
        self._addresses = addresses(urls)
        self._lane = {subject.encode(): lane for subject, lane in lanes.items()}
        self._batch = batch
        self._inbox = b"_INBOX.bb.%s" % os.urandom(12).hex().encode()
        request = json.dumps({"batch": batch, "expires": int(expires_s * 1e9)}).encode()
        self._ask = b"PUB $JS.API.CONSUMER.MSG.NEXT.%s.%s %s %d\r\n%s\r\n" % (
            stream.encode(), durable.encode(), self._inbox, len(request), request)
        self._overdue_s = expires_s + lost_s
        self._reconnect_wait_s = reconnect_wait_s
        self._replies: list[bytes] = []  # the reply subjects of the last poll's messages, not acknowledged yet
        self._unwritten = b""  # acknowledgements a lost connection did not take: written on the next one
        self._unconfirmed: deque[bytes] = deque()  # acknowledgement writes (each with a PING) awaiting their PONG
        self._owed = 0  # what the outstanding pull requests may still bring (0: none outstanding)
        self._asked_at = 0.0
        self._pinged = False  # a PING of ours is unanswered
        self._retry_at = 0.0
        self._conn: Connection | None = None
        self._server = 0  # the index of the server connected to (or last tried)
        refused = []
        for at, address in enumerate(self._addresses):
            try:
                self._conn, self._server = Connection(address, connect_timeout_s), at
                break
            except (OSError, ValueError) as exc:
                refused.append(f"{address[0]}:{address[1]}: {exc}")
        if self._conn is None:
            raise BrokerUnavailable(f"NATS at {','.join(urls)}: {'; '.join(refused)}")
        create = json.dumps({"stream_name": stream, "config": config}).encode()
        try:
            reply = json.loads(self._conn.request(f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{durable}", create,
                                                  self._inbox + b".create", admin_timeout_s))
            if "error" in reply:
                raise ProtocolError(reply["error"].get("description") or str(reply["error"]))
            self._subscribe()
        except (OSError, ValueError) as exc:
            self._conn.close()
            raise BrokerUnavailable(f"could not create consumer {durable} on stream {stream}: {exc}") from None

    def _subscribe(self) -> None:
        self._conn.write(b"SUB %s 1\r\n" % self._inbox)
        self._owed = 0  # the requests outstanding went with the connection
        self._top_up()

    def _top_up(self) -> None:
        """Pull requests asked until PULL_REQUESTS are outstanding (what they may still bring: `_owed`)."""
        missing = PULL_REQUESTS - -(-self._owed // self._batch)
        if missing > 0:
            self._owed += missing * self._batch
            self._asked_at = time.monotonic()
            self._conn.write(self._ask * missing)

    def _lost(self) -> None:
        self._unwritten = b"".join((*self._unconfirmed, self._unwritten))
        self._unconfirmed.clear()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._retry_at = 0.0  # the first attempt at once, to the next server

    def _reconnect(self) -> bool:
        """One attempt (at most one per reconnect_wait_s) on the next server in turn."""
        now = time.monotonic()
        if now < self._retry_at:
            return False
        self._retry_at = now + self._reconnect_wait_s
        self._server = (self._server + 1) % len(self._addresses)
        try:
            self._conn = Connection(self._addresses[self._server], RECONNECT_TIMEOUT_S)
            self._pinged = False
            self._subscribe()
            self._write_acknowledgements()
            return True
        except (OSError, ValueError):
            self._lost()
            self._retry_at = now + self._reconnect_wait_s
            return False

    def _acknowledge(self) -> None:
        """The last poll's messages acknowledged, in one write (with any a lost connection did not take)."""
        replies, self._replies = self._replies, []
        if replies:
            self._unwritten += b"".join((ACK_PREFIX, ACK_JOIN.join(replies), ACK_SUFFIX))
        if self._conn is not None:
            self._write_acknowledgements()

    def _write_acknowledgements(self) -> None:
        """What is to be acknowledged, written with a PING: kept until its PONG says the server read it."""
        if self._unwritten:
            written, self._unwritten = self._unwritten, b""
            self._unconfirmed.append(written)
            self._conn.write(written + b"PING\r\n")

    def _confirmed(self, pongs: int) -> None:
        """PONGs come in the order of the PINGs: each confirms the oldest write awaiting one."""
        for _ in range(min(pongs, len(self._unconfirmed))):
            self._unconfirmed.popleft()
        if pongs:
            self._pinged = False

    def poll(self, timeout_s: float) -> list[Message]:
        deadline = time.monotonic() + timeout_s
        try:
            if self._conn is None and not self._reconnect():
                time.sleep(max(0.0, min(deadline, self._retry_at) - time.monotonic()))
                return []
            conn = self._conn
            if not conn.read_lately():  # what came meanwhile, read before this poll writes (see ARRIVED_FIRST)
                conn.receive(0)
            self._acknowledge()
            if time.monotonic() - self._asked_at > self._overdue_s:  # none filled nor ended: lost, or no server
                if self._pinged:
                    raise ProtocolError("the server answered neither a pull request nor a PING")
                conn.write(b"PING\r\n")
                self._unconfirmed.append(b"")  # its PONG confirms nothing written
                self._pinged = True
                self._owed = 0
            self._top_up()
            while True:
                out = self._take(conn)
                if out:
                    self.arrived_ns = conn.arrived_at
                    return out
                if not conn.receive(deadline - time.monotonic()):
                    return out
        except OSError:
            self._lost()
            return []

    def _take(self, conn: Connection) -> list[Message]:
        deliveries, controls = conn.take()
        if controls:
            self._confirmed(conn.answer(controls))
        if not deliveries:
            return []
        lane, replies = self._lane, self._replies
        out: list[Message] = []
        owed, refused = self._owed, False
        for where, reply, status, body in deliveries:
            if status is None:
                if reply is None:
                    continue  # not a JetStream delivery (nothing else is sent to the inbox)
                replies.append(reply)
                end = body[0] + 1
                out.append((body[1:end], body[end:], lane[where]))
            elif status[0] != HEARTBEAT:  # a request ended (408: expired) with what it did not bring
                owed = owed - status[1] if status[1] is not None else 0
                refused = refused or status[0] != EXPIRED  # 409: asked again at the next poll, not at once
        self._owed = max(0, owed - len(out))
        if not refused:
            self._top_up()  # at once: the server sends on while the worker handles this poll's messages
        self._pinged = False  # the server answers
        return out

    def hold(self, on: bool) -> None:
        """Nothing to stop: messages come only for a pull request."""

    def commit(self) -> None:
        """Acknowledge what was received, for the broker-side backlog."""
        try:
            self._acknowledge()
        except OSError:
            self._lost()

    def close(self) -> None:
        """What was received acknowledged, and waited for (up to 5 s) until the server says it read it all."""
        try:
            self._acknowledge()
            deadline = time.monotonic() + 5
            while self._conn is not None and self._unconfirmed and time.monotonic() < deadline:
                _, controls = self._conn.take()
                self._confirmed(self._conn.answer(controls))
                if self._unconfirmed:
                    self._conn.receive(deadline - time.monotonic())
        except OSError:
            pass  # the server is gone: what was not acknowledged stays pending on the consumer
        finally:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class WireProducer:
    """The Python send loop's JetStream publisher, on a NATS connection it speaks itself (as the consumer does): each
    message a PUB to its lane's subject with a reply subject of its own (`<inbox>.<n>`), the PubAck read from the
    same socket and stamped when it arrived (the kernel's receive time, socket_buffer.recv_stamped), on the worker's
    thread. nats-py published from an event loop on a
    thread of its own and stamped in a callback that waited for that loop and the GIL: its publish p50 read 387 µs
    above the native loop's on the same server (docs/performance.md, bench/stamp_lag.py).

    What it keeps of the driver's promises: send/poll/flush/close; `on_ack(header, ok, at_ns)` on the worker's thread,
    with the read's time; a PubAck is `ok`, an `{"error": ...}` reply or a status (503 no responders) a failed send;
    up to `window` publishes awaiting their PubAck (a full window makes the next send wait); a publish unanswered
    after `ack_timeout_s` is no longer waited for (unacknowledged). A connection lost (an error, the server closing
    it, -ERR) is made again to the next server of the endpoint's list, at once and then every `reconnect_wait_s`;
    what was written on it stays awaited (a PubAck the server still sends to the inbox is taken on the new
    connection), and what is sent meanwhile is kept (up to `buffer_bytes`, past that a send fails at once) and
    written once connected, as nats-py's reconnect buffer did."""

    stamps = ARRIVAL  # a socket of its own (TLS spoken over it for tls://): the kernel's receive time

    def __init__(self, urls: list[str], subjects: list[str], window: int, on_ack, connect_timeout_s: float,
                 reconnect_wait_s: float, ack_timeout_s: float, buffer_bytes: int) -> None:
        self._addresses = addresses(urls)
        self._inbox = b"_INBOX.bb.%s" % os.urandom(12).hex().encode()
        self._prefixes = [b"PUB %s %s." % (subject.encode(), self._inbox) for subject in subjects]
        self._reply_from = len(self._inbox) + 1  # a reply's subject: <inbox>.<token>
        self._window = window
        self._on_ack = on_ack
        self._reconnect_wait_s = reconnect_wait_s
        self._ack_timeout_s = ack_timeout_s
        self._buffer_bytes = buffer_bytes
        self._in_flight: dict[bytes, tuple[bytes, float]] = {}  # token -> (header, monotonic s sent), oldest first
        self._token = 0
        self._unwritten: list[bytes] = []  # publishes made while disconnected, written on the next connection
        self._unwritten_bytes = 0
        self._next_expiry = 0.0
        self._retry_at = 0.0
        self._conn: Connection | None = None
        self._server = -1  # the index of the server connected to (or last tried); the first attempt takes [0]
        refused = []
        for _ in self._addresses:
            if self._connect(connect_timeout_s, refused):
                return
        raise BrokerUnavailable(f"NATS at {','.join(urls)}: {'; '.join(refused)}")

    def _connect(self, timeout_s: float, refused: list | None = None) -> bool:
        """One attempt on the next server in turn: the handshake, the inbox subscribed, what waits written."""
        self._server = (self._server + 1) % len(self._addresses)
        address = self._addresses[self._server]
        try:
            conn = Connection(address, timeout_s)
        except (OSError, ValueError) as exc:
            if refused is not None:
                refused.append(f"{address[0]}:{address[1]}: {exc}")
            return False
        try:
            conn.write(b"".join((b"SUB %s.* 1\r\n" % self._inbox, *self._unwritten)))
        except OSError:
            conn.close()
            return False
        self._conn = conn
        self._unwritten, self._unwritten_bytes = [], 0
        return True

    def _lost(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._retry_at = 0.0  # the first attempt at once, to the next server

    def _again(self) -> bool:
        """Connected, or one attempt made when one is due: whether it is connected now."""
        if self._conn is not None:
            return True
        now = time.monotonic()
        if now < self._retry_at:
            return False
        self._retry_at = now + self._reconnect_wait_s
        return self._connect(RECONNECT_TIMEOUT_S)

    def _read(self, timeout_s: float) -> bool:
        """What the socket holds (waiting up to timeout_s for something): each reply stamped when it arrived
        (socket_buffer.recv_stamped). False when nothing came."""
        conn = self._conn
        try:
            if not conn.receive(timeout_s):
                return False
        except OSError:
            self._lost()
            return False
        at = conn.arrived_at
        deliveries, controls = conn.take()
        in_flight, start, on_ack = self._in_flight, self._reply_from, self._on_ack
        for where, _, status, body in deliveries:
            sent = in_flight.pop(where[start:], None)
            if sent is not None:  # else: no longer awaited (expired)
                on_ack(sent[0], status is None and body[:1] == b"{" and b'"error"' not in body, at)
        if controls:
            try:
                conn.answer(controls)  # PONG to the server's PING; -ERR raises: the connection is given up
            except OSError:
                self._lost()
        return True

    def _expire(self) -> None:
        """PubAcks awaited longer than ack_timeout_s are no longer waited for (checked every half second). What the
        socket already holds is taken first: a PubAck that came while the worker was elsewhere is not one the
        server failed to give. (Expired before the read, the readiness probe's PubAck, sent before the cell spawned
        its processes and read once they had started, was dropped when the spawn took over 5 s on a loaded host:
        the cell failed "0 of 1", and a fault test's kill meant for it hit the next cell.)"""
        now = time.monotonic()
        if now < self._next_expiry:
            return
        self._next_expiry = now + 0.5
        limit, in_flight = now - self._ack_timeout_s, self._in_flight
        while in_flight and in_flight[next(iter(in_flight))][1] < limit and self._conn is not None and self._read(0):
            pass
        while in_flight:
            oldest = next(iter(in_flight))
            if in_flight[oldest][1] >= limit:
                break
            del in_flight[oldest]

    def _serve(self, timeout_s: float) -> None:
        """Replies taken, waiting up to timeout_s for the first read; while disconnected, an attempt when due."""
        self._expire()
        if self._again():
            self._read(timeout_s)
        elif timeout_s > 0:
            time.sleep(max(0.0, min(timeout_s, self._retry_at - time.monotonic())))

    def send(self, header: bytes, payload: bytes, partition: int) -> None:
        while len(self._in_flight) >= self._window:  # the window is full: take PubAcks until it has room
            self._serve(0.5)
        if self._again() and not self._conn.read_lately():
            self._read(0)  # what came meanwhile, and a connection the server closed found before writing on it
        self._token += 1
        token = b"%d" % self._token
        data = b"".join((self._prefixes[partition], token, b" %d\r\n" % (len(header) + 1 + len(payload)),
                         LENGTHS[len(header)], header, payload, b"\r\n"))  # the body as `frame` makes it
        if not self._write(data):
            if self._unwritten_bytes + len(data) > self._buffer_bytes:
                self._on_ack(header, False, time.monotonic_ns())  # disconnected, and its buffer is full: never sent
                return
            self._unwritten.append(data)
            self._unwritten_bytes += len(data)
        self._in_flight[token] = (header, time.monotonic())

    def _write(self, data: bytes) -> bool:
        """Written on the connection; False when there is none, or it was lost before taking all of it (the server
        never read it whole: the next connection writes it)."""
        if self._conn is None:
            return False
        try:
            self._conn.write(data)
            return True
        except OSError:
            self._lost()
            return False

    def poll(self, timeout_s: float) -> None:
        self._serve(timeout_s)

    def flush(self, timeout_s: float) -> int:
        """Wait up to timeout_s for the PubAcks of everything sent; returns how many are still awaited."""
        deadline = time.monotonic() + timeout_s
        self._serve(0)
        while self._in_flight and (left := deadline - time.monotonic()) > 0:
            self._serve(min(left, self._ack_timeout_s))
        return len(self._in_flight)

    def close(self) -> None:
        self.flush(5)
        if self._conn is not None:
            self._conn.close()
            self._conn = None
