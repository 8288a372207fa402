"""The durable-1k suite: valid, the brokers it compares, and settings under which every one of them states the same
durability (an fsync per acknowledgement, no replica) for the single node the local stack runs."""

from brokerbench.brokers import plugin
from brokerbench.spec import scaled, suite_request, validate

# The brokers durable-1k compares (rabbitmq-streams is left out: its confirms never wait for an fsync).
BROKERS = ["kafka", "redis-streams", "nats-jetstream", "rabbitmq-quorum"]
# What TargetsReady records of each broker's local single node (what the plug-ins read their durability from).
RECORDED = {"kafka": {"replication_factor": 1, "min_insync_replicas": 1, "nodes": 1},
            "redis-streams": {"settings": {"persistence": {"appendonly": "yes", "appendfsync": "always"}}},
            "nats-jetstream": {"settings": {"persistence": {"storage": "file", "replicas": 1,
                                                            "sync_interval": "always"}}},
            "rabbitmq-quorum": {"nodes": 1}}


def test_the_suite_is_valid_and_names_its_brokers_and_the_differences_that_remain():
    spec = validate(suite_request("durable-1k"))
    assert spec["brokers"] == BROKERS
    assert spec["sizes"] == [1024] and set(spec["modes"]) == {"batch", "single"}
    assert spec["client"]["kafka_flush_messages"] == 1 and spec["client"]["redis_appendfsync"] == "always"
    assert any(note.startswith("Differences that remain") for note in spec["notes"])
    assert any("rabbitmq-streams is left out" in note for note in spec["notes"])
    assert any("BROKERBENCH_NATS_SYNC=always" in note for note in spec["notes"])


def test_every_broker_of_the_suite_states_an_fsync_per_acknowledgement_and_no_replica():
    client = validate(suite_request("durable-1k"))["client"]
    for broker in BROKERS:
        stated = plugin(broker).state_durability(client, RECORDED[broker])
        assert (stated["fsync"], stated["replicas"], stated["memory_only"]) == (True, 0, False), (broker, stated)


def test_scaled_it_keeps_its_settings():
    request = scaled(suite_request("durable-1k"), 0.04)
    assert validate(request)["client"] == validate(suite_request("durable-1k"))["client"]
    assert request["duration_s"] == 1.2 and request["repeats"] == 1
