"""The API's routes through its Lambda handler, with API Gateway REST proxy events, as Lambda runs it in AWS.

The event store and the idempotency table are DynamoDB Local (real). Step Functions cannot run here, so its
control-plane calls (StartExecution, DescribeExecution, StopExecution) are answered by botocore's Stubber.
Stored runs are synthetic events shaped like a real run's (brokerbench.reports.synthetic); a real run through
the API is in test_api_serve.py.
"""

import importlib
import json
import secrets
import sys
from datetime import datetime, timezone
from pathlib import Path

from botocore.stub import ANY, Stubber
import pytest
from synthetic import synthetic_run

from brokerbench.api.deps import ensure_idempotency_table
from brokerbench.events import make_event, new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.workflow.admission import Admission

ROOT = Path(__file__).resolve().parents[2]
MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:brokerbench-run"
# Existing targets: a cancelled run's teardown leaves them alone (nothing in AWS is touched).
SPEC = {"brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000], "formats": ["json", "raw"],
        "repeats": 3, "targets": {"kafka": {"bootstrap_servers": "127.0.0.1:9"},
                                  "redis-streams": {"host": "127.0.0.1", "port": 9}}}


@pytest.fixture(scope="module")
def api(stack, tmp_path_factory, monkeypatch_module):
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    table, idempotency = f"bb-api-{secrets.token_hex(4)}", f"bb-idem-{secrets.token_hex(4)}"
    store = DynamoEventStore(table, endpoint_url=db["endpoint_url"])
    store.ensure_table()
    ensure_idempotency_table(store.client, idempotency)
    env = {"BROKERBENCH_MODE": "aws", "BROKERBENCH_EVENTS_TABLE": table, "BROKERBENCH_DYNAMODB_ENDPOINT": db["endpoint_url"],
           "BROKERBENCH_IDEMPOTENCY_TABLE": idempotency, "BROKERBENCH_STATE_MACHINE_ARN": MACHINE,
           "BROKERBENCH_REPORTS": str(tmp_path_factory.mktemp("reports")), "AWS_ENDPOINT_URL_DYNAMODB": db["endpoint_url"],
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "local",
           "AWS_SECRET_ACCESS_KEY": "local", "POWERTOOLS_SERVICE_NAME": "brokerbench"}
    for name, value in env.items():
        monkeypatch_module.setenv(name, value)
    sys.modules.pop("handlers.api", None)
    handler = importlib.import_module("handlers.api")
    # The API in AWS holds a slot among the runs in flight and checks the quotas before a start (DescribeExecution, Service
    # Quotas, Lambda, EC2): tests/unit/test_bounds.py plays those against moto and Stubber. Here the Step Functions
    # Stubber answers only the calls each test names, so the handler starts without that check.
    assert isinstance(handler.deps.starter.admission, Admission)
    handler.deps.starter.admission = None
    yield handler, store
    sys.modules.pop("handlers.api", None)
    store.client.delete_table(TableName=table)
    store.client.delete_table(TableName=idempotency)


@pytest.fixture(scope="module")
def monkeypatch_module():
    patch = pytest.MonkeyPatch()
    yield patch
    patch.undo()


class Context:
    function_name = "brokerbench-api"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:brokerbench-api"
    function_version = "$LATEST"
    memory_limit_in_mb = 512
    log_group_name = "/aws/lambda/brokerbench-api"
    log_stream_name = "stream"

    def __init__(self):
        self.aws_request_id = secrets.token_hex(8)

    @staticmethod
    def get_remaining_time_in_millis():
        return 29_000


def call(handler, method, path, body=None, headers=None, query=None):
    """One API Gateway REST (v1) proxy event through the Lambda handler; (status, parsed body)."""
    event = {"resource": path, "path": path, "httpMethod": method,
             "headers": {"content-type": "application/json", **(headers or {})},
             "multiValueHeaders": {}, "queryStringParameters": query,
             "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} if query else None,
             "pathParameters": None, "stageVariables": None,
             "requestContext": {"resourcePath": path, "httpMethod": method, "path": f"/prod{path}", "stage": "prod",
                                "requestId": secrets.token_hex(8), "identity": {"sourceIp": "10.0.0.1"}},
             "body": json.dumps(body) if body is not None else None, "isBase64Encoded": False}
    result = handler.lambda_handler(event, Context())
    text = result["body"]
    headers = {**{k: ", ".join(v) for k, v in (result.get("multiValueHeaders") or {}).items()}, **(result.get("headers") or {})}
    content_type = headers.get("Content-Type", "")
    return result["statusCode"], json.loads(text) if content_type.startswith("application/json") else text


@pytest.fixture(scope="module")
def stored(api):
    """Three synthetic runs (two of one suite, the second with half the throughput), one run still going."""
    handler, store = api
    suite = f"api-{secrets.token_hex(3)}"
    ids = sorted(new_run_id()[:-6] + f"{i:06x}" for i in range(3))
    store.append(synthetic_run({**SPEC, "name": suite}, intervals=5, seed=1, run_id=ids[0]))
    store.append(synthetic_run({**SPEC, "name": suite}, intervals=5, seed=2, run_id=ids[1], rate_scale=0.5))
    store.append(synthetic_run({**SPEC, "name": f"{suite}-other"}, intervals=5, seed=3, run_id=ids[2]))
    running = new_run_id()
    events = synthetic_run({**SPEC, "name": f"{suite}-live"}, intervals=5, seed=4, run_id=running)
    store.append([e for e in events if e["type"] not in ("RunCompleted", "ReportBuilt")
                  and not (e["type"] in ("CellCompleted", "IntervalMeasured", "CellStarted")
                           and e["data"]["cell_id"] != events[0]["data"]["cells"][0]["cell_id"])])
    return {"suite": suite, "baseline": ids[0], "candidate": ids[1], "other": ids[2], "running": running,
            "cells": len(events[0]["data"]["cells"])}


def test_post_run_starts_one_execution_and_a_retry_returns_the_same_run(api):
    handler, _ = api
    with Stubber(handler.deps.starter.client) as sfn:
        sfn.add_response("start_execution", {"executionArn": "arn:x", "startDate": datetime.now(timezone.utc)},
                         {"stateMachineArn": MACHINE, "name": ANY, "input": ANY})
        key = {"Idempotency-Key": secrets.token_hex(8)}
        status, first = call(handler, "POST", "/runs", {"suite": "smoke"}, key)
        assert status == 202 and first["status"] == "starting" and first["replayed"] is False
        status, again = call(handler, "POST", "/runs", {"suite": "smoke"}, key)
        assert status == 202 and again["run_id"] == first["run_id"] and again["replayed"] is True
        sfn.assert_no_pending_responses()  # StartExecution was called once
        status, other = call(handler, "POST", "/runs", {"suite": "quick"}, key)
        assert status == 422 and other["field"] == "Idempotency-Key"
    assert first["links"]["self"] == f"/runs/{first['run_id']}"


def test_a_run_of_a_study_starts_scaled_under_its_suite(api):
    """POST /runs {suite, run, scale}: the study's run, shortened, is what StartExecution is given."""
    handler, _ = api
    started = {}

    def capture(**kwargs):
        started.update(json.loads(kwargs["input"]))
    handler.deps.starter.client.meta.events.register("provide-client-params.states.StartExecution",
                                                    lambda params, **_: capture(**params))
    try:
        with Stubber(handler.deps.starter.client) as sfn:
            sfn.add_response("start_execution", {"executionArn": "arn:x", "startDate": datetime.now(timezone.utc)},
                             {"stateMachineArn": MACHINE, "name": ANY, "input": ANY})
            status, body = call(handler, "POST", "/runs", {"suite": "vandongen", "run": "vandongen-periodic-burst",
                                                           "scale": 0.05})
            assert status == 202, body
            sfn.assert_no_pending_responses()
    finally:
        handler.deps.starter.client.meta.events.unregister("provide-client-params.states.StartExecution")
    text = json.dumps(started)
    assert "vandongen-periodic-burst" in text and '"suite": "vandongen"' in text
    assert '"duration_s": 30.0' in text and '"warmup_s": 15.0' in text  # 600 s and 300 s at scale 0.05
    with Stubber(handler.deps.starter.client) as sfn:  # nothing queued: a StartExecution would fail the call
        status, body = call(handler, "POST", "/runs", {"suite": "vandongen"})
        assert status == 422 and body["field"] == "run" and "vandongen-startup-burst" in body["message"]
        status, body = call(handler, "POST", "/runs", {"suite": "vandongen", "run": "nope"})
        assert status == 422 and body["field"] == "run" and "no run 'nope'" in body["message"]
        status, body = call(handler, "POST", "/runs", {"suite": "smoke", "scale": 2})
        assert status == 422 and body["field"] == "scale"
        sfn.assert_no_pending_responses()
    status, suites = call(handler, "GET", "/suites")
    studies = {s["name"]: s["runs"] for s in suites["suites"]}
    assert studies["smoke"] == [] and "vandongen-startup-burst" in studies["vandongen"]
    status, detail = call(handler, "GET", "/suites/vandongen")
    assert status == 200 and detail["request"] is None
    assert detail["requests"]["vandongen-periodic-burst"]["burst"]["messages"] == 38000


def test_invalid_requests_are_422_naming_the_field_and_start_nothing(api):
    handler, _ = api
    with Stubber(handler.deps.starter.client) as sfn:  # no response queued: any StartExecution would fail the call
        status, body = call(handler, "POST", "/runs", {"brokers": ["kafka"], "sizes": [1024], "rates": [-5],
                                                        "formats": ["json"]})
        assert status == 422 and body["field"] == "rates[0]" and body["problems"]
        status, body = call(handler, "POST", "/runs", {"brokers": ["kafka"], "rates": [10], "formats": ["json"]})
        assert status == 422 and body["field"] == "sizes"
        status, body = call(handler, "POST", "/runs", {"suite": "../../etc/passwd"})
        assert status == 422 and body["field"] == "suite"
        status, body = call(handler, "POST", "/runs", {"suite": "smoke", "extra": 1})
        assert status == 422 and body["field"] == "extra"
        sfn.assert_no_pending_responses()
    for path in ("/runs/not-a-run", "/runs/20261122T000000Z-zzzzzz/events", "/compare"):
        status, body = call(handler, "GET", path)
        assert status == 422, path
        assert body["field"]


def test_listing_pages_filters_and_never_repeats_a_run(api, stored):
    handler, _ = api
    with Stubber(handler.deps.starter.client) as sfn:
        sfn.add_client_error("describe_execution", "ExecutionDoesNotExist")  # the live run's execution is asked once
        seen, token = [], None
        while True:
            query = {"limit": "2", **({"next": token} if token else {})}
            status, page = call(handler, "GET", "/runs", query=query)
            assert status == 200 and len(page["runs"]) <= 2
            seen += [r["run_id"] for r in page["runs"]]
            token = page["next"]
            if not token:
                break
    mine = [stored[k] for k in ("baseline", "candidate", "other", "running")]
    assert len(seen) == len(set(seen)) and set(mine) <= set(seen)
    assert [r for r in seen if r in mine] == sorted(mine, reverse=True)  # newest first

    status, page = call(handler, "GET", "/runs", query={"suite": stored["suite"]})
    assert status == 200 and [r["run_id"] for r in page["runs"]] == [stored["candidate"], stored["baseline"]]
    assert all(r["status"] == "completed" and r["cells"]["completed"] == stored["cells"] for r in page["runs"])
    status, page = call(handler, "GET", "/runs", query={"suite": stored["suite"], "status": "failed"})
    assert status == 200 and page["runs"] == []
    status, page = call(handler, "GET", "/runs", query={"since": "2999-01-01T00:00:00Z"})
    assert status == 200 and page["runs"] == []
    status, body = call(handler, "GET", "/runs", query={"next": "not-a-token"})
    assert status == 422 and body["field"] == "next"


def test_a_run_its_progress_events_cell_and_report(api, stored):
    handler, store = api
    run_id = stored["baseline"]
    status, run = call(handler, "GET", f"/runs/{run_id}")
    assert status == 200 and run["status"] == "completed"
    assert run["progress"] == {"total": stored["cells"], "completed": stored["cells"], "failed": 0, "fraction": 1.0}
    assert run["timings"]["duration_s"] >= 0 and len(run["cells_detail"]) == stored["cells"]

    events, token = [], None
    while True:
        status, page = call(handler, "GET", f"/runs/{run_id}/events", query={"limit": "7", **({"next": token} if token else {})})
        assert status == 200
        events += page["events"]
        token = page["next"]
        if not token:
            break
    assert [e["event_id"] for e in events] == [e["event_id"] for e in store.read(run_id)]

    cell = run["cells_detail"][0]
    status, detail = call(handler, "GET", f"/runs/{run_id}/cells/{cell['cell_id']}")
    assert status == 200 and detail["cell"]["cell_id"] == cell["cell_id"] and len(detail["series"]) == 5
    # the per-second series adds up to the cell's own count (both from the stored events, by different paths)
    assert sum(row["received"] for row in detail["series"]) == detail["cell"]["received"]
    assert [row["interval"] for row in detail["series"]] == list(range(5))
    status, body = call(handler, "GET", f"/runs/{run_id}/cells/kafka.nope.r1")
    assert status == 404 and body["field"] == "cell_id"

    status, page = call(handler, "GET", f"/runs/{run_id}/report", query={"format": "html"})
    assert status == 200 and "<svg" in page and "class=\"chart" in page
    status, page = call(handler, "GET", f"/runs/{run_id}/report", query={"format": "md"})
    assert status == 200 and run_id in page
    status, report = call(handler, "GET", f"/runs/{run_id}/report", query={"format": "json"})
    assert status == 200 and report["run_id"] == run_id
    status, body = call(handler, "GET", f"/runs/{run_id}/report", query={"format": "pdf"})
    assert status == 422 and body["field"] == "format"


def test_unknown_runs_are_404_and_a_just_started_one_is_starting(api):
    handler, _ = api
    run_id = new_run_id()
    with Stubber(handler.deps.starter.client) as sfn:
        sfn.add_client_error("describe_execution", "ExecutionDoesNotExist")
        status, body = call(handler, "GET", f"/runs/{run_id}")
        assert status == 404 and body["field"] == "run_id"
        sfn.add_response("describe_execution", {"executionArn": "arn:x", "stateMachineArn": MACHINE, "status": "RUNNING",
                                                "startDate": datetime.now(timezone.utc)},
                         {"executionArn": f"arn:aws:states:us-east-1:123456789012:execution:brokerbench-run:{run_id}"})
        status, body = call(handler, "GET", f"/runs/{run_id}")
        assert status == 200 and body["status"] == "starting"


def test_cancel_stops_the_execution_and_the_run_ends_cancelled_with_its_cells_kept(api, stored):
    handler, store = api
    run_id = stored["running"]
    arn = f"arn:aws:states:us-east-1:123456789012:execution:brokerbench-run:{run_id}"
    running = {"executionArn": arn, "stateMachineArn": MACHINE, "status": "RUNNING",
               "startDate": datetime.now(timezone.utc)}
    with Stubber(handler.deps.starter.client) as sfn:
        sfn.add_response("describe_execution", running, {"executionArn": arn})
        sfn.add_response("stop_execution", {"stopDate": datetime.now(timezone.utc)},
                         {"executionArn": arn, "error": "Cancelled", "cause": ANY})
        status, body = call(handler, "POST", f"/runs/{run_id}/cancel")
        assert status == 202 and body == {"run_id": run_id, "status": "cancelling"}
        sfn.assert_no_pending_responses()
    end = store.read(run_id, prefix="90#")[0]
    assert end["type"] == "RunCompleted" and end["data"] == {"status": "cancelled", "cells_completed": 1,
                                                              "cells_failed": 0, "reason": "cancelled by request"}
    status, run = call(handler, "GET", f"/runs/{run_id}")
    assert run["status"] == "cancelled" and run["cells"]["completed"] == 1
    status, body = call(handler, "POST", f"/runs/{run_id}/cancel")  # already ended
    assert status == 409 and body["field"] == "run_id"
    status, body = call(handler, "POST", f"/runs/{stored['baseline']}/cancel")
    assert status == 409


def test_compare_finds_the_halved_throughput(api, stored):
    handler, store = api
    query = {"baseline": stored["baseline"], "candidate": stored["candidate"]}
    status, body = call(handler, "GET", "/compare", query=query)  # two runs: run-to-run noise unknown
    assert status == 200 and body["summary"]["regression"] == 0
    assert any(v["why"].startswith("cannot tell") for v in body["verdicts"])
    for i in (1, 2):  # two earlier runs of the suite: its history
        store.append(synthetic_run({**SPEC, "name": stored["suite"]}, intervals=5, seed=10 + i,
                                   run_id=f"20200101T00000{i}Z-abcdef"))
    status, body = call(handler, "GET", "/compare", query=query)
    assert status == 200 and body["summary"]["regression"] > 0
    assert body["verdicts"][0]["verdict"] == "regression"  # regressions first
    # each change is of the two figures given with it (the geometric means), as `brokerbench compare` prints them
    changed = [v for v in body["verdicts"] if v["change"] is not None]
    assert changed and all(v["change"] == pytest.approx(v["candidate_mean"] / v["baseline_mean"] - 1, abs=1e-12)
                           for v in changed)
    status, body = call(handler, "GET", "/compare", query={"baseline": stored["baseline"], "candidate": new_run_id()})
    assert status == 404 and body["field"] == "candidate"


def test_catalog_routes(api):
    handler, _ = api
    status, body = call(handler, "GET", "/suites")
    names = [s["name"] for s in body["suites"]]
    assert status == 200 and "smoke" in names and all(s["cells"] > 0 and s["estimated_s"] > 0 for s in body["suites"])
    status, body = call(handler, "GET", "/suites/smoke")
    assert status == 200 and body["request"]["name"] == "smoke"
    status, body = call(handler, "GET", "/suites/nope")
    assert status == 404 and body["field"] == "name"
    status, body = call(handler, "GET", "/health")
    assert status == 200 and body["mode"] == "aws"
    status, body = call(handler, "GET", "/schedules")
    assert status == 200 and isinstance(body["schedules"], list)
    status, body = call(handler, "DELETE", "/runs")
    assert status in (404, 405) and "message" in body


def test_served_openapi_is_the_checked_in_document(api):
    handler, _ = api
    status, document = call(handler, "GET", "/openapi.json")
    assert status == 200
    checked_in = json.loads((ROOT / "schemas" / "openapi.json").read_text())
    assert document == checked_in, "schemas/openapi.json is stale: run `brokerbench openapi --write schemas/openapi.json`"


def test_logs_carry_the_run_id_and_a_start_is_counted(api, capsys):
    handler, _ = api
    with Stubber(handler.deps.starter.client) as sfn:
        sfn.add_response("start_execution", {"executionArn": "arn:x", "startDate": datetime.now(timezone.utc)},
                         {"stateMachineArn": MACHINE, "name": ANY, "input": ANY})
        capsys.readouterr()
        status, body = call(handler, "POST", "/runs", {"suite": "smoke"})
    assert status == 202
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    logs = [line for line in lines if line.get("message") == "run started"]
    assert logs and logs[0]["correlation_id"] == body["run_id"] and logs[0]["service"] == "brokerbench"
    emf = [line for line in lines if "_aws" in line]
    assert any(m["Name"] == "RunsStarted" for blob in emf for m in blob["_aws"]["CloudWatchMetrics"][0]["Metrics"])
    assert any(blob.get("RunsStarted") == [1.0] or blob.get("RunsStarted") == 1.0 for blob in emf)


def test_history_shows_each_configurations_series_with_its_change_point(api):
    """Six steady runs of a suite, then two at half the throughput: each configuration's series holds every run
    with its repeats, and one change point, an alert, at the first slow run, naming the run before it."""
    handler, store = api
    suite = f"hist-{secrets.token_hex(3)}"
    ids = [f"20210101T{i:06d}Z-abcdef" for i in range(8)]
    for i, run_id in enumerate(ids):
        store.append(synthetic_run({**SPEC, "name": suite}, intervals=3, seed=40 + i, run_id=run_id,
                                   rate_scale=0.5 if i >= 6 else 1.0))
    status, body = call(handler, "GET", f"/suites/{suite}/history", query={"metric": "throughput_msgs_per_s"})
    assert status == 200 and body["suite"] == suite and [r["run_id"] for r in body["runs"]] == ids
    assert len(body["series"]) == 4
    for series in body["series"]:
        assert [p["run_id"] for p in series["points"]] == ids and all(len(p["repeats"]) == 3 for p in series["points"])
        assert [(c["began_run_id"], c["before_run_id"], c["alert"]) for c in series["change_points"]] == \
            [(ids[6], ids[5], True)]
        assert series["change_points"][0]["change"] == pytest.approx(-0.5, abs=0.03)
    status, body = call(handler, "GET", f"/suites/{suite}/history", query={"metric": "p99"})
    assert status == 400 and body["field"] == "metric" and "end_to_end_p99_us" in body["message"]
    status, body = call(handler, "GET", f"/suites/{suite}/history")
    assert status == 400 and body["field"] == "metric" and "required" in body["message"]
    status, body = call(handler, "GET", "/suites/no-such-suite/history", query={"metric": "throughput_msgs_per_s"})
    assert status == 404 and body["field"] == "name"
