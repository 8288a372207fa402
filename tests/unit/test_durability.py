"""Matched durability: each plug-in states what an acknowledgement waits for (a disk sync, replicas, memory only)
from the settings in force, and results.json, report.md, report.html and the CLI table show it per broker."""

from dataclasses import replace

import pytest
from synthetic import synthetic_run

from brokerbench import registry
from brokerbench.brokers import plugin
from brokerbench.reports import html, markdown
from brokerbench.reports.model import build_report
from brokerbench.reports.results import build_results

KAFKA_RECORDED = {"replication_factor": 3, "min_insync_replicas": 2, "nodes": 3}


def kafka(client: dict, recorded: dict = KAFKA_RECORDED) -> dict:
    return plugin("kafka").state_durability({"acks": "all", **client}, recorded)


def test_kafka_acks_all_waits_for_every_replica_and_fsyncs_only_with_flush_messages():
    default = kafka({})
    assert (default["fsync"], default["replicas"], default["memory_only"]) == (False, 2, False)
    assert "min.insync.replicas 2" in default["text"] and "no fsync" in default["text"]
    assert kafka({"kafka_flush_messages": 1})["fsync"] is True
    assert kafka({"kafka_flush_messages": 100})["fsync"] == "interval"
    leader = kafka({"acks": "1"})
    assert leader["replicas"] == 0 and "leader's append" in leader["text"]
    assert kafka({"acks": "0"})["memory_only"] is True
    single = kafka({}, {"replication_factor": 1, "min_insync_replicas": 1, "nodes": 1})
    assert single["replicas"] == 0
    assert kafka({}, {})["replicas"] is None  # a target that did not answer: unknown, not guessed


def test_kafka_zookeeper_states_what_kafka_states():
    assert plugin("kafka-zookeeper").durability == plugin("kafka").durability


@pytest.mark.parametrize("persistence, fsync, memory_only", [
    ({"appendonly": "yes", "appendfsync": "always"}, True, False),
    ({"appendonly": "yes", "appendfsync": "everysec"}, "interval", False),
    ({"appendonly": "yes", "appendfsync": "no"}, False, False),
    ({"appendonly": "no", "appendfsync": "everysec"}, False, True),
    ({}, None, None),
])
def test_redis_follows_its_recorded_aof_policy(persistence, fsync, memory_only):
    stated = plugin("redis-streams").state_durability({}, {"settings": {"persistence": persistence}})
    assert (stated["fsync"], stated["replicas"], stated["memory_only"]) == (fsync, 0, memory_only)


def test_pulsar_waits_for_its_ack_quorum_and_states_the_bookies_journal_sync():
    recorded = {"settings": {"persistence": {"topic_type": "persistent", "journal_sync_data": False,
                                             "ledger_quorum": {"managedLedgerDefaultAckQuorum": 2}}}}
    stated = plugin("pulsar").state_durability({"pulsar_topic_type": "persistent"}, recorded)
    assert (stated["fsync"], stated["replicas"], stated["memory_only"]) == (False, 1, False)
    unknown = plugin("pulsar").state_durability({"pulsar_topic_type": "persistent"}, {})
    assert unknown["fsync"] is None and unknown["replicas"] is None
    gone = plugin("pulsar").state_durability({"pulsar_topic_type": "non-persistent"}, {})
    assert gone["memory_only"] is True


@pytest.mark.parametrize("persistence, fsync, replicas, memory_only", [
    ({"storage": "file", "replicas": 1, "sync_interval": "always"}, True, 0, False),
    ({"storage": "file", "replicas": 1, "sync_interval": "2m"}, "interval", 0, False),
    ({"storage": "file", "replicas": 3, "sync_interval": "always"}, True, 1, False),  # a quorum of 3: one other
    ({"storage": "memory", "replicas": 1, "sync_interval": "always"}, False, 0, True),
    ({"storage": "file", "replicas": 1}, None, 0, False),  # a server whose policy was not given: unknown
])
def test_nats_follows_its_stream_storage_replicas_and_the_servers_sync_interval(persistence, fsync, replicas,
                                                                                memory_only):
    stated = plugin("nats-jetstream").state_durability({"nats_storage": "file", "nats_replicas": 1},
                                                       {"settings": {"persistence": persistence}})
    assert (stated["fsync"], stated["replicas"], stated["memory_only"]) == (fsync, replicas, memory_only)
    assert stated["text"].startswith("PubAck: ")


def test_a_plugin_that_states_nothing_says_not_stated():
    silent = replace(plugin("kafka"), name="silent", durability=None)
    stated = silent.state_durability({"acks": "all"}, KAFKA_RECORDED)
    assert stated == registry.NOT_STATED and registry.durability_label(stated) == "not stated"


@pytest.mark.parametrize("statement, field", [
    ({"fsync": "yes", "replicas": 0, "memory_only": False, "text": "x"}, "durability.fsync"),
    ({"fsync": True, "replicas": -1, "memory_only": False, "text": "x"}, "durability.replicas"),
    ({"fsync": True, "replicas": 0, "memory_only": "no", "text": "x"}, "durability.memory_only"),
    ({"fsync": True, "replicas": 0, "memory_only": False, "text": ""}, "durability.text"),
    ({"fsync": True, "replicas": 0, "text": "x"}, "memory_only"),
])
def test_a_malformed_statement_is_refused_naming_the_field(statement, field):
    with pytest.raises(ValueError, match=field):
        registry.durability(statement)


def test_labels_say_sync_replicas_or_memory_only():
    assert registry.durability_label({"fsync": True, "replicas": 2, "memory_only": False}) == "fsync per message, 2 replicas"
    assert registry.durability_label({"fsync": "interval", "replicas": 0, "memory_only": False}) == \
        "fsync on a timer, no replicas"
    assert registry.durability_label({"fsync": False, "replicas": 0, "memory_only": True}) == "memory only"


@pytest.fixture(scope="module")
def events():
    spec = {"name": "dur", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000],
            "formats": ["json"], "modes": ["single"], "repeats": 1,
            "client": {"acks": "all", "kafka_flush_messages": 1, "redis_appendfsync": "always"}}
    events = synthetic_run(spec, intervals=3, seed=1)
    targets = next(e for e in events if e["type"] == "TargetsReady")["data"]["targets"]
    targets["kafka"].update(replication_factor=1, min_insync_replicas=1, nodes=1)
    targets["redis-streams"]["settings"] = {"persistence": {"appendonly": "yes", "appendfsync": "always"}}
    return events


def test_results_report_and_table_show_each_brokers_durability(events):
    results = build_results(events)
    assert results["durability"]["kafka"]["fsync"] is True and results["durability"]["kafka"]["replicas"] == 0
    assert results["durability"]["redis-streams"]["fsync"] is True
    report = build_report(events)
    text = markdown.render(report)
    assert "## Durability: what an acknowledgement waited for" in text
    assert "| kafka | yes | 0 | no | acks=all:" in text and "| redis-streams | yes | 0 | no | XADD reply:" in text
    page = html.render(report)
    assert "<h2>Durability: what an acknowledgement waited for</h2>" in page and "appendfsync always" in page

    from rich.console import Console

    from brokerbench.reports.table import comparison_tables

    console = Console(width=250, record=True, force_terminal=False)
    for table in comparison_tables(results):
        console.print(table)
    assert ("durability: kafka fsync per message, no replicas; redis-streams fsync per message, no replicas"
            in console.export_text())
