"""The Pulsar consumer that speaks the binary protocol itself (brokers.pulsar.wire_consumer), against a scripted peer
on a local TCP connection that answers as the broker does (CONNECTED, a SUCCESS per SUBSCRIBE) and writes MESSAGE
frames laid out by the protocol's documentation: a single message and a batch (with and without a checksum, with a
property in the metadata) split into the worker's header and payload on their lanes; each partition's last entry
acknowledged cumulatively at the next poll; permits given back when half the queue was taken; a compressed message
refused by name; the subscription and flow the consumer asked for; and a close that waits for the broker's SUCCESS.
The real broker's side is tests/integration/test_pulsar.py."""

from __future__ import annotations

import socket
import threading

import google_crc32c
import pytest

from brokerbench.brokers.pulsar import wire
from brokerbench.brokers.pulsar import wire_consumer as wc

HEADER = bytes(range(20))


def message(cid: int, ledger: int, entry: int, bodies: list[bytes], batched: bool = True, compression: int = 0,
            checksum: bool = True) -> bytes:
    """A MESSAGE frame as the broker writes it: [total][size][BaseCommand{MESSAGE{consumer_id, message_id}}]
    [0x0e01][CRC-32C][metadata size][MessageMetadata][payload]."""
    ids = wire.pb_uint(1, ledger) + wire.pb_uint(2, entry)
    cmd = wire.pb_uint(1, wc.MESSAGE) + wire.pb_bytes(wc.MESSAGE, wire.pb_uint(1, cid) + wire.pb_bytes(2, ids))
    meta = (wire.pb_bytes(1, b"standalone-0-3") + wire.pb_uint(2, 7) + wire.pb_uint(3, 1_700_000_000_000)
            + wire.pb_bytes(4, wire.pb_bytes(1, b"key") + wire.pb_bytes(2, b"value"))
            + (wire.pb_uint(8, compression) if compression else b"")
            + (wire.pb_uint(11, len(bodies)) if batched else b""))
    payload = b"".join(wire.batch_entry(body, n) for n, body in enumerate(bodies)) if batched else bodies[0]
    covered = wire.SIZE.pack(len(meta)) + meta + payload
    rest = wire.CHECKSUM_MAGIC + wire.SIZE.pack(google_crc32c.value(covered)) + covered if checksum else covered
    return wire.HEAD.pack(4 + len(cmd) + len(rest), len(cmd)) + cmd + rest


def body(seq: int, payload: bytes) -> bytes:
    header = HEADER[:19] + bytes([seq])
    return bytes([len(header)]) + header + payload


class Broker:
    """One connection accepted on 127.0.0.1, answered as Pulsar answers a consumer's handshake; `commands` keeps
    every command it read (type, fields)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.commands: list[tuple[int, dict]] = []
        self.conn: socket.socket | None = None
        self._buffer = b""
        self._ready = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> tuple[str, int]:
        return self.listener.getsockname()

    def _accept(self) -> None:
        self.conn, _ = self.listener.accept()
        self.conn.settimeout(5)
        self._ready.set()

    def read(self, kinds: int) -> list[tuple[int, dict]]:
        """Read until `kinds` more commands came; answers CONNECT and SUBSCRIBE as the broker does."""
        self._ready.wait(5)
        got: list[tuple[int, dict]] = []
        while len(got) < kinds:
            while (frame := wire.next_frame(self._buffer, 0)) is not None:
                kind, fields, end = frame
                self._buffer = self._buffer[end:]
                got.append((kind, fields))
                if kind == wire.CONNECT:
                    self.conn.sendall(wire.command(wire.CONNECTED, wire.pb_bytes(1, b"test") + wire.pb_uint(2, 19)))
                elif kind in (wc.SUBSCRIBE, wc.CLOSE_CONSUMER):
                    self.conn.sendall(wire.command(wc.SUCCESS, wire.pb_uint(1, fields[5 if kind == wc.SUBSCRIBE
                                                                                      else 2])))
            if len(got) < kinds:
                self._buffer += self.conn.recv(1 << 16)
        self.commands += got
        return got

    def closing(self, consumer: wc.WireConsumer, topics: int) -> list[tuple[int, dict]]:
        """consumer.close() beside the broker's reads, until each of its consumers was closed: what it wrote."""
        thread = threading.Thread(target=consumer.close)
        thread.start()
        got: list[tuple[int, dict]] = []
        while sum(kind == wc.CLOSE_CONSUMER for kind, _ in got) < topics:
            got += self.read(1)
        thread.join(5)
        assert not thread.is_alive()  # each SUCCESS ended its wait
        return got

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.listener.close()


@pytest.fixture
def broker():
    made = Broker()
    yield made
    made.close()


def subscribed(broker: Broker, topics: list[str], lanes: list[int], queue: int = 10) -> wc.WireConsumer:
    made: list = []
    thread = threading.Thread(target=lambda: made.append(
        wc.WireConsumer(broker.address, topics, "group-1", lanes, queue, 5)))
    thread.start()
    broker.read(1 + 2 * len(topics))  # CONNECT, the SUBSCRIBEs, the FLOWs
    thread.join(5)
    return made[0]


def test_it_subscribes_each_partition_exclusively_from_the_earliest_and_gives_its_permits(broker):
    consumer = subscribed(broker, ["persistent://public/default/t-partition-0",
                                   "persistent://public/default/t-partition-2"], [0, 2])
    kinds = [kind for kind, _ in broker.commands]
    assert kinds == [wire.CONNECT, wc.SUBSCRIBE, wc.SUBSCRIBE, wc.FLOW, wc.FLOW]
    subscriptions = [fields for kind, fields in broker.commands if kind == wc.SUBSCRIBE]
    assert [(s[1], s[2], s[3], s[4], s[5], s[13]) for s in subscriptions] == [
        (b"persistent://public/default/t-partition-0", b"group-1", wc.EXCLUSIVE, 0, 1, wc.EARLIEST),
        (b"persistent://public/default/t-partition-2", b"group-1", wc.EXCLUSIVE, 1, 2, wc.EARLIEST)]
    assert [(f[1], f[2]) for kind, f in broker.commands if kind == wc.FLOW] == [(0, 10), (1, 10)]
    assert consumer.stamps == "arrival"
    assert [kind for kind, _ in broker.closing(consumer, 2)] == [wc.CLOSE_CONSUMER, wc.CLOSE_CONSUMER]


def test_single_messages_and_batches_reach_their_lanes_and_the_last_entries_are_acknowledged(broker):
    consumer = subscribed(broker, ["a-partition-0", "a-partition-1"], [0, 1], queue=10)
    broker.conn.sendall(message(0, 5, 1, [body(0, b"x" * 300)], batched=False)
                        + message(1, 6, 9, [body(1, b"y"), body(2, b"z" * 200), body(3, b"")])
                        + message(1, 6, 10, [body(4, b"w")], checksum=False))
    got = []
    while len(got) < 5:
        got += consumer.poll(1)
    assert got == [(HEADER[:19] + b"\x00", b"x" * 300, 0), (HEADER[:19] + b"\x01", b"y", 1),
                   (HEADER[:19] + b"\x02", b"z" * 200, 1), (HEADER[:19] + b"\x03", b"", 1),
                   (HEADER[:19] + b"\x04", b"w", 1)]
    assert consumer.poll(0.05) == []  # the next poll acknowledges each partition's last entry, cumulatively
    acks = broker.read(2)
    assert sorted((f[1], f[2], wire.pb_fields(f[3])[1], wire.pb_fields(f[3])[2]) for kind, f in acks
                  if kind == wc.ACK) == [(0, wc.CUMULATIVE, 5, 1), (1, wc.CUMULATIVE, 6, 10)]
    # consumer 1 took 4 of its 10 permits, then 2 more: half its queue, given back in one FLOW
    broker.conn.sendall(message(1, 6, 11, [body(5, b"v"), body(6, b"u")]))
    got = []
    while len(got) < 2:
        got += consumer.poll(1)
    [(kind, fields)] = broker.read(1)
    assert (kind, fields[1], fields[2]) == (wc.FLOW, 1, 6)
    # closing acknowledges what the last poll took, before each consumer is closed
    closing = broker.closing(consumer, 2)
    assert [kind for kind, _ in closing] == [wc.ACK, wc.CLOSE_CONSUMER, wc.CLOSE_CONSUMER]
    assert (closing[0][1][1], wire.pb_fields(closing[0][1][3])) == (1, {1: 6, 2: 11})


def test_a_compressed_message_is_refused_by_name(broker):
    consumer = subscribed(broker, ["c-partition-0"], [0])
    broker.conn.sendall(message(0, 1, 1, [body(0, b"x")], compression=1))
    with pytest.raises(wc.Unreadable, match="compressed message \\(compression type 1\\)"):
        for _ in range(20):
            consumer.poll(0.1)
    broker.closing(consumer, 1)


def test_a_batch_whose_entry_runs_past_its_end_is_refused():
    frame = message(0, 1, 1, [body(0, b"x" * 50)])
    kind, _, start, end = wire.frame_parts(frame, 0)
    assert kind == wc.MESSAGE and wc.entry_messages(frame, start, end) == [(HEADER[:19] + b"\x00", b"x" * 50)]
    with pytest.raises(wc.Unreadable, match="runs past its end"):
        wc.entry_messages(frame[:-10], start, end - 10)
    # a SingleMessageMetadata with a property before its payload_size is read from its fields
    single = wire.pb_bytes(1, wire.pb_bytes(1, b"k") + wire.pb_bytes(2, b"v")) + b"\x18" + wire.varint(300)
    assert wc._payload_size(single) == 300 and wc._payload_size(b"\x18" + wire.varint(300)) == 300


def test_a_lost_connection_is_made_again_with_its_subscriptions(broker):
    consumer = subscribed(broker, ["r-partition-0"], [0])
    broker.conn.close()
    assert consumer.poll(0.2) == []  # the peer closed: given up, to be made again
    again = threading.Thread(target=broker._accept, daemon=True)
    broker._ready.clear()
    broker._buffer = b""
    again.start()
    reconnected = threading.Thread(target=lambda: consumer.poll(0.1))
    reconnected.start()
    commands = broker.read(3)
    reconnected.join(5)
    assert [kind for kind, _ in commands] == [wire.CONNECT, wc.SUBSCRIBE, wc.FLOW]
    broker.conn.sendall(message(0, 2, 0, [body(9, b"again")]))
    got = []
    for _ in range(20):
        got += consumer.poll(0.1)
        if got:
            break
    assert got == [(HEADER[:19] + b"\x09", b"again", 0)]
    broker.closing(consumer, 1)
