"""The real workflow definition, executed by the local ASL interpreter against the real local stack."""

import json

import pytest
from conftest import CORE_SERVICES
from results_tools import assert_logs_match, lower_bound_logs, read_cells_csv, read_hlog

from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.stack import LocalStack, free_port
from brokerbench.local.workflow import LocalWorkflow
from brokerbench.events import new_run_id
from brokerbench.reports.export import hlog_path
from brokerbench.reports.results import build_results, problems


def execute(stack, tmp_path, request):
    run_id = new_run_id()
    execution = LocalWorkflow(stack, tmp_path / "reports").execute(request, suite=request.get("name"), run_id=run_id)
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    events = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"]).read(run_id)
    return execution, events


def states(execution):
    return [state for state, _ in execution.tasks]


def test_happy_path_runs_lambda_and_ec2_workers_and_tears_down(stack, tmp_path):
    # Estimated 0.2 + 2 + 1 + 15 s at 200 msgs/s (EC2) and 0.2 + 0.4 + 1 + 15 s at 1,000 msgs/s (Lambda).
    request = {"name": "wf-happy", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [200, 1000],
               "formats": ["msgpack"], "messages": 400, "warmup_s": 0.2, "warmup_until_steady": False,
               "drain_timeout_s": 1,
               "placement": {"lambda_max_cell_s": 17}}
    execution, events = execute(stack, tmp_path, request)
    assert execution.status == "SUCCEEDED", (execution.error, execution.cause)
    types = [e["type"] for e in events]
    assert types[:2] == ["RunRequested", "TargetsReady"] and types[-2:] == ["RunCompleted", "ReportBuilt"]
    targets = events[1]["data"]["targets"]
    assert targets["kafka"]["settings"]["acks"] == "all"
    assert targets["redis-streams"]["settings"]["persistence"]["appendonly"] == "yes"
    assert types.count("CellStarted") == types.count("CellCompleted") == 4
    workers = {e["data"]["cell_id"]: e["data"]["worker"]["kind"] for e in events if e["type"] == "CellStarted"}
    assert {cell_id.split(".")[4]: kind for cell_id, kind in workers.items()} == {"200mps": "ec2", "1000mps": "lambda"}
    results = json.loads((tmp_path / "reports" / execution.run_id / "results.json").read_text())  # written by Aggregate
    assert results == build_results(events)
    for name in ("report.html", "report.md", "report.json"):
        assert (tmp_path / "reports" / execution.run_id / name).is_file(), name
    assert all(c["status"] == "completed" and c["sent"] == c["received"] == 400 for c in results["cells"])
    # The documented format, and the files other tools read: the logs give results.json's percentiles, and count
    # what the consumers received; the CSV the cells' figures.
    folder = tmp_path / "reports" / execution.run_id
    assert problems(results) == []
    assert assert_logs_match(folder, results, {c["cell_id"]: c["intervals"] for c in results["cells"]}) == \
        4 * 6 - lower_bound_logs(results)
    for cell in results["cells"]:
        assert read_hlog(folder / hlog_path(cell["cell_id"], "end_to_end_latency_us"))[0].get_total_count() == 400
    rows = read_cells_csv(folder / "cells.csv")
    assert {cell_id: (int(r["received"]), float(r["throughput_msgs_per_s"])) for cell_id, r in rows.items()} == {
        c["cell_id"]: (400, c["throughput_msgs_per_s"]) for c in results["cells"]}
    files = next(e for e in events if e["type"] == "ReportBuilt")["data"]["files"]
    assert (files["csv"], files["hlog"]) == (str(folder / "cells.csv"), str(folder / "hlog"))
    assert states(execution)[:2] == ["ValidateRequest", "PlanCells"]
    assert states(execution).index("CheckRegression") < states(execution).index("Aggregate")
    report = json.loads((tmp_path / "reports" / execution.run_id / "report.json").read_text())
    assert report["regression_check"]["baseline_run_id"] is None  # the suite's first run: nothing to compare
    assert states(execution).count("RunCellOnEc2") == 2 and states(execution).count("RunCellOnLambda") == 2
    assert "Notify" not in states(execution)  # nothing failed, nothing to tell
    assert execution.output["teardown"] == [{"broker": "kafka", "action": "left running (not started by this run)"},
                                            {"broker": "redis-streams", "action": "left running (not started by this run)"}]
    assert stack.is_up(CORE_SERVICES)


def test_a_failing_cell_is_recorded_and_the_run_completes(stack, tmp_path):
    request = {"name": "wf-fail", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [200],
               "formats": ["raw"], "duration_s": 1, "warmup_s": 0, "warmup_until_steady": False,
               "placement": {"worker": "ec2"},
               "targets": {"kafka": {"bootstrap_servers": f"127.0.0.1:{free_port()}"}}}
    execution, events = execute(stack, tmp_path, request)
    assert execution.status == "SUCCEEDED", (execution.error, execution.cause)
    results = build_results(events)
    cells = {c["broker"]: c for c in results["cells"]}
    kafka, redis_cell = cells["kafka"], cells["redis-streams"]
    assert kafka["status"] == "failed" and "did not answer" in kafka["reason"]
    assert redis_cell["status"] == "completed" and redis_cell["lost"] == 0
    assert results["status"] == "completed_with_failures"
    assert problems(results) == []
    folder = tmp_path / "reports" / execution.run_id
    # the completed cell's (less those a producer behind at the cell's end made lower bounds); the failed one has none
    assert assert_logs_match(folder, results) == 6 - lower_bound_logs(results)
    assert read_cells_csv(folder / "cells.csv")[kafka["cell_id"]]["status"] == "failed"
    assert "Notify" in states(execution) and states(execution)[-2:] == ["TeardownTarget", "TeardownTarget"]
    [note] = [json.loads(line) for line in (tmp_path / "reports" / execution.run_id / "notifications.jsonl").open()]
    assert note["message"]["failed_cells"][0]["cell_id"] == kafka["cell_id"]
    assert {t["action"] for t in execution.output["teardown"]} == {"kept (existing endpoint)",
                                                                   "left running (not started by this run)"}


@pytest.fixture
def store_only_stack(tmp_path):
    """A stack where only DynamoDB Local runs: the workflow must start (and stop) the brokers itself."""
    local = LocalStack(tmp_path / "stack")
    local.up(["dynamodb"], log=lambda m: None)
    yield local
    local.down(log=lambda m: None)


def test_provisioned_brokers_are_stopped_by_teardown(store_only_stack, tmp_path):
    request = {"name": "wf-provision", "brokers": ["redis-streams"], "sizes": [1024], "rates": [100],
               "formats": ["raw"], "duration_s": 1, "warmup_s": 0, "warmup_until_steady": False}
    execution, events = execute(store_only_stack, tmp_path, request)
    assert execution.status == "SUCCEEDED", (execution.error, execution.cause)
    assert build_results(events)["cells"][0]["status"] == "completed"
    assert execution.output["teardown"] == [{"broker": "redis-streams", "action": "stopped"}]
    assert store_only_stack.status()["redis"]["state"] == "stopped"


def test_a_provisioning_failure_measures_nothing_tears_down_and_fails_the_run(store_only_stack, tmp_path):
    request = {"name": "wf-noprov", "brokers": ["kafka"], "sizes": [1024], "rates": [100], "formats": ["raw"],
               "duration_s": 1, "provision": {"kafka": {"version": "2.8"}}}
    execution, events = execute(store_only_stack, tmp_path, request)
    assert execution.status == "FAILED" and execution.error == "RunFailed"
    assert "2.8 is not available locally" in execution.cause
    types = [e["type"] for e in events]
    assert types == ["RunRequested", "RunFailed", "Notified"]  # nothing measured; the failure was told, once
    assert "ProvisioningError" in events[1]["data"]["reason"]
    assert states(execution)[-1] == "TeardownTarget"
    assert build_results(events)["status"] == "failed"
    assert store_only_stack.status()["kafka"]["state"] == "stopped"


def test_an_invalid_request_fails_at_validation_and_starts_nothing(store_only_stack, tmp_path):
    execution, events = execute(store_only_stack, tmp_path, {"brokers": ["kafka"], "sizes": [10], "rates": [1],
                                                              "formats": ["yaml"]})
    assert execution.status == "FAILED" and execution.error == "InvalidRequest"
    assert "sizes[0]" in execution.cause and "formats[0]" in execution.cause
    assert states(execution) == ["ValidateRequest"]
    assert events == []
    assert store_only_stack.status()["kafka"]["state"] == "stopped"


def test_cells_run_in_the_stored_order_and_the_report_shows_the_regression_check(stack, tmp_path):
    """Two repeats in different (seeded) orders; CellStarted follows `order`; a second run of the suite
    is checked against the first, and its report says so."""
    from brokerbench.spec import expand, validate

    request = {"name": "wf-order", "brokers": ["redis-streams"], "sizes": [1024], "rates": [1000],
               "formats": ["raw", "json", "msgpack"], "messages": 300, "warmup_s": 0, "warmup_until_steady": False,
               "drain_timeout_s": 1,
               "repeats": 2}
    seed = next(s for s in range(100) if [c["format"] for c in expand(validate({**request, "order_seed": s}))[:3]]
                != [c["format"] for c in expand(validate({**request, "order_seed": s}))[3:]])
    first, first_events = execute(stack, tmp_path, {**request, "order_seed": seed})
    assert first.status == "SUCCEEDED", (first.error, first.cause)
    requested = first_events[0]["data"]
    assert requested["spec"]["order_seed"] == seed
    planned = sorted(requested["cells"], key=lambda c: c["order"])
    started = sorted((e for e in first_events if e["type"] == "CellStarted"), key=lambda e: e["at"])
    assert [e["data"]["cell_id"] for e in started] == [c["cell_id"] for c in planned]  # what ran is what is stored
    repeats = [[c["format"] for c in planned if c["repeat"] == r] for r in (0, 1)]
    assert repeats[0] != repeats[1] and sorted(repeats[0]) == sorted(repeats[1])

    second, second_events = execute(stack, tmp_path, request)  # a seed of its own
    assert second.status == "SUCCEEDED", (second.error, second.cause)
    assert second_events[0]["data"]["spec"]["order_seed"] is not None
    report = json.loads((tmp_path / "reports" / second.run_id / "report.json").read_text())
    check = report["regression_check"]
    assert check["baseline_run_id"] == first.run_id
    assert check["verdicts"] and check == json.loads((tmp_path / "reports" / second.run_id / "regression.json").read_text())


def test_a_failed_aggregate_ends_the_run_failed_and_the_execution_too(stack, tmp_path):
    request = {"name": "wf-aggregate-fails", "brokers": ["redis-streams"], "sizes": [1024], "rates": [1000],
               "formats": ["raw"], "messages": 100, "warmup_s": 0, "warmup_until_steady": False, "drain_timeout_s": 1}
    run_id = new_run_id()
    (tmp_path / "reports" / run_id / "report.html").mkdir(parents=True)  # Aggregate cannot write its report
    execution = LocalWorkflow(stack, tmp_path / "reports").execute(request, suite=request["name"], run_id=run_id)
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    events = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"]).read(run_id)
    assert execution.status == "FAILED" and execution.error == "RunFailed"
    assert "Is a directory" in execution.cause
    types = [e["type"] for e in events]
    assert "RunCompleted" not in types and types[-2:] == ["RunFailed", "Notified"]  # not hidden behind a RunCompleted
    assert "IsADirectoryError" in events[-2]["data"]["reason"]
    assert build_results(events)["cells"][0]["status"] == "completed"
    assert [s for s in states(execution) if s in ("CheckRegression", "Aggregate", "RecordRunFailed")] == [
        "CheckRegression", "Aggregate", "RecordRunFailed"]
    assert states(execution)[-1] == "TeardownTarget"


def test_a_failed_run_tells_the_recipients_of_its_request(store_only_stack, tmp_path):
    request = {"name": "wf-told", "brokers": ["kafka"], "sizes": [1024], "rates": [100], "formats": ["raw"],
               "duration_s": 1, "provision": {"kafka": {"version": "2.8"}},
               "notify": ["perf@example.com", "arn:aws:sns:us-east-1:123456789012:perf"]}
    execution, events = execute(store_only_stack, tmp_path, request)
    assert execution.status == "FAILED" and [e["type"] for e in events] == ["RunRequested", "RunFailed", "Notified"]
    assert events[0]["data"]["spec"]["notify"] == request["notify"]  # carried into the validated spec
    [note] = [json.loads(line) for line in (tmp_path / "reports" / execution.run_id / "notifications.jsonl").open()]
    assert note["to"] == request["notify"]
    assert note["subject"].startswith(f"brokerbench run {execution.run_id} failed: ") and "2.8" in note["subject"]
    assert note["message"]["reason"] == events[1]["data"]["reason"]


def test_the_teardown_state_machine_runs_and_stops_what_the_run_started(store_only_stack, tmp_path):
    """statemachines/teardown_run.asl.json (what the RunEnded rule and a cancel start in AWS) on the local interpreter,
    with {"run": {"run_id", "spec"}}: the run's Redis is stopped by the same TeardownTarget loop."""
    from brokerbench.local.workflow import TEARDOWN_DEFINITION
    from brokerbench.spec import validate

    run_id = new_run_id()
    spec = validate({"brokers": ["redis-streams"], "sizes": [1024], "rates": [100], "formats": ["raw"]})
    store_only_stack.up(services=["redis"], owner=run_id, log=lambda m: None)  # as the run's provisioning did
    assert store_only_stack.status()["redis"]["state"] == "running"
    execution = LocalWorkflow(store_only_stack, tmp_path / "reports", definition=TEARDOWN_DEFINITION).execute(
        spec, run_id=run_id, execution_input={"run": {"run_id": run_id, "spec": spec}})
    assert execution.status == "SUCCEEDED", (execution.error, execution.cause)
    assert execution.output["teardown"] == [{"broker": "redis-streams", "action": "stopped"}]
    assert states(execution) == ["TeardownTarget"]
    assert store_only_stack.status()["redis"]["state"] == "stopped"


def test_one_target_that_cannot_be_torn_down_leaves_the_others_deleted_and_is_named(store_only_stack, tmp_path,
                                                                                    monkeypatch):
    """The teardown state machine on the local interpreter, with TeardownTarget failing for Kafka on every call (its
    five retries too, 0.1 s apart here): Redis's iteration still stops the run's Redis, the execution fails
    (TargetsNotDeleted), and the run's StepFailed(TeardownTargets) names Kafka, and only Kafka, as not deleted."""
    from brokerbench.local.workflow import TEARDOWN_DEFINITION
    from brokerbench.spec import validate
    from handlers import teardown_target

    definition = json.loads(TEARDOWN_DEFINITION.read_text())
    retry = definition["States"]["TeardownTargets"]["ItemProcessor"]["States"]["TeardownTarget"]["Retry"][0]
    retry.update(IntervalSeconds=0.1, BackoffRate=1)
    quick = tmp_path / "teardown.asl.json"
    quick.write_text(json.dumps(definition))
    real, calls = teardown_target.lambda_handler, []

    def failing_for_kafka(event, context):
        calls.append(event["broker"])
        if event["broker"] == "kafka":
            raise RuntimeError("injected: DeleteCluster AccessDenied")
        return real(event, context)

    monkeypatch.setattr(teardown_target, "lambda_handler", failing_for_kafka)
    run_id = new_run_id()
    spec = validate({"brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [100], "formats": ["raw"]})
    store_only_stack.up(services=["redis"], owner=run_id, log=lambda m: None)  # as the run's provisioning did
    execution = LocalWorkflow(store_only_stack, tmp_path / "reports", definition=quick).execute(
        spec, run_id=run_id, execution_input={"run": {"run_id": run_id, "spec": spec}})
    assert (execution.status, execution.error) == ("FAILED", "TeardownFailed"), (execution.error, execution.cause)
    assert calls.count("kafka") == 6 and calls.count("redis-streams") == 1  # Kafka alone retried, five times
    assert store_only_stack.status()["redis"]["state"] == "stopped"
    db = store_only_stack.endpoints(required=["dynamodb"])["dynamodb"]
    [failed] = [e["data"] for e in DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"]).read(run_id)
                if e["type"] == "StepFailed"]
    assert failed["step"] == "TeardownTargets" and [t["broker"] for t in failed["targets_left"]] == ["kafka"]
    assert "injected: DeleteCluster AccessDenied" in failed["targets_left"][0]["cause"]
    assert failed["reason"].startswith("TargetsNotDeleted: kafka not deleted (")
