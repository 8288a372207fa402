"""A rated cell's processes and its local broker at real-time priority (worker/priority.py), read from the kernel while
the cell runs: every thread of the producer and the consumer, and Redis's, under SCHED_FIFO, and Redis back in the
fair scheduler after the cell. The cell stores what it ran at. And the supervisor's guard: a cell beyond its share of
the host goes back to the fair scheduler whole, its processes and Redis together, and says when and why."""

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


needs_permission = pytest.mark.skipif(not realtime_permitted(),
                                      reason="the host does not permit SCHED_FIFO (no CAP_SYS_NICE)")


def watched_cell(stack, tmp_path, redis_pid: int) -> tuple[str, dict[str, list]]:
    """A Redis cell through the local workflow, with the kernel's view of its processes' and Redis's policies twice a
    second while they live (each sample with its time): the run id and those samples."""
    seen: dict[str, list] = {"producer": [], "consumer": [], "redis": []}
    running = threading.Event()
    running.set()

    def watch() -> None:
        while running.is_set():
            now = time.monotonic()
            for role in ("producer", "consumer"):
                for pid in named(f"bb-{role}-"):
                    seen[role] += [(now, p) for p in thread_policies(pid).values()]
            if named("bb-producer-"):
                seen["redis"].append((now, thread_policies(redis_pid).get(redis_pid)))
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
    return run_id, seen


def stored(endpoints, run_id: str) -> list[dict]:
    db = endpoints["dynamodb"]
    return DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"]).read(run_id, interval_histograms=False)


@needs_permission
def test_a_rated_cell_and_its_local_broker_run_at_real_time_priority(stack, endpoints, tmp_path, monkeypatch):
    monkeypatch.setenv(priority.SWITCH, "1")
    # The host's other test workers may keep its CPUs busy; that guard is the next test's (and test_priority's)
    monkeypatch.setattr(priority, "HOST_BUSY_PCT", 100.0)
    redis_pid = stack.status()["redis"]["pids"][0]
    assert set(thread_policies(redis_pid).values()) == {(SCHED_OTHER, 0)}
    run_id, samples = watched_cell(stack, tmp_path, redis_pid)
    seen = {role: {policy for _, policy in found} for role, found in samples.items()}
    events = stored(endpoints, run_id)
    completed = next(e["data"] for e in events if e["type"] == "CellCompleted")
    # At 500 msgs/s no process of the cell runs 50 ms without blocking, nor takes half the host: nothing went back
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


@needs_permission
def test_a_cell_beyond_its_share_of_the_host_goes_back_whole(stack, endpoints, tmp_path, monkeypatch):
    """The supervisor's guard, with the cell's share of the host set to nothing: at its first interval write the
    cell's processes and Redis all go back to the fair scheduler, every thread, while the cell goes on."""
    monkeypatch.setenv(priority.SWITCH, "1")
    monkeypatch.setattr(priority, "CELL_SHARE_PCT", 0.0)
    monkeypatch.setattr(priority, "HOST_BUSY_PCT", 100.0)
    redis_pid = stack.status()["redis"]["pids"][0]
    run_id, samples = watched_cell(stack, tmp_path, redis_pid)
    events = stored(endpoints, run_id)
    completed = next(e["data"] for e in events if e["type"] == "CellCompleted")
    found = completed["priority"]
    assert (found["workers"], found["broker"]) == ("realtime", "realtime"), found  # what they were granted
    drops = {d["process"]: d for d in found["dropped"]}
    assert set(drops) == {"producer-0", "consumer-0", "broker"}, found
    assert len({d["why"] for d in drops.values()}) == 1, found  # together, for one reason
    # the processes at one moment, the broker once they were back (its grant notes its own)
    assert drops["producer-0"]["at_s"] == drops["consumer-0"]["at_s"] <= drops["broker"]["at_s"], found
    why, at_s = drops["broker"]["why"], drops["broker"]["at_s"]
    assert why.startswith("the cell's processes and the broker used ") and "more than 0%" in why, why
    assert at_s is not None and at_s < 3, found  # at an interval write within the 3 s cell (its first, unless late)
    # the share it names is one the cell stored: an interval's workers and broker CPU, over the host's CPUs
    shares = {round(((e["data"]["resources"]["workers"]["cpu_pct"] + e["data"]["resources"]["broker"]["cpu_pct"])
                     / e["data"]["host"]["cpus"])) for e in events if e["type"] == "IntervalMeasured"}
    assert int(why.split("used ")[1].split("%")[0]) in shares, (why, shares)
    # The kernel's view: real-time first, and every thread of the producer, the consumer and Redis back in the fair
    # scheduler at the watcher's last look while the cell's processes lived
    for role, found in samples.items():
        last = max(t for t, _ in found)
        assert {policy for t, policy in found if t == last} == {(SCHED_OTHER, 0)}, (role, found)
        assert (SCHED_FIFO, priority.LEVEL) in {policy for _, policy in found}, (role, found)
    assert set(thread_policies(redis_pid).values()) == {(SCHED_OTHER, 0)}
    # and every message was still delivered once: the cell went on
    (cell,) = build_results(events)["cells"]
    assert cell["lost"] == cell["duplicated"] == 0 and cell["sent"] == cell["received"] > 0, cell
