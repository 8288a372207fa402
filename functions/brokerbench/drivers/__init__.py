"""Brokers behind one small interface, in the spirit of OpenMessaging Benchmark's driver API.

A driver creates and deletes topics, and makes producers and consumers. A producer sends
(header, payload) to a partition and reports each acknowledgement through `on_ack(header, ok, at_ns)`
while it is polled or flushed, `at_ns` being when the acknowledgement arrived (time.monotonic_ns, taken
where it arrives: on the socket's read, in the client's callback; never when the worker next looks);
`poll(timeout_s)` waits for acknowledgements, not merely sleeps. A consumer returns batches of
(header, payload, partition).
A driver may also offer the producer's native send loop (`native_sender`, see brokerbench.native),
or raise native.Unsupported, and the worker runs its Python loop over `producer`.
The header is the worker's framing (producer id, sequence, intended send time); each driver
carries it where its broker keeps per-message metadata (a message key, a stream entry's field).
What this interface calls partitions are the cell's lanes (see `lanes`): a count of them, or lane
indexes; a driver maps each lane to its broker's own unit (a partition, a stream key).
Drivers live in the broker plug-ins (brokerbench.brokers); this module is the core's port to them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..brokers import for_target, plugins

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


class Driver(Protocol):
    name: str

    def check(self, timeout_s: float = 5.0) -> None: ...

    def describe(self) -> dict: ...

    def create_topic(self, topic: str, partitions: int) -> None: ...

    def delete_topic(self, topic: str, partitions: int) -> None: ...

    def producer(self, topic: str, partitions: int, mode: str, on_ack: OnAck) -> Producer: ...

    def native_sender(self, topic: str, partitions: int, mode: str): ...

    def consumer(self, topic: str, group: str, partitions: list[int]) -> Consumer: ...

    def backlog(self, topic: str, group: str, partitions: int) -> int | None: ...

    def message_count(self, topic: str, partitions: int) -> int | None: ...

    def close(self) -> None: ...


def lanes(cell: dict) -> int:
    """How many lanes a cell's messages spread over: its partitions times client.topics (1 unless the run
    asks for more, which only Kafka's driver serves: lane i is then partition i // topics of topic
    i % topics). Message seq goes to lane seq % lanes, and consumers split the lanes between them."""
    return int(cell.get("partitions", 1)) * int((cell.get("client") or {}).get("topics", 1))


def get_driver(broker: str, endpoint: dict, client: dict) -> Driver:
    """The driver for `broker` (a registered broker, or a named target whose endpoint names its `driver`),
    connected to `endpoint` with the run's client settings."""
    return for_target(broker, endpoint).new_driver(endpoint, client)


def driver_modules() -> list[str]:
    """The module of every registered broker's driver (what a worker's fork server imports before it forks the
    cell's processes)."""
    return [p.driver.partition(":")[0] for p in plugins().values()]
