"""Every workflow step called again after it succeeded, with the same payload: what a Lambda retry does when the
answer of a step that did its work is lost (a timeout, a throttled response), and what a redriven execution does.

The steps' Lambda handlers run here against the real local stack: Redis started by the run itself (so its
teardown has something to stop), DynamoDB Local as the event store, reports and notifications in a folder. After
each second call: no event stored twice or changed, no second side effect (a second measurement of a cell, a
second notification, a second broker, a second stop), and the same answer.
"""

import json
import socket
import time

import pytest
import redis

from brokerbench.events import dynamodb, make_event, new_run_id
from brokerbench.local.stack import LocalStack
from brokerbench.plan import plan
from brokerbench.reports.results import build_results
from brokerbench.spec import validate
from fault_tools import LambdaContext, event_facts
from reliability_log import observe

SPEC = {"name": "step-retries", "brokers": ["redis-streams"], "sizes": [512], "rates": [300], "formats": ["raw", "json"],
        "duration_s": 2, "warmup_s": 0.3, "warmup_until_steady": False, "order": "fixed", "notify": ["perf@example.com"]}


@pytest.fixture
def lambda_env(store, tmp_path, monkeypatch):
    """The steps' settings as the local workflow gives them: this test's stack folder, the session's event store."""
    for name, value in {"BROKERBENCH_MODE": "local", "BROKERBENCH_EVENTS_TABLE": store.table,
                        "BROKERBENCH_DYNAMODB_ENDPOINT": store.client.meta.endpoint_url,
                        "BROKERBENCH_REPORTS": str(tmp_path / "reports"), "BROKERBENCH_NOTIFY": str(tmp_path / "notes"),
                        "BROKERBENCH_STATE_DIR": str(tmp_path / "state")}.items():
        monkeypatch.setenv(name, value)
    dynamodb._store.cache_clear()
    yield tmp_path
    LocalStack(tmp_path / "state").down(log=lambda m: None)
    dynamodb._store.cache_clear()


def call(step: str, payload: dict):
    """The step's Lambda handler, as the workflow invokes it (the payload goes through JSON, as it does there)."""
    import importlib

    handler = importlib.import_module(f"handlers.{step}")
    return handler.lambda_handler(json.loads(json.dumps(payload)), LambdaContext(f"brokerbench-{step}"))


def twice(store, run_id: str, step: str, payload: dict):
    """Calls the step, then again: the second answer must equal the first and the stored events must not change."""
    first = call(step, payload)
    before = store.read(run_id) if run_id else []
    again = call(step, payload)
    after = store.read(run_id) if run_id else []
    assert again == first, step
    assert [e["event_id"] for e in after] == [e["event_id"] for e in before], step
    assert [e["data"] for e in after] == [e["data"] for e in before], step
    return first


def test_every_step_called_again_after_it_succeeded_changes_nothing(store, lambda_env):
    stack = LocalStack(lambda_env / "state")
    run = call("validate_request", {"request": SPEC})
    run_id = run["run_id"]
    planned = twice(store, run_id, "plan_cells", run)
    assert [e["type"] for e in store.read(run_id)] == ["RunRequested"]

    provisioned = call("provision_target", {"run_id": run_id, "broker": "redis-streams", "spec": run["spec"]})
    pids = stack.endpoint("redis")["pids"]
    again = call("provision_target", {"run_id": run_id, "broker": "redis-streams", "spec": run["spec"]})
    assert again["endpoint"] == provisioned["endpoint"] and stack.endpoint("redis")["pids"] == pids  # one Redis
    targets = twice(store, run_id, "record_targets_ready", {"run_id": run_id, "spec": run["spec"],
                                                            "targets": [provisioned]})["endpoints"]

    checked = []
    for cell in planned["cells"]:
        # A worker invocation run twice: the second finds the cell ended and measures nothing again.
        outcome = twice(store, run_id, "run_cell", {"run_id": run_id, "cell": cell, "targets": targets})
        assert outcome["status"] == "completed", outcome
        # RecordCellFailed after a worker whose answer was lost: the cell that completed stays completed.
        failed = call("record_cell_failed", {"run_id": run_id, "cell": cell,
                                             "error": {"Error": "States.Timeout", "Cause": "answer lost"}})
        assert failed["cell_id"] == cell["cell_id"] and failed["topics_removed"] == []  # its worker deleted it
        checked.append(cell["cell_id"])
    events = store.read(run_id)
    assert [e["type"] for e in events].count("CellCompleted") == 2 and "CellFailed" not in [e["type"] for e in events]
    assert [e["type"] for e in events].count("CellStarted") == 2  # one attempt each: nothing measured twice

    check = twice(store, run_id, "check_regression", {"run_id": run_id})
    summary = twice(store, run_id, "aggregate", {"run_id": run_id, "check": check})
    results = (lambda_env / "reports" / run_id / "results.json").read_text()
    call("aggregate", {"run_id": run_id, "check": check})
    assert (lambda_env / "reports" / run_id / "results.json").read_text() == results  # one result
    kinds = [e["type"] for e in store.read(run_id)]
    assert kinds.count("RunCompleted") == kinds.count("ReportBuilt") == 1 and summary["status"] == "completed"

    # Notify (here with a made-up failed cell, so there is something to tell) sends once.
    told = {**check, "failed_cells": [{"cell_id": checked[0], "reason": "for the notification"}], "notify": True}
    first = call("notify", {"run_id": run_id, "summary": summary, "check": told})
    assert call("notify", {"run_id": run_id, "summary": summary, "check": told}) == first
    notes = (lambda_env / "notes" / run_id / "notifications.jsonl").read_text().splitlines()
    assert len(notes) == 1 and json.loads(notes[0])["to"] == ["perf@example.com"]

    # A StepFailed recorded twice (the record step retried) is stored once.
    step_failed = {"run_id": run_id, "step": "TeardownTargets", "failure": {"Error": "X", "Cause": "y"}}
    assert call("record_run_failed", step_failed)["recorded"] is True
    assert call("record_run_failed", step_failed)["recorded"] is False
    assert [e["type"] for e in store.read(run_id)].count("StepFailed") == 1

    teardown = {"run_id": run_id, "broker": "redis-streams", "spec": run["spec"]}
    assert call("teardown_target", teardown)["action"] == "stopped"
    assert call("teardown_target", teardown)["action"] == "not running (stopped already)"
    events = store.read(run_id)
    assert len(events) == len({e["event_id"] for e in events})
    results = build_results(events)
    assert [c["status"] for c in results["cells"]] == ["completed", "completed"]
    assert all(c["received"] == c["sent"] > 0 for c in results["cells"])
    observe("step-retries", fault="every workflow step's Lambda handler called a second time with the same payload "
                                  "after it had succeeded (ValidateRequest, PlanCells, ProvisionTarget, "
                                  "RecordTargetsReady, RunCell, RecordCellFailed on a completed cell, CheckRegression, "
                                  "Aggregate, Notify, RecordRunFailed for a step, TeardownTarget)",
            run_status=results["status"], exit_code=None,
            cells=[{k: c.get(k) for k in ("cell_id", "status", "sent", "received", "lost", "duplicated")}
                   for c in results["cells"]],
            observed=["the second call of each step answered as the first and stored no event, changed none",
                      "RunCell called twice per cell: one CellStarted each, nothing measured twice",
                      "RecordCellFailed after a completed cell: the cell stays completed",
                      "ProvisionTarget twice: one Redis (the same pids); TeardownTarget twice: stopped, then "
                      "'not running (stopped already)'",
                      "Aggregate twice: one RunCompleted, one ReportBuilt, results.json the same",
                      "Notify twice: one notification sent", "a StepFailed recorded twice is stored once"],
            **event_facts(events))


def _failed_cell(store, run_id: str, topic: str) -> dict:
    """A cell whose worker started it (CellStarted names its topic) and then died without a word."""
    cell = plan(validate({**SPEC, "partitions": 2}))["cells"][0]
    store.append([make_event(run_id, "CellStarted", {"cell_id": cell["cell_id"], "cell": cell, "topic": topic,
                                                    "attempt": 0}, cell_index=0)])
    return cell


def test_a_lost_workers_streams_are_deleted_when_its_cell_is_recorded_failed(store, endpoints, lambda_env):
    run_id = new_run_id()
    topic = f"bb-{run_id}-c00000"
    at = endpoints["redis-streams"]
    client = redis.Redis(host=at["host"], port=at["port"])
    for partition in range(2):
        client.xadd(f"{topic}-{partition}", {"m": "left by a worker that was killed"})
    cell = _failed_cell(store, run_id, topic)
    payload = {"run_id": run_id, "cell": cell, "targets": {"redis-streams": at},
               "error": {"Error": "WorkerLost", "Cause": "worker process ended without reporting"}}
    recorded = call("record_cell_failed", payload)
    assert recorded["topics_removed"] == [topic]
    assert list(client.scan_iter(match=f"{topic}-*")) == []  # Redis's own keyspace
    assert [e["type"] for e in store.read(run_id)].count("CellFailed") == 1


def test_a_silent_broker_keeps_the_streams_and_the_failure_is_still_recorded_within_seconds(store, lambda_env):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run_id = new_run_id()
    cell = _failed_cell(store, run_id, f"bb-{run_id}-c00000")
    started = time.monotonic()
    recorded = call("record_cell_failed", {"run_id": run_id, "cell": cell,
                                           "targets": {"redis-streams": {"host": "127.0.0.1", "port": port}},
                                           "error": {"Error": "States.Timeout", "Cause": "no heartbeat"}})
    assert recorded == {"cell_id": cell["cell_id"], "status": "failed", "topics_removed": []}
    assert time.monotonic() - started < 30  # bounded: the broker's check gives up after 5 s
    failed = [e for e in store.read(run_id) if e["type"] == "CellFailed"]
    assert len(failed) == 1 and failed[0]["data"]["reason"] == "States.Timeout: no heartbeat"
