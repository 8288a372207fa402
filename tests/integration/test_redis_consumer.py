"""The Redis Streams consumer acknowledges a batch after it has been handed over (and timestamped),
with the next read: every delivered entry is acknowledged, once."""

import redis

from brokerbench.brokers.redis_streams.driver import HEADER_FIELD, PAYLOAD_FIELD, stream_key
from brokerbench.registry import get_driver
from brokerbench.spec import validate

CLIENT = validate({"brokers": ["redis-streams"], "sizes": [1024], "rates": [100], "formats": ["raw"]})["client"]


def xack_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_xack", {}).get("calls", 0))


def pending(client: redis.Redis, key: str, group: str) -> int:
    return int(client.xpending(key, group)["pending"])


def test_a_batch_is_acknowledged_with_the_next_read_and_the_last_one_at_close(endpoints):
    endpoint = endpoints["redis-streams"]
    client = redis.Redis(host=endpoint["host"], port=endpoint["port"])
    driver = get_driver("redis-streams", endpoint, {**CLIENT, "read_count": 50})
    topic, group = "bb-ack-test", "bb-ack-test-g"
    driver.create_topic(topic, 2)
    consumer = driver.consumer(topic, group, [0, 1])
    keys = [stream_key(topic, p) for p in range(2)]
    try:
        for i in range(120):
            client.xadd(keys[i % 2], {HEADER_FIELD: i.to_bytes(20, "big"), PAYLOAD_FIELD: b"x" * 10})
        before = xack_calls(client)

        first = consumer.poll(1.0)
        assert len(first) == 100  # 50 from each stream key
        # Handed over unacknowledged: the caller timestamps them before any XACK round trip.
        assert sum(pending(client, k, group) for k in keys) == 100
        assert xack_calls(client) == before

        second = consumer.poll(1.0)
        assert len(second) == 20
        assert sum(pending(client, k, group) for k in keys) == 20  # the first batch is acknowledged now
        assert xack_calls(client) == before + 2  # one XACK per stream key of the first batch

        assert consumer.poll(0.05) == []  # nothing new: the second batch's XACKs went out with this read
        assert sum(pending(client, k, group) for k in keys) == 0
        calls = xack_calls(client)
        assert calls == before + 4
        assert consumer.poll(0.05) == []
        assert xack_calls(client) == calls  # nothing is acknowledged twice

        client.xadd(keys[0], {HEADER_FIELD: (999).to_bytes(20, "big"), PAYLOAD_FIELD: b"y"})
        assert len(consumer.poll(1.0)) == 1
        assert pending(client, keys[0], group) == 1
        received = {h for h, _, _ in first + second}
        assert len(received) == 120
    finally:
        consumer.close()
    assert sum(pending(client, k, group) for k in keys) == 0  # close sent the last batch's acknowledgement
    assert consumer.ack_errors == 0
    driver.delete_topic(topic, 2)
