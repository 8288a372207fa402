"""The local stack's Redis compacts its AOF between cells, never during one: its automatic rewrite is off, and the
driver rewrites the AOF before a cell once it has grown (brokers/redis_streams/local.py, driver.py compact_aof)."""

import redis

from brokerbench.brokers.redis_streams import driver as redis_driver
from brokerbench.registry import get_driver
from brokerbench.spec import validate

CLIENT = validate({"brokers": ["redis-streams"], "sizes": [1024], "rates": [100], "formats": ["raw"]})["client"]


def persistence(client: redis.Redis) -> dict:
    return client.info("persistence")


def fill(client: redis.Redis, key: str, entries: int) -> None:
    pipe = client.pipeline(transaction=False)
    for _ in range(entries):
        pipe.xadd(key, {b"d": b"x" * 1024})
    pipe.execute()


def test_the_local_redis_never_rewrites_its_aof_on_its_own(endpoints):
    endpoint = endpoints["redis-streams"]
    client = redis.Redis(host=endpoint["host"], port=endpoint["port"])
    assert endpoint["aof_rewrite"] == "between_cells"
    assert client.config_get("auto-aof-rewrite-percentage")["auto-aof-rewrite-percentage"] == "0"
    assert int(persistence(client)["aof_enabled"]) == 1


def test_a_grown_aof_is_rewritten_before_the_next_cell_and_a_small_one_is_left(endpoints, monkeypatch):
    endpoint = endpoints["redis-streams"]
    client = redis.Redis(host=endpoint["host"], port=endpoint["port"])
    driver = get_driver("redis-streams", endpoint, CLIENT)
    topic = "bb-aof-compact"
    driver.create_topic(topic, 1)  # the AOF as the earlier tests left it, compacted if it was over the threshold
    fill(client, f"{topic}-0", 2_000)  # about 2 MB, deleted by the next create_topic: what a finished cell leaves
    grown = persistence(client)
    monkeypatch.setattr(redis_driver, "COMPACT_AOF_ABOVE_BYTES", int(grown["aof_current_size"]) + (64 << 20))
    driver.create_topic(topic, 1)  # below the threshold: no rewrite
    assert int(persistence(client)["aof_rewrites"]) == int(grown["aof_rewrites"])

    monkeypatch.setattr(redis_driver, "COMPACT_AOF_ABOVE_BYTES", 1 << 20)
    driver.create_topic(topic, 1)  # over it: rewritten, and done before create_topic returns
    after = persistence(client)
    assert int(after["aof_rewrites"]) == int(grown["aof_rewrites"]) + 1
    assert int(after["aof_rewrite_in_progress"]) == 0 and int(after["aof_rewrite_scheduled"]) == 0
    assert int(after["aof_current_size"]) < int(grown["aof_current_size"]) - (1 << 20)  # the deleted stream is gone
    driver.delete_topic(topic, 1)
