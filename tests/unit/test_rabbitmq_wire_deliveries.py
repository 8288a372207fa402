"""The quorum-queue consumer's parsing of deliveries (rabbitmq.wire.deliveries), on bytes built here as AMQP 0-9-1
frames them: several messages in one read, a message cut anywhere across reads, a body over several frames, a
heartbeat between messages, and a Channel.Close after them."""

import struct

import pytest

from brokerbench.brokers.rabbitmq import wire

LANES = {b"0": 0, b"1": 7}
SPLIT = 20  # the worker's header


def frame(kind: int, payload: bytes, channel: int = 1) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


def delivery(consumer_tag: bytes, tag: int, body: bytes, frame_max: int = 131072, properties: bytes = b"") -> bytes:
    """Basic.Deliver (routing key the queue), the content header (with `properties` after an empty flag word when
    given), and the body in frames of at most frame_max."""
    method = (struct.pack(">HH", 60, 60) + wire.short_str(consumer_tag) + struct.pack(">QB", tag, 1)
              + wire.short_str(b"") + wire.short_str(b"queue-" + consumer_tag))
    header = struct.pack(">HHQH", 60, 0, len(body), 0x8000 if properties else 0) + properties
    out = frame(wire.METHOD, method) + frame(wire.HEADER, header)
    chunk = frame_max - 8
    for at in range(0, len(body), chunk):
        out += frame(wire.BODY, body[at:at + chunk])
    return out


def body(n: int, size: int = 100) -> bytes:
    return bytes([n]) * SPLIT + bytes([n + 1]) * size


def test_several_messages_in_one_read_come_whole_with_their_lane_and_the_last_tag():
    data = b"".join(delivery(b"01"[n % 2:n % 2 + 1], 10 + n, body(n)) for n in range(5))
    out, tag, others, at = wire.deliveries(data, 0, LANES, SPLIT)
    assert [(h, p, lane) for h, p, lane in out] == [(body(n)[:SPLIT], body(n)[SPLIT:], (0, 7)[n % 2])
                                                     for n in range(5)]
    assert (tag, others, at) == (14, [], len(data))


def test_a_message_cut_anywhere_is_taken_whole_from_the_read_that_completes_it():
    first, second = delivery(b"0", 1, body(1)), delivery(b"1", 2, body(2, 5000), frame_max=1024)
    data = first + second
    for cut in range(len(first), len(data)):
        out, tag, _, at = wire.deliveries(data[:cut], 0, LANES, SPLIT)
        assert (len(out), tag, at) == (1, 1, len(first)), cut
        rest, tag, _, end = wire.deliveries(data[:cut][at:] + data[cut:], 0, LANES, SPLIT)
        assert rest == [(body(2)[:SPLIT], body(2, 5000)[SPLIT:], 7)] and tag == 2 and end == len(second)
    for cut in range(len(first)):
        assert wire.deliveries(data[:cut], 0, LANES, SPLIT)[::3] == ([], 0)


def test_a_body_over_several_frames_is_joined_and_properties_are_passed_over():
    big = bytes(range(256)) * 1200  # 307,200 bytes: three frames of 128 KB
    data = delivery(b"1", 3, big, properties=b"\x00" * 9) + delivery(b"0", 4, body(9))
    assert data.count(b"\xce") >= 6
    out, tag, _, at = wire.deliveries(data, 0, LANES, SPLIT)
    assert out == [(big[:SPLIT], big[SPLIT:], 7), (body(9)[:SPLIT], body(9)[SPLIT:], 0)]
    assert (tag, at) == (4, len(data))


def test_heartbeats_are_passed_over_and_other_methods_returned_after_the_messages_before_them():
    close = frame(wire.METHOD, struct.pack(">HHHB", 20, 40, 404, 9) + b"NOT_FOUND" + struct.pack(">HH", 60, 20))
    data = delivery(b"0", 1, body(1)) + frame(wire.HEARTBEAT, b"", channel=0) + delivery(b"0", 2, body(2)) + close
    out, tag, others, at = wire.deliveries(data, 0, LANES, SPLIT)
    assert len(out) == 2 and tag == 2 and at == len(data)
    assert [(channel, class_method) for channel, class_method, _ in others] == [(1, wire.CHANNEL_CLOSE)]
    error = wire.closed_by(wire.CHANNEL_CLOSE, others[0][2])
    assert error.channel and "404 NOT_FOUND" in str(error)


def test_a_frame_without_its_end_marker_is_refused():
    data = bytearray(delivery(b"0", 1, body(1)))
    data[-1] = 0
    with pytest.raises(ConnectionError, match="body"):
        wire.deliveries(bytes(data), 0, LANES, SPLIT)
