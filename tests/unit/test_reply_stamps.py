"""Replies are stamped when they arrive: both Redis senders against a small Redis-protocol server in this process.

The server (127.0.0.1, one connection) answers each XADD a known DELAY after it read it, and records when it
wrote each reply on the same monotonic clock the senders stamp with. The schedule sends a burst of BURST
messages 1 ms apart every PERIOD, so the sender spends most of each period waiting for its next message: a
loop that sleeps through that wait stamps a reply when it wakes (up to PERIOD - DELAY late, ~200 ms here); one
that waits on its socket stamps it as it arrives. Pipeline depth 100 keeps the burst in flight together, depth 1
sends it stop-and-wait; the stamps must follow the server's writes either way.

What is asserted is order and causality, not speed: a reply is stamped after the server wrote it (never before),
at most SLACK after it (a bound far above any thread's wake-up, far below the wait a sleeping loop makes), and
in the order written; the publish latency of each message is at least the server's delay.
"""

from __future__ import annotations

import select
import socket
import threading
import time

import hiredis
import numpy as np
import pytest

from brokerbench import native
from brokerbench.brokers.redis_streams.driver import RedisStreamsProducer, RespConnection
from brokerbench.worker.framing import HEADER

MS = 1_000_000
DELAY_NS = 20 * MS  # the server's answer time
PERIOD_NS = 250 * MS  # one burst per period
BURST = 5  # messages per burst, 1 ms apart
CYCLES = 3
SLACK_NS = 100 * MS  # a stamp this late after the server's write is the sleeping loop's, not a wake-up's


class SlowRedis:
    """Answers each XADD DELAY_NS after reading it (in order, as Redis does); records per sequence number when
    it read the command and when it wrote the reply."""

    def __init__(self, delay_ns: int) -> None:
        self.delay_ns = delay_ns
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.read_ns: dict[int, int] = {}
        self.written_ns: dict[int, int] = {}
        self.in_flight_max = 0  # XADDs read and not yet answered, at most
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(10)
        connection, _ = self.listener.accept()
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader, due = hiredis.Reader(), []  # due: (reply time, seq), oldest first
        while not self._stop.is_set():
            now = time.monotonic_ns()
            while due and due[0][0] <= now:
                _, seq = due.pop(0)
                self.written_ns[seq] = time.monotonic_ns()
                connection.sendall(b"$15\r\n1700000000000-0\r\n")
            wait = (due[0][0] - time.monotonic_ns()) / 1e9 if due else 0.05
            if not select.select([connection], [], [], max(0.0, wait))[0]:
                continue
            chunk = connection.recv(1 << 16)
            if not chunk:
                break
            at = time.monotonic_ns()
            reader.feed(chunk)
            while (command := reader.gets()) is not False:
                seq = HEADER.unpack(command[4])[1]  # XADD key * h <header> d <payload>
                self.read_ns[seq] = at
                due.append((at + self.delay_ns, seq))
            self.in_flight_max = max(self.in_flight_max, len(due))
        connection.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.listener.close()


@pytest.fixture
def server():
    slow = SlowRedis(DELAY_NS)
    yield slow
    slow.close()


def burst_offsets() -> bytes:
    return (np.arange(BURST, dtype=np.int64) * MS).tobytes()


def intended(base: int) -> list[int]:
    return [base + cycle * PERIOD_NS + k * MS for cycle in range(CYCLES) for k in range(BURST)]


def check_stamps(server: SlowRedis, seqs: list[int], stamped: list[int], handed: list[int], depth: int) -> None:
    count = BURST * CYCLES
    assert sorted(seqs) == list(range(count)) and sorted(server.written_ns) == list(range(count))
    written = np.array([server.written_ns[s] for s in seqs])
    late = np.array(stamped) - written
    assert (late >= 0).all(), "a reply stamped before the server wrote it"
    assert (late < SLACK_NS).all(), f"replies stamped up to {late.max() / MS:.1f} ms after the server wrote them"
    assert list(np.argsort(stamped, kind="stable")) == list(np.argsort(written, kind="stable"))
    publish = np.array(stamped) - np.array([handed[s] for s in seqs])
    assert (publish >= DELAY_NS).all()  # no reply before the server's delay was over
    # Depth 100 keeps a burst in flight together; depth 1 has one XADD unanswered at a time.
    assert server.in_flight_max == (BURST if depth > 1 else 1)


@pytest.mark.parametrize("depth", [100, 1])
def test_native_loop_stamps_each_reply_when_it_arrives(server, depth):
    sender = native.redis_sender("127.0.0.1", server.port, None, [b"s-0"], depth, 5.0)
    base = time.monotonic_ns() + 5 * MS
    sender.configure([b"x" * 100], None, 1, base, float(PERIOD_NS), burst_offsets())
    end = base + CYCLES * PERIOD_NS
    seq, why = sender.send_until(0, 1 << 62, end, end)
    assert sender.flush(5) == 0
    started, handed, acked_seq, acked_ns, failed = sender.take()
    sender.close()
    assert seq == BURST * CYCLES and failed == b""
    check_stamps(server, np.frombuffer(acked_seq, np.int64).tolist(), np.frombuffer(acked_ns, np.int64).tolist(),
                 np.frombuffer(handed, np.int64).tolist(), depth)


@pytest.mark.parametrize("depth", [100, 1])
def test_python_producer_stamps_each_reply_when_it_arrives(server, depth):
    """The Python loop's producer, driven as its wait_until drives it: send when due, poll until the next."""
    acks: list[tuple[int, int]] = []
    producer = RedisStreamsProducer(RespConnection("127.0.0.1", server.port, False, None), ["s-0"],
                                    depth, lambda header, ok, at: acks.append((HEADER.unpack(header)[1], at)))
    handed = []
    for seq, due in enumerate(intended(time.monotonic_ns() + 5 * MS)):
        while (left := due - time.monotonic_ns()) > 0:
            producer.poll(left / 1e9)
        handed.append(time.monotonic_ns())
        producer.send(HEADER.pack(1, seq, due), b"x" * 100, 0)
    assert producer.flush(5) == 0
    producer.close()
    check_stamps(server, [s for s, _ in acks], [at for _, at in acks], handed, depth)


def test_python_producer_writes_a_send_after_a_pause_at_once(server):
    """A send that follows the one before by more than JOIN_WITHIN_NS (a loop on schedule) reaches the server
    before the loop polls again: it is not kept for the next poll's write, which would add the loop's own steps back
    to its wait to the message's publish latency. Sends back to back are joined into one write at the next poll."""
    producer = RedisStreamsProducer(RespConnection("127.0.0.1", server.port, False, None), ["s-0"], 100,
                                    lambda header, ok, at: None)
    for seq in range(2):
        time.sleep(0.01)  # far more than JOIN_WITHIN_NS since the send before
        producer.send(HEADER.pack(1, seq, time.monotonic_ns()), b"x" * 100, 0)
        deadline = time.monotonic() + 5
        while seq not in server.read_ns and time.monotonic() < deadline:
            time.sleep(0.001)  # no poll: only the send itself can have written it
        assert seq in server.read_ns, f"send {seq} after a pause was kept back for the next poll"
    assert producer.flush(5) == 0
    producer.close()
