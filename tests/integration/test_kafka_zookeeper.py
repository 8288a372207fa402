"""Kafka in ZooKeeper mode (3.9) beside KRaft Kafka (4.1) in one run, each its own row, on the session's stack."""

import re
from pathlib import Path

from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.stack import pid_alive, port_answers
from brokerbench.local.workflow import LocalWorkflow
from brokerbench.reports.results import build_results
from inline_run import execute_run


def test_a_zookeeper_mode_cell_runs_beside_kraft_in_the_same_run(extra_brokers, store):
    endpoints = extra_brokers("kafka-zookeeper")
    request = {"name": "it-zookeeper", "brokers": ["kafka", "kafka-zookeeper"], "sizes": [1024], "rates": [200],
               "formats": ["json", "raw"], "duration_s": 1.5, "warmup_s": 0.5, "warmup_until_steady": False,
               "drain_timeout_s": 5}
    outcome = execute_run(request, endpoints, store)
    events = store.read(outcome.run_id)
    results = build_results(events)
    assert outcome.status == "completed" and results["status"] == "completed"
    rows = {}
    for cell in results["cells"]:
        rows.setdefault(cell["broker"], set()).add(cell["format"])
        assert cell["status"] == "completed", (cell["broker"], cell.get("reason"))
        assert cell["sent"] == cell["received"] > 0 and cell["lost"] == cell["duplicated"] == 0, cell
        assert cell["broker_count"]["observed"] == cell["broker_count"]["expected"] > 0, cell["broker_count"]
    assert rows == {"kafka": {"json", "raw"}, "kafka-zookeeper": {"json", "raw"}}
    targets = next(e for e in events if e["type"] == "TargetsReady")["data"]["targets"]
    assert targets["kafka-zookeeper"]["broker_version"] == "3.9.2" and targets["kafka"]["broker_version"] == "4.1.1"
    assert targets["kafka-zookeeper"]["settings"]["acks"] == "all"  # the Kafka plug-in's description serves it


def test_zookeeper_runs_beside_its_broker_on_loopback_and_both_kafkas_log(stack, extra_brokers):
    extra_brokers("kafka-zookeeper")
    status = stack.status()["kafka-zookeeper"]
    zookeeper, broker = status["pids"]  # ZooKeeper first, so the broker is stopped first
    assert pid_alive(zookeeper) and pid_alive(broker)
    folder = Path(status["log"]).parent
    settings = dict(line.split("=", 1) for line in (folder / "zookeeper.properties").read_text().splitlines())
    assert settings["clientPortAddress"] == "127.0.0.1" and port_answers(int(settings["clientPort"]))
    assert f"binding to port /127.0.0.1:{settings['clientPort']}" in (folder / "zookeeper.log").read_text()
    # A wrong SLF4J binding leaves only "SLF4J: Defaulting to no-operation (NOP) logger" in a broker's log.
    for name in ("kafka", "kafka-zookeeper"):
        log = Path(stack.status()[name]["log"]).read_text(errors="replace")
        # (the phrase, not "NOP" alone: a random topic id such as "WaQVSAJUPXNOPCAQ" in an INFO line holds those letters)
        assert " INFO " in log and "no-operation (NOP) logger" not in log, (name, log[-500:])


def test_a_three_broker_zookeeper_cluster_replicates_each_partition_three_times(stack, tmp_path):
    request = {"name": "wf-zookeeper-cluster", "brokers": ["kafka-zookeeper"],
               "provision": {"kafka-zookeeper": {"nodes": 3}}, "partitions": 2, "sizes": [1024], "rates": [200],
               "formats": ["raw"], "duration_s": 1.5, "warmup_s": 0.5, "warmup_until_steady": False,
               "drain_timeout_s": 5}
    run_id = new_run_id()
    execution = LocalWorkflow(stack, tmp_path / "reports").execute(request, run_id=run_id)
    assert execution.status == "SUCCEEDED", (execution.error, execution.cause)
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    events = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"]).read(run_id)
    target = next(e for e in events if e["type"] == "TargetsReady")["data"]["targets"]["kafka-zookeeper"]
    assert (target["broker_version"], target["nodes"], target["replication_factor"]) == ("3.9.2", 3, 3)
    cell = build_results(events)["cells"][0]
    assert cell["status"] == "completed" and cell["sent"] == cell["received"] > 0, cell
    topic = next(e["data"]["topic"] for e in events if e["type"] == "CellStarted")
    logs = sorted((Path(stack.state_dir) / "kafka-zookeeper@3").glob("node-*/kafka.log"))
    created = [set(re.findall(rf"Created log for partition ({re.escape(topic)}-\d+) in ", log.read_text()))
               for log in logs]
    assert created == [{f"{topic}-0", f"{topic}-1"}] * 3  # each broker holds a replica of both partitions
    assert execution.output["teardown"] == [{"broker": "kafka-zookeeper", "action": "stopped"}]
