"""A 3-node KRaft Kafka cluster on this host (provision.kafka.nodes: 3), started and stopped by the run that asks
for it beside the session's single node, and topics replicated as the client settings say; checked against the
brokers' own logs, which name every replica each node creates and the topic settings it was created with."""

import json
import re
from pathlib import Path

import pytest
from conftest import CORE_SERVICES
from fault_tools import assert_accounting_whole
from inline_run import execute_run
from study_scale import suite_run

from brokerbench.drivers import TargetRefused
from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.workflow import LocalWorkflow
from brokerbench.reports.markdown import render
from brokerbench.reports.model import build_report
from brokerbench.reports.results import build_results

TINY = {"sizes": [1024], "rates": [200], "formats": ["json"], "duration_s": 2, "warmup_s": 0.5,
        "warmup_until_steady": False, "drain_timeout_s": 5}


def execute(stack, tmp_path, request):
    run_id = new_run_id()
    execution = LocalWorkflow(stack, tmp_path / "reports").execute(request, run_id=run_id)
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    return execution, DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"]).read(run_id)


# A counted cell at max rate: every message sent is measured, however slowly the acknowledgements come. At a fixed
# rate, a single-mode producer waits for each acks=all answer (both followers' fetches) before the next send: as the
# first cell on the freshly started cluster (its JVMs' code not yet compiled), on a loaded host, the answers took
# 190 to 510 ms, so it fell behind a 200 msgs/s schedule at once, every message it sent was due in the warm-up, and
# the cell failed with nothing sent in the measured window.
COUNTED = {**TINY, "rates": ["max"], "messages": 30, "warmup_s": 0}


@pytest.fixture(scope="module")
def cluster_stopped(stack):
    """The 3-node cluster a run of this module started and kept (keep_targets: one start serves the module's runs)
    is stopped at the module's end."""
    yield
    stack.down(["kafka@3"], log=lambda m: None)


def test_a_run_on_a_three_node_cluster_replicates_every_partition_to_each_node_with_acks_all(stack, tmp_path,
                                                                                            cluster_stopped):
    # Single mode first (fixed order): the cell that used to fail as the cluster's first.
    request = {"name": "wf-cluster", "brokers": ["kafka"], "provision": {"kafka": {"nodes": 3}}, "partitions": 3,
               "modes": ["single", "batch"], "order": "fixed", "client": {"acks": "all", "min_insync_replicas": 2},
               "keep_targets": True, **COUNTED}
    # A node's log is appended across the cluster's starts (an earlier module's run may have started it): this
    # run's part is read from where each log ended before it.
    cluster = Path(stack.state_dir) / "kafka@3"
    before = {log: log.stat().st_size for log in cluster.glob("node-*/kafka.log")}
    execution, events = execute(stack, tmp_path, request)
    assert execution.status == "SUCCEEDED", (execution.error, execution.cause)
    target = next(e for e in events if e["type"] == "TargetsReady")["data"]["targets"]["kafka"]
    assert (target["nodes"], target["replication_factor"], target["min_insync_replicas"]) == (3, 3, 2)
    assert target["settings"]["persistence"]["replication_factor"] == 3
    results = build_results(events)
    assert len(results["cells"]) == 2
    for cell in results["cells"]:
        assert cell["status"] == "completed", {k: cell.get(k) for k in ("cell_id", "reason", "sent", "acked",
                                                                       "received", "send_errors", "warmup")}
        assert cell["sent"] == cell["received"] == 30 and cell["lost"] == cell["duplicated"] == 0, cell
        assert cell["broker_count"]["observed"] == cell["broker_count"]["expected"], cell["broker_count"]
        assert_accounting_whole(cell)
    completed = [e["data"] for e in events if e["type"] == "CellCompleted"]
    assert all(c["resources"]["broker"]["rss_mb_max"] > 3 * 150 for c in completed)  # three JVMs, not one

    # Each node's own log: a replica of every partition of every cell's topic, made with min.insync.replicas=2.
    topics = {e["data"]["topic"] for e in events if e["type"] == "CellStarted"}
    logs = sorted(cluster.glob("node-*/kafka.log"))
    assert len(logs) == 3
    text = {log: this_run(log, before.get(log, 0)) for log in logs}
    for log in logs:
        created = re.findall(r"Created log for partition (\S+)-(\d+) in .* with properties \{(.*)\}", text[log])
        replicas = {(topic, int(p)) for topic, p, properties in created
                    if topic in topics and "min.insync.replicas=2" in properties}
        assert replicas == {(topic, p) for topic in topics for p in range(3)}, log

    for log in logs:  # each node's client, proxied-client (network faults) and controller listeners on loopback only
        listening = re.findall(r"Awaiting socket connections on (\S+):\d+\.", text[log])
        assert len(listening) == 3 and set(listening) == {"127.0.0.1"}, (log, listening)

    # The run started the cluster and keeps it (keep_targets: the next test's run uses it); the session's single
    # node runs on beside it. (A run that stops what it started: test_workflow, test_cli_run.)
    assert execution.output["teardown"] == [{"broker": "kafka", "action": "kept (keep_targets)"}]
    assert stack.is_up(["kafka@3"]) and stack.is_up(CORE_SERVICES)


GAP_SLACK_S = 0.05  # what Toxiproxy had in hand when the toxic came (test_network_faults.py)


# A leader fault where Kafka promises the outcome: acks=all, min.insync.replicas 2 of 3 replicas, idempotence.
LEADER_FAULT = {"brokers": ["kafka"], "provision": {"kafka": {"nodes": 3}}, "sizes": [1024], "rates": [200],
                "formats": ["raw"], "warmup_s": 1, "warmup_until_steady": False, "drain_timeout_s": 15,
                "client": {"acks": "all", "min_insync_replicas": 2, "kafka_idempotence": True}}


def nothing_lost(stack, tmp_path, request: dict):
    """The run of `request` through the workflow, its one cell completed with every acknowledged message delivered
    once (sequence numbers), the topic's end offsets agreeing, and the accounting whole: (execution, events, cell)."""
    execution, events = execute(stack, tmp_path, request)
    assert execution.status == "SUCCEEDED", (execution.error, execution.cause)
    [cell] = build_results(events)["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    assert cell["lost"] == cell["duplicated"] == 0 and cell["received"] == cell["sent"] > 0, cell
    assert cell["broker_count"]["observed"] == cell["broker_count"]["expected"], cell["broker_count"]
    assert_accounting_whole(cell)
    return execution, events, cell


def test_a_leader_killed_mid_cell_with_acks_all_and_idempotence_loses_nothing_and_the_leader_moves(stack, tmp_path,
                                                                                                  cluster_stopped):
    """The fault whose outcome Kafka promises, as the guarantees suite asks it (its own run request, at the scale that
    makes its 40 s cell 6 s): acks=all, min.insync.replicas 2 of 3 replicas and the idempotent producer, 1 KB at
    1,000 msgs/s; the partition leader killed (SIGKILL) a quarter into the measured window and started again 2.25 s
    later. Every acknowledged message is delivered once (sequence numbers, and the broker's own count of the
    topic), the metadata names another leader after the kill, and the cell records when each action came."""
    request = suite_run("guarantees", "guarantees-kafka-acks-all", 0.15)
    planned = [fault["at_s"] for fault in request["faults"]]
    assert [f["kind"] for f in request["faults"]] == ["kill", "restart"] and request["duration_s"] == 6, request
    execution, events, cell = nothing_lost(stack, tmp_path, request)
    [done] = [e["data"] for e in events if e["type"] == "CellCompleted"]
    faults = done["faults"]
    assert cell["faults"] == faults  # in results.json too
    print(json.dumps(faults, indent=1), {k: cell[k] for k in ("sent", "acked", "received", "lost", "duplicated")})
    kill, restart = faults["applied"]
    killed = kill["leader_before"]
    assert kill["kind"] == "kill" and kill["nodes"] == [killed] and killed in {"1", "2", "3"}, faults
    assert restart["kind"] == "restart" and restart["nodes"] == [killed], faults
    assert kill["planned_s"] == planned[0] <= kill["at_s"] < restart["at_s"], faults  # never early
    assert restart["planned_s"] == planned[1] <= restart["at_s"] and restart["leader_before"] is None, faults
    # Kafka's own metadata: another node leads once the kill took the leader down
    assert faults["leader_at_end"] not in (None, killed), faults
    assert faults["cluster_whole_at_end"] and faults["restored_at_end"] == [], faults
    for gap in (faults["producer_ack_gap"], faults["consumer_receipt_gap"]):  # from the planned time on
        assert gap is not None and gap["from_s"] >= kill["planned_s"] and gap["s"] > 0, faults
    # the intervals wholly before the kill (the whole seconds before it) are the phase before, with their latency; the
    # rest lie in the fault window, which runs to the end of the longest stretch without an acknowledgement or a
    # delivery
    phases = faults["phases"]
    assert phases["before"]["seconds"] == int(planned[0]) and phases["before"]["end_to_end_latency_us"]["count"] > 0, phases
    assert phases["window_s"][0] == kill["at_s"] and phases["window_s"][1] >= faults["producer_ack_gap"]["to_s"]
    # the report's Guarantees table says what held, from the same events
    report = build_report(events)
    [row] = report["guarantees"]
    assert row["guarantee"]["held"] and row["guarantee"]["acknowledged"] == cell["acked"] > 0, row
    assert f"acknowledged messages lost: 0 of {cell['acked']:,}" in render(report)
    # the cluster the module's first run kept, or one this run started (the test alone) and stopped
    assert execution.output["teardown"][0]["action"] in ("left running (not started by this run)", "stopped"), \
        execution.output["teardown"]


def test_the_suites_acks_1_leader_kill_moves_the_leader_and_counts_what_only_the_leader_had(stack, tmp_path,
                                                                                          cluster_stopped):
    """The guarantees suite's acks=1 run, as it asks it (its own run request at the scale that makes its 40 s cell
    6 s): the partition leader killed (SIGKILL) a quarter into the measured window and started again 2.25 s later,
    with acks=1 (the leader acknowledges alone). Kafka's metadata names another leader after the kill and the cluster
    is whole at the end; every message sent is in one class of the accounting. What acks=1 does not promise is
    counted, not asserted: acknowledged records lost (the leader died before a follower fetched them) and the end
    offsets against what was acknowledged; the report's row says "held" exactly when both are 0, and otherwise
    "lost, as allowed" (Kafka promises nothing at acks=1), never "broken"."""
    request = suite_run("guarantees", "guarantees-kafka-acks-1", 0.15)
    assert request["client"] == {"acks": "1"} and [f["kind"] for f in request["faults"]] == ["kill", "restart"], request
    execution, events = execute(stack, tmp_path, request)
    assert execution.status == "SUCCEEDED", (execution.error, execution.cause)
    [cell] = build_results(events)["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    faults = cell["faults"]
    kill, restart = faults["applied"]
    killed = kill["leader_before"]
    assert kill["kind"] == "kill" and kill["nodes"] == restart["nodes"] == [killed] and killed in {"1", "2", "3"}, faults
    assert kill["planned_s"] <= kill["at_s"] < restart["at_s"], faults
    assert faults["leader_at_end"] not in (None, killed), faults  # Kafka's own metadata: another node leads
    assert faults["cluster_whole_at_end"] and faults["restored_at_end"] == [], faults
    assert_accounting_whole(cell)
    count = cell["broker_count"]
    discarded = max(0, count["expected"] - count["observed"])
    print(f"acks=1, leader {killed} killed: {faults['leader_at_end']} leads; acknowledged {cell['acked']}, lost "
          f"{cell['lost']}, the end offsets hold {count['observed']} of {count['expected']}; producers without an "
          f"acknowledgement {faults['producer_ack_gap']['s']:.1f} s")
    assert cell["acked"] > 0 and cell["received"] > 0 and cell["lost"] is not None, cell
    report = build_report(events)
    [row] = report["guarantees"]
    assert row["guarantee"]["held"] is (cell["lost"] == 0 and discarded == 0), row
    [setting] = report["guarantees_by_setting"]
    assert setting["promise"]["promised"] is False, setting  # acks=1: Kafka promises nothing here
    assert setting["verdict"] == ("held" if row["guarantee"]["held"] else "expected"), setting


def test_a_leader_stopped_cleanly_mid_cell_hands_over_its_partitions_and_loses_nothing(stack, tmp_path,
                                                                                       cluster_stopped):
    """A clean stop (SIGTERM) of the partition leader 1.5 s into the measured window: the broker shuts down in
    order (its leaderships moved to the in-sync followers before it goes), and is started again at 3.5 s, once its
    process has ended. Kafka's own metadata names another leader, and with acks=all, min.insync.replicas 2 and the
    idempotent producer every acknowledged message is delivered once, the topic's end offsets agree, and the
    accounting is whole."""
    request = {**LEADER_FAULT, "name": "wf-leader-stop", "duration_s": 5,
               "faults": [{"kind": "stop", "target": "leader", "at_s": 1.5}, {"kind": "restart", "at_s": 3.5}]}
    _, _, cell = nothing_lost(stack, tmp_path, request)
    faults = cell["faults"]
    print(json.dumps(faults["applied"], indent=1), {k: cell[k] for k in ("sent", "acked", "received", "lost")})
    stop, restart = faults["applied"]
    stopped = stop["leader_before"]
    assert stop["kind"] == "stop" and stop["nodes"] == [stopped] and stopped in {"1", "2", "3"}, faults
    assert restart["kind"] == "restart" and restart["nodes"] == [stopped] and restart["at_s"] >= 3.5, faults
    assert faults["leader_at_end"] not in (None, stopped), faults  # the metadata: another node leads
    assert faults["cluster_whole_at_end"] and faults["restored_at_end"] == [], faults


def test_a_reset_of_the_leaders_link_makes_the_clients_wait_and_leaves_the_leader_in_place(stack, tmp_path,
                                                                                          cluster_stopped):
    """A network fault on the cluster: every connection between the cell's clients and the partition leader reset
    for 2 s (Toxiproxy in front of each node; the clients bootstrap through the proxies and are told the proxies'
    addresses by the PROXIED listener). Only the clients' link to one node fails: the brokers' own links and the
    controller's are not proxied, so Kafka's metadata names the same leader after the fault, the producers (which
    send to the leader alone) get no acknowledgement and the consumer no delivery while the toxics are on, and with
    acks=all, min.insync.replicas 2 and idempotence nothing acknowledged is lost. A consumer may be given again what
    it read after its last commit (counted as duplicates), so those are not asserted away."""
    request = {**LEADER_FAULT, "name": "wf-leader-reset", "duration_s": 5,
               "faults": [{"kind": "network", "effect": "reset", "target": "leader", "at_s": 1.5, "duration_s": 2}]}
    kept = stack.is_up(["kafka@3"])  # the module's first run kept it; alone, this run starts and stops it
    execution, events = execute(stack, tmp_path, request)
    assert execution.status == "SUCCEEDED", (execution.error, execution.cause)
    [cell] = build_results(events)["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    faults = cell["faults"]
    print(json.dumps(faults["applied"], indent=1), {k: cell[k] for k in ("sent", "acked", "received", "lost",
                                                                          "duplicated", "send_errors")},
          {k: faults[k] for k in ("producer_ack_gap", "consumer_receipt_gap", "leader_at_end")})
    fault, heal = faults["applied"]
    leader = fault["leader_before"]
    assert (fault["kind"], heal["kind"]) == ("network", "heal") and leader in {"1", "2", "3"}, faults
    assert fault["nodes"] == heal["nodes"] == [leader] and fault["proxy"] == heal["proxy"], faults
    assert faults["leader_at_end"] == leader, faults  # the node itself never failed
    span = heal["at_s"] - fault["at_s"]
    assert span >= 2 - GAP_SLACK_S, faults
    produced = faults["producer_ack_gap"]  # the producers' longest stretch without an acknowledgement covers it
    assert produced["from_s"] <= fault["at_s"] + GAP_SLACK_S and produced["to_s"] >= heal["at_s"], faults
    # The consumer's longest stretch may come later (it waits on the producers, which librdkafka's reconnect backoff,
    # grown by the resets, holds up beyond the fault): the whole seconds inside the fault (the last closing before
    # the heal) delivered nothing, and acknowledged nothing.
    inside = [e["data"]["counters"] for e in events if e["type"] == "IntervalMeasured"
              and e["data"]["interval"] >= fault["at_s"] and e["data"]["interval"] + 1 + 0.5 <= heal["at_s"]]
    assert inside and all(c["received"] == c["acked"] == 0 for c in inside), (inside, faults)
    assert cell["lost"] == 0 and cell["received"] > 0, cell
    assert cell["broker_count"]["observed"] == cell["broker_count"]["expected"], cell["broker_count"]
    assert_accounting_whole(cell)
    assert faults["restored_at_end"] == [], faults  # the heal took every toxic off
    assert stack.is_up(["kafka@3"]) == kept, execution.output["teardown"]


def this_run(log: Path, offset: int) -> str:
    """What a node wrote to its log from `offset` on (where it ended before this run)."""
    with log.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


@pytest.mark.parametrize("client, field", [({"replication_factor": 2}, "client.replication_factor"),
                                           ({"min_insync_replicas": 2}, "client.min_insync_replicas")])
def test_settings_the_target_cannot_serve_fail_the_run_before_any_cell(stack, endpoints, store, tmp_path, client,
                                                                      field):
    request = {"name": "refused", "brokers": ["kafka"], "client": client, **TINY}
    run_ids = []
    with pytest.raises(TargetRefused, match=field):
        execute_run(request, endpoints, store, on_run_id=run_ids.append)
    assert [e["type"] for e in store.read(run_ids[0])] == ["RunRequested", "RunFailed"]

    execution, events = execute(stack, tmp_path, request)  # the same through the workflow
    assert execution.status == "FAILED"
    assert [e["type"] for e in events] == ["RunRequested", "RunFailed", "Notified"]  # told once
    failed = next(e for e in events if e["type"] == "RunFailed")["data"]["reason"]
    assert field in failed, failed
