"""A whole EC2-kind worker killed with SIGKILL in the middle of a cell, through `brokerbench run` as a user starts it.

The spec places its cells on the EC2 worker kind (`placement.worker: ec2`); locally the bridge starts each as
`python -m brokerbench.ec2_worker` (LocalProcessFleet), the parent of the cell's producer and consumer processes.
The test kills that worker, the whole of it, while the first of two cells measures: the cell must end failed as
WorkerLost, keep the intervals it measured (each once), the run must go on to its second cell, the report must
mark the first, results.json must read completed_with_failures, the CLI must exit 1, and no worker process may be
left behind.
"""

import json
import os
import signal
import time

import pytest
import redis

from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.dynamodb import EVENTS_TABLE
from fault_tools import EC2_WORKER, ancestor_running, cell_facts, descendants, event_facts, run_until_measuring, running
from reliability_log import observe

# The bridge's heartbeat window (BROKERBENCH_LOCAL_HEARTBEAT_S; 300 s in the workflow definition). The kill is seen
# by the worker's process ending (WorkerLost), not by the window, so the window only has to outlast a loaded worker's
# start-up, which counts against it as it does in Step Functions (the clock starts with the task; a worker's first
# beat took 9 to 17 s at a load of 11 to 14 beside two CPU hogs). Should the process end go unseen, the cell fails
# States.HeartbeatTimeout within the window, which the reason's assertion prints.
WINDOW_S = 60
# Long enough that a producer left running by the killed worker would still be sending long after a loaded host's
# slowest teardown of the worker's fork server (whose end is what kills the producer and consumer).
DURATION_S = 30


def measured_seconds(store, run_id: str, cli, at_least: int = 2) -> int:
    """Once the run's first cell has stored `at_least` measured seconds (its only cell so far): how many it has."""
    deadline = time.monotonic() + 120
    while (seen := sum(e["type"] == "IntervalMeasured" for e in store.read(run_id, interval_histograms=False))) \
            < at_least:
        assert cli.poll() is None and time.monotonic() < deadline, f"{seen} measured seconds stored, CLI exit " \
                                                                   f"{cli.poll()}, {time.monotonic() - deadline:+.0f} s"
        time.sleep(0.3)
    return seen


@pytest.mark.timeout(240)
def test_a_killed_ec2_worker_fails_its_cell_as_worker_lost_and_the_run_goes_on(stack, endpoints, tmp_path):
    spec = {"name": "fault-ec2-worker", "brokers": ["redis-streams"], "sizes": [512], "rates": [500],
            "formats": ["json", "raw"], "duration_s": DURATION_S, "warmup_s": 1, "warmup_until_steady": False,
            "order": "fixed", "placement": {"worker": "ec2"}}
    store = DynamoEventStore(EVENTS_TABLE, endpoint_url=endpoints["dynamodb"]["endpoint_url"])
    cli = run_until_measuring(stack.state_dir, spec, tmp_path, {"BROKERBENCH_LOCAL_HEARTBEAT_S": str(WINDOW_S)})
    producer = next(pid for pid, name in descendants(cli.pid).items() if name == "bb-producer-0")
    worker = ancestor_running(producer, EC2_WORKER)  # the EC2-kind worker runs the cell's processes
    family = set(descendants(worker))  # its fork server, the cell's producer and consumer
    measured = measured_seconds(store, stack.run_holder()["run_id"], cli)  # a few measured seconds of the first cell
    os.kill(worker, signal.SIGKILL)
    killed = time.monotonic()
    # The worker's producer and consumer go with it, not at the end of their schedule: gone before half of what
    # was left of it (how promptly on a loaded host is a timing; the fork server has to end first).
    bound_s = (DURATION_S - measured) / 2
    while running(family) and time.monotonic() - killed < bound_s:
        time.sleep(0.1)
    outlived, gone_after_s = running(family), time.monotonic() - killed
    stdout, stderr = cli.communicate(timeout=180)
    assert cli.returncode == 1, stdout[-2000:] + stderr[-2000:]  # a cell failed: the run completed with failures
    assert "Traceback" not in stderr, stderr[-3000:]
    assert not outlived, (outlived, f"still running {gone_after_s:.1f} s after the kill", measured)

    out = tmp_path / "out"
    results = json.loads(next(out.glob("*/results.json")).read_text())
    assert results["status"] == "completed_with_failures"
    first, second = sorted(results["cells"], key=lambda c: c["order"])
    assert first["status"] == "failed"
    assert first["reason"] == f"WorkerLost: worker process {worker} ended without reporting", first["reason"]
    assert second["status"] == "completed" and second["received"] == second["sent"] > 0

    events = store.read(results["run_id"])
    assert len({e["event_id"] for e in events}) == len(events)
    kinds = [e["type"] for e in events]
    assert kinds.count("CellFailed") == 1 and kinds.count("CellCompleted") == 1 and kinds.count("RunCompleted") == 1
    kept = sorted(e["data"]["interval"] for e in events
                  if e["type"] == "IntervalMeasured" and e["data"]["cell_id"] == first["cell_id"])
    # What was measured before the kill is kept, each second once.
    assert len(kept) >= measured and kept == list(range(len(kept))), (measured, kept)
    # The killed worker could not delete its cell's streams: RecordCellFailed did (the completed cell's worker
    # deleted its own). Redis's own keyspace holds none of the run's.
    redis_at = endpoints["redis-streams"]
    left = list(redis.Redis(host=redis_at["host"], port=redis_at["port"]).scan_iter(match=f"bb-{results['run_id']}-*"))
    assert left == [], left
    report = next(out.glob("*/report.md")).read_text()
    assert "FAILED: WorkerLost" in report
    assert not [pid for pid, name in descendants(os.getpid()).items() if name.startswith("bb-")]
    observe("kill-worker", fault="kill -9 of the whole EC2-kind worker process (python -m brokerbench.ec2_worker, "
                                 "the parent of the cell's producer and consumer) once the first of two cells had "
                                 f"stored two measured seconds (BROKERBENCH_LOCAL_HEARTBEAT_S={WINDOW_S})",
            run_status=results["status"], exit_code=cli.returncode, intervals_kept=len(kept),
            cells=[cell_facts(first), cell_facts(second)],
            observed=[f"the first cell failed with '{first['reason']}'",
                      f"its {len(kept)} measured intervals were kept, each once (0..{len(kept) - 1})",
                      "the second cell completed with every message received",
                      "report.md marks the first cell FAILED: WorkerLost",
                      "results.json reads completed_with_failures and the CLI exited 1",
                      f"the killed worker's producer and consumer processes were gone {gone_after_s:.1f} s after it, "
                      f"{DURATION_S - measured} s before their schedule's end; no bb-* process left",
                      "no stream of the run left in Redis (the failed cell's deleted by RecordCellFailed)"],
            **event_facts(events))
