"""`brokerbench run` as a user runs it: a subprocess against the session's stack."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import CORE_SERVICES
from fault_tools import as_from_a_terminal

BIN = Path(sys.executable).parent / "brokerbench"


def brokerbench(stack, *args, **kwargs):
    return subprocess.run([str(BIN), "--state-dir", str(stack.state_dir), *args], capture_output=True, text=True,
                          timeout=300, **kwargs)


@pytest.fixture
def tiny_spec(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({"name": "tiny", "brokers": ["kafka", "redis-streams"], "sizes": [1024],
                                "rates": [300], "formats": ["json"], "duration_s": 2, "warmup_s": 0.5,
                                "warmup_until_steady": False}))
    return path


def test_run_prints_the_table_writes_results_and_leaves_the_stack_as_found(stack, tiny_spec, tmp_path):
    pids = {n: s.get("pid") for n, s in stack.status().items()}
    done = brokerbench(stack, "run", "--spec", str(tiny_spec), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "2 cells (random order, seed" in done.stdout
    assert "1,024 B (record basis) · 300 msgs/s · batch mode" in done.stdout
    assert "redis-streams" in done.stdout and "kafka" in done.stdout
    [results_path] = (tmp_path / "out").glob("*/results.json")
    results = json.loads(results_path.read_text())
    assert results["name"] == "tiny" and results["status"] == "completed"
    assert [c["status"] for c in results["cells"]] == ["completed", "completed"]
    # each row not stamped at arrival is marked, and the note under the table says how it was (figures.stamp_note)
    assert {(c["broker"], c["ack_stamps"], c["delivery_stamps"]) for c in results["cells"]} == {
        ("kafka", "arrival", "client:librdkafka-fetch-arrival"), ("redis-streams", "arrival", "arrival")}
    printed = " ".join(done.stdout.split())  # rich wraps the note to the terminal's width
    # the Kafka row and the note; Redis's row, stamped at arrival on both sides, is not marked
    assert printed.count("†") == 2 and "† not stamped at arrival (the kernel's receive time): " in printed
    # Kafka's acknowledgements at their response's arrival: only its deliveries are marked
    assert "kafka json: deliveries (end-to-end latency) at the arrival (the kernel's receive time) of the latest " \
           "Fetch response read before the poll returned" in printed
    assert "acknowledgements (publish latency)" not in printed
    assert {n: s.get("pid") for n, s in stack.status().items()} == pids  # the running stack was reused, not stopped
    # The run ends with where its report is: the HTML report's whole path is the last line (no browser here).
    assert done.stdout.strip().splitlines()[-1] == f"report:  {(results_path.parent / 'report.html').resolve()}"
    assert (results_path.parent / "report.html").is_file()

    shown = brokerbench(stack, "show", results["run_id"], "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout) == results
    listed = brokerbench(stack, "runs", "--suite", "tiny")
    assert results["run_id"] in listed.stdout


def test_a_target_that_does_not_answer_is_refused_with_exit_3_before_anything_starts(stack, tmp_path):
    from brokerbench.events.dynamodb import DynamoEventStore
    from brokerbench.local.stack import free_port

    port = free_port()
    spec = tmp_path / "down.json"
    spec.write_text(json.dumps({"name": "silent-target", "brokers": ["kafka", "redis-streams"], "sizes": [1024],
                                "rates": [100], "formats": ["raw"], "duration_s": 1, "warmup_s": 0,
                                "warmup_until_steady": False,
                                "targets": {"kafka": {"bootstrap_servers": f"127.0.0.1:{port}"}}}))
    done = brokerbench(stack, "run", "--spec", str(spec), "--out", str(tmp_path / "out"))
    assert done.returncode == 3, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert f"targets.kafka: Kafka at 127.0.0.1:{port} did not answer" in said and "nothing was started" in said
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    store.ensure_table()  # as the CLI opens it: on a stack that has held no run yet the table is not there
    runs = store.list_runs(limit=200)
    assert not [r for r in runs if r["data"]["spec"].get("name") == "silent-target"]  # no run was started


def test_ctrl_c_keeps_what_was_measured_and_leaves_the_stack_running(stack, tmp_path):
    from brokerbench.events.dynamodb import DynamoEventStore

    spec = tmp_path / "long.json"
    spec.write_text(json.dumps({"name": "long", "brokers": ["redis-streams"], "sizes": [1024], "rates": [200],
                                "formats": ["raw", "json"], "duration_s": 30, "warmup_s": 0}))
    proc = subprocess.Popen([str(BIN), "--state-dir", str(stack.state_dir), "run", "--spec", str(spec),
                             "--out", str(tmp_path / "out")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=as_from_a_terminal)
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    events = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    deadline = time.monotonic() + 120  # a hang, not a loaded host (idle: about 10 s)
    run_id = None
    while time.monotonic() < deadline and run_id is None:  # wait until a few intervals are stored
        try:
            runs = events.list_runs(suite="long", limit=1)
        except events.client.exceptions.ResourceNotFoundException:  # the run has not created the table yet
            runs = []
        if runs and sum(e["type"] == "IntervalMeasured" for e in events.read(runs[0]["run_id"])) >= 3:
            run_id = runs[0]["run_id"]
        time.sleep(0.5)
    assert run_id, "the run never stored an interval"
    # A second run on the same stack meanwhile is refused, naming the one that holds it, and starts nothing.
    second = brokerbench(stack, "run", "--suite", "smoke", "--out", str(tmp_path / "second"))
    assert second.returncode == 3, second.stderr
    assert "busy" in second.stderr and run_id in second.stderr and str(proc.pid) in second.stderr
    assert not (tmp_path / "second").exists()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    stored = events.read(run_id)
    types = [e["type"] for e in stored]
    assert types.count("IntervalMeasured") >= 3
    failed = [e for e in stored if e["type"] == "CellFailed"]
    assert failed and failed[0]["data"]["reason"] == "stopped: the run was interrupted or cancelled"
    assert stored[-1]["type"] == "RunCompleted" and stored[-1]["data"]["status"] == "interrupted"
    results = json.loads(next((tmp_path / "out").glob("*/results.json")).read_text())
    assert results["status"] == "interrupted"
    run_order = sorted(stored[0]["data"]["cells"], key=lambda c: c["order"])
    status = {c["cell_id"]: c["status"] for c in results["cells"]}
    assert [status[c["cell_id"]] for c in run_order] == ["failed", "incomplete"]  # the one running was stopped
    assert stack.is_up(CORE_SERVICES)
