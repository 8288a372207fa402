"""client.topics: one cell spread over several Kafka topics (lanes), and who may ask for it."""

from math import gcd

import pytest

from brokerbench import native, schema, spec
from brokerbench.brokers import plugin
from brokerbench.brokers.kafka.driver import KafkaDriver, lane_of, lane_place, lane_places, topic_names
from brokerbench.environment import broker_settings
from brokerbench.spec import lanes
from brokerbench.worker.payloads import pool_size_for

MINIMAL = {"brokers": ["kafka"], "sizes": [1024], "rates": [100], "formats": ["json"]}
UNREACHABLE = {"bootstrap_servers": "127.0.0.1:1"}


def problems_of(doc):
    with pytest.raises(spec.SpecError) as info:
        spec.validate(doc)
    return {p.path: p.message for p in info.value.problems}


# -- lanes ------------------------------------------------------------------------------------------
def test_one_topic_keeps_the_cells_topic_and_lanes_are_its_partitions():
    assert topic_names("bb-run-c00001", 1) == ["bb-run-c00001"]
    assert lane_places("bb-run-c00001", 3, 1) == [("bb-run-c00001", 0), ("bb-run-c00001", 1), ("bb-run-c00001", 2)]
    full = spec.validate({**MINIMAL, "partitions": 3})
    assert "topics" not in full["client"]  # omitted: one topic, and the stored request is as before
    cell = spec.expand(full)[0]
    assert lanes(cell) == 3 and KafkaDriver(UNREACHABLE, cell["client"]).topics == 1


def test_several_topics_are_numbered_and_every_lane_maps_to_one_partition_and_back():
    assert topic_names("t", 5) == ["t-0000", "t-0001", "t-0002", "t-0003", "t-0004"]
    assert topic_names("t", 1000)[-1] == "t-0999"
    for topics, per_topic in ((5, 1), (3, 4), (7, 2)):
        names, total = topic_names("t", topics), topics * per_topic
        places = lane_places("t", total, topics)
        assert len(set(places)) == total  # no two lanes share a partition
        assert {name for name, _ in places} == set(names)
        assert {p for _, p in places} == set(range(per_topic))
        for lane, (name, partition) in enumerate(places):
            assert lane_place("t", lane, topics) == (name, partition)
            assert lane_of(names.index(name), partition, topics) == lane
    # Round-robin over the lanes: consecutive messages go to consecutive topics.
    assert [lane_place("t", seq % 6, 3)[0] for seq in range(6)] == ["t-0000", "t-0001", "t-0002"] * 2


def test_lanes_that_do_not_fill_the_topics_evenly_are_refused():
    with pytest.raises(ValueError, match="do not split"):
        lane_places("t", 7, 3)


def test_a_cells_lanes_are_partitions_times_topics():
    cell = spec.expand(spec.validate({**MINIMAL, "partitions": 2, "client": {"topics": 5}}))[0]
    assert cell["client"]["topics"] == 5 and cell["partitions"] == 2 and lanes(cell) == 10
    assert KafkaDriver(UNREACHABLE, cell["client"]).topics == 5


def test_the_payload_pool_cycles_through_every_lane():
    for partitions, topics in ((1, 4), (2, 3), (3, 5)):
        cell = spec.expand(spec.validate({**MINIMAL, "partitions": partitions,
                                          "client": {"topics": topics, "compression": "lz4"}}))[0]
        assert gcd(pool_size_for(cell), partitions * topics) == 1


def test_several_topics_leave_the_native_send_loop_for_the_python_one():
    driver = KafkaDriver(UNREACHABLE, {**spec.validate(MINIMAL)["client"], "topics": 3})
    with pytest.raises(native.Unsupported, match="client.topics"):
        driver.native_sender("t", 3, "batch")


# -- validation -------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [0, 1001, 2.5, "5"])
def test_topics_out_of_range_or_not_an_integer_are_refused_naming_the_field(value):
    assert "client.topics" in problems_of({**MINIMAL, "client": {"topics": value}})


@pytest.mark.parametrize("broker", ["redis-streams", "pulsar"])
def test_several_topics_with_a_broker_that_cannot_spread_are_refused(broker):
    found = problems_of({**MINIMAL, "brokers": ["kafka", broker], "client": {"topics": 4}})
    assert set(found) == {"client.topics"}
    assert broker in found["client.topics"] and "kafka" in found["client.topics"]
    # One topic is what every broker does: asking for it explicitly is fine.
    spec.validate({**MINIMAL, "brokers": [broker], "client": {"topics": 1}})


def test_named_targets_spread_by_their_driver():
    targets = {"redpanda": {"driver": "kafka", "bootstrap_servers": "10.0.0.5:9092"},
               "valkey": {"driver": "redis", "host": "10.0.0.6", "port": 6379}}
    spec.validate({**MINIMAL, "brokers": ["kafka", "kafka-zookeeper", "redpanda"], "targets": targets,
                   "client": {"topics": 1000}})
    found = problems_of({**MINIMAL, "brokers": ["redpanda", "valkey"], "targets": targets, "client": {"topics": 2}})
    assert "valkey" in found["client.topics"] and "redpanda" not in found["client.topics"].split(" (")[0]


def test_consumers_may_use_every_topics_partitions():
    spec.validate({**MINIMAL, "consumers": 3, "client": {"topics": 3}})
    found = problems_of({**MINIMAL, "consumers": 4, "partitions": 1, "client": {"topics": 3}})
    assert "client.topics 3" in found["consumers"]


def test_the_setting_is_in_the_checked_in_schema():
    setting = schema.checked_in()["properties"]["client"]["properties"]["topics"]
    assert (setting["type"], setting["minimum"], setting["maximum"]) == ("integer", 1, 1000)
    assert schema.generated() == schema.checked_in()
    assert "topics" in plugin("kafka-zookeeper").settings.client
    assert "topics" not in plugin("redis-streams").settings.client and "topics" not in plugin("pulsar").settings.client


# -- what a reader sees -----------------------------------------------------------------------------
def test_settings_and_captions_state_the_topic_count_only_when_there_are_several():
    client = spec.validate(MINIMAL)["client"]
    one = broker_settings("kafka", UNREACHABLE, client)
    several = broker_settings("kafka", UNREACHABLE, {**client, "topics": 5})
    assert "topics" not in one
    assert several["topics"]["per_cell"] == 5 and "5 topics" in several["topics"]["meaning"]
    kafka = plugin("kafka")
    assert "topics" not in kafka.describe_mode("batch", client, {"replication_factor": 3})
    assert kafka.describe_mode("batch", {**client, "topics": 5}, {"replication_factor": 3}).endswith(
        "RF 3, 5 topics x the cell's partitions")
