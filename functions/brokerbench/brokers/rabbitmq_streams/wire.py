"""RabbitMQ's stream protocol spoken on a blocking socket of its own: the Python loop's stream producer and the
stream consumer (rabbitmq_streams.driver.StreamsWireProducer, StreamsWireConsumer), on one node reached directly and
where they follow a failover, where Metadata (key 0x000f: each stream's leader and replicas, by the address its node
advertises) says where to connect.

rstream runs on an asyncio loop of its own thread: a publish crossed to that thread and was encoded there, and a
confirm was stamped in its callback after rstream's decoding, 392 µs above the native loop's publish p50 on the
same node (bench/stamp_lag.py). Here a lane's publishes are written as one Publish frame when the worker polls, and
the confirms are parsed from what one read of the socket brought, stamped when it arrived (the kernel's receive
time, socket_buffer.recv_stamped), as the native loop does (functions/brokerbench/native/sendloop.c: stream_connect,
stream_seal, stream_reply).

What it speaks (https://github.com/rabbitmq/rabbitmq-server/blob/main/deps/rabbitmq_stream/docs/PROTOCOL.adoc): a
frame is its size, a key, a version and the command's fields, big-endian. PeerProperties (none), SaslHandshake,
SaslAuthenticate (PLAIN), the broker's Tune answered (its frame size, no heartbeats: the producer reads its socket
at every poll and while it waits), Open of the virtual host, then a publisher per lane (DeclarePublisher: id = the
lane, no reference, so no deduplication). Publish carries a lane's messages (publishing id, size, data each);
PublishConfirm acknowledges publishing ids, PublishError fails them; a Close, or a MetadataUpdate (the stream was
deleted or its leader moved), ends the connection. Metadata's answer has no response code of its own: each stream's
entry carries one (`metadata_answer`), and a leader reference of 0xFFFF while none leads it.

The consumer (driver.StreamsWireConsumer) speaks it too, on a Subscriptions connection:
a Subscribe per lane (subscription id = the lane's index, the offset specification and initial credit given), and
each Deliver frame's osiris chunk parsed where it lies in the buffer (`Subscriptions.take`): its entries are simple
entries, [size][data], or sub-entry batches, whose records are read when uncompressed and refused (ProtocolError)
when compressed (the worker's producers never batch nor compress). Offsets count records from the chunk's first
offset; records below the offset a subscription asked for (the broker starts at the chunk that holds it) are passed
over; chunks other than user data (offset tracking) give their credit back and deliver nothing. One Credit is
given back per chunk, as the Java client's default flow strategy does, written for all the chunks of a read at
once. No heartbeats here either (a held consumer does not read its socket, and the broker asks for none when
they are tuned off). StoreOffset records a group's position (no answer comes), and a Close waited for before the
socket closes makes sure the broker took what was written before it."""

from __future__ import annotations

import socket
import struct
import time
from typing import NamedTuple

from ..socket_buffer import SocketBuffer, TlsSocket, stamp_arrivals

PEER_PROPERTIES, SASL_HANDSHAKE, SASL_AUTHENTICATE, TUNE, OPEN, CLOSE = 0x11, 0x12, 0x13, 0x14, 0x15, 0x16
DECLARE_PUBLISHER, PUBLISH, PUBLISH_CONFIRM, PUBLISH_ERROR, METADATA_UPDATE = 0x01, 0x02, 0x03, 0x04, 0x10
SUBSCRIBE, DELIVER, CREDIT, STORE_OFFSET, QUERY_OFFSET, HEARTBEAT = 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x17
METADATA = 0x0F
NO_LEADER = 0xFFFF  # a Metadata answer's leader reference while the stream has none (an election under way)
# A Subscribe's offset specification: the stream's first offset, its last chunk of messages, or an offset given
OFFSET_FIRST, OFFSET_LAST, OFFSET_OFFSET = 1, 2, 4
LAST = "last"  # a subscription's start: the first offset of the stream's last chunk of messages
RESPONSE = 0x8000
OK = 1
NO_OFFSET = 0x13  # QueryOffset's answer where nothing is stored under the reference
MAX_FRAME = 1048576  # the frame size asked for, as the native loop (the broker's own when smaller)
STREAM_NOT_AVAILABLE = 6  # a node just started again answers so until its stream is back
REFUSALS = {2: "the stream does not exist", STREAM_NOT_AVAILABLE: "the stream is not available", 8: "authentication failure", 0x0C: "virtual host access failure",
            0x10: "access refused"}


class Refused(OSError):
    """The broker answered a request with another code than OK (`code`: the stream protocol's response code)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class ProtocolError(ConnectionError):
    """The broker sent what this client does not read (a compressed sub-entry batch, a frame too short)."""


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


class Placement(NamedTuple):
    """Where a stream lives, as a Metadata answer says: its response code (OK, or why not), its leader's advertised
    stream address (None while it has none) and its replicas' (those running)."""

    code: int
    leader: tuple[str, int] | None
    replicas: list[tuple[str, int]]


def metadata_request(correlation: int, streams: list[str]) -> bytes:
    """Metadata (key 0x000f) asking where `streams` live: an array (int32 count) of strings (int16 size each)."""
    names = [stream.encode() for stream in streams]
    return request(METADATA, correlation, struct.pack(">i", len(names)) + b"".join(str16(name) for name in names))


def metadata_answer(content: bytes) -> dict[str, Placement]:
    """A Metadata answer's content (after key and version: the correlation id, an array of brokers, each a reference
    (uint16), host (string) and port (uint32), then an array of stream metadata, each the stream's name, a response
    code, the leader's reference (NO_LEADER: none) and an array of replica references) as each stream's Placement.
    A reference the brokers do not list counts as no node (ProtocolError where the answer is cut short)."""
    try:
        at = 4
        (count,) = struct.unpack_from(">i", content, at)
        at += 4
        brokers: dict[int, tuple[str, int]] = {}
        for _ in range(count):
            reference, size = struct.unpack_from(">HH", content, at)
            host = content[at + 4:at + 4 + size].decode()
            (port,) = struct.unpack_from(">I", content, at + 4 + size)
            brokers[reference] = (host, port)
            at += 8 + size
        (count,) = struct.unpack_from(">i", content, at)
        at += 4
        out: dict[str, Placement] = {}
        for _ in range(count):
            (size,) = struct.unpack_from(">H", content, at)
            name = content[at + 2:at + 2 + size].decode()
            code, leader, replicas = struct.unpack_from(">HHi", content, at + 2 + size)
            at += 10 + size
            references = struct.unpack_from(f">{replicas}H", content, at)
            at += 2 * replicas
            out[name] = Placement(code, brokers.get(leader) if leader != NO_LEADER else None,
                                  [brokers[r] for r in references if r in brokers])
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"RabbitMQ sent a Metadata answer this client cannot read: {exc}") from None
    if at != len(content):
        raise ProtocolError(f"RabbitMQ sent a Metadata answer with {len(content) - at} bytes after its streams")
    return out


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


class Session(SocketBuffer):
    """One stream-protocol connection, logged in to its virtual host: PeerProperties, SASL PLAIN, Tune, Open."""

    PEER = "RabbitMQ"

    def __init__(self, host: str, port: int, user: str, password: str, vhost: str, timeout_s: float,
                 tls: bool = False) -> None:
        """With `tls`, TLS spoken over the socket from its first byte (a stream listener of RabbitMQ's
        stream.listeners.ssl: socket_buffer.TlsSocket, the server's certificate checked against `host` by the default
        trust store), what comes still stamped by the kernel."""
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            stamp_arrivals(self.sock)  # over TLS too: TlsSocket reads the ciphertext with the kernel's stamp
            if tls:
                self.sock = TlsSocket(self.sock, host)
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

    def metadata(self, streams: list[str], timeout_s: float) -> dict[str, Placement]:
        """Where each of `streams` lives (Metadata), answered within timeout_s."""
        self.write(metadata_request(METADATA, streams))
        return metadata_answer(self._expect(METADATA | RESPONSE, timeout_s))

    def _request(self, key: int, fields: bytes, what: str, timeout_s: float) -> None:
        self.write(request(key, key, fields))  # the key serves as the correlation id: one request at a time
        content = self._expect(key | RESPONSE, timeout_s)
        code = struct.unpack_from(">H", content, 4)[0]
        if code != OK:
            raise Refused(f"RabbitMQ refused {what}: {REFUSALS.get(code, 'see the code')} (stream response code "
                          f"{code})", code)


class Connection(Session):
    """One stream-protocol connection with a publisher per stream (its id: the lane, `lanes` giving each stream's,
    else its index)."""

    def __init__(self, host: str, port: int, user: str, password: str, vhost: str, streams: list[str],
                 timeout_s: float, lanes: list[int] | None = None, tls: bool = False) -> None:
        super().__init__(host, port, user, password, vhost, timeout_s, tls)
        try:
            for lane, stream in zip(range(len(streams)) if lanes is None else lanes, streams):
                self._request(DECLARE_PUBLISHER, bytes((lane,)) + str16(b"") + str16(stream.encode()),
                              f"a publisher on stream {stream}", timeout_s)
        except BaseException:
            self.sock.close()
            raise

    def take(self) -> tuple[list[tuple[int, bool]], str | None]:
        """The answers complete in the buffer, taken off it (see `answers`)."""
        found, self.at = frames(self.buffer, self.at)
        return answers(found)


SIZE = struct.Struct(">I")
# A Deliver frame from its subscription id: the id, then the osiris chunk's header (magic and version, chunk type,
# entries, records, timestamp, epoch, first offset, CRC, data length, trailer length, reserved), then its entries.
CHUNK = struct.Struct(">BBBHIqQQIIII")
CHUNK_AT = 8  # after the frame's size, key and version
ENTRIES_AT = CHUNK_AT + CHUNK.size
USER_DATA = 0  # the chunk type of messages (the others: offset tracking)
SUB_BATCH = struct.Struct(">BHII")  # a sub-entry batch's type, records, uncompressed size, size
CLOSE_CORRELATION = 0xFFFF  # correlation ids: a subscription's own id + SUBSCRIBE_CORRELATION, and this for Close
SUBSCRIBE_CORRELATION = 0x100


def offset_spec(start: int | str | None) -> bytes:
    """A Subscribe's offset specification: the stream's first offset (None), its last chunk of messages (LAST),
    else the offset given."""
    if start is None:
        return struct.pack(">H", OFFSET_FIRST)
    if start == LAST:
        return struct.pack(">H", OFFSET_LAST)
    return struct.pack(">HQ", OFFSET_OFFSET, start)


def credit_frames(chunks: dict[int, int]) -> bytes:
    """Credit frames giving each subscription back its chunks (at most 65,535 a frame)."""
    out = []
    for subscription, count in chunks.items():
        while count > 0:
            out.append(struct.pack(">IHHBH", 7, CREDIT, 1, subscription, min(count, 0xFFFF)))
            count -= 0xFFFF
    return b"".join(out)


def store_offset_frame(reference: bytes, stream: bytes, offset: int) -> bytes:
    fields = str16(reference) + str16(stream) + struct.pack(">Q", offset)
    return struct.pack(">IHH", 4 + len(fields), STORE_OFFSET, 1) + fields


class Subscriptions(Session):
    """A consumer's connection: a subscription per stream of `streams` (its id: the stream's index there), whose
    messages `take` returns as (header, payload, lane) with the lane `lanes` gives the id. `last[id]` is the offset of
    the last message taken from that subscription (None before the first); `ended` says why the connection can
    deliver no more (a Close from the broker), and `dropped` names each subscription the broker ended (a
    MetadataUpdate: its stream was deleted or its leader moved), whose deliveries are passed over from then on."""

    def __init__(self, host: str, port: int, user: str, password: str, vhost: str, streams: list[str],
                 lanes: list[int], header_size: int, timeout_s: float, tls: bool = False) -> None:
        if len(streams) > 256:
            raise ValueError(f"partitions: a stream connection has at most 256 subscriptions, {len(streams)} asked")
        super().__init__(host, port, user, password, vhost, timeout_s, tls)
        self.track(streams, lanes, header_size)

    def track(self, streams: list[str], lanes: list[int], header_size: int) -> None:
        """What the connection keeps of its subscriptions (none subscribed yet)."""
        self.streams = [stream.encode() for stream in streams]
        self.lanes = lanes
        self.header_size = header_size
        self.wanted = [0] * len(streams)  # the first offset each subscription delivers
        self.last: list[int | None] = [None] * len(streams)
        self.active = [False] * len(streams)
        self.dropped: dict[int, str] = {}
        self.ended: str | None = None
        self.answered: dict[int, int] = {}  # correlation id -> response code

    def subscribe(self, starts: dict[int, int | str | None], credit: int,
                  timeout_s: float) -> list[tuple[bytes, bytes, int]]:
        """Subscribe each id of `starts` from its offset (None: the stream's first; LAST: its last chunk) with
        `credit` chunks, all in one write, and wait up to timeout_s for every answer: the messages delivered meanwhile
        are returned (taken)."""
        requests = []
        for subscription, start in starts.items():
            self.wanted[subscription] = start if isinstance(start, int) else 0
            self.active[subscription] = True
            requests.append(request(SUBSCRIBE, SUBSCRIBE_CORRELATION + subscription,
                                    bytes((subscription,)) + str16(self.streams[subscription]) + offset_spec(start)
                                    + struct.pack(">HI", credit, 0)))
        self.write(b"".join(requests))
        waiting = {SUBSCRIBE_CORRELATION + subscription for subscription in starts}
        out, deadline = [], time.monotonic() + timeout_s
        while True:
            out += self.take()
            if self.ended:
                raise ConnectionError(self.ended)
            if waiting <= self.answered.keys():
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"RabbitMQ did not answer a Subscribe within {timeout_s} s")
            self.receive(left)
        for correlation in waiting:
            code = self.answered.pop(correlation)
            if code != OK:
                subscription = correlation - SUBSCRIBE_CORRELATION
                self.active[subscription] = False
                raise Refused(f"RabbitMQ refused a subscription to stream {self.streams[subscription].decode()}: "
                              f"{REFUSALS.get(code, 'see the code')} (stream response code {code})", code)
        return out

    def take(self) -> list[tuple[bytes, bytes, int]]:
        """The messages of the complete Deliver frames in the buffer, taken off it, each chunk's credit given back (one
        write for them all); the other frames' news kept (`answered`, `dropped`, `ended`)."""
        data, at, size = self.buffer, self.at, len(self.buffer)
        out: list[tuple[bytes, bytes, int]] = []
        chunks: dict[int, int] = {}
        unpack = SIZE.unpack_from
        while at + 8 <= size:
            end = at + 4 + unpack(data, at)[0]
            if end > size:
                break
            key = (data[at + 4] << 8) | data[at + 5]
            if key == DELIVER:
                subscription = data[at + CHUNK_AT]
                if subscription < len(self.active) and self.active[subscription]:
                    chunks[subscription] = chunks.get(subscription, 0) + 1
                    self._chunk(data, at, end, subscription, out)
            elif end - at < 8:
                raise ProtocolError(f"RabbitMQ sent a stream frame of {end - at - 4} bytes")
            elif key == CREDIT | RESPONSE:
                pass  # credit for a subscription that ended meanwhile: nothing to do
            elif key & RESPONSE and end - at >= 14:
                correlation, code = struct.unpack_from(">IH", data, at + 8)
                self.answered[correlation] = code
            elif key == METADATA_UPDATE:
                code, length = struct.unpack_from(">HH", data, at + 8)
                stream = data[at + 12:at + 12 + length]
                for subscription, name in enumerate(self.streams):
                    if name == stream and self.active[subscription]:
                        self.active[subscription] = False
                        self.dropped[subscription] = (f"RabbitMQ moved or deleted stream {stream.decode()} "
                                                      f"(code {code})")
            elif key == CLOSE:
                code = struct.unpack_from(">H", data, at + 12)[0] if end - at >= 14 else 0
                self.ended = f"RabbitMQ closed the stream connection (code {code})"
            at = end  # (a Heartbeat: nothing to do)
        self.at = at
        if chunks:
            self.write(credit_frames(chunks))
        return out

    def _chunk(self, data: bytes, at: int, end: int, subscription: int, out: list) -> None:
        """One Deliver frame's chunk (from `at` to `end` of data): its messages appended to out."""
        if end < at + ENTRIES_AT:
            raise ProtocolError(f"RabbitMQ sent a Deliver frame of {end - at - 4} bytes")
        if data[at + 7] != 1:
            raise ProtocolError(f"RabbitMQ sent a Deliver frame of version {data[at + 7]} (this client reads 1)")
        _, _, kind, entries, _, _, _, offset, _, _, _, _ = CHUNK.unpack_from(data, at + CHUNK_AT)
        if kind != USER_DATA:
            return
        lane, wanted, cut = self.lanes[subscription], self.wanted[subscription], self.header_size
        unpack, append = SIZE.unpack_from, out.append
        pos = at + ENTRIES_AT
        for _ in range(entries):
            (length,) = unpack(data, pos)
            if length & 0x80000000:  # a sub-entry batch
                pos, offset = self._sub_batch(data, pos, end, offset, wanted, lane, out)
                continue
            pos += 4
            if offset >= wanted:
                append((data[pos:pos + cut], data[pos + cut:pos + length], lane))
            pos += length
            offset += 1
        if pos > end:
            raise ProtocolError(f"RabbitMQ sent a chunk whose entries run {pos - end} bytes past its frame")
        self.last[subscription] = offset - 1 if offset > wanted else self.last[subscription]

    def _sub_batch(self, data: bytes, pos: int, end: int, offset: int, wanted: int, lane: int,
                   out: list) -> tuple[int, int]:
        """A sub-entry batch at pos: its records appended to out when uncompressed; where the next entry begins and
        the offset after its records."""
        kind, records, _, length = SUB_BATCH.unpack_from(data, pos)
        compression = (kind & 0x70) >> 4
        if compression:
            raise ProtocolError(f"RabbitMQ delivered a compressed sub-entry batch (compression type {compression}): "
                                "this consumer reads uncompressed entries only")
        at, stop, cut = pos + SUB_BATCH.size, pos + SUB_BATCH.size + length, self.header_size
        if stop > end:
            raise ProtocolError("RabbitMQ sent a sub-entry batch that runs past its frame")
        for _ in range(records):
            (size,) = SIZE.unpack_from(data, at)
            at += 4
            if offset >= wanted:
                out.append((data[at:at + cut], data[at + cut:at + size], lane))
            at += size
            offset += 1
        return stop, offset

    def store(self, reference: bytes, offsets: dict[int, int]) -> None:
        """Store each subscription's offset given under `reference` (StoreOffset: the broker does not answer)."""
        self.write(b"".join(store_offset_frame(reference, self.streams[subscription], offset)
                            for subscription, offset in offsets.items()))

    def close_after(self, timeout_s: float) -> None:
        """Close the connection once the broker has taken what was written before (its answer to a Close, waited for
        up to timeout_s; deliveries meanwhile passed over)."""
        try:
            self.active = [False] * len(self.active)
            self.write(request(CLOSE, CLOSE_CORRELATION, struct.pack(">H", OK) + str16(b"")))
            deadline = time.monotonic() + timeout_s
            while CLOSE_CORRELATION not in self.answered and (left := deadline - time.monotonic()) > 0:
                self.take()
                if CLOSE_CORRELATION not in self.answered:
                    self.receive(left)
        except OSError:
            pass  # the broker is gone
        finally:
            self.sock.close()


class Reader(Subscriptions):
    """A connection that reads where `streams` begin and end, counts their messages, and asks what a group stored
    on them (driver.message_count and backlog, on one node reached directly): a subscription per stream (its id: the
    stream's index), from one end (`edge`) or from the first offset to one given (`count_to`), nothing kept of the
    messages. A connection serves one of them (a subscription id serves once)."""

    def __init__(self, host: str, port: int, user: str, password: str, vhost: str, streams: list[str],
                 timeout_s: float, tls: bool = False) -> None:
        super().__init__(host, port, user, password, vhost, streams, list(range(len(streams))), 0, timeout_s, tls)
        self.timeout_s = timeout_s
        self.first: list[int | None] = [None] * len(streams)  # the offset of the first message delivered
        self.goal: dict[int, int] = {}  # count_to's last offset of each subscription's stream
        self.counted = [0] * len(streams)

    def _chunk(self, data: bytes, at: int, end: int, subscription: int, out: list) -> None:
        messages: list = []
        super()._chunk(data, at, end, subscription, messages)
        if not messages:
            return
        first = CHUNK.unpack_from(data, at + CHUNK_AT)[7]
        if self.first[subscription] is None:
            self.first[subscription] = first
        # A chunk is delivered whole, and count_to's goal is the last offset of a chunk: one that begins at or before
        # it is counted whole
        if subscription not in self.goal or first <= self.goal[subscription]:
            self.counted[subscription] += len(messages)

    def _read_until(self, done, timeout_s: float) -> bool:
        """Take what comes until done() holds (True) or timeout_s has passed (False)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.take()
            if self.ended or self.dropped:
                raise ConnectionError(self.ended or next(iter(self.dropped.values())))
            if done():
                return True
            left = deadline - time.monotonic()
            if left <= 0 or not self.receive(left):
                return done()

    def edge(self, start: str | None, wait_s: float) -> list[int | None]:
        """Each stream's first offset (start None: the offset of its first message) or last (LAST: the last offset
        of its last chunk of messages); None for a stream that delivers nothing within wait_s (it holds none)."""
        self.subscribe(dict.fromkeys(range(len(self.streams)), start), 1, self.timeout_s)
        ends = self.first if start is None else self.last
        self._read_until(lambda: None not in ends, wait_s)
        return list(ends)

    def count_to(self, goal: list[int | None], timeout_s: float) -> int:
        """The messages of each stream from its first offset to its `goal` offset (None: an empty stream), summed;
        TimeoutError when they are not read through in timeout_s."""
        self.goal = {k: last for k, last in enumerate(goal) if last is not None}
        if not self.goal:
            return 0
        self.subscribe(dict.fromkeys(self.goal), 10, self.timeout_s)
        if not self._read_until(lambda: all(self.last[k] is not None and self.last[k] >= last
                                            for k, last in self.goal.items()), timeout_s):
            raise TimeoutError(f"streams not read to their last offset in {timeout_s} s")
        return sum(self.counted[k] for k in self.goal)

    def stored(self, reference: str) -> list[int | None]:
        """The offset stored under `reference` on each stream (QueryOffset), None where none is."""
        out = []
        for stream in self.streams:
            self.write(request(QUERY_OFFSET, QUERY_OFFSET, str16(reference.encode()) + str16(stream)))
            content = self._expect(QUERY_OFFSET | RESPONSE, self.timeout_s)
            code = struct.unpack_from(">H", content, 4)[0]
            if code == NO_OFFSET:
                out.append(None)
            elif code != OK:
                raise Refused(f"RabbitMQ refused the offset query on stream {stream.decode()}: "
                              f"{REFUSALS.get(code, 'see the code')} (stream response code {code})", code)
            else:
                out.append(struct.unpack_from(">Q", content, 6)[0])
        return out
