"""A blocking socket read into a buffer, for the drivers that speak their broker's protocol themselves (NATS's
consumer and producer, RabbitMQ's quorum-queue and stream producers), and what their producers that keep a window of
confirms share. Each read takes what the socket holds, up to RECV_BYTES, waiting up to a timeout for the first byte.

A read's replies are stamped when they arrived, not when the loop came to read them: on a plain socket the kernel
stamps what it receives (SO_TIMESTAMPNS), and the read returns the time its last segment came (`recv_stamped`). The
loop reads late whenever it is busy sending, waking from its wait or waiting for the GIL; the kernel's stamp is the
same however late. ssl.SSLSocket cannot return it (it has no recvmsg), so TLS is spoken over the plain socket through
memory buffers (`TlsSocket`: the ciphertext read with the kernel's stamp, then decrypted), and its replies are stamped
at arrival as well. A socket that is an ssl.SSLSocket all the same keeps the read's return as its stamp (READ)."""

from __future__ import annotations

import socket
import ssl
import struct
import time

from ..figures import ARRIVAL, READ

# One recv takes up to this much of what the socket holds: about a thousand 1 KB messages.
RECV_BYTES = 1 << 20
# A producer's send reads the socket first (what came meanwhile, and a connection the peer closed, found before writing
# on it) unless it was read this recently: a loop on schedule waits on it until just before each send, and one that
# sends back to back reads it at its polls. A read before every send cost the NATS producer's publish p50 some 15 µs
# (a system call and an exception, on a path the loop comes to cold after its wait).
RECENT_READ_NS = 1_000_000
# A Python loop's producer joins sends closer together than this into one write at the loop's next poll (or a full
# window), and writes one after a longer pause at once. Left to the poll, a send on schedule waited for the loop's own
# steps back to its wait: RabbitMQ streams' Python − native publish p50 at 100 msgs/s read +95 µs, +20 written at
# once (bench/stamp_lag.py, 5 trials each).
JOIN_WITHIN_NS = 50_000
# A write the peer does not take within this long (its socket's buffers full: it stopped reading) gives the
# connection up.
WRITE_TIMEOUT_S = 5.0
# The kernel's receive time of a socket's data (linux/asm-generic/socket.h; Python's socket module does not name it):
# a control message with the CLOCK_REALTIME struct timespec of the last segment a read returned.
SO_TIMESTAMPNS = 35
# A stamp further back than this is not taken: a kernel whose loopback passed on the sender's own (monotonic) departure
# time in place of a receive time would put it decades back.
STAMP_AGE_MAX_NS = 60_000_000_000
# The offset between the two clocks is read as a real-time reading between two monotonic ones; the arrival, moved by
# it, errs late by at most their gap, never early. A gap wider than CLOCK_PAIR_NS (the thread preempted between them,
# on a busy host for milliseconds) is read again, up to CLOCK_PAIR_TRIES times, and the closest pair is used (the
# last of 3 tries, as before, once erred 90 µs late in a loaded CI run: test_nats's delivery read late).
CLOCK_PAIR_NS = 20_000
CLOCK_PAIR_TRIES = 5
STAMP = struct.Struct("qq")
STAMP_SPACE = socket.CMSG_SPACE(STAMP.size)


def stamp_arrivals(sock: socket.socket) -> None:
    """Ask the kernel to stamp what `sock` receives (read back with `recv_stamped`). Where the system has no such
    option the reads keep their own return as the stamp."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        pass


class TlsSocket:
    """TLS spoken over a plain socket through memory buffers (ssl.MemoryBIO), the part of a socket's interface the
    drivers use (sendall, recv, settimeout, fileno for select, pending, close): what comes is read from the plain
    socket with the kernel's stamp (recv_stamped) and decrypted, so a reply over TLS is stamped when its last segment
    arrived, as on a plain socket. The handshake is made at once (within the socket's timeout), the server's
    certificate checked against `hostname` by `context` (ssl.create_default_context() unless given)."""

    def __init__(self, sock: socket.socket, hostname: str, context: ssl.SSLContext | None = None) -> None:
        self.raw = sock
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = (context or ssl.create_default_context()).wrap_bio(self._incoming, self._outgoing,
                                                                      server_hostname=hostname)
        self._arrived = 0  # the kernel's stamp of the read that brought the ciphertext last written to _incoming
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                data = sock.recv(RECV_BYTES)
                if not data:
                    raise ConnectionResetError("the server closed the connection during the TLS handshake")
                self._incoming.write(data)
        self._flush()

    def _flush(self) -> None:
        out = self._outgoing.read()
        if out:
            self.raw.sendall(out)

    def sendall(self, data: bytes) -> None:
        self.tls.write(data)
        self._flush()

    def recv_stamped(self, size: int) -> tuple[bytes, int, int]:
        """recv_stamped's, over TLS: everything decrypted from what has come (at least one byte, reading the plain
        socket, within its timeout, until a whole record came; b"" once the server closed), stamped with the kernel's
        receive time of the read that brought its last ciphertext (late by the segments after it, never early)."""
        while True:
            out = []
            try:
                while chunk := self.tls.read(RECV_BYTES):  # every whole record: none is left behind for select
                    out.append(chunk)
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):  # no whole record left; or the server closed TLS
                pass
            if out:
                return b"".join(out), self._arrived, time.monotonic_ns()
            data, arrived, returned = recv_stamped(self.raw, max(size, RECV_BYTES))
            if not data:
                return b"", returned, returned
            self._incoming.write(data)
            self._arrived = arrived
            self._flush()  # what reading wrote (a key update's answer)

    def recv(self, size: int) -> bytes:
        return self.recv_stamped(size)[0]

    def pending(self) -> int:
        """Decrypted bytes waiting to be read (none after a read: it takes every whole record)."""
        return self.tls.pending()

    def settimeout(self, timeout_s: float | None) -> None:
        self.raw.settimeout(timeout_s)

    def fileno(self) -> int:
        return self.raw.fileno()

    def close(self) -> None:
        self.raw.close()


def socket_stamps(sock: socket.socket) -> str:
    """How `recv_stamped` stamps what `sock` brings (figures.ARRIVAL, a TlsSocket's too, or READ: an
    ssl.SSLSocket)."""
    return READ if isinstance(sock, ssl.SSLSocket) else ARRIVAL


def recv_stamped(sock: socket.socket, size: int) -> tuple[bytes, int, int]:
    """One read of up to `size` bytes: (what it brought, when it arrived, when the read returned), both monotonic ns
    (the clock of time.monotonic_ns). The arrival is the kernel's stamp of the read's last segment, moved to the
    monotonic clock by the offset between the clocks read right after it (CLOCK_PAIR_NS: it errs late by at most the
    gap between two monotonic readings around the real-time one, never early), and never later than the read's
    return. Without a usable stamp (a TLS socket, the option not set, data that came before it was, one older than
    STAMP_AGE_MAX_NS) it is the return. A TlsSocket's is the kernel's stamp of the ciphertext's read (see there)."""
    if isinstance(sock, TlsSocket):
        return sock.recv_stamped(size)
    if isinstance(sock, ssl.SSLSocket):
        data = sock.recv(size)
        returned = time.monotonic_ns()
        return data, returned, returned
    data, controls, _, _ = sock.recvmsg(size, STAMP_SPACE)
    returned = before = time.monotonic_ns()
    for level, kind, value in controls:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= STAMP.size:
            best = None
            for _ in range(CLOCK_PAIR_TRIES):  # the real-time clock read between two monotonic readings close together
                real = time.time_ns()
                after = time.monotonic_ns()
                if best is None or after - before < best[2]:
                    best = (real, after, after - before)  # the closest pair read: the smallest error
                if after - before <= CLOCK_PAIR_NS:
                    break
                before = after
            real, after, _ = best
            seconds, nanoseconds = STAMP.unpack_from(value)
            age = real - (seconds * 1_000_000_000 + nanoseconds)
            if age <= STAMP_AGE_MAX_NS:
                return data, min(returned, after - max(0, age)), returned
    return data, returned, returned


class SocketBuffer:
    """`sock` (set by the subclass, which calls `stamp_arrivals` on it) and what it brought: `buffer`, parsed from
    `at` on; `arrived_at`, the monotonic ns when what the last read brought arrived (the stamp of its replies: see
    `recv_stamped`); `read_at`, when that read returned (how recently the loop read the socket)."""

    PEER = "the server"  # who closed the connection, in its error
    sock: socket.socket
    buffer: bytes = b""
    at: int = 0
    arrived_at: int = 0
    read_at: int = 0

    @property
    def stamps(self) -> str:
        """How this connection's reads are stamped (socket_stamps)."""
        return socket_stamps(self.sock)

    def write(self, data: bytes) -> None:
        """All of `data`, or OSError (socket.timeout after WRITE_TIMEOUT_S: the peer stopped reading)."""
        self.sock.settimeout(WRITE_TIMEOUT_S)
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()

    def read_lately(self) -> bool:
        """Whether the socket was read within RECENT_READ_NS (see there)."""
        return time.monotonic_ns() - self.read_at <= RECENT_READ_NS

    def receive(self, timeout_s: float) -> bool:
        """Add what the socket holds (waiting up to timeout_s for something) to the buffer; False when nothing
        came in time. The peer closing the connection, or an error on it, raises OSError."""
        self.sock.settimeout(max(0.0, timeout_s))
        try:
            data, self.arrived_at, self.read_at = recv_stamped(self.sock, RECV_BYTES)
        except (socket.timeout, BlockingIOError, ssl.SSLWantReadError):
            self.read_at = time.monotonic_ns()
            return False
        if not data:
            raise ConnectionResetError(f"{self.PEER} closed the connection")
        self.buffer = self.buffer[self.at:] + data if self.at < len(self.buffer) else data
        self.at = 0
        return True


class ConfirmedProducer:
    """What the producers that speak their broker's protocol themselves and keep a window of publishes awaiting a
    confirm share (RabbitMQ's quorum-queue and stream producers): `_in_flight` (awaiting), `_broken` (the connection
    was lost), `_connection`, and `_read(timeout_s)`, which takes the answers one read brought (each subclass parses
    them, `_take`, and serves them, `_answered`); `_hand_over` writes what was kept back (nothing by default)."""

    _broken = False
    _in_flight: dict
    _connection: SocketBuffer

    def _hand_over(self) -> None:
        """Write what sends kept back; publishes written as they are made keep nothing."""

    def _take(self) -> tuple[list, object]:
        """What the read brought, parsed: the answers, and what ended the connection or channel (None when nothing
        did). OSError where what came cannot be read."""
        raise NotImplementedError

    def _answered(self, answers: list, at: int) -> None:
        """Serve the answers of one read, each stamped `at` (when what the read brought arrived)."""
        raise NotImplementedError

    def _lost(self) -> None:
        """The connection is given up: what is in flight is no longer waited for."""
        raise NotImplementedError

    def _read(self, timeout_s: float) -> bool:
        """The answers one read of the socket brought (waiting up to timeout_s for it), stamped when they arrived;
        False when nothing came. A connection lost, or ended by the broker, is given up (`_lost`)."""
        connection = self._connection
        try:
            if not connection.receive(timeout_s):
                return False
            at = connection.arrived_at
            answers, ended = self._take()
        except OSError:
            self._lost()
            return True
        self._answered(answers, at)
        if ended is not None:
            self._lost()
        return True

    def poll(self, timeout_s: float) -> None:
        """Write what is kept back and serve the confirms: waiting up to timeout_s on the socket for the first read."""
        self._hand_over()
        if self._broken:
            time.sleep(max(0.0, timeout_s))
        else:
            self._read(max(0.0, timeout_s))

    def flush(self, timeout_s: float) -> int:
        """Wait up to timeout_s for every confirm; returns the messages still unconfirmed."""
        deadline = time.monotonic() + timeout_s
        self._hand_over()
        while self._in_flight and not self._broken and (left := deadline - time.monotonic()) > 0:
            self._read(left)
        return len(self._in_flight)

    def close(self) -> None:
        self.flush(5)
        if not self._broken:
            self._connection.close()
