"""A rated cell's processes and its local broker at real-time priority (worker/priority.py), read from the kernel while
the cell runs: every thread of the producer and the consumer, and Redis's, under SCHED_FIFO, and Redis back in the
fair scheduler after the cell. The cell stores what it ran at."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.workflow import LocalWorkflow
from brokerbench.reports.results import build_results
from brokerbench.worker import priority
from sched_policies import SCHED_FIFO, SCHED_OTHER, realtime_permitted, thread_policies



def parent_of(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2:].split()[1])


def named(prefix: str) -> list[int]:
    """This test's cell processes called `prefix`...: descendants of this process (other test workers run cells of
    their own at the same time)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if not Path(f"/proc/{entry}/comm").read_text().strip().startswith(prefix):
                    continue
            except OSError:
                continue
            ancestor = parent_of(int(entry))
            for _ in range(5):  # the fork server, and whatever runs the worker
                if ancestor in (None, 0, 1) or ancestor == os.getpid():
                    break
                ancestor = parent_of(ancestor)
            if ancestor == os.getpid():
                pids.append(int(entry))
    return pids


@pytest.mark.skipif(not realtime_permitted(), reason="the host does not permit SCHED_FIFO (no CAP_SYS_NICE)")
def test_a_rated_cell_and_its_local_broker_run_at_real_time_priority(stack, endpoints, tmp_path, monkeypatch):
    monkeypatch.setenv(priority.SWITCH, "1")
    redis_pid = stack.status()["redis"]["pids"][0]
    assert set(thread_policies(redis_pid).values()) == {(SCHED_OTHER, 0)}
    seen: dict[str, set] = {"producer": set(), "consumer": set(), "redis": set()}
    running = threading.Event()
    running.set()

    def watch() -> None:  # the kernel's view, twice a second, while the cell's processes live
        while running.is_set():
            for role in ("producer", "consumer"):
                for pid in named(f"bb-{role}-"):
                    seen[role].update(thread_policies(pid).values())
            if named("bb-producer-"):
                seen["redis"].add(thread_policies(redis_pid).get(redis_pid))
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    request = {"name": "wf-priority", "brokers": ["redis-streams"], "sizes": [1024], "rates": [500],
               "formats": ["raw"], "duration_s": 3, "warmup_s": 0.5, "warmup_until_steady": False,
               "placement": {"worker": "lambda"}, "keep_targets": True}
    run_id = new_run_id()
    try:
        execution = LocalWorkflow(stack, tmp_path / "reports").execute(request, run_id=run_id)
    finally:
        running.clear()
        watcher.join()
    assert execution.status == "SUCCEEDED", (execution.error, execution.cause)
    db = endpoints["dynamodb"]
    events = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"]).read(run_id, interval_histograms=False)
    completed = next(e["data"] for e in events if e["type"] == "CellCompleted")
    # At 500 msgs/s no process of the cell runs 50 ms without blocking: nothing went back
    assert completed["priority"] == {"workers": "realtime", "broker": "realtime"}, completed["priority"]
    # Every thread of the cell's processes (the watcher one level up) and Redis's main thread, as the kernel had them
    for role in ("producer", "consumer"):
        assert seen[role] and seen[role] <= {(SCHED_FIFO, priority.LEVEL), (SCHED_FIFO, priority.LEVEL + 1)}, seen
        assert (SCHED_FIFO, priority.LEVEL) in seen[role]
    assert seen["redis"] == {(SCHED_FIFO, priority.LEVEL)}, seen
    # and Redis as it was once the cell ended
    assert set(thread_policies(redis_pid).values()) == {(SCHED_OTHER, 0)}
    # A publish (XADD to its reply) takes no longer than the same messages' trip to the consumer: with the broker at
    # the clients' level, a client that wakes does not take the core from Redis between the two writes
    # (test_latency_truth's rule, with its margin for a wake)
    (cell,) = build_results(events)["cells"]
    assert cell["publish_latency_us"]["p50"] <= cell["end_to_end_latency_us"]["p50"] + 200, cell
