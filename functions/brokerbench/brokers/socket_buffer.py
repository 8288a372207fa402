"""A blocking socket read into a buffer, for the drivers that speak their broker's protocol themselves (NATS's
consumer and producer, RabbitMQ's quorum-queue and stream producers), and what their producers that keep a window of
confirms share. Each read takes what the socket holds, up to
RECV_BYTES, waiting up to a timeout for the first byte, so that a reply is parsed (and stamped) as the read that
brought it returns."""

from __future__ import annotations

import socket
import ssl
import time

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


class SocketBuffer:
    """`sock` (set by the subclass) and what it brought: `buffer`, parsed from `at` on; `read_at`, the monotonic ns
    when the last read returned (what it brought arrived by then: the stamp of its replies)."""

    PEER = "the server"  # who closed the connection, in its error
    sock: socket.socket
    buffer: bytes = b""
    at: int = 0
    read_at: int = 0

    def read_lately(self) -> bool:
        """Whether the socket was read within RECENT_READ_NS (see there)."""
        return time.monotonic_ns() - self.read_at <= RECENT_READ_NS

    def receive(self, timeout_s: float) -> bool:
        """Add what the socket holds (waiting up to timeout_s for something) to the buffer; False when nothing
        came in time. The peer closing the connection, or an error on it, raises OSError."""
        self.sock.settimeout(max(0.0, timeout_s))
        try:
            data = self.sock.recv(RECV_BYTES)
        except (socket.timeout, BlockingIOError, ssl.SSLWantReadError):
            self.read_at = time.monotonic_ns()
            return False
        self.read_at = time.monotonic_ns()
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
        """Serve the answers of one read, each stamped `at` (when the read returned)."""
        raise NotImplementedError

    def _lost(self) -> None:
        """The connection is given up: what is in flight is no longer waited for."""
        raise NotImplementedError

    def _read(self, timeout_s: float) -> bool:
        """The answers one read of the socket brought (waiting up to timeout_s for it), stamped as it returned;
        False when nothing came. A connection lost, or ended by the broker, is given up (`_lost`)."""
        connection = self._connection
        try:
            if not connection.receive(timeout_s):
                return False
            at = connection.read_at
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
