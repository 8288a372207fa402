"""Brokers behind one small interface, in the spirit of OpenMessaging Benchmark's driver API.

A driver creates and deletes topics, and makes producers and consumers. A producer sends
(header, payload) to a partition and reports each acknowledgement through `on_ack(header, ok, at_ns)`
while it is polled or flushed, `at_ns` being when the acknowledgement arrived (time.monotonic_ns, taken
where it arrives: the kernel's receive time of the socket's read, in the client's callback; never when the worker
next looks); `poll(timeout_s)` waits for acknowledgements, not merely sleeps. A consumer returns batches of
(header, payload, partition); one that reads its own socket may say in `arrived_ns` when its last poll's batch
arrived (the worker's stamp of their receipt; else the poll's return).
A driver may also offer the producer's native send loop (`native_sender`, see brokerbench.native),
or raise native.Unsupported, and the worker runs its Python loop over `producer`.
A producer keeps a bounded number of messages unacknowledged, and a send waits for room when they fill it: the
driver says how many (`in_flight_window`, and `in_flight_bounds` where its client bounds them per lane or in
bytes too; `producer_window` combines them for a cell), so that a cell can tell whether the broker held its
producers back or they were the limit themselves (brokerbench.limit).
The header is the worker's framing (producer id, sequence, intended send time); each driver
carries it where its broker keeps per-message metadata (a message key, a stream entry's field).
What this interface calls partitions are the cell's lanes (see `lanes`): a count of them, or lane
indexes; a driver maps each lane to its broker's own unit (a partition, a stream key).
Drivers live in the broker plug-ins (brokerbench.brokers); this module is the core's port to them and imports
nothing of brokerbench: brokerbench.registry.get_driver makes a plug-in's driver, brokerbench.spec.lanes
counts a cell's lanes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

OnAck = Callable[[bytes, bool, int], None]
Message = tuple[bytes, bytes, int]


class BrokerUnavailable(RuntimeError):
    """The broker could not be reached or refused the operation."""


class TargetRefused(ValueError):
    """The target answers but cannot serve the run's settings (e.g. more replicas than it has brokers):
    raised by `check`, it fails the run before any cell starts, naming the setting."""


class Producer(Protocol):
    def send(self, header: bytes, payload: bytes, partition: int) -> None: ...

    def poll(self, timeout_s: float) -> None: ...

    def flush(self, timeout_s: float) -> int: ...

    def close(self) -> None: ...


class Consumer(Protocol):
    def poll(self, timeout_s: float) -> list[Message]: ...

    def hold(self, on: bool) -> None:
        """Fetch nothing until hold(False), even in the background (a startup backlog builds up at the broker
        meanwhile, and is then read from it)."""

    def commit(self) -> None: ...

    def close(self) -> None: ...

    # Optional: `finish()`, the consumer's last acknowledgements written where `close` would then keep the
    # connection open for the broker's count (RabbitMQ's quorum consumer: count_settle_s). The worker calls it, says
    # "done", and closes after: the wait goes on beside the cell's end instead of before it.


class Driver(Protocol):
    name: str
    # Optional (True when absent): whether a new topic keeps what is published before a consumer reads it; the
    # cell sends its readiness probe before the consumers start only where it does.
    keeps_unread: bool

    def check(self, timeout_s: float = 5.0) -> None: ...

    def describe(self) -> dict: ...

    def create_topic(self, topic: str, partitions: int) -> None: ...

    def delete_topic(self, topic: str, partitions: int) -> None: ...

    def producer(self, topic: str, partitions: int, mode: str, on_ack: OnAck) -> Producer: ...

    def in_flight_window(self, mode: str) -> int | None:
        """The most messages one producer (`producer` or `native_sender`) keeps unacknowledged, over all its lanes,
        before a send waits for room, as the driver's code bounds them (single mode: 1); None when nothing bounds
        them in all. Optional (absent: unknown). A driver whose client also bounds them per lane or in payload bytes
        says so in `in_flight_bounds(mode) -> {"per_lane": n, "payload_bytes": b}` (optional too)."""

    def native_sender(self, topic: str, partitions: int, mode: str): ...

    def consumer(self, topic: str, group: str, partitions: list[int]) -> Consumer: ...

    def backlog(self, topic: str, group: str, partitions: int) -> int | None: ...

    def message_count(self, topic: str, partitions: int) -> int | None: ...

    def close(self) -> None: ...


def producer_window(driver, mode: str, lanes: int, payload_bytes: float) -> int | None:
    """How many messages one producer of a cell keeps unacknowledged at most: the tightest of the driver's
    `in_flight_window` and, where it states them, its bounds per lane (times the cell's lanes, which every producer
    sends to in turn) and in payload bytes (over the cell's mean payload size). None when the driver states none."""
    window = getattr(driver, "in_flight_window", None)
    found = [window(mode)] if window else []
    bounds = getattr(driver, "in_flight_bounds", None)
    bounds = bounds(mode) if bounds else {}
    if bounds.get("per_lane"):
        found.append(bounds["per_lane"] * max(1, lanes))
    if bounds.get("payload_bytes"):
        found.append(max(1, int(bounds["payload_bytes"] // max(1.0, payload_bytes))))
    found = [n for n in found if n is not None]
    return min(found) if found else None
