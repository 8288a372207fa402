"""What each broker promises for an acknowledged message when a node fails (the plug-ins' durability statements,
`failover`), and the Guarantees table per broker and durability setting that sets a run's losses against it."""

import pytest

from brokerbench import registry
from brokerbench.brokers import plugin
from brokerbench.reports import faults, html
from brokerbench.reports.rows import section

KAFKA = {"replication_factor": 3, "min_insync_replicas": 2, "nodes": 3}


@pytest.mark.parametrize("broker, client, recorded, promised", [
    ("kafka", {"acks": "all"}, KAFKA, True),
    ("kafka", {"acks": "all"}, {**KAFKA, "min_insync_replicas": 1}, False),  # the leader alone may acknowledge
    ("kafka", {"acks": "1"}, KAFKA, False),
    ("kafka", {"acks": "0"}, KAFKA, False),
    ("kafka", {"acks": "all"}, {}, None),  # a target that did not answer: unknown, not guessed
    ("kafka", {"acks": "all"}, {"replication_factor": 1, "min_insync_replicas": 1}, False),
    ("rabbitmq-quorum", {}, {"nodes": 3}, True),
    ("rabbitmq-quorum", {}, {"nodes": 1}, False),
    ("rabbitmq-streams", {}, {"nodes": 3}, True),
    ("nats-jetstream", {"nats_replicas": 3, "nats_storage": "file"}, {}, True),
    ("nats-jetstream", {"nats_replicas": 1, "nats_storage": "file"}, {}, False),
    ("redis-streams", {"redis_wait_replicas": 1}, {"settings": {"replication": {"replicas": 2}}}, False),
    ("redis-streams", {}, {}, False),  # asynchronous replication: never promised, whatever the settings
    ("pulsar", {}, {}, None),  # no statement: said so
])
def test_each_plugin_states_what_its_documentation_promises_when_a_node_fails(broker, client, recorded, promised):
    failover = plugin(broker).state_durability(client, recorded)["failover"]
    assert failover["promised"] is promised and failover["text"]


def test_a_failover_statement_is_checked_like_the_rest():
    base = {"fsync": True, "replicas": 1, "memory_only": False, "text": "x"}
    assert registry.durability(base)["failover"] == registry.FAILOVER_NOT_STATED
    with pytest.raises(ValueError, match="durability.failover.promised"):
        registry.durability({**base, "failover": {"promised": "yes", "text": "x"}})
    with pytest.raises(ValueError, match="durability.failover.text"):
        registry.durability({**base, "failover": {"promised": True, "text": ""}})


def _row(broker: str, acked: int, lost: int | None, gap: float, duplicated: int = 0, difference: int | None = 0):
    return {"broker": broker, "unavailable_s": gap, "back_to_rate_s": 3.0,
            "guarantee": faults.guarantee({"acked": acked, "lost": lost, "duplicated": duplicated,
                                           "undelivered_or_lost": lost or 0, "send_errors": 5, "unacknowledged": 1,
                                           "broker_count": {"difference": difference}})}


def _durability(promised: dict[str, bool | None]) -> dict:
    return {b: {"fsync": True, "replicas": 1, "memory_only": False, "text": f"{b} setting",
                "failover": {"promised": p, "text": f"{b} promise"}} for b, p in promised.items()}


def test_the_setting_sums_its_cells_and_sets_a_loss_against_the_promise():
    rows = [_row("kafka", 1000, 0, 9.1), _row("kafka", 1200, 0, 11.2, duplicated=2),
            _row("kafka-acks1", 1000, 3, 8.0, difference=-3), _row("redis", 900, 40, 2.0, difference=-40),
            _row("nats", 700, 2, 4.0), _row("pulsar", 500, None, 1.0, difference=None)]
    found = {r["broker"]: r for r in faults.by_setting(rows, _durability(
        {"kafka": True, "kafka-acks1": True, "redis": False, "nats": None, "pulsar": True}))}
    kafka = found["kafka"]
    assert (kafka["cells"], kafka["acknowledged"], kafka["lost"], kafka["duplicated"]) == (2, 2200, 0, 2)
    assert (kafka["send_errors"], kafka["unacknowledged"], kafka["unavailable_s"]) == (10, 2, 11.2)
    assert kafka["verdict"] == "held" and kafka["broker_count_agrees"] is True
    assert faults.setting_text(kafka) == ("acknowledged messages lost: 0 of 2,200 (verified by sequence numbers; "
                                          "the broker's count agrees)")
    assert found["kafka-acks1"]["verdict"] == "broken"  # promised, lost: said plainly
    assert found["redis"]["verdict"] == "expected"  # nothing promised: a finding, not a defect
    assert found["nats"]["verdict"] == "lost"  # no statement: neither
    assert found["pulsar"]["verdict"] == "unknown" and found["pulsar"]["lost"] is None
    assert found["pulsar"]["broker_count_agrees"] is None


def test_a_broken_promise_is_marked_in_markdown_html_and_a_held_one_is_not():
    rows = [_row("kafka", 1000, 0, 9.0), _row("rabbitmq", 800, 5, 5.0, difference=-5)]
    report = {"guarantees": [], "guarantees_by_setting": faults.by_setting(
        rows, _durability({"kafka": True, "rabbitmq": True}))}
    lines = faults.setting_lines(report["guarantees_by_setting"])
    [kafka] = [line for line in lines if line.startswith("| kafka")]
    [rabbit] = [line for line in lines if line.startswith("| rabbitmq")]
    assert "⚠" not in kafka and faults.VERDICTS["held"] in kafka
    assert "⚠ **BROKEN" in rabbit and "lost: 5 of 800" in rabbit and "rabbitmq promise" in rabbit
    page = "".join(html._guarantees_section(section(report)))
    assert page.count("class='bad'") == 1 and "BROKEN" in page


def test_a_broker_that_discarded_what_it_acknowledged_did_not_hold_even_with_nothing_lost():
    """A paused Redis master's writes read by the consumer, then thrown away by the failover: lost 0 (every message
    arrived), but the broker ends with 40 fewer than it acknowledged."""
    rows = [_row("redis", 900, 0, 2.0, difference=-40), _row("kafka", 900, 0, 2.0, difference=-40)]
    found = {r["broker"]: r for r in faults.by_setting(rows, _durability({"redis": False, "kafka": True}))}
    assert found["redis"]["discarded"] == 40 and found["redis"]["verdict"] == "discarded"
    assert faults.VERDICTS["discarded"].startswith("discarded, as allowed: the broker promises nothing")
    assert found["kafka"]["verdict"] == "broken"
    assert faults.setting_text(found["kafka"]).startswith("every one of 900 acknowledged messages delivered")
    assert "the broker then discarded 40 of them" in faults.setting_text(found["kafka"])
    # a loss before delivery where nothing is promised stays "expected", discarded or not
    rows = [_row("redis", 900, 3, 2.0, difference=-40)]
    [found] = faults.by_setting(rows, _durability({"redis": False}))
    assert found["verdict"] == "expected" and "holds 40 fewer than it acknowledged" in faults.setting_text(found)



def test_every_guarantee_verdict_has_its_class_in_the_html_report():
    """The HTML table reads a verdict's class by the verdict (no default): each verdict faults names has one."""
    assert html.GUARANTEE_CSS.keys() == faults.VERDICTS.keys()
