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

WINDOW_S = 10  # the bridge's heartbeat window (BROKERBENCH_LOCAL_HEARTBEAT_S), 300 s in the workflow definition


@pytest.mark.timeout(240)
def test_a_killed_ec2_worker_fails_its_cell_as_worker_lost_and_the_run_goes_on(stack, endpoints, tmp_path):
    spec = {"name": "fault-ec2-worker", "brokers": ["redis-streams"], "sizes": [512], "rates": [500],
            "formats": ["json", "raw"], "duration_s": 8, "warmup_s": 1, "warmup_until_steady": False,
            "order": "fixed", "placement": {"worker": "ec2"}}
    cli = run_until_measuring(stack.state_dir, spec, tmp_path, {"BROKERBENCH_LOCAL_HEARTBEAT_S": str(WINDOW_S)})
    producer = next(pid for pid, name in descendants(cli.pid).items() if name == "bb-producer-0")
    worker = ancestor_running(producer, EC2_WORKER)  # the EC2-kind worker runs the cell's processes
    family = set(descendants(worker))  # its fork server, the cell's producer and consumer
    time.sleep(4)  # the warm-up and a few measured seconds of the first cell
    os.kill(worker, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while running(family) and time.monotonic() < deadline:
        time.sleep(0.1)
    outlived = running(family)  # the worker's producer and consumer go with it, not at the end of their schedule
    stdout, stderr = cli.communicate(timeout=180)
    assert cli.returncode == 1, stdout[-2000:] + stderr[-2000:]  # a cell failed: the run completed with failures
    assert "Traceback" not in stderr, stderr[-3000:]
    assert not outlived, outlived

    out = tmp_path / "out"
    results = json.loads(next(out.glob("*/results.json")).read_text())
    assert results["status"] == "completed_with_failures"
    first, second = sorted(results["cells"], key=lambda c: c["order"])
    assert first["status"] == "failed"
    assert first["reason"] == f"WorkerLost: worker process {worker} ended without reporting", first["reason"]
    assert second["status"] == "completed" and second["received"] == second["sent"] > 0

    events = DynamoEventStore(EVENTS_TABLE, endpoint_url=endpoints["dynamodb"]["endpoint_url"]).read(
        results["run_id"])
    assert len({e["event_id"] for e in events}) == len(events)
    kinds = [e["type"] for e in events]
    assert kinds.count("CellFailed") == 1 and kinds.count("CellCompleted") == 1 and kinds.count("RunCompleted") == 1
    kept = sorted(e["data"]["interval"] for e in events
                  if e["type"] == "IntervalMeasured" and e["data"]["cell_id"] == first["cell_id"])
    assert kept and kept == list(range(len(kept)))  # what was measured before the kill is kept, each second once
    # The killed worker could not delete its cell's streams: RecordCellFailed did (the completed cell's worker
    # deleted its own). Redis's own keyspace holds none of the run's.
    redis_at = endpoints["redis-streams"]
    left = list(redis.Redis(host=redis_at["host"], port=redis_at["port"]).scan_iter(match=f"bb-{results['run_id']}-*"))
    assert left == [], left
    report = next(out.glob("*/report.md")).read_text()
    assert "FAILED: WorkerLost" in report
    assert not [pid for pid, name in descendants(os.getpid()).items() if name.startswith("bb-")]
    observe("kill-worker", fault="kill -9 of the whole EC2-kind worker process (python -m brokerbench.ec2_worker, "
                                 "the parent of the cell's producer and consumer) about 4 s into the first of two "
                                 f"cells (BROKERBENCH_LOCAL_HEARTBEAT_S={WINDOW_S})",
            run_status=results["status"], exit_code=cli.returncode, intervals_kept=len(kept),
            cells=[cell_facts(first), cell_facts(second)],
            observed=[f"the first cell failed with '{first['reason']}'",
                      f"its {len(kept)} measured intervals were kept, each once (0..{len(kept) - 1})",
                      "the second cell completed with every message received",
                      "report.md marks the first cell FAILED: WorkerLost",
                      "results.json reads completed_with_failures and the CLI exited 1",
                      "the killed worker's producer and consumer processes did not outlive it; no bb-* process left",
                      "no stream of the run left in Redis (the failed cell's deleted by RecordCellFailed)"],
            **event_facts(events))
