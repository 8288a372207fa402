"""The Lambda code runs as Lambda runs it (tests/lambda_runtime.py): the real layer (the bundling `cdk deploy` runs:
the lock's wheels, compiled by Python 3.12), the code asset alone, Python 3.12, and RunCell and the API handler
invoked through the Lambda Runtime Interface Emulator with awslambdaric, against the session's Kafka, Redis and
DynamoDB Local. The first run builds the layer (about a minute with PyPI); later runs find it in .cache/lambda."""

import json
import re
import secrets
import subprocess
import time

import pytest

from brokerbench import environment
from brokerbench.events import make_event, new_run_id
from brokerbench.events.run import run_completed_event, run_requested_events
from brokerbench.spec import expand, validate
from brokerbench.workflow.fleet import TOKEN_ENV, WORKER_MODULE, user_data
from brokerbench.workflow.steps import describe_targets
from lambda_runtime import IMPORT_CHECK, Emulator, code_asset, environment as lambda_environment, layer, python, \
    runtime_client, worker_asset

from cdk import paths

# What the stack sets on one function or another (cdk/stack.py), with values that reach nothing.
STACK_SETTINGS = {
    "BROKERBENCH_MODE": "aws", "BROKERBENCH_EVENTS_TABLE": "bb-none", "BROKERBENCH_REPORTS": "s3://bb-none/reports",
    "BROKERBENCH_NOTIFY": "arn:aws:sns:us-east-1:123456789012:bb-none", "POWERTOOLS_SERVICE_NAME": "brokerbench",
    "POWERTOOLS_METRICS_NAMESPACE": "brokerbench", "BROKERBENCH_MSK_SUBNETS": "subnet-1,subnet-2",
    "BROKERBENCH_MSK_SECURITY_GROUPS": "sg-1", "BROKERBENCH_REDIS_SUBNET_GROUP": "bb-subnets",
    "BROKERBENCH_REDIS_SECURITY_GROUPS": "sg-1", "BROKERBENCH_REDIS_AUTH_SECRET_ARN":
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:bb-auth", "BROKERBENCH_WORKER_LAUNCH_TEMPLATE": "bb-worker",
    "BROKERBENCH_WORKER_SUBNET": "subnet-1", "BROKERBENCH_WORKER_ASSET": "s3://bb-none/worker.zip",
    "BROKERBENCH_IDEMPOTENCY_TABLE": "bb-idempotency",
    "BROKERBENCH_STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:bb",
    "BROKERBENCH_TEARDOWN_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:bb-teardown",
    "BROKERBENCH_TOKEN_PARAMETERS": "/bb/task-tokens", "BROKERBENCH_SCHEDULES_DEPLOYED": "off",
}


@pytest.fixture(scope="module")
def function(tmp_path_factory):
    """The layer (/opt), the code asset (/var/task) and the runtime client, each in a folder of its own."""
    started = time.monotonic()
    opt, ric = layer(), runtime_client()
    task = code_asset(tmp_path_factory.mktemp("task") / "task")
    print(f"layer and runtime client ready in {time.monotonic() - started:.1f} s: {opt}")
    return {"opt": opt, "ric": ric, "task": task, "home": tmp_path_factory.mktemp("home")}


def folders(function):
    return {k: function[k] for k in ("task", "opt", "ric", "home")}


def test_every_handler_imports_from_the_layer_and_the_code_asset_alone(function):
    handlers = sorted(p.stem for p in paths.HANDLERS.glob("*.py") if p.stem != "__init__")
    env = lambda_environment(**folders(function), **STACK_SETTINGS)
    done = subprocess.run([python(), "-c", IMPORT_CHECK, json.dumps(handlers), str(function["opt"]),
                           str(function["task"])], cwd=function["task"], env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["version"] == [3, 12]
    assert found["outside"] == [], "modules loaded from outside the layer, the code asset and the standard library"
    assert found["from_layer"] > 100 and found["stale"] == [], found["stale"][:10]
    assert found["pulsar"] is False  # the layer has no pulsar-client and no handler needs it
    assert not list((function["opt"] / "python").glob("pulsar*"))


@pytest.fixture(scope="module")
def cell_run(function, endpoints, store, tmp_path_factory):
    """A two-cell run (Kafka, Redis Streams) recorded as PlanCells and RecordTargetsReady would, each cell run by
    RunCell inside the emulator, then RunCompleted; the invocations' answers."""
    spec = validate({"name": f"lambda-{secrets.token_hex(3)}", "brokers": ["kafka", "redis-streams"],
                     "sizes": [256], "rates": [200], "formats": ["msgpack"], "duration_s": 3, "warmup_s": 1,
                     "warmup_until_steady": False})
    cells, run_id = expand(spec), new_run_id()
    targets = {b: endpoints[b] for b in spec["brokers"]}
    store.append(run_requested_events(run_id, spec, cells, None))
    described = describe_targets(spec["brokers"], targets, spec["client"])
    store.append([make_event(run_id, "TargetsReady",
                             {"targets": environment.with_settings(described, targets, spec["client"])})])
    env = lambda_environment(**folders(function), **{**STACK_SETTINGS, "BROKERBENCH_EVENTS_TABLE": store.table,
                             "BROKERBENCH_DYNAMODB_ENDPOINT": store.client.meta.endpoint_url,
                             "AWS_LAMBDA_FUNCTION_TIMEOUT": "300"})
    log = tmp_path_factory.mktemp("rie") / "run_cell.log"
    started = time.monotonic()
    with Emulator("handlers.run_cell.lambda_handler", function["task"], env, log) as rie:
        answers = [rie.invoke({"run_id": run_id, "cell": cell, "targets": targets}) for cell in cells]
    print(f"{len(cells)} cells through the emulator in {time.monotonic() - started:.1f} s")
    completed = sum(1 for a in answers if a.get("status") == "completed")
    store.append([run_completed_event(run_id, "completed" if completed == len(cells) else "completed_with_failures",
                                      completed, len(cells) - completed)])
    return {"run_id": run_id, "cells": cells, "answers": answers, "env": env, "log": log}


def test_run_cell_measures_a_cell_per_broker_inside_the_emulator(cell_run, store):
    answers, cells = cell_run["answers"], cell_run["cells"]
    assert [a.get("cell_id") for a in answers] == [c["cell_id"] for c in cells], cell_run["log"].read_text()[-3000:]
    assert [a["status"] for a in answers] == ["completed"] * len(cells), answers
    events = store.read(cell_run["run_id"])
    done = {e["data"]["cell_id"]: e["data"] for e in events if e["type"] == "CellCompleted"}
    assert sorted(done) == sorted(c["cell_id"] for c in cells)
    for cell_id, data in done.items():
        # The native send loop is left out of the code asset (CODE_EXCLUDES: *.so): Lambda measures with Python's.
        assert data["send_loop"] == "python", cell_id
        totals = data["totals"]
        assert totals["sent"] > 0 and totals["delivered"] == totals["sent"] and totals["lost"] == 0, totals
    intervals = [e for e in events if e["type"] == "IntervalMeasured"]
    assert {e["data"]["cell_id"] for e in intervals} == set(done)


def test_the_api_handler_answers_a_get_inside_the_emulator(cell_run, function, tmp_path):
    path = f"/runs/{cell_run['run_id']}"
    event = {"resource": "/{proxy+}", "path": path, "httpMethod": "GET", "headers": {"accept": "application/json"},
             "multiValueHeaders": {}, "queryStringParameters": None, "multiValueQueryStringParameters": None,
             "pathParameters": {"proxy": path[1:]}, "stageVariables": None, "body": None, "isBase64Encoded": False,
             "requestContext": {"resourcePath": "/{proxy+}", "httpMethod": "GET", "path": f"/prod{path}",
                                "stage": "prod", "requestId": secrets.token_hex(8), "identity": {"sourceIp": "10.0.0.1"}}}
    with Emulator("handlers.api.lambda_handler", function["task"], cell_run["env"], tmp_path / "api.log") as rie:
        answer = rie.invoke(event, timeout_s=60)
    assert answer.get("statusCode") == 200, (answer, (tmp_path / "api.log").read_text()[-3000:])
    body = json.loads(answer["body"])
    assert body["run_id"] == cell_run["run_id"] and body["status"] == "completed"
    assert body["cells"] == {"total": len(cell_run["cells"]), "completed": len(cell_run["cells"]), "failed": 0}


# --- the EC2 worker's boot: the same lock, from the asset's wheels, without PyPI ---------------------------------

BOOT_STUB = """#!/bin/bash
(IFS=$'\\t'; printf '%s\\t%s\\n' "$(basename "$0")" "$*") >> "$FAKE_LOG"
if [ "$(basename "$0") $1 $2" = "aws s3 cp" ]; then cp "$FAKE_ASSET" "${@: -1}"; fi
exit 0
"""


def test_an_ec2_worker_installs_the_layers_packages_from_its_asset_without_an_index(tmp_path):
    """The boot script (fleet.user_data) under bash with the real Python 3.12 and pip; only `aws` and `shutdown` are
    stubs, and the worker itself is not started (it would call Step Functions): the script stops once the
    installed worker imports."""
    asset = worker_asset(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3.12").symlink_to(python())
    for name in ("aws", "shutdown"):
        (bin_dir / name).write_text(BOOT_STUB)
        (bin_dir / name).chmod(0o755)
    script = user_data({"run_id": "r", "cell": {}}, "T", {"BROKERBENCH_MODE": "aws"}, worker_asset="s3://bb/w.zip",
                       root=str(tmp_path / "opt"))
    worker_line = f'{TOKEN_ENV}="$TASK_TOKEN" python -m {WORKER_MODULE}'
    assert worker_line in script
    (tmp_path / "boot.sh").write_text(script.replace(worker_line, "exit 0; " + worker_line))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "FAKE_LOG": str(tmp_path / "calls.log"),
           "FAKE_ASSET": str(asset), "PIP_CONFIG_FILE": "/dev/null", "PIP_NO_CACHE_DIR": "1"}
    done = subprocess.run(["bash", str(tmp_path / "boot.sh")], env=env, capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    calls = (tmp_path / "calls.log").read_text()
    assert done.returncode == 0 and "send-task-failure" not in calls, done.stderr[-3000:]
    venv = tmp_path / "opt" / ".venv"
    frozen = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze", "--all"], capture_output=True,
                            text=True, check=True).stdout
    installed = {line.split("==")[0].lower().replace("_", "-"): line.split("==")[1] for line in frozen.splitlines()
                 if "==" in line}
    locked = {m.group(1).lower(): m.group(2) for m in re.finditer(r"(?m)^([A-Za-z0-9_.\-]+)==(\S+) \\",
                                                                    paths.LAMBDA_LOCK.read_text())}
    assert {name: installed.get(name) for name in locked} == locked  # exactly the layer's versions
    assert "pulsar-client" not in installed
