"""The stream protocol's Metadata (key 0x000f) as rabbitmq_streams.wire frames the request and reads the answer, on
bytes built here from PROTOCOL.adoc's layout (https://github.com/rabbitmq/rabbitmq-server/blob/main/deps/
rabbitmq_stream/docs/PROTOCOL.adoc: MetadataQuery, MetadataResponse): a stream with a leader and replicas, one
whose leader is being elected, one the broker does not know, and answers cut short or with bytes left over."""

import struct

import pytest

from brokerbench.brokers.rabbitmq_streams import wire


def string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def answer(correlation: int, brokers: list[tuple[int, str, int]], streams: list[tuple[str, int, int, list[int]]]):
    """A MetadataResponse frame: Size, Key 0x800f, Version 1, CorrelationId, [Broker], [StreamMetadata]."""
    body = struct.pack(">HHI", 0x800F, 1, correlation) + struct.pack(">i", len(brokers))
    body += b"".join(struct.pack(">H", ref) + string(host) + struct.pack(">I", port) for ref, host, port in brokers)
    body += struct.pack(">i", len(streams))
    for name, code, leader, replicas in streams:
        body += string(name) + struct.pack(">HHi", code, leader, len(replicas))
        body += b"".join(struct.pack(">H", ref) for ref in replicas)
    return struct.pack(">I", len(body)) + body


def test_the_request_names_each_stream_in_an_array_after_the_correlation_id():
    frame = wire.metadata_request(7, ["bb-a-0", "s"])
    expected = struct.pack(">HHI", 0x000F, 1, 7) + struct.pack(">i", 2) + string("bb-a-0") + string("s")
    assert frame == struct.pack(">I", len(expected)) + expected


def test_the_answer_gives_each_streams_leader_and_replicas_by_their_advertised_address():
    data = answer(7, [(0, "127.0.0.1", 5552), (1, "127.0.0.1", 5553), (2, "node-c", 5554)],
                  [("bb-a-0", wire.OK, 1, [0, 2]), ("bb-a-1", wire.OK, 2, [])])
    key, content, end = wire.next_frame(data, 0)
    assert key == wire.METADATA | wire.RESPONSE and end == len(data)
    placements = wire.metadata_answer(content)
    assert placements == {
        "bb-a-0": wire.Placement(wire.OK, ("127.0.0.1", 5553), [("127.0.0.1", 5552), ("node-c", 5554)]),
        "bb-a-1": wire.Placement(wire.OK, ("node-c", 5554), [])}


def test_a_stream_without_a_leader_or_unknown_to_the_broker_says_so():
    data = answer(1, [(0, "h", 1)], [("electing", wire.OK, wire.NO_LEADER, [0]), ("gone", 2, 0, [])])
    placements = wire.metadata_answer(wire.next_frame(data, 0)[1])
    assert placements["electing"] == wire.Placement(wire.OK, None, [("h", 1)])
    assert placements["gone"].code == 2


@pytest.mark.parametrize("cut", [1, 5, 12, 20])
def test_an_answer_cut_short_or_with_bytes_left_over_is_a_protocol_error(cut):
    content = wire.next_frame(answer(1, [(0, "host", 5552)], [("s", wire.OK, 0, [0])]), 0)[1]
    with pytest.raises(wire.ProtocolError):
        wire.metadata_answer(content[:-cut])
    with pytest.raises(wire.ProtocolError):
        wire.metadata_answer(content + b"\x00" * cut)
