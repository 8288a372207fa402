"""A reply is stamped when it arrived, however late the loop reads it: a local TCP connection (127.0.0.1), a reply
written, then LATE_NS without a read, then the read. The stamp must be within SLACK_NS after the write (the kernel's
receive time, socket_buffer.recv_stamped), not LATE_NS after it (the read's return, as the loops stamped before);
and never before the write. The Python loop's reads (SocketBuffer, the Redis producer's) and the native loop's
(a Redis sender whose reply is read at its flush, after the schedule ended) are each checked, and the Redis
consumer's deliveries too."""

from __future__ import annotations

import socket
import time

import hiredis
import numpy as np
import pytest

from brokerbench import native
from brokerbench.brokers.redis_streams.driver import RedisStreamsConsumer, RedisStreamsProducer, RespConnection
from brokerbench.brokers.socket_buffer import SocketBuffer, recv_stamped, stamp_arrivals
from brokerbench.worker.framing import HEADER
from kernel_stamps import stamps_on
from test_reply_stamps import SlowRedis

MS = 1_000_000
LATE_NS = 40 * MS  # how long the reply waits in the socket before it is read
SLACK_NS = 10 * MS  # a stamp this much after the write is the read's, not the arrival's


@pytest.fixture(autouse=True, scope="module")
def stamping():
    """The host's stamping kept on (tests/kernel_stamps.py: it is switched on by a deferred kernel work item)."""
    with stamps_on():
        yield


@pytest.fixture
def pair():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname(), timeout=5)
        server, _ = listener.accept()
    yield client, server
    client.close()
    server.close()


class Buffered(SocketBuffer):
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        stamp_arrivals(sock)


def test_socket_buffer_stamps_a_reply_when_it_arrived_not_when_read(pair):
    client, server = pair
    connection = Buffered(client)
    for _ in range(3):
        written = time.monotonic_ns()
        server.sendall(b"+OK\r\n")
        time.sleep(LATE_NS / 1e9)
        assert connection.receive(5)
        assert connection.buffer[connection.at:].endswith(b"+OK\r\n")
        assert 0 <= connection.arrived_at - written < SLACK_NS, \
            f"stamped {(connection.arrived_at - written) / MS:.1f} ms after the write"
        assert connection.read_at - written >= LATE_NS  # the read's own return: what read_lately() goes by
        assert not connection.read_lately() or time.monotonic_ns() - connection.read_at <= 1_000_000


def test_without_the_option_the_stamp_is_the_read(pair):
    client, server = pair
    written = time.monotonic_ns()
    server.sendall(b"x")
    time.sleep(LATE_NS / 1e9)
    data, arrived, returned = recv_stamped(client, 100)
    assert data == b"x" and arrived == returned and returned - written >= LATE_NS


def test_a_tls_socket_keeps_the_read_as_its_stamp(pair, monkeypatch):
    """ssl.SSLSocket has no recvmsg: its reads are stamped as they return (the path is taken by type)."""
    import ssl

    client, server = pair

    class Plain(ssl.SSLSocket):
        def __init__(self, sock):  # no handshake: only the type and recv matter here
            self._sock = sock

        def recv(self, size):
            return self._sock.recv(size)

    stamp_arrivals(client)
    server.sendall(b"x")
    time.sleep(LATE_NS / 1e9)
    before = time.monotonic_ns()
    data, arrived, returned = recv_stamped(Plain(client), 100)
    assert data == b"x" and arrived == returned >= before


def test_redis_python_producer_stamps_the_arrival():
    peer = SlowRedis(0)  # answers at once
    acks: list[int] = []
    producer = RedisStreamsProducer(RespConnection("127.0.0.1", peer.port, False, None), ["s-0"], 100,
                                    lambda header, ok, at: acks.append(at))
    for seq in range(3):
        time.sleep(0.01)
        producer.send(HEADER.pack(1, seq, time.monotonic_ns()), b"x" * 100, 0)  # written at once: after a pause
        time.sleep(LATE_NS / 1e9)  # the reply waits in the socket
        producer.poll(1)
    assert producer.flush(5) == 0
    producer.close()
    peer.close()
    late = np.array(acks) - np.array([peer.written_ns[seq] for seq in range(3)])
    assert len(acks) == 3 and (late >= 0).all() and (late < SLACK_NS).all(), late / MS


def test_native_loop_stamps_a_reply_read_late_when_it_arrived():
    """The schedule's first message is sent at base and the loop returns at a boundary 3 ms later (its wait wrote
    the message), before the reply comes (the peer answers 10 ms after it read the XADD); the reply is read at the
    flush, LATE_NS later."""
    peer = SlowRedis(10 * MS)
    sender = native.redis_sender("127.0.0.1", peer.port, None, [b"s-0"], 100, 5.0)
    base = time.monotonic_ns() + 2 * MS
    sender.configure([b"x" * 100], None, 1, base, float(10**9), np.array([0, 500 * MS], np.int64).tobytes())
    seq, why = sender.send_until(0, 1 << 62, base + 3 * MS, base + 10**9)
    time.sleep(LATE_NS / 1e9)
    assert sender.flush(5) == 0
    _, _, acked_seq, acked_ns, failed = sender.take()
    sender.close()
    peer.close()
    assert (seq, why) == (1, 0) and failed == b"" and np.frombuffer(acked_seq, np.int64).tolist() == [0]
    late = int(np.frombuffer(acked_ns, np.int64)[0]) - peer.written_ns[0]
    assert 0 <= late < SLACK_NS, f"stamped {late / MS:.1f} ms after the write"


def test_pulsar_wire_producer_stamps_a_receipt_when_it_arrived(pair):
    """The Python loop's Pulsar producer (pulsar/wire.py) on a plain TCP connection made as its Connection makes
    it: a receipt written, left LATE_NS in the socket, then served at the producer's flush."""
    from brokerbench.brokers.pulsar import wire

    client, server = pair
    connection = object.__new__(wire.Connection)
    connection.sock, connection.address, connection.buffer, connection.at = client, "pair", b"", 0
    connection.names = [b"standalone-0-0"]
    stamp_arrivals(client)
    acks: list[tuple] = []
    producer = wire.WireProducer(connection, {"batching_enabled": False, "max_pending_messages": 10}, True,
                                 lambda *a: acks.append(a))
    producer.send(bytes(20), b"one", 0)
    server.settimeout(5)
    assert server.recv(1 << 16)  # the SEND
    written = time.monotonic_ns()
    server.sendall(wire.command(wire.SEND_RECEIPT, wire.pb_uint(1, 0) + wire.pb_uint(2, 0)
                                + wire.pb_bytes(3, wire.pb_uint(1, 5) + wire.pb_uint(2, 0)) + wire.pb_uint(4, 0)))
    time.sleep(LATE_NS / 1e9)
    assert producer.flush(5) == 0
    [(header, ok, at)] = acks
    assert ok and 0 <= at - written < SLACK_NS, f"stamped {(at - written) / MS:.1f} ms after the write"


def test_redis_consumer_stamps_a_read_when_its_entries_arrived(pair):
    """The Redis consumer's connection (a RespConnection on a plain socket): a reply of two entries written, left
    LATE_NS in the socket, then read by the next poll. Its entries carry the arrival, and the poll's XREADGROUP went
    out as the consumer group's read of both keys."""
    client, server = pair
    connection = object.__new__(RespConnection)
    connection.sock, connection.reader = client, hiredis.Reader()
    stamp_arrivals(client)
    consumer = RedisStreamsConsumer(lambda: connection, ["s-0", "s-1"], "g", 10)
    assert consumer.stamps == "arrival"
    headers = [HEADER.pack(1, seq, 0) for seq in range(2)]
    entry = [b"*2\r\n$3\r\n%d-0\r\n*4\r\n$1\r\nh\r\n$%d\r\n%s\r\n$1\r\nd\r\n$3\r\nabc\r\n"
             % (seq, len(header), header) for seq, header in enumerate(headers)]
    written = time.monotonic_ns()
    server.sendall(b"*1\r\n*2\r\n$3\r\ns-1\r\n*2\r\n" + b"".join(entry))
    time.sleep(LATE_NS / 1e9)
    assert consumer.poll(1) == [(headers[0], b"abc", 1), (headers[1], b"abc", 1)]
    assert 0 <= consumer.arrived_ns - written < SLACK_NS, f"stamped {(consumer.arrived_ns - written) / MS:.1f} ms late"
    server.settimeout(5)
    command = hiredis.Reader()
    command.feed(server.recv(1 << 16))
    assert command.gets() == [b"XREADGROUP", b"GROUP", b"g", consumer._name, b"COUNT", b"10", b"BLOCK", b"1000",
                              b"STREAMS", b"s-0", b"s-1", b">", b">"]
    server.sendall(b":2\r\n*-1\r\n")  # the XACK's reply, then BLOCK timed out: nothing, and no stamp
    assert consumer.poll(1) == [] and consumer.arrived_ns is None
    command.feed(server.recv(1 << 16))  # the first read's XACK went out with the second read
    assert command.gets() == [b"XACK", b"s-1", b"g", b"0-0", b"1-0"]


def test_pulsar_wire_consumer_stamps_a_delivery_when_it_arrived():
    """The Pulsar consumer that speaks the protocol itself (pulsar/wire_consumer.py), subscribed on a local TCP
    connection to a peer that answers as the broker does: a MESSAGE written, left LATE_NS in the socket, then read by
    the next poll, carries the arrival."""
    from test_pulsar_wire_consumer import Broker, body, message, subscribed

    broker = Broker()
    try:
        consumer = subscribed(broker, ["t-partition-0"], [0])
        written = time.monotonic_ns()
        broker.conn.sendall(message(0, 3, 4, [body(0, b"late")]))
        time.sleep(LATE_NS / 1e9)
        [(_, payload, lane)] = consumer.poll(1)
        assert (payload, lane) == (b"late", 0)
        assert 0 <= consumer.arrived_ns - written < SLACK_NS, f"stamped {(consumer.arrived_ns - written) / MS:.1f} ms late"
        broker.closing(consumer, 1)
    finally:
        broker.close()
