"""AMQP 0-9-1 publishing with confirms, and consuming, spoken on a blocking socket of its own: the Python loop's
quorum-queue producer and the quorum-queue consumer (rabbitmq_quorum.driver: QuorumProducer, QuorumConsumer).

pika's publish goes into its connection's output buffer and is written when its I/O loop next runs, and a confirm
is stamped in a callback after pika's frame decoding and dispatch; its publish p50 read 282 µs above the native
loop's on the same node (bench/stamp_lag.py). Here a publish is written as it is made and the confirms are parsed
from what one read of the socket brought, stamped when it arrived (the kernel's receive time,
socket_buffer.recv_stamped; on a TLS connection, which cannot return it, when the read returned), as the native loop
does (functions/brokerbench/native/sendloop.c: amqp_connect, amqp_send, amqp_reply).

What it speaks (https://www.rabbitmq.com/resources/specs/amqp0-9-1.pdf): the protocol header, Connection.Start-Ok
(PLAIN, and the capability that makes a refused login a Connection.Close rather than a hang-up), Tune-Ok (the
broker's frame size, no heartbeats: the producer reads its socket at every send and while it waits), Open of the
virtual host; then a channel in confirm mode (Channel.Open, Confirm.Select). A message is Basic.Publish to the lane's
queue through the default exchange, a content header without properties and the body in frames of at most the
frame size. The broker's Basic.Ack and Basic.Nack confirm a delivery tag, or every one up to it (`multiple`); a
Channel.Close (a refused channel) or Connection.Close raises `Closed` with the broker's code and text. Over TLS
(Amazon MQ) the same bytes go through TLS spoken over the socket (socket_buffer.TlsSocket), stamped at arrival too.

A consuming connection (`Consuming`) opens its channel without confirm mode, asks Basic.Qos and a Basic.Consume per
queue, and parses what each read of the socket brought in one pass (`deliveries`): Basic.Deliver, the content
header, the body in one frame or several. pika built an object per frame and called back per message, some 31 µs of
CPU a message in all. Without heartbeats, a consumer whose broker went silent (a black hole) waits for it as long
as it lasts; a reset or a close is found at the next read."""

from __future__ import annotations

import socket
import struct
import time

from ...drivers import BrokerUnavailable
from ..socket_buffer import SocketBuffer, TlsSocket, stamp_arrivals
from . import amqp

FRAME_END = b"\xce"
METHOD, HEADER, BODY, HEARTBEAT = 1, 2, 3, 8
MAX_FRAME = 131072  # the frame size asked for, as the native loop (the broker's own when smaller)
SOCKET_BUFFER_BYTES = 4 << 20  # a consumer's receive buffer asked of the kernel: a prefetch of 1 KB messages and more
CAPABILITY = b"authentication_failure_close"
BASIC_ACK, BASIC_NACK = (60, 80), (60, 120)
CONNECTION_CLOSE, CHANNEL_CLOSE, CHANNEL_CLOSE_OK = (10, 50), (20, 40), (20, 41)
CONNECTION_CLOSE_OK = (10, 51)
BASIC_QOS, BASIC_QOS_OK, BASIC_CONSUME = (60, 10), (60, 11), (60, 20)
DELIVER = struct.pack(">HH", 60, 60)  # Basic.Deliver's class and method, as they open its method frame's payload


class Closed(OSError):
    """The broker closed the channel (`channel` True: a refused channel; the connection stays) or the connection."""

    def __init__(self, channel: bool, code: int, text: str) -> None:
        super().__init__(f"RabbitMQ closed the {'channel' if channel else 'connection'}: {code} {text}")
        self.channel = channel


def short_str(value: bytes) -> bytes:
    return bytes((len(value),)) + value


def method_frame(channel: int, class_method: tuple[int, int], args: bytes = b"") -> bytes:
    return struct.pack(">BHIHH", METHOD, channel, 4 + len(args), *class_method) + args + FRAME_END


def frames(data: bytes, at: int) -> tuple[list[tuple[int, int, bytes]], int]:
    """The complete frames of data from `at`: (type, channel, payload) each, and where the first incomplete begins."""
    out = []
    size = len(data)
    while at + 7 <= size:
        kind, channel, length = struct.unpack_from(">BHI", data, at)
        end = at + 7 + length
        if end + 1 > size:
            break
        if data[end] != 0xCE:
            raise ConnectionError(f"RabbitMQ sent a frame without its end marker (type {kind})")
        out.append((kind, channel, data[at + 7:end]))
        at = end + 1
    return out, at


def closed_by(class_method: tuple[int, int], args: bytes) -> Closed:
    code, text_len = struct.unpack_from(">HB", args)
    return Closed(class_method == CHANNEL_CLOSE, code, args[3:3 + text_len].decode(errors="replace"))


class Connection(SocketBuffer):
    """One AMQP connection with a channel in confirm mode (`channel`); publishes are written at once."""

    PEER = "RabbitMQ"

    confirm = True  # the channel in confirm mode (a publisher's); a consumer's is not (Consuming)

    def __init__(self, host: str, port: int, user: str, password: str, vhost: str, timeout_s: float,
                 tls_host: str | None = None) -> None:
        sock = socket.create_connection((host, port), timeout=timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not self.confirm:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
            stamp_arrivals(sock)  # over TLS too: TlsSocket reads the ciphertext with the kernel's stamp
            if tls_host:
                sock = TlsSocket(sock, tls_host)
            self.sock = sock
            self.buffer, self.at = b"", 0
            self.channel = 0
            self._handshake(user.encode(), password.encode(), vhost.encode(), timeout_s)
            self.open_channel(timeout_s)
        except BaseException:
            sock.close()
            raise

    def _handshake(self, user: bytes, password: bytes, vhost: bytes, timeout_s: float) -> None:
        self.write(b"AMQP\x00\x00\x09\x01")
        self._expect((10, 10), timeout_s)  # Connection.Start
        capabilities = short_str(CAPABILITY) + b"t\x01"
        properties = short_str(b"capabilities") + b"F" + struct.pack(">I", len(capabilities)) + capabilities
        response = b"\x00" + user + b"\x00" + password
        self.write(method_frame(0, (10, 11), struct.pack(">I", len(properties)) + properties + short_str(b"PLAIN")
                                + struct.pack(">I", len(response)) + response + short_str(b"en_US")))
        tune = self._expect((10, 30), timeout_s)  # Connection.Tune: channel_max, frame_max, heartbeat
        channel_max, frame_max = struct.unpack_from(">HI", tune)
        self.frame_max = MAX_FRAME if frame_max == 0 or frame_max > MAX_FRAME else frame_max
        self.write(method_frame(0, (10, 31), struct.pack(">HIH", channel_max, self.frame_max, 0)))
        self.write(method_frame(0, (10, 40), short_str(vhost) + short_str(b"") + b"\x00"))
        self._expect((10, 41), timeout_s)  # Open-Ok

    def open_channel(self, timeout_s: float) -> None:
        """The next channel, in confirm mode (its delivery tags count its publishes from 1) unless `confirm` is off."""
        self.channel += 1
        self.write(method_frame(self.channel, (20, 10), b"\x00"))
        self._expect((20, 11), timeout_s)
        if not self.confirm:
            return
        self.write(method_frame(self.channel, (85, 10), b"\x00"))
        self._expect((85, 11), timeout_s)
        self.prefixes: dict[bytes, bytes] = {}

    def close_channel(self, timeout_s: float) -> None:
        """The channel closed (Channel.Close, its Close-Ok awaited; confirms that come meanwhile are dropped)."""
        self.write(method_frame(self.channel, CHANNEL_CLOSE, struct.pack(">HB", 200, 0) + b"\x00\x00\x00\x00"))
        self._expect(CHANNEL_CLOSE_OK, timeout_s)

    def _expect(self, want: tuple[int, int], timeout_s: float) -> bytes:
        """The arguments of the next method `want` on the current channel, read within timeout_s; other frames are
        passed over; a Connection.Close or Channel.Close raises Closed."""
        deadline = time.monotonic() + timeout_s
        while True:
            found, self.at = frames(self.buffer, self.at)
            for kind, channel, payload in found:
                if kind != METHOD:
                    continue
                class_method = struct.unpack_from(">HH", payload)
                if class_method in (CONNECTION_CLOSE, CHANNEL_CLOSE):
                    raise closed_by(class_method, payload[4:])
                if class_method == want and channel == (0 if want[0] == 10 else self.channel):
                    self.buffer, self.at = self.buffer[self.at:], 0
                    return payload[4:]
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"RabbitMQ did not answer {want} within {timeout_s} s")
            self.receive(left)

    def publish(self, queue: bytes, header: bytes, payload: bytes) -> None:
        """Basic.Publish to `queue` through the default exchange, its content header and the body (header, then
        payload) in frames of at most the frame size, written. A body of one frame, the usual case, takes one pack
        and one join: the loop comes to this path cold after its wait, and each step costs it there."""
        prefix = self.prefixes.get(queue)
        if prefix is None:
            prefix = self.prefixes[queue] = method_frame(self.channel, (60, 40), b"\x00\x00\x00" + short_str(queue)
                                                         + b"\x00") + struct.pack(">BHIHH", HEADER, self.channel, 14,
                                                                                   60, 0)
        size = len(header) + len(payload)
        if size <= self.frame_max - 8:
            self.write(b"".join((prefix, struct.pack(">QHBBHI", size, 0, 0xCE, BODY, self.channel, size), header,
                                 payload, FRAME_END)))
            return
        body, chunk = header + payload, self.frame_max - 8
        parts = [prefix, struct.pack(">QH", size, 0), FRAME_END]
        for at in range(0, size, chunk):
            piece = body[at:at + chunk]
            parts += (struct.pack(">BHI", BODY, self.channel, len(piece)), piece, FRAME_END)
        self.write(b"".join(parts))

    def confirms(self) -> tuple[list[tuple[int, bool, bool]], Closed | None]:
        """The confirms complete in the buffer, taken off it: (delivery tag, multiple, ok) each, in order; and a
        Channel.Close or Connection.Close that came after them (the connection is then given up), else None."""
        found, self.at = frames(self.buffer, self.at)
        out = []
        for kind, channel, payload in found:
            if kind != METHOD or channel not in (0, self.channel):
                continue  # a heartbeat, or what a channel closed before still brought
            class_method = struct.unpack_from(">HH", payload)
            if class_method in (BASIC_ACK, BASIC_NACK):
                tag, bits = struct.unpack_from(">QB", payload, 4)
                out.append((tag, bool(bits & 1), class_method == BASIC_ACK))
            elif class_method in (CONNECTION_CLOSE, CHANNEL_CLOSE):
                return out, closed_by(class_method, payload[4:])
        return out, None

    def close(self) -> None:
        try:
            self.sock.settimeout(1.0)
            self.sock.sendall(method_frame(0, CONNECTION_CLOSE, struct.pack(">HB", 200, 0) + b"\x00\x00\x00\x00"))
        except OSError:
            pass
        finally:
            self.sock.close()


class Consuming(Connection):
    """An AMQP connection whose channel consumes (no confirm mode): Basic.Qos, a Basic.Consume per queue, the
    deliveries parsed in bulk from the buffer (`take`), a `multiple` Basic.Ack written at once."""

    confirm = False

    def consume(self, queues: list[bytes], prefetch: int, timeout_s: float) -> dict[bytes, int]:
        """Basic.Qos `prefetch` (per consumer, as pika's basic_qos) awaited; then a Basic.Consume on each queue, its
        consumer tag its index, written in one go without waiting for Consume-Ok (no-wait: deliveries may follow at
        once; a queue that does not exist closes the channel, and `take` raises it). Returns {consumer tag: index}."""
        self.write(method_frame(self.channel, BASIC_QOS, struct.pack(">IHB", 0, prefetch, 0)))
        self._expect(BASIC_QOS_OK, timeout_s)
        tags = {b"%d" % n: n for n in range(len(queues))}
        self.write(b"".join(method_frame(self.channel, BASIC_CONSUME, b"\x00\x00" + short_str(queue) + short_str(tag)
                                         + b"\x08\x00\x00\x00\x00")  # no-wait; no arguments
                            for tag, queue in zip(tags, queues)))
        return tags

    def ack(self, tag: int) -> None:
        """Basic.Ack of every delivery up to `tag` (multiple)."""
        self.write(method_frame(self.channel, BASIC_ACK, struct.pack(">QB", tag, 1)))

    def take(self, lanes: dict[bytes, int], split: int) -> tuple[list, int]:
        """The messages complete in the buffer (see `deliveries`), taken off it, and the last one's delivery tag; a
        Channel.Close or Connection.Close among what came raises Closed (after the messages before it: they are
        delivered again on the next connection, as they were not acknowledged)."""
        out, tag, others, self.at = deliveries(self.buffer, self.at, lanes, split)
        for channel, class_method, args in others:
            if class_method in (CONNECTION_CLOSE, CHANNEL_CLOSE) and channel in (0, self.channel):
                raise closed_by(class_method, args)
        return out, tag

    def close(self, timeout_s: float = 1.0) -> None:
        """Connection.Close, and its Close-Ok awaited up to timeout_s before the socket is closed: the broker has
        then taken every acknowledgement written before it. (A socket closed with deliveries unread in it sends a
        reset, which may discard what the broker had not read yet.)"""
        try:
            self.write(method_frame(0, CONNECTION_CLOSE, struct.pack(">HB", 200, 0) + b"\x00\x00\x00\x00"))
            self._expect(CONNECTION_CLOSE_OK, timeout_s)
        except OSError:
            pass
        finally:
            self.sock.close()


def deliveries(data: bytes, at: int, lanes: dict[bytes, int], split: int) -> tuple[list, int, list, int]:
    """The messages complete in data from `at`, each a Basic.Deliver, its content header and its body frames:
    (header, payload, lane) each, the body's first `split` bytes its header and the lane its consumer tag's in
    `lanes`; the last one's delivery tag (0: none came); the other methods, (channel, (class, method), arguments)
    each (a Channel.Close, a Connection.Close); and where the first incomplete message begins. A message is taken
    whole or not at all, so one split across reads is taken from the read that completes it. Heartbeats are passed
    over. Each message costs four unpacks and two slices here: what one read brought is parsed in one pass, with no
    object or call per frame."""
    out: list = []
    append = out.append
    others = []
    unpack = struct.unpack_from
    size = len(data)
    last = -1  # where the last message's delivery tag is
    while at + 7 <= size:
        kind, channel, length = unpack(">BHI", data, at)
        end = at + 7 + length
        if end >= size:
            break
        if data[end] != 0xCE:
            raise ConnectionError(f"RabbitMQ sent a frame without its end marker (type {kind})")
        if kind != METHOD:  # a heartbeat (none is asked for)
            at = end + 1
            continue
        if data[at + 7:at + 11] != DELIVER:
            others.append((channel, unpack(">HH", data, at + 7), data[at + 11:end]))
            at = end + 1
            continue
        # Basic.Deliver: consumer tag, delivery tag, redelivered, exchange, routing key
        begin, tag_at = at, at + 12 + data[at + 11]
        lane = lanes[data[at + 12:tag_at]]
        header_at = end + 1
        if header_at + 19 > size:
            break
        kind, _, length, _, _, body_size = unpack(">BHIHHQ", data, header_at)
        body_at = header_at + 8 + length
        if body_at > size:
            break
        if kind != HEADER or data[body_at - 1] != 0xCE:
            raise ConnectionError(f"RabbitMQ sent a frame of type {kind} where a delivery's content header belongs")
        if body_at + 7 > size:
            break
        kind, _, length = unpack(">BHI", data, body_at)
        start, stop = body_at + 7, body_at + 7 + length
        if stop >= size:
            break
        if kind != BODY or data[stop] != 0xCE:
            raise ConnectionError(f"RabbitMQ sent a frame of type {kind} where a delivery's body belongs")
        if length == body_size:  # the usual case: the body in one frame, sliced out as it lies
            append((data[start:start + split], data[start + split:stop], lane))
            at = stop + 1
        else:  # a body over several frames (larger than the frame size)
            pieces, got, at = [data[start:stop]], length, stop + 1  # the message began at `begin`
            while got < body_size and at + 7 <= size:
                kind, _, length = unpack(">BHI", data, at)
                stop = at + 7 + length
                if stop >= size:
                    break
                if kind != BODY or data[stop] != 0xCE:
                    raise ConnectionError(f"RabbitMQ sent a frame of type {kind} where a delivery's body belongs")
                pieces.append(data[at + 7:stop])
                got += length
                at = stop + 1
            if got < body_size:
                at = begin  # the rest of the body is still to come
                break
            body = b"".join(pieces)
            append((body[:split], body[split:], lane))
        last = tag_at
    tag = unpack(">Q", data, last)[0] if last >= 0 else 0
    return out, tag, others, at


def connect(endpoint: dict, timeout_s: float = 10.0, kind: type[Connection] = Connection) -> Connection:
    """A publishing connection (a consuming one: `kind` Consuming) to the first of the endpoint's addresses
    (amqp.addresses: a cluster's nodes in turn) that takes one; a refused login, or no address answering, is
    BrokerUnavailable."""
    user, password = amqp.credentials(endpoint)
    tls_host = endpoint["host"] if endpoint.get("tls") else None
    errors = []
    for host, port in amqp.addresses(endpoint):
        try:
            return kind(host, port, user, password, endpoint.get("vhost", "/"), timeout_s, tls_host)
        except Closed as exc:  # the broker answered, and refused (a login, a virtual host)
            raise BrokerUnavailable(f"RabbitMQ at {host}:{port}: {exc}") from None
        except (OSError, ValueError, struct.error) as exc:
            errors.append(f"{host}:{port}: {exc!r}")
    raise BrokerUnavailable(f"RabbitMQ at {endpoint['host']}:{endpoint['amqp_port']} did not answer: "
                            f"{'; '.join(errors)}")
