"""The Python loop's Pulsar producer's framing (brokers.pulsar.wire), on bytes checked here against the protocol's
layout: protobuf varints as the protobuf documentation encodes them, a SEND's sizes, command, metadata, checksum and
batch entries read back, the broker's answers parsed from one read (a receipt, a ping answered, a frame cut across
reads, a send error ending the connection), and the producer's batches bounded by messages, bytes and delay on a
socket pair standing in for the broker's connection."""

import socket
import struct
import time

import google_crc32c
import pytest

from brokerbench.brokers.pulsar import wire


def test_varints_and_fields_are_encoded_as_protobuf_encodes_them():
    assert wire.varint(1) == b"\x01" and wire.varint(150) == b"\x96\x01" and wire.varint(300) == b"\xac\x02"
    assert wire.pb_uint(1, 150) == b"\x08\x96\x01"  # the protobuf encoding guide's example
    assert wire.pb_bytes(2, b"testing") == b"\x12\x07testing"
    assert wire.pb_fields(b"\x08\x96\x01\x12\x07testing\x1d\x00\x00\x00\x00\x20\x05") == {1: 150, 2: b"testing",
                                                                                         4: 5}
    with pytest.raises(ValueError, match="malformed"):
        wire.pb_fields(b"\x12\x09short")
    assert google_crc32c.value(b"123456789") == 0xE3069283  # CRC-32C's check value


def read_send(frame: bytes) -> tuple[dict, dict, bytes]:
    """A SEND frame read back by its layout: (the CommandSend's fields, the MessageMetadata's, the payload); the
    sizes and the checksum checked on the way."""
    total, size = struct.unpack_from(">II", frame)
    assert total == len(frame) - 4
    base = wire.pb_fields(frame[8:8 + size])
    assert base[1] == wire.SEND
    at = 8 + size
    assert frame[at:at + 2] == wire.CHECKSUM_MAGIC
    (checksum,) = struct.unpack_from(">I", frame, at + 2)
    assert checksum == google_crc32c.value(frame[at + 6:])
    (meta_size,) = struct.unpack_from(">I", frame, at + 6)
    meta = wire.pb_fields(frame[at + 10:at + 10 + meta_size])
    return wire.pb_fields(base[wire.SEND]), meta, frame[at + 10 + meta_size:]


def read_entries(payload: bytes) -> list[tuple[dict, bytes]]:
    out, at = [], 0
    while at < len(payload):
        (size,) = struct.unpack_from(">I", payload, at)
        meta = wire.pb_fields(payload[at + 4:at + 4 + size])
        at += 4 + size
        out.append((meta, payload[at:at + meta[3]]))
        at += meta[3]
    return out


def test_a_single_message_and_a_batch_are_framed_as_the_protocol_lays_them_out():
    send, meta, payload = read_send(wire.send_frame(2, b"standalone-0-7", 41, 41, 1, b"body", False, 1_700_000))
    assert send == {1: 2, 2: 41} and meta == {1: b"standalone-0-7", 2: 41, 3: 1_700_000} and payload == b"body"
    bodies = [bytes([n]) * (100 + n * 200) for n in range(3)]  # one over 127 bytes: a two-byte payload_size
    entries = b"".join(wire.batch_entry(body, 10 + n) for n, body in enumerate(bodies))
    send, meta, payload = read_send(wire.send_frame(0, b"p", 10, 12, 3, entries, True, 5))
    assert send == {1: 0, 2: 10, 3: 3, 6: 12} and meta == {1: b"p", 2: 10, 3: 5, 11: 3, 24: 12}
    assert read_entries(payload) == [({3: len(body), 8: 10 + n}, body) for n, body in enumerate(bodies)]


class Peer:
    """The far end of a socket pair: what the producer wrote, and answers written to it."""

    def __init__(self) -> None:
        self.near, self.far = socket.socketpair()
        self.far.settimeout(1)

    def frames(self) -> list[tuple[int, dict, bytes]]:
        """The frames written so far: (command type, the command's fields, the whole frame)."""
        data = b""
        self.far.setblocking(False)
        try:
            while chunk := self.far.recv(1 << 20):
                data += chunk
        except BlockingIOError:
            pass
        out, at = [], 0
        while (frame := wire.next_frame(data, at)) is not None:
            out.append((frame[0], frame[1], data[at:frame[2]]))
            at = frame[2]
        assert at == len(data)
        return out


def connection(peer: Peer, lanes: int) -> wire.Connection:
    """A Connection on the pair's near end, its producers named as a broker would name them."""
    made = object.__new__(wire.Connection)
    made.sock, made.address, made.buffer, made.at = peer.near, "pair", b"", 0
    made.names = [f"standalone-0-{lane}".encode() for lane in range(lanes)]
    return made


def receipt(lane: int, first: int, highest: int) -> bytes:
    return wire.command(wire.SEND_RECEIPT, wire.pb_uint(1, lane) + wire.pb_uint(2, first)
                        + wire.pb_bytes(3, wire.pb_uint(1, 5) + wire.pb_uint(2, first)) + wire.pb_uint(4, highest))


def test_one_read_brings_receipts_a_ping_and_a_frame_cut_in_two():
    peer = Peer()
    near = connection(peer, 2)
    cut = receipt(1, 7, 9)
    near.buffer = receipt(0, 0, 2) + wire.command(wire.PING, b"") + receipt(1, 3, 6) + cut[:5]
    assert near.take() == ([(0, 0, True), (1, 3, True)], None)
    assert [kind for kind, _, _ in peer.frames()] == [wire.PONG]
    near.buffer, near.at = near.buffer[near.at:] + cut[5:], 0
    assert near.take() == ([(1, 7, True)], None)
    near.buffer, near.at = wire.command(wire.SEND_ERROR, wire.pb_uint(1, 1) + wire.pb_uint(2, 10) + wire.pb_uint(3, 8)
                                        + wire.pb_bytes(4, b"Checksum failed")) + receipt(0, 3, 3), 0
    assert near.take() == ([(1, 10, False)], "Pulsar refused a send: Checksum failed")
    near.buffer, near.at = wire.command(wire.CLOSE_PRODUCER, wire.pb_uint(1, 0) + wire.pb_uint(2, 1)), 0
    assert near.take() == ([], "Pulsar closed the producer (its topic was unloaded or moved)")


SETTINGS = {"batching_enabled": True, "batching_max_messages": 3, "batching_max_allowed_size_in_bytes": 1024,
            "batching_max_publish_delay_ms": 20, "max_pending_messages": 100}
HEADER = bytes(20)


def test_a_batch_goes_out_full_at_its_byte_bound_or_when_its_delay_is_over_and_each_receipt_answers_it():
    peer = Peer()
    answers = []
    producer = wire.WireProducer(connection(peer, 2), SETTINGS, False, lambda *a: answers.append(a))
    for n in range(4):  # three make a full batch; the fourth opens the next
        producer.send(bytes([n]) * 20, b"x" * 10, 0)
    producer.send(HEADER, b"y" * 600, 1)
    producer.send(HEADER, b"z" * 600, 1)  # would take lane 1's batch over 1,024 bytes: the first goes alone
    sent = peer.frames()
    assert [(kind, fields[1], fields[2], fields.get(3)) for kind, fields, _ in sent] == [(wire.SEND, 0, 0, 3),
                                                                                        (wire.SEND, 1, 0, 1)]
    _, meta, payload = read_send(sent[0][2])
    assert meta[1] == b"standalone-0-0" and meta[24] == 2
    assert [body for _, body in read_entries(payload)] == [bytes((20,)) + bytes([n]) * 20 + b"x" * 10
                                                           for n in range(3)]
    started = time.monotonic()
    producer.poll(1)  # nothing comes: it wakes when the open batches fall due, sends them, and waits on
    assert time.monotonic() - started >= 0.9
    assert sorted((fields[1], fields[2]) for _, fields, _ in peer.frames()) == [(0, 3), (1, 1)]
    peer.far.sendall(receipt(0, 0, 2) + receipt(1, 1, 1))
    producer.poll(1)
    at = producer._connection.arrived_at
    assert answers == [(bytes([n]) * 20, True, at) for n in range(3)] + [(HEADER, True, at)]
    assert producer.flush(0) == 2  # lane 0's fourth and lane 1's first, unanswered
    peer.far.close()
    assert producer.flush(1) == 0 and producer.error == "Pulsar closed the connection"
    producer.send(HEADER, b"late", 0)
    assert answers[-1][:2] == (HEADER, False) and len(answers) == 5  # what was in flight: unacknowledged, not failed


def test_single_mode_sends_each_message_at_once_unbatched():
    peer = Peer()
    answers = []
    producer = wire.WireProducer(connection(peer, 1), SETTINGS, True, lambda *a: answers.append(a))
    producer.send(HEADER, b"one", 0)
    [(kind, fields, frame)] = peer.frames()
    send, meta, payload = read_send(frame)
    assert send == {1: 0, 2: 0} and 11 not in meta and payload == bytes((20,)) + HEADER + b"one"
    peer.far.sendall(receipt(0, 0, 0))
    assert producer.flush(1) == 0 and answers == [(HEADER, True, producer._connection.arrived_at)]
