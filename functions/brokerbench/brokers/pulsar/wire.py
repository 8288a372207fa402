"""Pulsar's binary protocol spoken on a blocking socket of its own: the Python loop's producer where one broker
serves every partition at a pulsar:// address, or at a pulsar+ssl:// one with TLS spoken over the socket
(socket_buffer.TlsSocket: what comes still stamped by the kernel) (driver.PulsarDriver.producer; pulsar-client's
elsewhere).

pulsar-client calls back on its own thread: a receipt was stamped in a Python callback that first had to take the
GIL from the worker's loop, 352 µs above the native loop's publish p50 on the same broker (bench/stamp_lag.py). Here
each receipt is parsed from what one read of the socket brought and stamped with the kernel's receive time of that
read (socket_buffer.recv_stamped), as the native loop does (functions/brokerbench/native/sendloop.c: pwire_connect,
pwire_seal_lane, pwire_reply).

What it speaks (https://pulsar.apache.org/docs/next/developing-binary-protocol/): a frame is [total size][command
size][BaseCommand], sizes big-endian; a SEND adds [0x0e01][CRC-32C][metadata size][MessageMetadata][payload], the
checksum covering what follows it. A batch's payload is, per message, [size][SingleMessageMetadata][body]. The few
protobuf messages used are written and read here by hand. CONNECT (no authentication) is answered CONNECTED; a
PRODUCER per partition topic (producer id = the lane, its request id the lane + 1) is answered PRODUCER_SUCCESS with
the name the broker gave it, which each SEND's metadata carries. A SEND_RECEIPT names the producer and the batch's
first sequence id; a SEND_ERROR fails the send it names; a SEND_ERROR, an ERROR or a CLOSE_PRODUCER (the broker
unloaded or moved the topic) ends the connection, which is not made again; a PING is answered with a PONG.
"""

from __future__ import annotations

import select
import socket
import ssl
import struct
import time

import google_crc32c

from ...drivers import OnAck
from ...figures import ARRIVAL
from ..socket_buffer import ConfirmedProducer, SocketBuffer, TlsSocket, stamp_arrivals

CONNECT, CONNECTED, PRODUCER, SEND, SEND_RECEIPT, SEND_ERROR = 2, 3, 5, 6, 7, 8
ERROR, CLOSE_PRODUCER, PRODUCER_SUCCESS, PING, PONG = 14, 15, 17, 18, 19
PROTOCOL_VERSION = 19  # what the fields used here need; the broker answers in the version both know
CLIENT_VERSION = b"brokerbench"  # what the broker's stats name the producer's client
CHECKSUM_MAGIC = b"\x0e\x01"
ENTRY_ROOM = 4 + 16  # what a batch adds to a message's body: its size and its SingleMessageMetadata, at most
CALL_TIMEOUT_S = 30.0  # a full window waits this long for a receipt (pulsar-client's send timeout) before giving up
NEVER = 1 << 62
# An open batch's delay is waited for in select until this long before it ends, then on the clock: select wakes
# 80 to 90 µs after its timeout on this host (p50, 300 waits of 5 ms), and Python's path from there to the write
# took as long again, so a batch went out 153 µs after its delay (p50 of 1,000 at 100 msgs/s).
DUE_SPIN_NS = 50_000
SELECT_FDS = 1024  # select takes descriptors below FD_SETSIZE; a producer on a higher one waits on its socket's timeout
LENGTHS = [bytes((n,)) for n in range(256)]  # the header's length byte at the body's start, as PulsarProducer's
HEAD = struct.Struct(">II")
SIZE = struct.Struct(">I")


class Refused(OSError):
    """The broker answered the connection or a producer with an ERROR."""


def tls_failed(address: tuple[str, int], exc: ssl.SSLError) -> str:
    """Why TLS with the broker at (host, port) failed, for a BrokerUnavailable: pulsar-client would fail the same
    handshake only when its operation timeout (30 s) ran out, and say "TimeOut"."""
    return (f"Pulsar at {address[0]}:{address[1]}: TLS failed: {exc.reason or exc} (the broker's certificate is checked against the "
            "system's trust store, or the file SSL_CERT_FILE names)")


def varint(value: int) -> bytes:
    if value < 0x80:
        return LENGTHS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def pb_uint(field: int, value: int) -> bytes:
    return varint(field << 3) + varint(value)


def pb_bytes(field: int, data: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(data)) + data


def pb_fields(data: bytes) -> dict[int, int | bytes]:
    """A protobuf message's fields: a varint's value, a length-delimited field's bytes (the last one of a number
    wins; fixed-width fields are passed over). ValueError where the message is malformed."""
    out: dict[int, int | bytes] = {}
    at, end = 0, len(data)

    def read_varint() -> int:
        nonlocal at
        value, shift = 0, 0
        while True:
            if at >= end or shift > 63:
                raise ValueError("Pulsar sent a malformed command (a varint runs past its end)")
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    while at < end:
        key = read_varint()
        kind = key & 7
        if kind == 0:
            out[key >> 3] = read_varint()
        elif kind == 2:
            length = read_varint()
            if at + length > end:
                raise ValueError("Pulsar sent a malformed command (a field runs past its end)")
            out[key >> 3] = data[at:at + length]
            at += length
        elif kind in (1, 5):
            at += 8 if kind == 1 else 4
        else:
            raise ValueError(f"Pulsar sent a malformed command (wire type {kind})")
    if at > end:
        raise ValueError("Pulsar sent a malformed command (a fixed field runs past its end)")
    return out


def command(kind: int, fields: bytes) -> bytes:
    """A simple command's frame (no payload): [total][size][BaseCommand{type, <the type's field>: fields}]."""
    cmd = pb_uint(1, kind) + pb_bytes(kind, fields)
    return HEAD.pack(4 + len(cmd), len(cmd)) + cmd


def next_frame(data: bytes, at: int) -> tuple[int, dict, int] | None:
    """The frame of data at `at` when it is complete: (command type, the command's own fields, where the next frame
    begins); None when incomplete. ValueError where it is malformed."""
    parts = frame_parts(data, at)
    return None if parts is None else (parts[0], parts[1], parts[3])


def frame_parts(data: bytes, at: int) -> tuple[int, dict, int, int] | None:
    """next_frame's, with where what follows the command begins (a MESSAGE's checksum, metadata and payload):
    (command type, its fields, that offset, where the next frame begins)."""
    if at + 4 > len(data):
        return None
    (total,) = SIZE.unpack_from(data, at)
    end = at + 4 + total
    if end > len(data):
        return None
    if total < 4 or SIZE.unpack_from(data, at + 4)[0] > total - 4:
        raise ValueError(f"Pulsar sent a frame of {total} bytes whose command does not fit in it")
    size = SIZE.unpack_from(data, at + 4)[0]
    base = pb_fields(data[at + 8:at + 8 + size])
    kind = base.get(1, 0)
    sub = base.get(kind) if kind else None
    return kind, pb_fields(sub) if isinstance(sub, bytes) else {}, at + 8 + size, end


def batch_entry(body: bytes, sequence_id: int) -> bytes:
    """A message in a batch's payload: [size][SingleMessageMetadata: payload_size, sequence_id][body]."""
    meta = b"\x18" + varint(len(body)) + b"\x40" + varint(sequence_id)
    return SIZE.pack(len(meta)) + meta + body


def send_frame(producer_id: int, name: bytes, first: int, last: int, count: int, payload: bytes, batched: bool,
               publish_ms: int) -> bytes:
    """A SEND of one message (`payload` its body) or a batch of `count` (`payload` their entries, sequence ids
    first to last)."""
    meta = pb_bytes(1, name) + pb_uint(2, first) + pb_uint(3, publish_ms)
    send = pb_uint(1, producer_id) + pb_uint(2, first)
    if batched:
        meta += pb_uint(11, count) + pb_uint(24, last)
        send += pb_uint(3, count) + pb_uint(6, last)
    cmd = pb_uint(1, SEND) + pb_bytes(SEND, send)
    covered = SIZE.pack(len(meta)) + meta + payload
    return b"".join((HEAD.pack(4 + len(cmd) + 6 + len(covered), len(cmd)), cmd, CHECKSUM_MAGIC,
                     SIZE.pack(google_crc32c.value(covered)), covered))


def error_text(fields: dict) -> str:
    """A CommandError's message."""
    message = fields.get(3)
    return message[:300].decode(errors="replace") if isinstance(message, bytes) else "no reason given"


class Link(SocketBuffer):
    """A connection to a broker, CONNECTed (what arrives on it stamped by the kernel: socket_buffer.stamp_arrivals);
    `_open` makes it, `_expect` waits for an answer."""

    PEER = "Pulsar"
    address: str

    def _open(self, host: str, port: int, timeout_s: float, tls: bool = False) -> None:
        """Connected and CONNECTed; with `tls`, TLS spoken over the socket (TlsSocket: the server's certificate
        checked against `host` by the default trust store), what comes still stamped by the kernel."""
        self.address = f"{host}:{port}"
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            stamp_arrivals(self.sock)  # an answer is stamped when it arrived, however late the loop reads it
            if tls:
                self.sock = TlsSocket(self.sock, host)
            self.buffer, self.at = b"", 0
            self.write(command(CONNECT, pb_bytes(1, CLIENT_VERSION) + pb_uint(4, PROTOCOL_VERSION)))
            self._expect((CONNECTED,), "the connection", timeout_s)
        except BaseException:
            self.sock.close()
            raise

    def _expect(self, kinds: tuple[int, ...], what: str, timeout_s: float) -> tuple[int, dict]:
        """The next frame of one of `kinds` within timeout_s (PINGs answered); Refused on an ERROR or another
        command."""
        deadline = time.monotonic() + timeout_s
        while True:
            while (frame := next_frame(self.buffer, self.at)) is not None:
                kind, fields, self.at = frame
                if kind in kinds:
                    return kind, fields
                if kind == PING:
                    self.write(command(PONG, b""))
                elif kind == ERROR:
                    raise Refused(f"Pulsar at {self.address} refused {what}: {error_text(fields)}")
                else:
                    raise Refused(f"Pulsar at {self.address} answered {what} with command {kind} (it may want "
                                  "authentication, which this client does not do)")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"Pulsar at {self.address} did not answer {what} within {timeout_s} s")
            self.receive(left)


class Connection(Link):
    """One connection to the broker that serves every topic of `topics`, a producer on each (its index: the lane;
    `names`, what the broker named them)."""

    def __init__(self, host: str, port: int, topics: list[str], timeout_s: float, tls: bool = False) -> None:
        self._open(host, port, timeout_s, tls)
        try:
            self.names: list[bytes] = []
            for lane, topic in enumerate(topics):
                self.write(command(PRODUCER, pb_bytes(1, topic.encode()) + pb_uint(2, lane) + pb_uint(3, lane + 1)))
                while True:  # a success that says the producer is not ready yet is followed by one that does
                    kind, fields = self._expect((PRODUCER_SUCCESS,), f"a producer on {topic}", timeout_s)
                    if fields.get(6, 1):
                        break
                name = fields.get(2)
                if not isinstance(name, bytes):
                    raise Refused(f"Pulsar at {self.address} gave the producer on {topic} no name")
                self.names.append(name)
        except BaseException:
            self.sock.close()
            raise

    def take(self) -> tuple[list[tuple[int, int, bool]], str | None]:
        """The answers complete in the buffer, taken off it: (lane, first sequence id, True) per receipt, False for a
        send the broker refused; and why the connection ends (a SEND_ERROR, an ERROR, a CLOSE_PRODUCER), else None.
        PINGs are answered."""
        out: list[tuple[int, int, bool]] = []
        ended = None
        try:
            while ended is None and (frame := next_frame(self.buffer, self.at)) is not None:
                kind, fields, self.at = frame
                if kind == SEND_RECEIPT:
                    out.append((fields.get(1, -1), fields.get(2, 0), True))
                elif kind == SEND_ERROR:
                    out.append((fields.get(1, -1), fields.get(2, 0), False))
                    message = fields.get(4)
                    ended = "Pulsar refused a send" + (f": {message[:300].decode(errors='replace')}"
                                                       if isinstance(message, bytes) else "")
                elif kind == ERROR:
                    ended = f"Pulsar answered with an error: {error_text(fields)}"
                elif kind == CLOSE_PRODUCER:
                    ended = "Pulsar closed the producer (its topic was unloaded or moved)"
                elif kind == PING:
                    self.write(command(PONG, b""))
        except ValueError as exc:
            raise ConnectionError(str(exc)) from None
        return out, ended


class WireProducer(ConfirmedProducer):
    """The Python loop's producer on one Connection, with PulsarDriver.producer_settings: in batch mode each lane's
    messages are gathered into a batch that goes out as one SEND when it holds batching_max_messages, when the next
    would take it over batching_max_allowed_size_in_bytes, or when batching_max_publish_delay_ms has passed since its
    first message (at the send or poll that finds it due), as the client batches; in single mode (and without
    batching) each message goes out at once. A lane keeps at most max_pending_messages unanswered: a send beyond that
    waits for a receipt. Each receipt is stamped when the read that brought it arrived. A lost or ended connection is
    not made again (as the native loop's): what was not written fails, what was in flight is no longer waited for
    (unacknowledged), and later sends fail at once."""

    stamps = ARRIVAL  # a receipt at the kernel's receive time of the read that brought it (of the ciphertext, over TLS)

    def __init__(self, connection: Connection, settings: dict, single: bool, on_ack: OnAck) -> None:
        lanes = len(connection.names)
        self._connection = connection
        self._on_ack = on_ack
        self._batching = bool(settings["batching_enabled"]) and not single
        self._max_messages = int(settings.get("batching_max_messages", 1000))
        self._max_bytes = int(settings.get("batching_max_allowed_size_in_bytes", 128 * 1024))
        self._delay_ns = int(settings.get("batching_max_publish_delay_ms", 10)) * 1_000_000
        self._max_pending = int(settings["max_pending_messages"])
        self._names = connection.names
        self._next_id = [0] * lanes  # each lane's next sequence id
        self._entries: list[list[bytes]] = [[] for _ in range(lanes)]  # each lane's open batch
        self._headers: list[list[bytes]] = [[] for _ in range(lanes)]
        self._bytes = [0] * lanes
        self._first = [0] * lanes  # each open batch's first sequence id
        self._due = [NEVER] * lanes  # when each open batch must go out
        self._next_due = NEVER
        self._out: list[bytes] = []  # SEND frames sealed, not written yet
        self._out_keys: list[tuple[int, int]] = []  # their batches' keys in _in_flight
        self._in_flight: dict[tuple[int, int], list[bytes]] = {}  # (lane, first sequence id) -> headers, sealed
        self._per_lane = [0] * lanes  # messages unanswered per lane (open or sealed)
        self._unanswered = 0
        self._broken = False
        self.error: str | None = None  # why the connection was given up

    def send(self, header: bytes, payload: bytes, partition: int) -> None:
        now = time.monotonic_ns()
        if self._broken:
            self._on_ack(header, False, now)
            return
        body = LENGTHS[len(header)] + header + payload
        lane = partition
        sequence = self._next_id[lane]
        self._next_id[lane] = sequence + 1
        self._per_lane[lane] += 1
        self._unanswered += 1
        if not self._batching:
            self._in_flight[(lane, sequence)] = [header]
            self._out_keys.append((lane, sequence))
            self._out.append(send_frame(lane, self._names[lane], sequence, sequence, 1, body, False,
                                        time.time_ns() // 1_000_000))
        else:
            entries = self._entries[lane]
            if entries and self._bytes[lane] + len(body) + ENTRY_ROOM > self._max_bytes:
                self._seal(lane)
                entries = self._entries[lane]
            if not entries:
                self._first[lane] = sequence
                self._due[lane] = due = now + self._delay_ns
                if due < self._next_due:
                    self._next_due = due
            entries.append(batch_entry(body, sequence))
            self._headers[lane].append(header)
            self._bytes[lane] += len(body) + ENTRY_ROOM
            if len(entries) >= self._max_messages or self._due[lane] <= now:
                self._seal(lane)
            if self._next_due <= now:
                self._seal_due(now)
        self._hand_over()
        while self._per_lane[lane] >= self._max_pending and not self._broken:
            self._seal(lane)
            self._hand_over()
            if not self._read(CALL_TIMEOUT_S):
                self._lost(f"no receipt came within {CALL_TIMEOUT_S} s")

    def _seal(self, lane: int) -> None:
        """Lane's open batch as one SEND frame, to be written."""
        entries = self._entries[lane]
        if not entries:
            return
        count = len(entries)
        first = self._first[lane]
        last = first + count - 1
        self._in_flight[(lane, first)] = self._headers[lane]
        self._out_keys.append((lane, first))
        self._out.append(send_frame(lane, self._names[lane], first, last, count, b"".join(entries), True,
                                    time.time_ns() // 1_000_000))
        self._entries[lane], self._headers[lane], self._bytes[lane] = [], [], 0
        self._due[lane] = NEVER
        self._next_due = min(self._due)

    def _seal_due(self, now: int) -> None:
        for lane, due in enumerate(self._due):
            if due <= now:
                self._seal(lane)

    def _hand_over(self) -> None:
        if self._broken or not self._out:
            return
        out, self._out = self._out, []
        keys, self._out_keys = self._out_keys, []
        try:
            self._connection.write(b"".join(out) if len(out) > 1 else out[0])
        except OSError as exc:
            self._out, self._out_keys = out, keys  # not written: failed with the open batches
            self._lost(f"the write failed: {exc}")

    def _take(self) -> tuple[list, object]:
        """SEND_RECEIPTs and SEND_ERRORs as read, and what ended the connection."""
        return self._connection.take()

    def _answered(self, answers: list, at: int) -> None:
        in_flight, on_ack, per_lane = self._in_flight, self._on_ack, self._per_lane
        for lane, first, ok in answers:
            headers = in_flight.pop((lane, first), None)
            if headers is None:
                continue
            per_lane[lane] -= len(headers)
            self._unanswered -= len(headers)
            for header in headers:
                on_ack(header, ok, at)

    def _read(self, timeout_s: float) -> bool:
        connection = self._connection
        try:
            if not connection.receive(timeout_s):
                return False
            answers, ended = self._take()
        except OSError as exc:
            self._lost(str(exc))
            return True
        self._answered(answers, connection.arrived_at)
        if ended is not None:
            self._lost(ended)
        return True

    def _wait(self, timeout_s: float) -> bool:
        """Wait up to timeout_s for the socket to have something, then read it (`_read`); False when nothing came.
        The wait is select's, to the microsecond: a socket's own timeout waits whole milliseconds, rounded up, so a
        batch due in 4.2 ms went out 5 ms later."""
        sock = self._connection.sock
        if timeout_s > 0 and sock.fileno() < SELECT_FDS:
            if not select.select((sock,), (), (), timeout_s)[0]:
                return False
            timeout_s = 0.0
        return self._read(timeout_s)

    def poll(self, timeout_s: float) -> None:
        """Send the batches that are due and serve the receipts: waiting up to timeout_s for a read that brings
        something (waking when an open batch falls due, to send it)."""
        now = time.monotonic_ns()
        deadline = now + int(max(0.0, timeout_s) * 1e9)
        while True:
            if self._next_due <= now:
                self._seal_due(now)
            self._hand_over()
            if self._broken:
                time.sleep(max(0, deadline - now) / 1e9)
                return
            due = self._next_due
            if self._wait(max(0, min(deadline, due - DUE_SPIN_NS) - now) / 1e9):
                return
            now = time.monotonic_ns()
            while now < due <= deadline and due - now <= DUE_SPIN_NS:  # the batch's delay ends: spin to it
                now = time.monotonic_ns()
            if now >= deadline:
                return

    def flush(self, timeout_s: float) -> int:
        """Send every open batch and wait up to timeout_s for every receipt; returns the messages still
        unanswered."""
        deadline = time.monotonic() + timeout_s
        for lane in range(len(self._entries)):
            self._seal(lane)
        self._hand_over()
        while self._in_flight and not self._broken and (left := deadline - time.monotonic()) > 0:
            self._read(left)
        return self._unanswered

    def _lost(self, why: str = "the connection was lost") -> None:
        if self._broken:
            return
        self._broken = True
        self.error = why
        at = time.monotonic_ns()
        unwritten = [self._in_flight.pop(key, []) for key in self._out_keys] if self._out else []
        for headers in unwritten + self._headers:
            for header in headers:
                self._on_ack(header, False, at)
        self._out, self._out_keys = [], []
        self._entries = [[] for _ in self._entries]
        self._headers = [[] for _ in self._headers]
        self._in_flight.clear()
        self._per_lane = [0] * len(self._per_lane)
        self._unanswered = 0
        self._connection.close()

    def close(self) -> None:
        self.flush(5)
        if not self._broken:
            self._connection.close()
