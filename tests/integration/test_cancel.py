"""Cancel mid-cell, for both worker kinds: a run cancelled through the API (or stopped with Ctrl-C) while its cell
measures ends `cancelled` (`interrupted`), the cell ends failed with the reason and keeps the intervals it measured,
each once, the run's teardown stops the broker it started, and no worker process is left.

The stack is the module's own (DynamoDB Local only): each run starts its Redis itself, so its teardown has something
to stop (the session's brokers belong to no run). An EC2-kind cell runs in the real `python -m
brokerbench.ec2_worker` process the local bridge starts, which the bridge tells to stop when the run is cancelled.
"""

import json
import signal
import time

import pytest

from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.stack import LocalStack
from brokerbench.reports.results import build_results
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
