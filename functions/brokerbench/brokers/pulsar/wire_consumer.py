"""Pulsar's binary protocol spoken by the consumer on a socket of its own: the driver's consumer where one broker serves
every partition at a pulsar:// address, or at a pulsar+ssl:// one with TLS spoken over the socket
(socket_buffer.TlsSocket: what comes still stamped by the kernel) (driver.PulsarDriver.consumer; pulsar-client's
elsewhere).

pulsar-client's consumer hands a message over when the worker's receive returns it: after the C++ client's I/O thread
read it and queued it, and after the loop came back to receive. Its stamp came hundreds of microseconds after the
kernel's receive time at the median (docs/performance.md, "How late a client library stamps"). Here a poll returns
what one read of the socket brought, stamped with the kernel's receive time of that read (socket_buffer.recv_stamped),
as NATS's consumer is: late by no more than the read's later segments, never early.

What it speaks (https://pulsar.apache.org/docs/next/developing-binary-protocol/), on one CONNECTed connection (wire.Link):
- a SUBSCRIBE per partition topic (consumer id = its index; Exclusive, durable, from the earliest message, as
  pulsar-client's consumer subscribes), each answered SUCCESS, then a FLOW of RECEIVER_QUEUE permits per consumer; the
  broker sends at most that many messages ahead of what the consumer took, and each time a consumer has taken half of
  them, a FLOW gives them back (as the clients refill their receiver queues);
- a MESSAGE carries its consumer id and message id (ledger, entry), then [checksum][metadata size][MessageMetadata]
  [payload]; the payload is a batch ([size][SingleMessageMetadata][body] per message) where the metadata has
  num_messages_in_batch, else one body. A compressed payload is not read (the project's producers never compress);
- each partition's last entry is acknowledged cumulatively (an ACK of its ledger and entry: the whole entry) at the
  next poll, at commit and at close; close then closes each consumer (CLOSE_CONSUMER), whose SUCCESS comes after the
  broker took the acknowledgements written before it, so the backlog counted after the drain is exact;
- a PING is answered with a PONG. A connection lost (or a CLOSE_CONSUMER from the broker: the topic was unloaded) is
  made again, with its subscriptions, at the next poll and then every RECONNECT_WAIT_S: the broker delivers again
  from the last acknowledged entry (what came twice, the worker counts as duplicated).
"""

from __future__ import annotations

import ssl
import time

from ...drivers import BrokerUnavailable, Message
from ...figures import ARRIVAL
from .wire import (CHECKSUM_MAGIC, ERROR, PING, PONG, SIZE, Link, Refused, command, error_text, frame_parts, pb_bytes,
                   pb_fields, pb_uint, tls_failed)

SUBSCRIBE, MESSAGE, ACK, FLOW, SUCCESS, CLOSE_CONSUMER = 4, 9, 10, 11, 13, 16
EXCLUSIVE, EARLIEST, CUMULATIVE = 0, 1, 1  # CommandSubscribe.SubType, .InitialPosition; CommandAck.AckType
RECONNECT_WAIT_S = 1.0
# A connection made again while the consumer polls (a broker restarted) waits this long at most for CONNECTED and each
# SUCCESS: the worker's poll is held that long, and a broker that does not answer by then (still loading the topic) is
# tried again RECONNECT_WAIT_S later.
RECONNECT_TIMEOUT_S = 2.0
CLOSE_TIMEOUT_S = 5.0


class Unreadable(RuntimeError):
    """A message this consumer cannot read (a compressed payload, a malformed batch): the cell fails with it."""


def message_id(ledger: int, entry: int) -> bytes:
    """MessageIdData of a whole entry (no batch index: a cumulative ACK of it takes every message of the entry)."""
    return pb_uint(1, ledger) + pb_uint(2, entry)


def subscribe(topic: str, subscription: str, consumer_id: int) -> bytes:
    return command(SUBSCRIBE, pb_bytes(1, topic.encode()) + pb_bytes(2, subscription.encode())
                   + pb_uint(3, EXCLUSIVE) + pb_uint(4, consumer_id) + pb_uint(5, consumer_id + 1)
                   + pb_uint(13, EARLIEST))


def flow(consumer_id: int, permits: int) -> bytes:
    return command(FLOW, pb_uint(1, consumer_id) + pb_uint(2, permits))


def acknowledgement(consumer_id: int, ledger: int, entry: int) -> bytes:
    return command(ACK, pb_uint(1, consumer_id) + pb_uint(2, CUMULATIVE) + pb_bytes(3, message_id(ledger, entry)))


def _payload_size(single: bytes) -> int | None:
    """A SingleMessageMetadata's payload_size (field 3): read at once where it comes first (as the clients write it
    when a message has no properties or key), else from its fields."""
    if single[:1] == b"\x18":
        value, shift = 0, 0
        for byte in single[1:6]:
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
    length = pb_fields(single).get(3)
    return length if isinstance(length, int) else None


def entry_messages(data: bytes, start: int, end: int) -> list[tuple[bytes, bytes]]:
    """The worker's (header, payload) of each message of a MESSAGE's [checksum][metadata size][MessageMetadata]
    [payload], data[start:end]: one, or each of a batch's (a body is [header length][header][payload]). Unreadable
    where the payload is compressed or does not parse."""
    if data[start:start + 2] == CHECKSUM_MAGIC:
        start += 6  # the broker checked the checksum when it took the message
    try:
        (size,) = SIZE.unpack_from(data, start)
        meta = pb_fields(data[start + 4:start + 4 + size])
    except (ValueError, IndexError) as exc:  # struct.error is a ValueError
        raise Unreadable(f"Pulsar sent a message whose metadata does not parse: {exc}") from None
    if meta.get(8, 0):
        raise Unreadable(f"Pulsar sent a compressed message (compression type {meta[8]}), which this consumer does "
                         "not read")
    at = start + 4 + size
    if 11 not in meta:  # num_messages_in_batch: a batch, even of one
        cut = at + 1 + data[at]
        return [(data[at + 1:cut], data[cut:end])]
    out = []
    for _ in range(meta[11]):
        try:
            (size,) = SIZE.unpack_from(data, at)
            length = _payload_size(data[at + 4:at + 4 + size])
        except ValueError as exc:
            raise Unreadable(f"Pulsar sent a batch whose entries do not parse: {exc}") from None
        at += 4 + size
        if length is None or not 0 < length <= end - at:
            raise Unreadable("Pulsar sent a batch whose entry runs past its end (or has no body)")
        cut = at + 1 + data[at]
        out.append((data[at + 1:cut], data[cut:at + length]))
        at += length
    return out


class Subscriptions(Link):
    """One connection with a consumer on each topic of `topics` (its index: the consumer id), each given `permits`."""

    def __init__(self, host: str, port: int, topics: list[str], subscription: str, permits: int,
                 timeout_s: float, tls: bool = False) -> None:
        self._open(host, port, timeout_s, tls)
        try:
            for consumer_id, topic in enumerate(topics):
                self.write(subscribe(topic, subscription, consumer_id))
                self._expect((SUCCESS,), f"a subscription {subscription} to {topic}", timeout_s)
            self.write(b"".join(flow(consumer_id, permits) for consumer_id in range(len(topics))))
        except BaseException:
            self.sock.close()
            raise


class WireConsumer:
    """The driver's consumer (see the module's notes): `poll` returns what one read of the socket brought (at least one
    message, or nothing after timeout_s) and sets `arrived_ns`, when that read's data arrived: the worker's stamp of
    their receipt."""

    stamps = ARRIVAL  # a socket of its own: the kernel's receive time (of the ciphertext, over TLS)

    def __init__(self, address: tuple[str, int], topics: list[str], subscription: str, lanes: list[int],
                 queue: int, timeout_s: float, tls: bool = False) -> None:
        self._address, self._topics, self._subscription = address, topics, subscription
        self._tls = tls
        self._lanes = lanes  # consumer id -> the lane (partition) the worker knows it by
        self._queue = queue
        self._refill_at = max(1, queue // 2)
        self._timeout_s = timeout_s
        self._taken = [0] * len(topics)  # messages taken since each consumer's last FLOW
        self._last: dict[int, tuple[int, int]] = {}  # consumer id -> its last entry received, not acknowledged yet
        self._retry_at = 0.0
        self.arrived_ns = 0
        self._link: Subscriptions | None = Subscriptions(*address, topics, subscription, queue, timeout_s, tls)

    def _lost(self) -> None:
        if self._link is not None:
            self._link.close()
            self._link = None
            self._retry_at = 0.0  # the first attempt at the next poll

    def _reconnect(self) -> bool:
        """One attempt (at most one per RECONNECT_WAIT_S): the connection and its subscriptions made again."""
        now = time.monotonic()
        if now < self._retry_at:
            return False
        self._retry_at = now + RECONNECT_WAIT_S
        try:
            self._link = Subscriptions(*self._address, self._topics, self._subscription, self._queue,
                                       min(self._timeout_s, RECONNECT_TIMEOUT_S), self._tls)
        except (OSError, ValueError):
            return False
        self._taken = [0] * len(self._topics)
        self._last.clear()  # what was not acknowledged comes again
        return True

    def _acknowledge(self) -> None:
        """The last poll's entries acknowledged, each partition's last one, in one write."""
        if self._last:
            last, self._last = self._last, {}
            self._link.write(b"".join(acknowledgement(cid, *entry) for cid, entry in last.items()))

    def poll(self, timeout_s: float) -> list[Message]:
        deadline = time.monotonic() + timeout_s
        if self._link is None and not self._reconnect():
            time.sleep(max(0.0, min(deadline, self._retry_at) - time.monotonic()))
            return []
        link = self._link
        try:
            if not link.read_lately():  # what came meanwhile, read before this poll writes (NATS's ARRIVED_FIRST)
                link.receive(0)
            self._acknowledge()
            while True:
                out = self._take(link)
                if out:
                    self.arrived_ns = link.arrived_at
                    return out
                left = deadline - time.monotonic()
                if left <= 0 or not link.receive(left):
                    return out
        except OSError:
            self._lost()
            return []

    def _take(self, link: Subscriptions) -> list[Message]:
        """The messages complete in the buffer (each body: [header length][header][payload]), taken off it; the
        permits given back where a consumer took half its queue."""
        out: list[Message] = []
        lanes, last, taken = self._lanes, self._last, self._taken
        data = link.buffer
        try:
            while (parts := frame_parts(data, link.at)) is not None:
                kind, fields, start, end = parts
                link.at = end
                if kind == MESSAGE:
                    cid = fields.get(1, -1)
                    ids = fields.get(2)
                    if not 0 <= cid < len(lanes) or not isinstance(ids, bytes):
                        raise Unreadable(f"Pulsar sent a message for consumer {cid}, which this connection does not "
                                         "have")
                    ids = pb_fields(ids)
                    lane = lanes[cid]
                    messages = entry_messages(data, start, end)
                    out += [(header, payload, lane) for header, payload in messages]
                    last[cid] = (ids.get(1, 0), ids.get(2, 0))
                    taken[cid] += len(messages)
                elif kind == PING:
                    link.write(command(PONG, b""))
                elif kind == CLOSE_CONSUMER:
                    raise ConnectionResetError("Pulsar closed a consumer (its topic was unloaded or moved)")
                elif kind == ERROR:
                    raise ConnectionResetError(f"Pulsar answered with an error: {error_text(fields)}")
        except ValueError as exc:
            raise ConnectionError(str(exc)) from None
        refill = [cid for cid, n in enumerate(taken) if n >= self._refill_at]
        if refill:
            link.write(b"".join(flow(cid, taken[cid]) for cid in refill))
            for cid in refill:
                taken[cid] = 0
        return out

    def hold(self, on: bool) -> None:
        """Nothing to stop: the broker sends at most the permits given (RECEIVER_QUEUE per partition), which wait in
        the socket; the rest stays at the broker until taken."""

    def commit(self) -> None:
        """Acknowledge what was received, for the broker-side backlog."""
        if self._link is None:
            return
        try:
            self._acknowledge()
        except OSError:
            self._lost()

    def close(self) -> None:
        """What was received acknowledged, and each consumer closed: its SUCCESS (up to CLOSE_TIMEOUT_S) says the
        broker took the acknowledgements written before it."""
        link = self._link
        if link is None:
            return
        try:
            self._acknowledge()
            first = len(self._topics) + 1  # request ids past the subscriptions'
            link.write(b"".join(command(CLOSE_CONSUMER, pb_uint(1, cid) + pb_uint(2, first + cid))
                                for cid in range(len(self._topics))))
            waiting = set(range(first, first + len(self._topics)))
            deadline = time.monotonic() + CLOSE_TIMEOUT_S
            while waiting:
                while waiting and (parts := frame_parts(link.buffer, link.at)) is not None:
                    kind, fields, _, link.at = parts  # a message still coming is the broker's again once closed
                    if kind == SUCCESS:
                        waiting.discard(fields.get(1))
                    elif kind == PING:
                        link.write(command(PONG, b""))
                    elif kind == ERROR:
                        return
                left = deadline - time.monotonic()
                if waiting and (left <= 0 or not link.receive(left)):
                    return
        except (OSError, ValueError):
            pass  # the broker is gone: what was not acknowledged stays in its backlog
        finally:
            link.close()
            self._link = None


def wire_consumer(address: tuple[str, int], topics: list[str], subscription: str, lanes: list[int], queue: int,
                  timeout_s: float, tls: bool = False) -> WireConsumer | None:
    """The consumer on its own connection (over TLS with `tls`), or None where the connection or a subscription
    cannot be made (authentication: what it does not do), for pulsar-client's to try. A subscription the broker
    refuses for a reason of the subscription's own (another consumer holds it), and a TLS handshake that fails (a
    certificate not trusted: pulsar-client's would fail too, after its 30 s timeout), are BrokerUnavailable."""
    try:
        return WireConsumer(address, topics, subscription, lanes, queue, timeout_s, tls)
    except ssl.SSLError as exc:  # a certificate not trusted: pulsar-client's handshake would fail the same way
        raise BrokerUnavailable(tls_failed(address, exc)) from None
    except Refused as exc:
        if "Exclusive consumer is already connected" in str(exc):  # the broker's words (Refused keeps no code)
            raise BrokerUnavailable(f"could not subscribe {subscription}: {exc}") from None
        return None
    except (OSError, ValueError):
        return None
