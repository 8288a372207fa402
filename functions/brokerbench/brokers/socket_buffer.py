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
    was lost), `_connection`, and `_read(timeout_s)`, which takes the answers one read brought; `_hand_over` writes
    what was kept back (nothing by default)."""

    _broken = False
    _in_flight: dict
    _connection: SocketBuffer

    def _hand_over(self) -> None:
        """Write what sends kept back; publishes written as they are made keep nothing."""

    def _read(self, timeout_s: float) -> bool:
        raise NotImplementedError

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
