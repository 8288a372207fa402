"""A broker the run has just started is warmed up before its first cell: traffic through the cell's own driver, sent
batched and one at a time, received by a consumer group that commits.

A new broker is not yet the broker a run means to measure. A JVM broker interprets its send and dispatch paths
until the JIT has compiled them: the project's latency checks measured a new Pulsar standalone's first cells
9.5 and 11.6 ms above the same cells a few thousand messages later (tests/integration/test_latency_truth.py); a new
Kafka creates its consumer-offsets topic when the first group commits, which held the first cell up for seconds.
A cell's own warm-up (1 s by default) is too short for either, and cells run in a random order, so without this the
first cells of every run that starts its brokers measure a colder broker than the rest. A broker the run found
running has served before and is not warmed.

What it sends never enters a measurement (a topic of its own, deleted after). A warm-up that fails is logged and
the run goes on: its cells then say what is wrong with the broker.
"""

from __future__ import annotations

import logging
import time

from ..registry import get_driver
from ..spec import validate

BATCHED = 20_000  # as the latency checks warm a new Pulsar: enough for the JIT to compile the send path
SINGLE = 300  # one at a time: each a request of its own, the path single-mode cells take
MAX_BATCHED_S = 5.0  # a slow broker stops sending batched after this long (a warm-up is not a benchmark)
TIMEOUT_S = 60.0
PAYLOAD = bytes(1024)
HEADER = b"warm"
log = logging.getLogger(__name__)


def warm_up(broker: str, endpoint: dict, clock=time.monotonic) -> dict:
    """Send and receive warm-up traffic through `broker`'s driver at `endpoint`; returns what was sent, received
    and acknowledged, and how long it took. Raises what the driver raises."""
    client = validate({"brokers": [broker], "sizes": [1024], "rates": [1], "formats": ["raw"]})["client"]
    driver = get_driver(broker, {k: v for k, v in endpoint.items() if k != "pids"}, client)
    topic = f"bb-warm-{int(time.time() * 1000)}"
    group = f"{topic}-g"
    began = clock()
    acked: list[bool] = []
    sent = received = 0
    driver.create_topic(topic, 1)
    try:
        consumer = driver.consumer(topic, group, [0])
        try:
            for mode, count in (("batch", BATCHED), ("single", SINGLE)):
                producer = driver.producer(topic, 1, mode, lambda header, ok, at_ns: acked.append(ok))
                try:
                    stop_at = clock() + MAX_BATCHED_S
                    for n in range(count):
                        producer.send(HEADER, PAYLOAD, 0)
                        sent += 1
                        if mode == "single":
                            producer.flush(TIMEOUT_S)
                        elif n % 100 == 0:
                            producer.poll(0)
                            if clock() > stop_at:
                                break
                    producer.flush(TIMEOUT_S)
                finally:
                    producer.close()
                received += _receive(consumer, sent - received, clock)
            committed = _commit(driver, consumer, topic, group, clock)
        finally:
            consumer.close()
    finally:
        driver.delete_topic(topic, 1)
        driver.close()
    return {"sent": sent, "acknowledged": sum(acked), "received": received, "committed": committed,
            "seconds": round(clock() - began, 3)}


def _receive(consumer, expected: int, clock) -> int:
    got, deadline = 0, clock() + TIMEOUT_S
    while got < expected and clock() < deadline:
        got += len(consumer.poll(0.5))
    return got


def _commit(driver, consumer, topic: str, group: str, clock) -> bool | None:
    """The group's position, committed until the broker's own backlog reads 0: a new Kafka creates its offsets
    topic at the first commit and stores none until it is loaded. None where the broker cannot tell a group's
    backlog; False when it still had one after TIMEOUT_S."""
    deadline = clock() + TIMEOUT_S
    while True:
        consumer.commit()
        backlog = driver.backlog(topic, group, 1)
        if backlog is None or backlog == 0:
            return None if backlog is None else True
        if clock() > deadline:
            return False
        time.sleep(0.2)


def warm_up_logged(broker: str, endpoint: dict) -> dict | None:
    """warm_up, with its figures or its failure logged; None when it failed."""
    try:
        done = warm_up(broker, endpoint)
    except Exception as exc:  # noqa: BLE001 (the run goes on; its cells say what is wrong with the broker)
        log.warning("warm-up of a new %s failed: %s: %s", broker, type(exc).__name__, exc)
        return None
    log.info("warmed up a new %s", broker, extra={"warm_up": done})
    return done
