"""Cancel mid-cell, for both worker kinds: a run cancelled through the API (or stopped with Ctrl-C) while its cell
measures ends `cancelled` (`interrupted`), the cell ends failed with the reason and keeps the intervals it measured,
each once, the run's teardown stops the broker it started, and no worker process is left.

The stack is the module's own (DynamoDB Local only): each run starts its Redis itself, so its teardown has something
to stop (the session's brokers belong to no run). An EC2-kind cell runs in the real `python -m
brokerbench.ec2_worker` process the local bridge starts, which the bridge tells to stop when the run is cancelled.

The cancel of a deployed run is checked here too, where nothing tells the cell to stop: RunCell's Lambda handler
runs in a process of its own, and the AWS cancel (StepFunctionsStarter.cancel) writes the run's end; the cell must
see that end in the store and stop, writing nothing after it.
"""

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.stack import LocalStack
from brokerbench.reports.results import build_results
from brokerbench.workflow import steps
from brokerbench.workflow.starter import StepFunctionsStarter
from conftest import ServedApi
from fault_tools import EC2_WORKER, alive, cell_facts, event_facts, run_until_measuring, workers_below
from reliability_log import observe

CELL_S = 30  # far longer than the tests wait: the cell ends because the run was stopped
STOPPED = "stopped: the run was interrupted or cancelled"


def spec(worker: str) -> dict:
    return {"name": f"cancel-{worker}", "brokers": ["redis-streams"], "sizes": [1024], "rates": [200],
            "formats": ["raw"], "duration_s": CELL_S, "warmup_s": 1, "warmup_until_steady": False,
            "placement": {"worker": worker}}


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory):
    local = LocalStack(tmp_path_factory.mktemp("cancel") / "state")
    local.up(services=["dynamodb"], log=lambda m: None)
    yield local
    local.down(log=lambda m: None)


@pytest.fixture(scope="module")
def events(own_stack):
    db = own_stack.endpoints(required=["dynamodb"])["dynamodb"]
    return DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])


@pytest.fixture(scope="module")
def served(own_stack, tmp_path_factory):
    api = ServedApi(own_stack.state_dir, tmp_path_factory.mktemp("served"), "--no-schedules")
    yield api
    api.stop()


def measuring(own_stack, events, run_id: str, below: int) -> tuple[dict, dict[int, str]]:
    """Once the run's cell has stored two measured seconds: the Redis the run started (its stack.json record) and
    the worker processes below `below`."""
    deadline = time.monotonic() + 120
    while sum(e["type"] == "IntervalMeasured" for e in events.read(run_id, interval_histograms=False)) < 2:
        assert time.monotonic() < deadline, "the cell measured nothing in 120 s"
        time.sleep(0.3)
    redis = json.loads((own_stack.state_dir / "stack.json").read_text())["redis"]
    assert redis["owner"] == run_id  # this run started it: its teardown is what stops it
    return redis, workers_below(below)


def check_stopped(own_stack, events, run_id: str, kind: str, redis: dict, family: dict[int, str],
                  below: int) -> tuple[list[dict], dict, list[str]]:
    """What every stopped run must show; returns its events, its cell (results.json) and what was checked."""
    stored = events.read(run_id)
    [started] = [e for e in stored if e["type"] == "CellStarted"]
    assert started["data"]["worker"]["kind"] == kind
    [end] = [e for e in stored if e["type"] in ("CellCompleted", "CellFailed")]
    assert end["type"] == "CellFailed" and end["data"]["reason"] == STOPPED
    kept = [e["data"]["interval"] for e in stored if e["type"] == "IntervalMeasured"]
    assert end["data"]["intervals"] == len(kept) >= 2 and sorted(set(kept)) == sorted(kept)
    assert len(kept) < CELL_S - 5  # stopped mid-cell, not at its end
    [cell] = build_results(stored)["cells"]
    assert cell["status"] == "failed" and cell["reason"] == STOPPED
    facts = event_facts(stored)
    assert facts["duplicated"] == 0 and facts["by_type"]["RunCompleted"] == 1
    assert "redis" not in json.loads((own_stack.state_dir / "stack.json").read_text())  # torn down
    assert not [pid for pid in redis["pids"] if alive(pid)]
    assert {"bb-producer-0", "bb-consumer-0"} <= set(family.values())
    assert (EC2_WORKER in family.values()) == (kind == "ec2")
    assert not [pid for pid in family if alive(pid)] and not workers_below(below)
    where = {"ec2": f"EC2-kind worker ({EC2_WORKER}, a process of its own)", "lambda": "Lambda-kind worker (in the serving process)"}
    return stored, cell, [
        f"the cell ran on the {where[kind]} and ended failed once: {STOPPED}",
        f"{len(kept)} measured intervals of the {CELL_S} s cell kept, each once, as its end event counts them",
        f"teardown stopped the Redis the run had started (pid {', '.join(map(str, redis['pids']))})",
        f"no worker process left: {', '.join(sorted(set(family.values())))} seen mid-cell are gone",
        f"{facts['events']} events stored, none twice",
    ]


def cancel_over_the_api(served, own_stack, events, worker: str):
    status, _, started = served.request("POST", "/runs", spec(worker))
    assert status == 202, started
    run_id = started["run_id"]
    redis, family = measuring(own_stack, events, run_id, served.process.pid)
    status, _, body = served.request("POST", f"/runs/{run_id}/cancel")
    assert status == 202 and body["status"] == "cancelling"
    asked = time.monotonic()
    while (run := served.request("GET", f"/runs/{run_id}")[2])["status"] in ("starting", "running"):
        assert time.monotonic() - asked < 60, run
        time.sleep(0.3)
    took = time.monotonic() - asked
    assert run["status"] == "cancelled" and run["reason"] == "cancelled by request"
    while own_stack.run_holder():  # the run lets the stack go once its teardown is done
        assert time.monotonic() - asked < 60, "the cancelled run did not let the stack go"
        time.sleep(0.3)
    stored, cell, observed = check_stopped(own_stack, events, run_id, worker, redis, family, served.process.pid)
    assert took < CELL_S, took  # before the cell's schedule would have ended (how promptly is a timing)
    observe(f"cancel-{worker}", fault=f"POST /runs/RUN_ID/cancel two measured seconds into a {CELL_S} s cell on the "
            f"{worker} worker kind, through `brokerbench serve`", run_status=run["status"], exit_code=None,
            cells=[cell_facts(cell)], observed=[f"the run ended cancelled {took:.1f} s after the cancel", *observed],
            **event_facts(stored))


@pytest.mark.timeout(240)
def test_an_api_cancel_stops_the_ec2_worker_mid_cell(served, own_stack, events):
    cancel_over_the_api(served, own_stack, events, "ec2")


@pytest.mark.timeout(240)
def test_an_api_cancel_stops_a_lambda_kind_cell_and_tears_down(served, own_stack, events):
    cancel_over_the_api(served, own_stack, events, "lambda")


@pytest.mark.timeout(240)
def test_ctrl_c_stops_the_ec2_worker_mid_cell(own_stack, events, tmp_path):
    cli = run_until_measuring(own_stack.state_dir, spec("ec2"), tmp_path)
    run_id = own_stack.run_holder()["run_id"]
    redis, family = measuring(own_stack, events, run_id, cli.pid)
    cli.send_signal(signal.SIGINT)  # the CLI only, as `kill -INT`: the bridge must tell the worker itself
    asked = time.monotonic()
    out, err = cli.communicate(timeout=120)
    took = time.monotonic() - asked
    assert cli.returncode == 130, out[-2000:] + err[-2000:]
    results = json.loads(next((tmp_path / "out").glob("*/results.json")).read_text())
    assert results["status"] == "interrupted"
    stored, cell, observed = check_stopped(own_stack, events, run_id, "ec2", redis, family, cli.pid)
    assert took < CELL_S, took  # before the cell's schedule would have ended
    observe("ctrl-c-ec2", fault=f"SIGINT to `brokerbench run` two measured seconds into a {CELL_S} s cell on the EC2 "
            "worker kind", run_status=results["status"], exit_code=cli.returncode, cells=[cell_facts(cell)],
            observed=[f"the CLI exited 130 {took:.1f} s after the signal, the run interrupted", *observed],
            **event_facts(stored))


AWS_CANCEL_HANDLER = """
import json, sys
from fault_tools import LambdaContext
from handlers import run_cell
print(json.dumps(run_cell.lambda_handler(json.loads(sys.stdin.read()), LambdaContext("brokerbench-RunCell"))))
"""
STATE_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:brokerbench-run"


def aws_cancel(store, run_id: str, spec: dict) -> None:
    """What POST /runs/{id}/cancel does in AWS (the API's StepFunctionsStarter); StopExecution, which stops no
    Lambda invocation in flight, answered by botocore's Stubber (there is no Step Functions here)."""
    client = boto3.client("stepfunctions", region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    with Stubber(client) as stub:
        stub.add_response("stop_execution", {"stopDate": datetime.now(timezone.utc)},
                          {"executionArn": f"arn:aws:states:us-east-1:123456789012:execution:brokerbench-run:{run_id}",
                           "error": "Cancelled", "cause": "cancelled by request"})
        StepFunctionsStarter(client, STATE_MACHINE, store).cancel(run_id, spec)
        stub.assert_no_pending_responses()


@pytest.mark.timeout(240)
def test_an_aws_cancel_stops_a_lambda_cell_in_flight_and_nothing_is_written_after_the_run_ends(
        own_stack, events, monkeypatch, tmp_path):
    owner = "tests-aws-cancel"  # a Redis of this test's own, which the run's teardown leaves running
    events.ensure_table()  # in AWS the CDK app's table
    own_stack.up(services=["redis"], owner=owner, log=lambda m: None)
    handler = None
    try:
        settings = {"BROKERBENCH_MODE": "local", "BROKERBENCH_STATE_DIR": str(own_stack.state_dir),
                    "BROKERBENCH_EVENTS_TABLE": events.table,
                    "BROKERBENCH_DYNAMODB_ENDPOINT": events.client.meta.endpoint_url,
                    "BROKERBENCH_REPORTS": str(tmp_path / "reports")}
        for name, value in settings.items():
            monkeypatch.setenv(name, value)
        run = steps.validate_request({"request": spec("lambda")})
        [cell] = steps.plan_cells(run)["cells"]  # RunRequested stored, as the workflow's PlanCells does
        run_id = run["run_id"]
        job = {"run_id": run_id, "cell": cell, "targets": {"redis-streams": own_stack.endpoint("redis")}}
        path = os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(Path(__file__).parents[1])])
        (tmp_path / "job.json").write_text(json.dumps(job))
        out, err = tmp_path / "handler.stdout", tmp_path / "handler.stderr"
        with open(tmp_path / "job.json") as stdin, open(out, "wb") as stdout, open(err, "wb") as stderr:
            handler = subprocess.Popen([sys.executable, "-c", AWS_CANCEL_HANDLER], stdin=stdin, stdout=stdout,
                                       stderr=stderr, env={**os.environ, **settings, "PYTHONPATH": path})
        deadline = time.monotonic() + 120
        while sum(e["type"] == "IntervalMeasured" for e in events.read(run_id, interval_histograms=False)) < 2:
            assert time.monotonic() < deadline and handler.poll() is None, err.read_text()[-3000:]
            time.sleep(0.3)
        family = workers_below(handler.pid)

        aws_cancel(events, run_id, run["spec"])
        asked = time.monotonic()
        at_the_end = events.read(run_id)  # the run's end is stored when the cancel returns
        handler.wait(timeout=120)
        took = time.monotonic() - asked
    finally:
        if handler is not None and handler.poll() is None:  # a failed check above: no handler outlives the test
            handler.kill()
            handler.wait()
        own_stack.down(owner=owner, log=lambda m: None)
    assert handler.returncode == 0, err.read_text()[-3000:]
    outcome = json.loads(out.read_text().strip().splitlines()[-1])
    assert outcome == {"cell_id": cell["cell_id"], "status": "failed", "reason": steps.RUN_ENDED}
    stored = events.read(run_id)
    assert stored == at_the_end  # nothing was written after the run's end
    [end] = [e for e in stored if e["type"] == "RunCompleted"]
    assert end["data"]["status"] == "cancelled" and all(e["at"] <= end["at"] for e in stored)
    assert not [e for e in stored if e["type"] in ("CellCompleted", "CellFailed")]
    kept = [e["data"]["interval"] for e in stored if e["type"] == "IntervalMeasured"]
    assert 2 <= len(kept) < CELL_S - 5 and sorted(set(kept)) == sorted(kept)  # stopped mid-cell, each interval once
    [result] = build_results(stored)["cells"]
    assert result["status"] == "incomplete"
    assert {"bb-producer-0", "bb-consumer-0"} <= set(family.values())
    assert not [pid for pid in family if alive(pid)]
    assert took < CELL_S, took  # long before the cell's own end (how promptly is a timing)
