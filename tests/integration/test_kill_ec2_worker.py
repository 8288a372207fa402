"""An EC2-kind worker that dies and one that hangs, in the middle of a cell, through `brokerbench run` as a user starts
it: one run of two cells, the first worker killed (SIGKILL), the second stopped (SIGSTOP).

The spec places its cells on the EC2 worker kind (`placement.worker: ec2`); locally the bridge starts each as
`python -m brokerbench.ec2_worker` (LocalProcessFleet), the parent of the cell's producer and consumer processes.
A killed worker's cell must end failed as WorkerLost as soon as the bridge sees the process end, keep the intervals
it measured (each once), and the run must go on to its second cell. A hung worker's cell ends only by its missing
heartbeats: States.HeartbeatTimeout within the heartbeat window, and the bridge kills the worker it started. The
report marks both cells, results.json reads completed_with_failures, the CLI exits 1, no worker process is left
behind and no stream of the run is left in Redis.

The local ASL interpreter (aws-local-stepfunctions) enforces TimeoutSeconds but ignores HeartbeatSeconds, so the
local bridge enforces it; BROKERBENCH_LOCAL_HEARTBEAT_S gives it a window of WINDOW_S instead of RunCellOnEc2's 300.
"""

import json
import os
import signal
import time
from datetime import datetime

import pytest
import redis

from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.dynamodb import EVENTS_TABLE
from fault_tools import EC2_WORKER, alive, ancestor_running, cell_facts, descendants, event_facts, run_until_measuring
from fault_tools import running
from reliability_log import observe

# The window's clock starts with the task, as Step Functions' does, so a worker's start-up counts against it: the
# window outlasts a loaded worker's start-up (its first beat came 9 to 17 s after its launch at a load of 11 to 14
# beside two CPU hogs, 4 to 6 s at 10 without them), or a cell fails before it measures. The worker beats every
# WINDOW_S / 4 and a loaded host may delay a beat, so the hung cell's window runs out no sooner than WINDOW_S / 2
# after the stop. A killed worker is seen by its process ending (WorkerLost), not by the window.
WINDOW_S = 40
# Far longer than the window: the hung cell must end because its worker stopped, not by its schedule; and a producer
# left running by the killed worker would still be sending long after a loaded host's slowest teardown of the
# worker's fork server (whose end is what kills the producer and consumer).
DURATION_S = 90


def measured_seconds(store, run_id: str, cell_id_part: str, cli, at_least: int) -> int:
    """Once the run's cell named by `cell_id_part` has stored `at_least` measured seconds: how many it has."""
    deadline = time.monotonic() + 180
    while (seen := sum(e["type"] == "IntervalMeasured" and cell_id_part in e["data"]["cell_id"]
                       for e in store.read(run_id, interval_histograms=False))) < at_least:
        assert cli.poll() is None and time.monotonic() < deadline, f"{seen} measured seconds stored, CLI exit " \
                                                                   f"{cli.poll()}, {time.monotonic() - deadline:+.0f} s"
        time.sleep(0.3)
    return seen


def worker_of_the_cell(cli, earlier: frozenset = frozenset()) -> tuple[int, set[int]]:
    """The EC2-kind worker running the CLI's current cell (its producer not one of `earlier`), and its descendants
    (fork server, producer, consumer)."""
    producer = next(pid for pid, name in descendants(cli.pid).items()
                    if name == "bb-producer-0" and pid not in earlier and alive(pid))
    worker = ancestor_running(producer, EC2_WORKER)
    return worker, set(descendants(worker))


def kill_and_wait(worker: int, family: set[int], measured: int) -> tuple[dict, float]:
    """SIGKILL of the worker; its producer and consumer go with it, not at the end of their schedule: gone before
    half of what was left of it (how promptly on a loaded host is a timing; the fork server has to end first)."""
    os.kill(worker, signal.SIGKILL)
    killed = time.monotonic()
    while running(family) and time.monotonic() - killed < (DURATION_S - measured) / 2:
        time.sleep(0.1)
    return running(family), time.monotonic() - killed


@pytest.mark.timeout(420)
def test_a_killed_and_a_hung_ec2_worker_fail_their_cells_and_the_run_ends(stack, endpoints, tmp_path):
    spec = {"name": "fault-ec2-worker", "brokers": ["redis-streams"], "sizes": [512], "rates": [500],
            "formats": ["json", "raw"], "duration_s": DURATION_S, "warmup_s": 1, "warmup_until_steady": False,
            "order": "fixed", "placement": {"worker": "ec2"}}
    store = DynamoEventStore(EVENTS_TABLE, endpoint_url=endpoints["dynamodb"]["endpoint_url"])
    cli = run_until_measuring(stack.state_dir, spec, tmp_path, {"BROKERBENCH_LOCAL_HEARTBEAT_S": str(WINDOW_S)})
    hung = None
    try:
        killed, family = worker_of_the_cell(cli)
        run_id = stack.run_holder()["run_id"]
        measured = measured_seconds(store, run_id, ".json.", cli, at_least=2)
        outlived, gone_after_s = kill_and_wait(killed, family, measured)
        measured_second = measured_seconds(store, run_id, ".raw.", cli, at_least=1)  # the run went on
        hung, _ = worker_of_the_cell(cli, frozenset(family))
        os.kill(hung, signal.SIGSTOP)
        stopped_at = time.time()
        stdout, stderr = cli.communicate(timeout=300)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
        if hung and alive(hung):  # what the test's run started is stopped
            os.kill(hung, signal.SIGKILL)
    assert cli.returncode == 1, stdout[-2000:] + stderr[-2000:]  # cells failed: the run completed with failures
    assert "Traceback" not in stderr, stderr[-3000:]
    assert not outlived, (outlived, f"still running {gone_after_s:.1f} s after the kill", measured)

    out = tmp_path / "out"
    results = json.loads(next(out.glob("*/results.json")).read_text())
    assert results["status"] == "completed_with_failures"
    first, second = sorted(results["cells"], key=lambda c: c["order"])
    assert first["status"] == "failed"
    assert first["reason"] == f"WorkerLost: worker process {killed} ended without reporting", first["reason"]
    assert second["status"] == "failed"
    assert second["reason"].startswith("States.HeartbeatTimeout"), second["reason"]
    assert second["reason"].endswith(f"no heartbeat from the worker for {WINDOW_S} s (HeartbeatSeconds)")
    assert not alive(hung)  # the bridge killed the hung worker it started

    events = store.read(results["run_id"])
    assert len({e["event_id"] for e in events}) == len(events)
    kinds = [e["type"] for e in events]
    assert kinds.count("CellFailed") == 2 and kinds.count("CellCompleted") == 0 and kinds.count("RunCompleted") == 1
    kept = sorted(e["data"]["interval"] for e in events
                  if e["type"] == "IntervalMeasured" and e["data"]["cell_id"] == first["cell_id"])
    # What was measured before the kill is kept, each second once.
    assert len(kept) >= measured and kept == list(range(len(kept))), (measured, kept)
    [timed_out] = [e for e in events if e["type"] == "CellFailed" and e["data"]["cell_id"] == second["cell_id"]]
    after_stop_s = datetime.fromisoformat(timed_out["at"]).timestamp() - stopped_at
    # Not before the window less a beat interval and a delayed beat; before the cell's schedule would have ended.
    assert WINDOW_S / 2 <= after_stop_s < DURATION_S, (after_stop_s, measured_second, timed_out["data"])
    # The lost and the hung workers could not delete their cells' streams: RecordCellFailed did. Redis's own
    # keyspace holds none of the run's.
    redis_at = endpoints["redis-streams"]
    left = list(redis.Redis(host=redis_at["host"], port=redis_at["port"]).scan_iter(match=f"bb-{results['run_id']}-*"))
    assert left == [], left
    report = next(out.glob("*/report.md")).read_text()
    assert "FAILED: WorkerLost" in report and "FAILED: States.HeartbeatTimeout" in report
    assert not [pid for pid, name in descendants(os.getpid()).items() if name.startswith("bb-")]
    observe("kill-worker", fault="kill -9 of the whole EC2-kind worker process (python -m brokerbench.ec2_worker, "
                                 "the parent of the cell's producer and consumer) once the first of two cells had "
                                 f"stored two measured seconds (BROKERBENCH_LOCAL_HEARTBEAT_S={WINDOW_S})",
            run_status=results["status"], exit_code=cli.returncode, intervals_kept=len(kept),
            cells=[cell_facts(first)],
            observed=[f"the first cell failed with '{first['reason']}'",
                      f"its {len(kept)} measured intervals were kept, each once (0..{len(kept) - 1})",
                      "the run went on to its second cell, which measured",
                      "report.md marks the first cell FAILED: WorkerLost",
                      "results.json reads completed_with_failures and the CLI exited 1",
                      f"the killed worker's producer and consumer processes were gone {gone_after_s:.1f} s after it, "
                      f"{DURATION_S - measured} s before their schedule's end; no bb-* process left",
                      "no stream of the run left in Redis (the failed cells' deleted by RecordCellFailed)"],
            **event_facts(events))
    observe("hang-worker", fault="SIGSTOP of the EC2-kind worker process of the second cell once it had stored a "
                                 f"measured second (BROKERBENCH_LOCAL_HEARTBEAT_S={WINDOW_S})",
            run_status=results["status"], exit_code=cli.returncode, cells=[cell_facts(second)],
            observed=[f"the cell failed with '{second['reason']}' {after_stop_s:.0f} s after the stop, "
                      f"{DURATION_S} s schedule",
                      "the bridge killed the hung worker", "report.md marks it FAILED: States.HeartbeatTimeout"],
            **event_facts(events))
