"""TLS spoken over a driver's own socket (socket_buffer.TlsSocket): a local TLS server on 127.0.0.1 with a certificate
made for the test (trustme) answers; what it writes arrives whole (a reply, and one of many records), the server's
certificate is checked against the name asked for, and a reply left LATE_NS in the socket is stamped when it arrived
(the kernel's receive time of the ciphertext's read), not when the read returned. The real brokers' side:
tests/integration/test_tls.py (Redis's TLS port)."""

from __future__ import annotations

import socket
import ssl
import threading
import time

import pytest
import trustme

from brokerbench.brokers.socket_buffer import SocketBuffer, TlsSocket, recv_stamped, socket_stamps, stamp_arrivals
from kernel_stamps import stamps_on

MS = 1_000_000
LATE_NS = 40 * MS
SLACK_NS = 10 * MS


@pytest.fixture(autouse=True, scope="module")
def stamping():
    with stamps_on():
        yield


@pytest.fixture(scope="module")
def authority():
    return trustme.CA()


class Server:
    """One TLS connection accepted on 127.0.0.1 (certificate for "broker.test"); `conn` once the handshake is done."""

    def __init__(self, authority: trustme.CA) -> None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        authority.issue_cert("broker.test").configure_cert(context)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.context = context
        self.conn: ssl.SSLSocket | None = None
        self.error: BaseException | None = None
        self.ready = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        raw, _ = self.listener.accept()
        # as a broker's: without it Nagle held a reply written after the session tickets for the client's delayed ACK
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.conn = self.context.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError) as exc:
            self.error = exc
            raw.close()
        self.ready.set()

    def connect(self, authority: trustme.CA, hostname: str = "broker.test") -> TlsSocket:
        sock = socket.create_connection(self.listener.getsockname(), timeout=5)
        stamp_arrivals(sock)
        context = ssl.create_default_context()
        authority.configure_trust(context)
        try:
            return TlsSocket(sock, hostname, context)
        except BaseException:
            sock.close()
            raise

    def close(self) -> None:
        self.ready.wait(5)
        if self.conn is not None:
            self.conn.close()
        self.listener.close()


@pytest.fixture
def server(authority):
    made = Server(authority)
    yield made
    made.close()


def test_a_reply_over_tls_is_stamped_when_it_arrived_not_when_read(server, authority):
    client = server.connect(authority)
    assert server.ready.wait(5) and server.error is None
    assert socket_stamps(client) == "arrival"
    for n in range(3):
        client.sendall(b"PING %d\r\n" % n)
        assert server.conn.recv(100) == b"PING %d\r\n" % n
        written = time.monotonic_ns()
        server.conn.sendall(b"+PONG %d\r\n" % n)
        time.sleep(LATE_NS / 1e9)
        client.settimeout(5)
        data, arrived, returned = recv_stamped(client, 1 << 16)
        assert data == b"+PONG %d\r\n" % n
        assert 0 <= arrived - written < SLACK_NS, f"stamped {(arrived - written) / MS:.1f} ms after the write"
        assert returned - written >= LATE_NS  # the read's own return came later
    client.close()


def test_many_records_arrive_whole_through_a_socket_buffer(server, authority):
    """A socket buffer's reads over TLS (as RabbitMQ's and Pulsar's connections read): 300 KB written at once (many
    TLS records) comes whole, with nothing left decrypted and unread for a select to miss."""

    class Buffered(SocketBuffer):
        def __init__(self, sock) -> None:
            self.sock = sock

    client = Buffered(server.connect(authority))
    assert server.ready.wait(5)
    sent = bytes(range(256)) * 1200
    server.conn.sendall(sent)
    got = b""
    while len(got) < len(sent):
        assert client.receive(5)
        got, client.buffer = got + client.buffer, b""
        assert client.sock.pending() == 0
    assert got == sent
    assert not client.receive(0.05)  # nothing more: a timeout, not an error
    server.conn.close()
    server.conn = None
    with pytest.raises(ConnectionResetError):  # the server closed: as a plain socket's reader sees it
        client.receive(5)
    client.close()


def test_the_servers_certificate_is_checked_against_the_name_asked_for(server, authority):
    with pytest.raises(ssl.SSLCertVerificationError):
        server.connect(authority, hostname="other.test")
