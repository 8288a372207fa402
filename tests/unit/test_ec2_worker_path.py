"""The EC2 worker path: idempotent launches, the boot script, heartbeats, and provisioning retries.

AWS control-plane calls (RunInstances, SSM PutParameter, SendTaskHeartbeat, CreateClusterV2, ListClustersV2,
CreateReplicationGroup, DescribeReplicationGroups, ListTagsForResource) cannot run on this machine, so
they go through botocore's Stubber, which checks each request against the service model and the exact
parameters expected and plays back the responses (including the error codes AWS would answer).

The boot script (fleet.user_data) runs under the real bash, with fake `aws`, `pip`, `python`,
`python3.12` and `shutdown` commands first on PATH: small shell stubs that log their arguments to a
file (`python3.12 -m zipfile` is handed to the real Python, so the asset is really unpacked).

The local bridge's heartbeat route and window, and its cancel (TaskTimedOut answers, the worker process told to
stop), run for real (an HTTP server on 127.0.0.1 and urllib), with a stand-in for the StartEc2Worker handler module.
"""

import base64
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import zipfile
from concurrent.futures import Future

import boto3
import pytest
from botocore.stub import ANY, Stubber

from brokerbench import ec2_worker as worker_ec2
from brokerbench import settings
from brokerbench.brokers.kafka.cloud import MskTargets
from brokerbench.brokers.redis_streams.cloud import ElastiCacheTargets
from brokerbench.local import workflow as local_workflow
from brokerbench.local.processes import pid_alive
from brokerbench.spec import validate
from brokerbench.targets import ProvisioningError, TransientProvisioningError, resource_name
from brokerbench.workflow import wiring
from brokerbench.workflow.callbacks import LocalCallbacks, StepFunctionsCallbacks, TaskGone
from brokerbench.workflow.fleet import (MAX_LAUNCH_ATTEMPTS, Ec2Fleet, LocalProcessFleet, TokenParameters,
                                        WorkerLaunchFailed, client_token, encode_job, token_parameter, user_data)

RUN = "20261122T101500Z-def456"
CELL = "kafka.json.batch.1024B.100mps.r0"
JOB = {"run_id": RUN, "cell": {"cell_id": CELL, "index": 0}, "targets": {}}
ARN = "arn:aws:kafka:us-east-1:123456789012:cluster/bb/1"
# Shaped to need quoting in bash: the script must pass it through verbatim, and never run any of it.
TOKEN = "AAAAKgAAAAIAAAAA+/=" + "x" * 300 + "$(touch pwned)'\"`;"
PREFIX = "/Brokerbench/task-tokens"
PARAMETER = token_parameter(PREFIX, client_token(RUN, CELL, 0), TOKEN)


def client(service):
    return boto3.client(service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def spec(**extra):
    return validate({"brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [100], "formats": ["json"], **extra})


# --- RunInstances' ClientToken ----------------------------------------------------------------------------


def test_client_token_is_deterministic_short_ascii_and_distinct_per_run_cell_and_attempt():
    token = client_token(RUN, CELL, 0)
    assert token == client_token(RUN, CELL, 0)
    assert len(token) <= 64 and token.isascii() and token.isprintable()
    assert len({token, client_token(RUN, CELL, 1), client_token(RUN, "redis.json.batch.1024B.100mps.r0", 0),
                client_token("20261122T101500Z-aaaaaa", CELL, 0)}) == 4
    long_cell = "kafka." + "x" * 500
    assert len(client_token(RUN, long_cell, MAX_LAUNCH_ATTEMPTS - 1)) <= 64


def parameter_of(token: str, attempt: int) -> str:
    return token_parameter(PREFIX, client_token(RUN, CELL, attempt), token)


def expected_run_instances(token: str, attempt: int) -> dict:
    return {"MinCount": 1, "MaxCount": 1, "ClientToken": client_token(RUN, CELL, attempt),
            "LaunchTemplate": {"LaunchTemplateName": "bb-worker", "Version": "$Latest"}, "SubnetId": "subnet-w",
            "UserData": user_data(JOB, parameter_of(token, attempt), {"AWS_REGION": "us-east-1"},
                                  worker_asset="s3://assets/worker.zip"),
            "InstanceInitiatedShutdownBehavior": "terminate", "MetadataOptions": {"HttpTokens": "required"},
            "TagSpecifications": ANY}


def expected_put(token: str, attempt: int) -> dict:
    return {"Name": parameter_of(token, attempt), "Value": token, "Type": "SecureString", "Overwrite": True,
            "Tier": "Standard", "Description": ANY}


def fleet(ec2, ssm):
    return Ec2Fleet(ec2, launch_template="bb-worker", subnet="subnet-w", environment={"AWS_REGION": "us-east-1"},
                    tokens=TokenParameters(ssm, PREFIX), worker_asset="s3://assets/worker.zip")


def test_the_task_token_waits_in_an_ssm_parameter_never_in_the_user_data():
    """The token is put in a SecureString parameter named per launch attempt and per token; the user data
    names the parameter only."""
    ec2, ssm = client("ec2"), client("ssm")
    with Stubber(ec2) as ec2_stub, Stubber(ssm) as ssm_stub:
        ssm_stub.add_response("put_parameter", {"Version": 1}, expected_put(TOKEN, 0))
        ec2_stub.add_response("run_instances", {"Instances": [{"InstanceId": "i-0abc"}]}, expected_run_instances(TOKEN, 0))
        fleet(ec2, ssm).launch(JOB, TOKEN)
        ssm_stub.assert_no_pending_responses()
    script = user_data(JOB, PARAMETER, {"AWS_REGION": "us-east-1"}, worker_asset="s3://assets/worker.zip")
    assert TOKEN not in script and "x" * 300 not in script and PARAMETER in script
    assert PARAMETER.startswith(PREFIX + "/bb-a0-") and PARAMETER != parameter_of("TOKEN-2", 0)


def test_a_retried_launch_sends_the_same_request_and_gets_the_same_instance_back():
    """StartEc2Worker running twice for one task (same job, same token) sends RunInstances twice with the same
    ClientToken and parameters; EC2 answers such a retry with the instance the first call started."""
    ec2, ssm = client("ec2"), client("ssm")
    with Stubber(ec2) as stub, Stubber(ssm) as ssm_stub:
        for _ in range(2):
            ssm_stub.add_response("put_parameter", {"Version": 1}, expected_put(TOKEN, 0))
            stub.add_response("run_instances", {"Instances": [{"InstanceId": "i-0abc"}]},
                              expected_run_instances(TOKEN, 0))
        first = fleet(ec2, ssm).launch(JOB, TOKEN)
        second = fleet(ec2, ssm).launch(json.loads(json.dumps(JOB)), TOKEN)
        stub.assert_no_pending_responses()
    assert first == second == {"kind": "ec2", "instance_id": "i-0abc", "attempt": 0}


def test_a_launch_for_a_new_task_token_takes_the_next_attempt():
    """RunCellOnEc2 retried: the new token changes the user data, EC2 answers IdempotentParameterMismatch for
    attempt 0's ClientToken, and the launch starts the instance of attempt 1 (the parameter put for attempt 0
    is deleted: no instance will read it)."""
    ec2, ssm = client("ec2"), client("ssm")
    with Stubber(ec2) as stub, Stubber(ssm) as ssm_stub:
        ssm_stub.add_response("put_parameter", {"Version": 1}, expected_put("TOKEN-2", 0))
        stub.add_client_error("run_instances", "IdempotentParameterMismatch", http_status_code=400,
                              expected_params=expected_run_instances("TOKEN-2", 0))
        ssm_stub.add_response("delete_parameter", {}, {"Name": parameter_of("TOKEN-2", 0)})
        ssm_stub.add_response("put_parameter", {"Version": 1}, expected_put("TOKEN-2", 1))
        stub.add_response("run_instances", {"Instances": [{"InstanceId": "i-0def"}]},
                          expected_run_instances("TOKEN-2", 1))
        assert fleet(ec2, ssm).launch(JOB, "TOKEN-2") == {"kind": "ec2", "instance_id": "i-0def", "attempt": 1}
        stub.assert_no_pending_responses()
        ssm_stub.assert_no_pending_responses()


def test_a_capacity_error_is_the_retried_worker_launch_failed_and_others_stay_errors():
    ec2, ssm = client("ec2"), client("ssm")
    with Stubber(ec2) as stub, Stubber(ssm) as ssm_stub:
        for _ in range(2):
            ssm_stub.add_response("put_parameter", {"Version": 1}, expected_put(TOKEN, 0))
        stub.add_client_error("run_instances", "InsufficientInstanceCapacity", http_status_code=500)
        stub.add_client_error("run_instances", "InvalidParameterValue", http_status_code=400)
        with pytest.raises(WorkerLaunchFailed, match="InsufficientInstanceCapacity"):
            fleet(ec2, ssm).launch(JOB, TOKEN)
        with pytest.raises(Exception, match="InvalidParameterValue") as raised:
            fleet(ec2, ssm).launch(JOB, TOKEN)
        assert not isinstance(raised.value, WorkerLaunchFailed)
    # The state's Retry names the error by the exception's class name (Lambda's errorType).
    definition = local_workflow.load_definition()
    ec2_state = definition["States"]["RunCells"]["ItemProcessor"]["States"]["RunCellOnEc2"]
    assert any(WorkerLaunchFailed.__name__ in r["ErrorEquals"] for r in ec2_state["Retry"])
    assert ec2_state["HeartbeatSeconds"] == 300 and ec2_state["TimeoutSeconds"] == 86400


# --- the boot script, under real bash with fake commands ----------------------------------------------------

STUB = """#!/bin/bash
name=$(basename "$0")
(IFS=$'\\t'; printf '%s\\t%s\\n' "$name" "$*") >> "$FAKE_LOG"
case "$name" in
  aws)
    if [ "$1 $2" = "ssm get-parameter" ]; then
      [ -n "${FAKE_SSM_FAIL:-}" ] && { echo "An error occurred (ParameterNotFound)" >&2; exit 254; }
      printf '%s\n' "$FAKE_TOKEN"
    fi
    if [ "$1 $2" = "s3 cp" ]; then
      [ -n "${FAKE_S3_FAIL:-}" ] && { echo "fatal error: An error occurred (403) when calling the HeadObject operation: Forbidden" >&2; exit 1; }
      cp "$FAKE_ASSET" "${@: -1}"
    fi ;;
  python3.12)
    if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin"; exit 0; fi
    exec "$REAL_PYTHON" "$@" ;;
  pip)
    [ -n "${FAKE_PIP_FAIL:-}" ] && { echo "ERROR: No matching distribution found" >&2; exit 1; }
    exit 0 ;;
  python)
    if [ "$1" = "-m" ]; then
      printf 'token=%s\\n' "${BROKERBENCH_TASK_TOKEN:-}" > "$FAKE_WORKER_ENV"
      exit "${FAKE_WORKER_EXIT:-0}"
    fi ;;
esac
exit 0
"""


def boot(tmp_path, **fake) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("aws", "pip", "python", "python3.12", "shutdown"):
        (bin_dir / name).write_text(STUB)
        (bin_dir / name).chmod(stat.S_IRWXU)
    asset = tmp_path / "asset.zip"
    with zipfile.ZipFile(asset, "w") as zf:
        zf.writestr("requirements-lambda.txt", "boto3==1.44.5 --hash=sha256:00\n")
        zf.writestr("wheels/boto3-1.44.5-py3-none-any.whl", "")
        zf.writestr("functions/brokerbench/__init__.py", "")
    script = tmp_path / "user-data.sh"
    script.write_text(user_data(JOB, PARAMETER, {"AWS_REGION": "us-east-1", "BROKERBENCH_MODE": "aws"},
                                worker_asset="s3://bb-assets/worker-abc.zip", root=str(tmp_path / "opt")))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "FAKE_LOG": str(tmp_path / "calls.log"),
           "FAKE_ASSET": str(asset), "REAL_PYTHON": sys.executable, "FAKE_WORKER_ENV": str(tmp_path / "worker.env"),
           "FAKE_TOKEN": TOKEN, **fake}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    calls = [line.split("\t") for line in (tmp_path / "calls.log").read_text().splitlines()]
    assert not (tmp_path / "pwned").exists()
    assert TOKEN not in done.stdout + done.stderr  # the boot log never shows the token
    return done, calls


def failures(calls):
    return [c for c in calls if c[:3] == ["aws", "stepfunctions", "send-task-failure"]]


def test_boot_script_installs_the_asset_runs_the_worker_and_powers_off(tmp_path):
    done, calls = boot(tmp_path)
    names = [c[0] for c in calls]
    # The token read from its parameter and the parameter deleted, before anything else.
    assert calls[0][:5] == ["aws", "ssm", "get-parameter", "--name", PARAMETER] and "--with-decryption" in calls[0]
    assert calls[1] == ["aws", "ssm", "delete-parameter", "--name", PARAMETER]
    assert calls[2][:3] == ["aws", "stepfunctions", "send-task-heartbeat"] and calls[2][4] == TOKEN
    assert ["aws", "s3", "cp", "--only-show-errors", "s3://bb-assets/worker-abc.zip", str(tmp_path / "opt/worker.zip")] in calls
    assert (tmp_path / "opt/app/requirements-lambda.txt").read_text().startswith("boto3==")  # really unpacked
    assert ["python3.12", "-m", "venv", str(tmp_path / "opt/.venv")] in calls
    [pip] = [c for c in calls if c[0] == "pip"]
    # The layer's lock, from the asset's wheels only: no index, hashes checked, nothing resolved.
    assert pip[:2] == ["pip", "install"] and pip[-2:] == ["-r", str(tmp_path / "opt/app/requirements-lambda.txt")]
    assert {"--no-index", "--require-hashes", "--no-deps"} <= set(pip)
    assert pip[pip.index("--find-links") + 1] == str(tmp_path / "opt/app/wheels")
    assert ["python", "-c", "import brokerbench.ec2_worker"] in calls
    [worker] = [c for c in calls if c[:3] == ["python", "-m", "brokerbench.ec2_worker"]]
    assert worker[3:] == ["--job", encode_job(JOB)]  # the token is not on the command line...
    assert (tmp_path / "worker.env").read_text() == f"token={TOKEN}\n"  # ...but in the worker's environment
    assert names.index("pip") < calls.index(worker) < len(calls) - 1
    # A power-off scheduled first (a hung worker's instance still goes: twice the estimate + 30 min; this
    # cell has no timings, so an hour is assumed), then the real one at the end.
    assert ["shutdown", "-h", f"+{2 * 60 + 30}"] in calls and calls.index(["shutdown", "-h", "+150"]) < names.index("pip")
    assert calls[-1] == ["shutdown", "-h", "now"] and names.count("shutdown") == 2
    assert not failures(calls) and done.returncode == 0


def test_a_failed_download_reports_worker_boot_failed_with_the_token_and_powers_off(tmp_path):
    done, calls = boot(tmp_path, FAKE_S3_FAIL="1")
    [failure] = failures(calls)
    assert failure[3:7] == ["--task-token", TOKEN, "--error", "WorkerBootFailed"]
    assert failure[7] == "--cause"
    assert failure[8].startswith("downloading the worker code from s3://bb-assets/worker-abc.zip failed (exit 1)")
    assert "aws s3 cp" in failure[8] and TOKEN not in failure[8]
    assert not [c for c in calls if c[0] in ("pip", "python")]  # nothing after the failed step ran
    assert calls[-1] == ["shutdown", "-h", "now"]
    assert done.returncode != 0 and "downloading the worker code" in done.stderr


def test_a_failed_install_reports_its_step_and_a_failed_worker_reports_nothing_more(tmp_path):
    done, calls = boot(tmp_path, FAKE_PIP_FAIL="1")
    [failure] = failures(calls)
    assert failure[4] == TOKEN and failure[8].startswith("installing the worker's packages from the asset's wheels failed (exit 1)")
    assert not [c for c in calls if c[0] == "python"] and calls[-1] == ["shutdown", "-h", "now"]

    worker_failed = tmp_path / "worker-failed"
    worker_failed.mkdir()
    done, calls = boot(worker_failed, FAKE_WORKER_EXIT="1")  # the worker sent its own WorkerFailed
    assert not failures(calls) and calls[-1] == ["shutdown", "-h", "now"]
    assert "the worker exited with 1" in done.stderr


def test_a_token_that_cannot_be_read_sends_nothing_and_powers_off(tmp_path):
    """No token, no answer: the task's heartbeat timeout (300 s) fails the cell."""
    done, calls = boot(tmp_path, FAKE_SSM_FAIL="1")
    assert not failures(calls) and not [c for c in calls if c[0] in ("pip", "python")]
    assert calls[-1] == ["shutdown", "-h", "now"] and "reading the task token" in done.stderr


def test_without_an_asset_the_image_install_is_used(tmp_path):
    script = user_data(JOB, "T", {}, root="/opt/brokerbench")
    assert "aws s3 cp" not in script and "pip install" not in script
    assert 'export PATH="$ROOT/.venv/bin:$PATH"' in script and "ROOT=/opt/brokerbench\n" in script
    assert "\nset -x" not in script and "set -o xtrace" not in script and "set -Eeuo pipefail" in script


# --- heartbeats: the Step Functions and local callbacks, the worker's thread, the local bridge ------------


def test_step_functions_heartbeat_and_a_gone_token():
    sfn = client("stepfunctions")
    with Stubber(sfn) as stub:
        stub.add_response("send_task_heartbeat", {}, {"taskToken": "T"})
        stub.add_client_error("send_task_heartbeat", "TaskTimedOut", expected_params={"taskToken": "T"})
        stub.add_client_error("send_task_success", "TaskDoesNotExist")
        stub.add_client_error("send_task_heartbeat", "ThrottlingException")
        callbacks = StepFunctionsCallbacks(sfn)
        callbacks.heartbeat("T")
        with pytest.raises(TaskGone, match="TaskTimedOut"):
            callbacks.heartbeat("T")
        with pytest.raises(TaskGone, match="TaskDoesNotExist"):
            callbacks.success("T", {"status": "completed"})
        with pytest.raises(Exception, match="ThrottlingException") as raised:
            callbacks.heartbeat("T")
        assert not isinstance(raised.value, TaskGone)
        stub.assert_no_pending_responses()


class FakeCallbacks:
    def __init__(self, gone_after: int | None = None) -> None:
        self.calls: list[tuple] = []
        self.gone_after = gone_after

    def heartbeat(self, token):
        self.calls.append(("heartbeat", token))
        if self.gone_after is not None and len(self.calls) > self.gone_after:
            raise TaskGone("TaskTimedOut: gone")

    def success(self, token, output):
        self.calls.append(("success", token, output))

    def failure(self, token, error, cause):
        self.calls.append(("failure", token, error, cause))


def test_the_heartbeat_thread_beats_until_stopped_and_stops_the_cell_when_the_task_is_gone():
    beating = FakeCallbacks()
    heartbeat = worker_ec2.Heartbeat(beating, "T", 0.05).start()
    time.sleep(0.4)
    heartbeat.stop()
    beats = len(beating.calls)
    assert beats >= 3 and set(beating.calls) == {("heartbeat", "T")}
    time.sleep(0.15)
    assert len(beating.calls) == beats  # stopped

    stopped = threading.Event()
    heartbeat = worker_ec2.Heartbeat(FakeCallbacks(gone_after=1), "T", 0.05, on_gone=stopped.set).start()
    assert stopped.wait(2) and heartbeat.gone.is_set()


def test_the_worker_beats_while_the_cell_runs_and_measures_nothing_for_a_gone_token(monkeypatch):
    callbacks = FakeCallbacks()
    monkeypatch.setattr(wiring, "task_callbacks", lambda: callbacks)
    monkeypatch.setattr(settings, "heartbeat_interval_s", lambda: 0.05)
    ran = []

    def run_cell(job, worker, stop):
        assert not stop.is_set()  # the worker's own stop: set only by a signal or a gone token
        ran.append(job)
        time.sleep(0.3)
        return {"cell_id": job["cell"]["cell_id"], "status": "completed", "reason": None}

    monkeypatch.setattr(worker_ec2.steps, "run_cell", run_cell)
    monkeypatch.setenv("BROKERBENCH_TASK_TOKEN", "T-env")
    assert worker_ec2.main(["--job", encode_job(JOB)]) == 0
    assert ran == [JOB] and callbacks.calls[-1] == ("success", "T-env", {"cell_id": CELL, "status": "completed",
                                                                        "reason": None})
    assert callbacks.calls.count(("heartbeat", "T-env")) >= 3  # one before the cell, then every interval

    gone = FakeCallbacks(gone_after=0)
    monkeypatch.setattr(wiring, "task_callbacks", lambda: gone)
    assert worker_ec2.main(["--task-token", "T-old", "--job", encode_job(JOB)]) == worker_ec2.EXIT_TASK_GONE
    assert len(ran) == 1 and gone.calls == [("heartbeat", "T-old")]


def test_heartbeat_interval_follows_the_local_window(monkeypatch):
    monkeypatch.delenv("BROKERBENCH_LOCAL_HEARTBEAT_S", raising=False)
    monkeypatch.setenv("BROKERBENCH_MODE", "aws")
    assert settings.heartbeat_interval_s() == 60
    monkeypatch.setenv("BROKERBENCH_MODE", "local")
    assert settings.heartbeat_interval_s() == 60 and settings.local_heartbeat_s() is None
    monkeypatch.setenv("BROKERBENCH_LOCAL_HEARTBEAT_S", "8")
    assert settings.local_heartbeat_s() == 8 and settings.heartbeat_interval_s() == 2
    monkeypatch.setenv("BROKERBENCH_LOCAL_HEARTBEAT_S", "0")
    with pytest.raises(RuntimeError, match="positive"):
        settings.local_heartbeat_s()


def test_settings_docstring_lists_the_new_settings():
    for name in ("BROKERBENCH_WORKER_ASSET", "BROKERBENCH_LOCAL_HEARTBEAT_S", "BROKERBENCH_TASK_TOKEN"):
        assert name in settings.__doc__


class _Launcher:
    """Stands in for the StartEc2Worker handler module: records the payload, starts nothing."""

    def __init__(self) -> None:
        self.payloads: list[dict] = []

    def lambda_handler(self, payload, context):
        self.payloads.append(payload)
        return {"kind": "ec2", "instance_id": "i-local"}


def test_the_local_bridge_reads_heartbeat_seconds_and_serves_heartbeats(monkeypatch):
    assert local_workflow._heartbeat_seconds(local_workflow.load_definition()["States"]) == {
        "RunCellOnEc2": 300.0, "LargeRunCellOnEc2": 300.0}
    monkeypatch.setenv("BROKERBENCH_MODE", "local")
    with local_workflow.Bridge() as bridge:
        callbacks = LocalCallbacks(bridge.url)
        with pytest.raises(TaskGone, match="TaskDoesNotExist"):
            callbacks.heartbeat("local-unknown")
        bridge.waiting["local-known"] = Future()
        bridge.beats["local-known"] = 0.0
        callbacks.heartbeat("local-known")
        assert bridge.beats["local-known"] > 0
        bridge.waiting["local-known"].set_result({"status": "completed"})
        with pytest.raises(TaskGone):  # a finished task takes no more heartbeats
            callbacks.heartbeat("local-known")


def test_the_local_bridge_fails_a_silent_task_with_states_heartbeat_timeout(monkeypatch):
    monkeypatch.setenv("BROKERBENCH_MODE", "local")
    monkeypatch.setenv("BROKERBENCH_LOCAL_HEARTBEAT_S", "0.6")
    with local_workflow.Bridge() as bridge:
        launcher = _Launcher()
        payload = {"run_id": RUN, "cell": JOB["cell"], "targets": {}, "task_token": local_workflow.TOKEN_PLACEHOLDER}
        started = time.monotonic()
        with pytest.raises(local_workflow._TaskError) as raised:
            bridge._wait_for_token("local:start_ec2_worker", launcher, payload, "RunCellOnEc2")
        assert raised.value.error == "States.HeartbeatTimeout"
        assert 0.6 <= time.monotonic() - started < 3
        assert not bridge.waiting and not bridge.beats

        # A worker that beats keeps the task alive past the window, until it reports.
        launcher = _Launcher()
        result: dict = {}

        def wait():
            try:
                result["output"] = bridge._wait_for_token("local:start_ec2_worker", launcher, payload, "RunCellOnEc2")
            except Exception as exc:  # noqa: BLE001 (reported by the assertion below)
                result["error"] = exc

        waiter = threading.Thread(target=wait)
        waiter.start()
        while not launcher.payloads:
            time.sleep(0.01)
        token = launcher.payloads[0]["task_token"]
        callbacks = LocalCallbacks(bridge.url)
        for _ in range(8):  # 1.6 s of beats, over twice the window
            callbacks.heartbeat(token)
            time.sleep(0.2)
        callbacks.success(token, {"cell_id": CELL, "status": "completed"})
        waiter.join(5)
        assert result == {"output": {"cell_id": CELL, "status": "completed"}}


class _ProcessLauncher:
    """Stands in for the StartEc2Worker handler: starts a real process (`script`, Python) as the local fleet does."""

    def __init__(self, script: str, process_group: int = -1) -> None:
        self.script = script
        self.process_group = process_group  # 0: its own, as LocalProcessFleet starts a worker
        self.process: subprocess.Popen | None = None

    def lambda_handler(self, payload, context):
        self.process = subprocess.Popen([sys.executable, "-c", self.script], process_group=self.process_group)
        return {"kind": "local-process", "pid": self.process.pid}


def test_a_lost_worker_is_stopped_with_every_process_it_started(monkeypatch, tmp_path):
    monkeypatch.setenv("BROKERBENCH_MODE", "local")
    fleet = LocalProcessFleet({"BROKERBENCH_CALLBACK_URL": "http://127.0.0.1:9"})
    pid = fleet.launch(JOB, "T")["pid"]
    try:
        assert os.getpgid(pid) == pid  # the leader of its own process group
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    # A worker that starts a process (its fork server does, and the cell's producers) and dies without reporting.
    child = tmp_path / "child"
    launcher = _ProcessLauncher("import os, pathlib, subprocess, sys\n"
                                "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                                f"pathlib.Path({str(child)!r}).write_text(str(p.pid))\nos._exit(1)", process_group=0)
    payload = {"run_id": RUN, "cell": JOB["cell"], "targets": {}, "task_token": local_workflow.TOKEN_PLACEHOLDER}
    with local_workflow.Bridge() as bridge:
        with pytest.raises(local_workflow._TaskError) as raised:
            bridge._wait_for_token("local:start_ec2_worker", launcher, payload, "RunCellOnEc2")
    assert raised.value.error == "WorkerLost", raised.value
    left = int(child.read_text())
    deadline = time.monotonic() + 10
    while pid_alive(left) and time.monotonic() < deadline:  # SIGKILLed; reaped by whoever adopted it
        time.sleep(0.05)
    assert not pid_alive(left), f"the lost worker's process {left} outlived it"


def _cancel_while_waiting(bridge, launcher, ready) -> tuple[threading.Thread, dict, float]:
    """Wait for `launcher`'s task in a thread and cancel once its worker has set its signal handlers (it creates
    `ready`): the thread, where the task's error will be ("error") and when the cancel came."""
    payload = {"run_id": RUN, "cell": JOB["cell"], "targets": {}, "task_token": local_workflow.TOKEN_PLACEHOLDER}
    raised: dict = {}

    def wait():
        try:
            bridge._wait_for_token("local:start_ec2_worker", launcher, payload, "RunCellOnEc2")
        except local_workflow._TaskError as exc:
            raised["error"] = exc

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = time.monotonic() + 60
    while not (bridge.workers and ready.exists()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ready.exists(), "the stand-in worker never set its signal handlers"
    started = time.monotonic()
    bridge.cancelled = True
    return waiter, raised, started


def test_a_cancelled_bridge_answers_task_timed_out_and_stops_the_worker_it_started(monkeypatch, tmp_path):
    monkeypatch.setenv("BROKERBENCH_MODE", "local")
    told, ready = tmp_path / "sigterm", tmp_path / "ready"
    with local_workflow.Bridge() as bridge:
        # A worker that stops on SIGTERM, as brokerbench.ec2_worker does once its cell has recorded its end.
        launcher = _ProcessLauncher("import pathlib, signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: "
                                    f"(pathlib.Path({str(told)!r}).touch(), sys.exit(3)))\n"
                                    f"pathlib.Path({str(ready)!r}).touch()\ntime.sleep(60)")
        waiter, raised, started = _cancel_while_waiting(bridge, launcher, ready)
        with pytest.raises(TaskGone, match="TaskTimedOut"):  # what Step Functions answers for a stopped execution
            LocalCallbacks(bridge.url).heartbeat("local-any")
        waiter.join(30)
        # Answered by the cancel, not by the worker's 60 s sleep ending (a loaded host may take seconds).
        assert raised["error"].error == "States.Cancelled" and time.monotonic() - started < 30
        assert told.exists() and launcher.process.poll() is not None and not bridge.workers  # reaped

    with local_workflow.Bridge() as bridge:  # one that does not stop is killed when the cancel's grace ends
        ready = tmp_path / "ready-ignoring"
        launcher = _ProcessLauncher("import pathlib, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                    f"pathlib.Path({str(ready)!r}).touch()\ntime.sleep(60)")
        waiter, raised, _ = _cancel_while_waiting(bridge, launcher, ready)
        time.sleep(1)
        assert waiter.is_alive() and launcher.process.poll() is None
        assert bridge.stop_workers() == [launcher.process.pid]
        waiter.join(10)
        assert raised["error"].error == "States.Cancelled" and launcher.process.poll() is not None


def test_the_worker_stops_its_cell_on_sigterm_and_sigint():
    for sig in ("SIGTERM", "SIGINT"):
        done = subprocess.run([sys.executable, "-c", "import os, signal, threading\nfrom brokerbench import ec2_worker as ec2\n"
                               "stop = threading.Event()\nec2.stop_on_signals(stop)\n"
                               f"os.kill(os.getpid(), signal.{sig})\nassert stop.is_set()"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr


# --- provisioning: a create that already happened ---------------------------------------------------------


def test_msk_conflict_takes_this_runs_cluster_and_stays_transient_otherwise():
    kafka = client("kafka")
    name = resource_name(RUN, "kafka")
    provider = MskTargets(kafka, subnets=["s"], security_groups=["g"])
    with Stubber(kafka) as stub:
        stub.add_client_error("create_cluster_v2", "ConflictException", http_status_code=409)
        stub.add_response("list_clusters_v2", {"ClusterInfoList": [
            {"ClusterArn": ARN + "-old", "ClusterName": name, "State": "DELETING", "Tags": {"brokerbench:run": RUN}},
            {"ClusterArn": ARN, "ClusterName": name, "State": "CREATING", "Tags": {"brokerbench:run": RUN}}]},
            {"ClusterNameFilter": name})
        stub.add_client_error("create_cluster_v2", "ConflictException", http_status_code=409)
        stub.add_response("list_clusters_v2", {"ClusterInfoList": [
            {"ClusterArn": ARN, "ClusterName": name, "State": "ACTIVE", "Tags": {"brokerbench:run": "another-run"}}]},
            {"ClusterNameFilter": name})
        stub.add_client_error("create_cluster_v2", "ConflictException", http_status_code=409)
        stub.add_response("list_clusters_v2", {"ClusterInfoList": []}, {"ClusterNameFilter": name})
        target = provider.provision(RUN, "kafka", spec())
        assert (target["resource"], target["ready"], target["provider"]) == (ARN, False, "msk")
        with pytest.raises(TransientProvisioningError, match="ConflictException"):
            provider.provision(RUN, "kafka", spec())
        with pytest.raises(TransientProvisioningError, match="ConflictException"):
            provider.provision(RUN, "kafka", spec())
        stub.assert_no_pending_responses()


def test_elasticache_already_exists_continues_with_this_runs_group_only():
    cache, secrets = client("elasticache"), client("secretsmanager")
    name = resource_name(RUN, "redis-streams")
    group_arn = f"arn:aws:elasticache:us-east-1:123456789012:replicationgroup:{name}"
    provider = ElastiCacheTargets(cache, secrets, auth_secret_arn="arn:s", subnet_group="g", security_groups=["s"])
    with Stubber(cache) as cache_stub, Stubber(secrets) as secret_stub:
        for tags in ([{"Key": "brokerbench:run", "Value": RUN}], [{"Key": "brokerbench:run", "Value": "other"}]):
            secret_stub.add_response("get_secret_value", {"SecretString": "t" * 32}, {"SecretId": "arn:s"})
            cache_stub.add_client_error("create_replication_group", "ReplicationGroupAlreadyExists")
            cache_stub.add_response("describe_replication_groups",
                                    {"ReplicationGroups": [{"ReplicationGroupId": name, "Status": "creating",
                                                            "ARN": group_arn}]}, {"ReplicationGroupId": name})
            cache_stub.add_response("list_tags_for_resource", {"TagList": tags}, {"ResourceName": group_arn})
        target = provider.provision(RUN, "redis-streams", spec())
        assert (target["resource"], target["ready"], target["provider"]) == (name, False, "elasticache")
        with pytest.raises(ProvisioningError, match="not this run's"):
            provider.provision(RUN, "redis-streams", spec())
        cache_stub.assert_no_pending_responses()


def test_the_job_in_user_data_round_trips():
    assert json.loads(base64.b64decode(encode_job(JOB))) == JOB

def test_the_power_off_safety_net_is_twice_the_cells_estimate_plus_half_an_hour():
    from brokerbench.spec import expand, validate
    from brokerbench.workflow.fleet import power_off_minutes

    cell = expand(validate({"brokers": ["kafka"], "sizes": [1024], "rates": [100], "formats": ["raw"],
                            "warmup_s": 2, "duration_s": 10, "drain_timeout_s": 10, "warmup_until_steady": False}))[0]
    # 2 s warm-up + 10 s measured + 10 s drain + 15 s start-up = 37 s; twice that is 1.2 min, so 2, plus 30
    assert power_off_minutes({"cell": cell}) == 32
    assert power_off_minutes({"cell": {"cell_id": "x"}}) == 150  # no timings: an hour assumed
