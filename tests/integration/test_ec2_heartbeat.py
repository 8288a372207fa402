"""An EC2-kind worker that hangs mid-cell: its cell fails within the heartbeat window and the run ends.

A worker that dies (SIGKILL) is test_kill_ec2_worker.py's: through `brokerbench run`, WorkerLost as soon as the
bridge sees the process end, the run going on to its next cell.

The real workflow definition runs through the local ASL interpreter against the real local stack. The
interpreter (aws-local-stepfunctions) enforces TimeoutSeconds but ignores HeartbeatSeconds, so the local
bridge enforces it; BROKERBENCH_LOCAL_HEARTBEAT_S gives it a window of a few seconds for these tests
instead of RunCellOnEc2's 300. The worker is a real process (LocalProcessFleet), found among this
process's children and signalled: SIGSTOP (a hung one, which only the
missing heartbeats reveal).
"""

import os
import signal
import time

import pytest

from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.workflow import LocalWorkflow
from brokerbench.reports.results import build_results
from fault_tools import EC2_WORKER, alive, descendants, workers_below

WINDOW_S = 10
DURATION_S = 90  # far longer than the window: the cell must end because its worker stopped, not by itself


def run_and_signal(stack, tmp_path, monkeypatch, sig):
    """Run a one-cell EC2-kind request; once the cell measures, send `sig` to its worker process."""
    monkeypatch.setenv("BROKERBENCH_LOCAL_HEARTBEAT_S", str(WINDOW_S))
    run_id = new_run_id()
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    request = {"name": f"hb-{sig.name.lower()}", "brokers": ["redis-streams"], "sizes": [1024], "rates": [100],
               "formats": ["raw"], "duration_s": DURATION_S, "warmup_s": 1, "placement": {"worker": "ec2"}}
    seen: dict = {}

    def on_poll():
        if "pid" in seen:
            return
        if not any(e["type"] == "IntervalMeasured" for e in store.read(run_id, interval_histograms=False)):
            return  # signal it mid-measurement, once its producer and consumer processes run
        workers = [p for p, name in workers_below(os.getpid()).items() if name == EC2_WORKER]
        if workers:
            [pid] = workers
            seen["family"] = list(descendants(pid))  # its producer and consumer processes
            os.kill(pid, sig)
            seen["pid"], seen["at"] = pid, time.monotonic()

    try:
        execution = LocalWorkflow(stack, tmp_path / "reports").execute(request, suite=request["name"], run_id=run_id,
                                                                        on_poll=on_poll)
        ended = time.monotonic()
    finally:
        for pid in [seen.get("pid"), *seen.get("family", [])]:  # what the test's run started is stopped
            if pid and alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    assert "pid" in seen, "the worker process was not found"
    return execution, store.read(run_id), ended - seen["at"], seen


def check_failed_cell(execution, events, error_names):
    assert execution.status == "SUCCEEDED", (execution.error, execution.cause)  # the run ends, with a failed cell
    [ec2_task] = [outcome for state, outcome in execution.tasks if state == "RunCellOnEc2"]
    assert ec2_task in error_names
    assert "RecordCellFailed" in [state for state, _ in execution.tasks]
    [failed] = [e for e in events if e["type"] == "CellFailed"]
    assert failed["data"]["reason"].split(":")[0] in error_names
    results = build_results(events)
    assert [c["status"] for c in results["cells"]] == ["failed"]
    assert results["status"] != "completed"
    types = [e["type"] for e in events]
    assert "RunCompleted" in types and types.count("CellCompleted") == 0
    return failed


@pytest.mark.timeout(240)
def test_a_hung_worker_fails_its_cell_with_states_heartbeat_timeout(stack, tmp_path, monkeypatch):
    execution, events, after_stop_s, seen = run_and_signal(stack, tmp_path, monkeypatch, signal.SIGSTOP)
    failed = check_failed_cell(execution, events, {"States.HeartbeatTimeout"})
    assert "no heartbeat from the worker" in failed["data"]["reason"]
    assert WINDOW_S - 3 < after_stop_s < WINDOW_S + 30, after_stop_s  # within the window, not the cell's 90 s
    assert not alive(seen["pid"])  # the bridge killed the hung worker it started
