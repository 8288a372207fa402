"""RabbitMQ's stream protocol spoken on a blocking socket of its own: the Python loop's stream producer on one node
reached directly (rabbitmq_streams.driver.StreamsWireProducer; through rstream where it follows a failover).

rstream runs on an asyncio loop of its own thread: a publish crossed to that thread and was encoded there, and a
confirm was stamped in its callback after rstream's decoding, 392 µs above the native loop's publish p50 on the
same node (bench/stamp_lag.py). Here a lane's publishes are written as one Publish frame when the worker polls, and
the confirms are parsed from what one read of the socket brought, stamped as that read returned, as the native loop
does (functions/brokerbench/native/sendloop.c: stream_connect, stream_seal, stream_reply).

What it speaks (https://github.com/rabbitmq/rabbitmq-server/blob/main/deps/rabbitmq_stream/docs/PROTOCOL.adoc): a
frame is its size, a key, a version and the command's fields, big-endian. PeerProperties (none), SaslHandshake,
SaslAuthenticate (PLAIN), the broker's Tune answered (its frame size, no heartbeats: the producer reads its socket
at every poll and while it waits), Open of the virtual host, then a publisher per lane (DeclarePublisher: id = the
lane, no reference, so no deduplication). Publish carries a lane's messages (publishing id, size, data each);
PublishConfirm acknowledges publishing ids, PublishError fails them; a Close, or a MetadataUpdate (the stream was
deleted or its leader moved), ends the connection."""

from __future__ import annotations

import socket
import struct
import time

from ..socket_buffer import SocketBuffer

PEER_PROPERTIES, SASL_HANDSHAKE, SASL_AUTHENTICATE, TUNE, OPEN, CLOSE = 0x11, 0x12, 0x13, 0x14, 0x15, 0x16
DECLARE_PUBLISHER, PUBLISH, PUBLISH_CONFIRM, PUBLISH_ERROR, METADATA_UPDATE = 0x01, 0x02, 0x03, 0x04, 0x10
RESPONSE = 0x8000
OK = 1
MAX_FRAME = 1048576  # the frame size asked for, as the native loop (the broker's own when smaller)
WRITE_TIMEOUT_S = 5.0  # a write the broker does not take within this long (it stopped reading) gives the connection up
REFUSALS = {2: "the stream does not exist", 8: "authentication failure", 0x0C: "virtual host access failure",
            0x10: "access refused"}


class Refused(OSError):
    """The broker answered a request with another code than OK."""


def str16(value: bytes) -> bytes:
    return struct.pack(">H", len(value)) + value


def request(key: int, correlation: int, fields: bytes = b"") -> bytes:
    return struct.pack(">IHHI", 8 + len(fields), key, 1, correlation) + fields


def next_frame(data: bytes, at: int) -> tuple[int, bytes, int] | None:
    """The frame of data at `at`, when it is complete: (key, content after key and version, where the next begins)."""
    if at + 4 > len(data):
        return None
    (length,) = struct.unpack_from(">I", data, at)
    end = at + 4 + length
    if end > len(data):
        return None
    if length < 4:
        raise ConnectionError(f"RabbitMQ sent a stream frame of {length} bytes")
    return struct.unpack_from(">H", data, at + 4)[0], data[at + 8:end], end


def frames(data: bytes, at: int) -> tuple[list[tuple[int, bytes]], int]:
    """The complete frames of data from `at`: (key, content) each, and where the first incomplete one begins."""
    out = []
    while (frame := next_frame(data, at)) is not None:
        out.append(frame[:2])
        at = frame[2]
    return out, at


def answers(found: list[tuple[int, bytes]]) -> tuple[list[tuple[int, bool]], str | None]:
    """The publishing ids the frames confirm (True) or fail (False), in order; and why the connection ends (a Close,
    a MetadataUpdate), else None."""
    out = []
    for key, content in found:
        if key in (PUBLISH_CONFIRM, PUBLISH_ERROR):
            (count,) = struct.unpack_from(">I", content, 1)
            each = 8 if key == PUBLISH_CONFIRM else 10
            out += [(struct.unpack_from(">Q", content, 5 + k * each)[0], key == PUBLISH_CONFIRM)
                    for k in range(count)]
        elif key == CLOSE:
            code = struct.unpack_from(">H", content, 4)[0] if len(content) >= 6 else 0
            return out, f"RabbitMQ closed the stream connection (code {code})"
        elif key == METADATA_UPDATE:
            code = struct.unpack_from(">H", content)[0] if len(content) >= 2 else 0
            return out, f"RabbitMQ moved or deleted a stream the producer publishes to (code {code})"
    return out, None


def publish_frames(lane: int, messages: list[tuple[int, bytes]], frame_max: int) -> list[bytes]:
    """A lane's messages ((publishing id, data) each) as Publish frames (version 1) of at most frame_max bytes."""
    out, entries, size = [], [], 13
    for publishing_id, data in messages:
        entry = struct.pack(">QI", publishing_id, len(data)) + data
        if entries and size + len(entry) > frame_max:
            out.append(_publish_frame(lane, entries))
            entries, size = [], 13
        entries.append(entry)
        size += len(entry)
    if entries:
        out.append(_publish_frame(lane, entries))
    return out


def _publish_frame(lane: int, entries: list[bytes]) -> bytes:
    body = b"".join(entries)
    return struct.pack(">IHHBI", 9 + len(body), PUBLISH, 1, lane, len(entries)) + body


class Connection(SocketBuffer):
    """One stream-protocol connection with a publisher per stream (its index: the lane)."""

    PEER = "RabbitMQ"

    def __init__(self, host: str, port: int, user: str, password: str, vhost: str, streams: list[str],
                 timeout_s: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.buffer, self.at = b"", 0
            self._request(PEER_PROPERTIES, struct.pack(">I", 0), "the peer properties", timeout_s)
            self._request(SASL_HANDSHAKE, b"", "the SASL handshake", timeout_s)
            login = b"\x00" + user.encode() + b"\x00" + password.encode()
            self._request(SASL_AUTHENTICATE, str16(b"PLAIN") + struct.pack(">I", len(login)) + login, "the login",
                          timeout_s)
            tune = self._expect(TUNE, timeout_s)
            frame_max = struct.unpack_from(">I", tune)[0]
            self.frame_max = MAX_FRAME if frame_max == 0 or frame_max > MAX_FRAME else frame_max
            self.write(struct.pack(">IHHII", 12, TUNE, 1, self.frame_max, 0))
            self._request(OPEN, str16(vhost.encode()), "the virtual host", timeout_s)
            for lane, stream in enumerate(streams):
                self._request(DECLARE_PUBLISHER, bytes((lane,)) + str16(b"") + str16(stream.encode()),
                              f"a publisher on stream {stream}", timeout_s)
        except BaseException:
            self.sock.close()
            raise

    def _expect(self, key: int, timeout_s: float) -> bytes:
        """The content of the next frame with `key`, read within timeout_s (frames before it are passed over)."""
        deadline = time.monotonic() + timeout_s
        while True:
            while (frame := next_frame(self.buffer, self.at)) is not None:
                got, content, self.at = frame
                if got == key:
                    return content
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"RabbitMQ's stream port did not answer within {timeout_s} s")
            self.receive(left)

    def _request(self, key: int, fields: bytes, what: str, timeout_s: float) -> None:
        self.write(request(key, key, fields))  # the key serves as the correlation id: one request at a time
        content = self._expect(key | RESPONSE, timeout_s)
        code = struct.unpack_from(">H", content, 4)[0]
        if code != OK:
            raise Refused(f"RabbitMQ refused {what}: {REFUSALS.get(code, 'see the code')} (stream response code "
                          f"{code})")

    def write(self, data: bytes) -> None:
        self.sock.settimeout(WRITE_TIMEOUT_S)
        self.sock.sendall(data)

    def take(self) -> tuple[list[tuple[int, bool]], str | None]:
        """The answers complete in the buffer, taken off it (see `answers`)."""
        found, self.at = frames(self.buffer, self.at)
        return answers(found)

    def close(self) -> None:
        self.sock.close()
