"""Real-time priority for a rated cell's processes and a local broker (worker/priority.py), against the kernel itself:
each policy is read back from /proc/<pid>/task/<tid>/stat (field 41), not from the module's own calls."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from brokerbench.worker import priority
from sched_policies import SCHED_FIFO, SCHED_OTHER, realtime_permitted, thread_policies

FUNCTIONS = str(Path(priority.__file__).resolve().parents[2])
needs_permission = pytest.mark.skipif(not realtime_permitted(),
                                      reason="the host does not permit SCHED_FIFO (no CAP_SYS_NICE)")


def test_wanted_for_rated_cells_unless_turned_off():
    for on in ({}, {priority.SWITCH: "1"}, {priority.SWITCH: ""}):
        assert priority.wanted({"rate": 1000}, on) is None
        assert priority.wanted({"rate": "max"}, on) == "a max-rate cell"
    for off in ("0", "false", "No", "off "):
        assert priority.wanted({"rate": 1000}, {priority.SWITCH: off}) == f"{priority.SWITCH}={off}"


def test_the_guard_puts_a_cell_back_when_it_or_the_host_is_busy():
    quiet = {"cpu_pct": 30.0, "cpus": 2}
    assert priority.guard([], 60.0, quiet, 2) is None  # a quick-suite cell: 30% of 2 cores, the host 30% busy
    assert priority.guard([], None, None, 2) is None  # nothing read yet: no reason
    # a process that went back on its own takes the rest with it
    assert priority.guard(["consumer-0"], 10.0, quiet, 2) == "consumer-0 went back to normal priority"
    # the cell's processes with the broker beyond their share: 160% of one core is 80% of 2 cores
    assert priority.guard([], 160.0, quiet, 2) == (
        "the cell's processes and the broker used 80% of the host's CPU over an interval (more than 75%)")
    assert priority.guard([], 140.0, quiet, 2) is None  # 70%: a Kafka cell's JIT on a fresh broker reached 58%
    assert priority.guard([], 160.0, quiet, 4) is None  # 40% of 4 cores
    # the host busy with anyone's work: another run's real-time cell, a build
    assert priority.guard([], 40.0, {"cpu_pct": 95.0, "cpus": 2}, 2) == (
        "the host's CPUs were 95% busy over an interval (more than 90%)")


def test_a_grant_told_not_to_changes_nothing():
    before = thread_policies(os.getpid())
    grant = priority.Grant("a max-rate cell")
    assert grant.record() == {"policy": "normal", "why_normal": "a max-rate cell"}
    assert thread_policies(os.getpid()) == before


# In a child's script, after its imports: a thread started then, sleeping 30 s; its id
SLEEPING_THREAD = textwrap.dedent("""
    def sleeping_thread():
        tids = []
        def sleeper():
            tids.append(threading.get_native_id())
            time.sleep(30)
        threading.Thread(target=sleeper, daemon=True).start()
        while not tids:
            time.sleep(0.001)
        return tids[0]
""")

CHILD = textwrap.dedent("""
    import json, os, sys, threading, time
    sys.path.insert(0, {functions!r})
    from brokerbench.worker import priority
    {sleeping_thread}
    grant = priority.Grant(None)
    thread = sleeping_thread()
    for _ in range(200):  # a rated loop: sleeps between its sends
        time.sleep(0.001)
    print(json.dumps({{"phase": "light", "record": grant.record(), "thread": thread}}), flush=True)
    sys.stdin.readline()
    busy_from = time.monotonic_ns()
    while time.monotonic_ns() - busy_from < 300_000_000:  # the load: no blocking call for 0.3 s
        pass
    time.sleep(0.05)
    print(json.dumps({{"phase": "busy", "record": grant.record(), "busy_from": busy_from}}), flush=True)
    sys.stdin.readline()
""")


@needs_permission
def test_a_grant_holds_while_the_process_blocks_and_drops_once_it_runs_without_blocking():
    import json

    script = CHILD.format(functions=FUNCTIONS, sleeping_thread=SLEEPING_THREAD)
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        light = json.loads(child.stdout.readline())
        assert light["record"] == {"policy": "realtime"}
        threads = thread_policies(child.pid)
        # every thread: the main one, the watcher (one level up) and one started after the grant, which inherited it
        assert threads[child.pid] == (SCHED_FIFO, priority.LEVEL)
        assert threads[light["thread"]] == (SCHED_FIFO, priority.LEVEL)
        assert sorted(set(threads.values())) == [(SCHED_FIFO, priority.LEVEL), (SCHED_FIFO, priority.LEVEL + 1)]
        child.stdin.write("\n")
        child.stdin.flush()
        busy = json.loads(child.stdout.readline())
        dropped = busy["record"]["dropped_ns"] - busy["busy_from"]
        # the kernel's signal comes once a thread has run RUN_LIMIT_US without blocking, not before
        assert busy["record"]["policy"] == "realtime"
        assert priority.RUN_LIMIT_US * 1000 <= dropped < 300_000_000
        assert set(thread_policies(child.pid).values()) == {(SCHED_OTHER, 0)}  # every thread, the sleeper too
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=10) == 0  # SIGXCPU never ended it
    finally:
        child.kill()
        child.wait()


SERVED = textwrap.dedent("""
    import json, multiprocessing, sys, threading, time
    sys.path.insert(0, {functions!r})
    from brokerbench.worker import processes
    {sleeping_thread}
    def body(grant):
        thread = sleeping_thread()
        print(json.dumps({{"record": grant.record(), "thread": thread}}), flush=True)
        sys.stdin.readline()
    ours, theirs = multiprocessing.Pipe()
    processes.serve("producer", 3, ours, body, {why!r})
""")


def served(why: str | None) -> tuple[subprocess.Popen, dict]:
    script = SERVED.format(functions=FUNCTIONS, why=why, sleeping_thread=SLEEPING_THREAD)
    child = subprocess.Popen([sys.executable, "-c", script],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return child, __import__("json").loads(child.stdout.readline())


def thread_names(pid: int) -> set[str]:
    return {Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip() for tid in os.listdir(f"/proc/{pid}/task")}


@needs_permission
def test_a_served_process_has_its_priority_before_its_name_on_every_thread():
    """processes.serve makes the grant first and names the process after: every thread bears the cell's name, the
    grant's watcher (started before the name) among them, and every thread is at the cell's priority, one started by
    the body too. What a person's top or a test finds by that name runs at the cell's priority."""
    child, report = served(None)
    try:
        assert report["record"] == {"policy": "realtime"}
        threads = thread_policies(child.pid)
        assert len(threads) == 3, threads  # the main thread, the grant's watcher and the body's sleeper
        assert thread_names(child.pid) == {"bb-producer-3"}
        assert threads[child.pid] == threads[report["thread"]] == (SCHED_FIFO, priority.LEVEL)
        assert sorted(set(threads.values())) == [(SCHED_FIFO, priority.LEVEL), (SCHED_FIFO, priority.LEVEL + 1)]
    finally:
        child.kill()
        child.wait()
    child, report = served("a max-rate cell")  # at normal priority: named all the same, nothing raised
    try:
        assert report["record"] == {"policy": "normal", "why_normal": "a max-rate cell"}
        assert thread_names(child.pid) == {"bb-producer-3"}
        assert set(thread_policies(child.pid).values()) == {(SCHED_OTHER, 0)}
    finally:
        child.kill()
        child.wait()


BROKER = textwrap.dedent("""
    import os, sys, threading, time
    for _ in range(3):
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    print("up", flush=True)
    sys.stdin.readline()
    # a child started while the grant holds (a Redis rewrite): it must begin in the fair scheduler
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    print(pid, flush=True)
    sys.stdin.readline()
    os.kill(pid, 9)
""")


@pytest.fixture()
def broker():
    process = subprocess.Popen([sys.executable, "-c", BROKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "up"
    yield process
    process.kill()
    process.wait()


@needs_permission
def test_a_supervisor_puts_back_every_thread_of_another_process(broker):
    grant = priority.BrokerGrant([broker.pid], None)  # every thread raised, as a cell's process raises its own
    try:
        assert set(thread_policies(broker.pid).values()) == {(SCHED_FIFO, priority.LEVEL)}
        assert priority.drop_process(broker.pid) is True
        assert set(thread_policies(broker.pid).values()) == {(SCHED_OTHER, 0)}
        assert priority.drop_process(broker.pid) is False  # nothing left to put back
    finally:
        grant.restore()


@needs_permission
def test_a_broker_grant_raises_every_thread_and_puts_them_back(broker):
    before = thread_policies(broker.pid)
    assert len(before) == 4
    grant = priority.BrokerGrant([broker.pid], None)
    assert grant.policy == "realtime" and grant.held()
    assert set(thread_policies(broker.pid).values()) == {(SCHED_FIFO, priority.LEVEL)}
    broker.stdin.write("\n")
    broker.stdin.flush()
    forked = int(broker.stdout.readline())
    assert thread_policies(forked)[forked][0] == SCHED_OTHER  # SCHED_RESET_ON_FORK
    grant.restore()
    assert thread_policies(broker.pid) == before
    grant.restore()  # once
    assert thread_policies(broker.pid) == before
    broker.stdin.write("\n")
    broker.stdin.flush()


@needs_permission
def test_a_broker_grant_dropped_says_when_and_why_and_one_put_back_by_another_is_not_held(broker):
    grant = priority.BrokerGrant([broker.pid], None)
    os.sched_setscheduler(broker.pid, os.SCHED_OTHER, os.sched_param(0))  # another cell's restore
    assert not grant.held()
    before = time.monotonic_ns()
    grant.drop("the broker used 180% of a core over an interval")
    assert grant.dropped[0] >= before and grant.dropped[1] == "the broker used 180% of a core over an interval"
    assert set(thread_policies(broker.pid).values()) == {(SCHED_OTHER, 0)}
    grant.drop("again")
    assert grant.dropped[1] != "again"


@needs_permission
def test_a_broker_found_at_another_real_time_level_gets_it_back(broker):
    os.sched_setscheduler(broker.pid, os.SCHED_FIFO, os.sched_param(20))  # someone's choice, kept
    grant = priority.BrokerGrant([broker.pid], None)
    grant.restore()
    assert thread_policies(broker.pid)[broker.pid] == (SCHED_FIFO, 20)


def test_a_broker_grant_without_a_local_broker_or_told_not_to_changes_nothing(broker):
    before = thread_policies(broker.pid)
    assert priority.BrokerGrant([], None).why_normal == "no local broker"
    told = priority.BrokerGrant([broker.pid], "a max-rate cell")
    assert (told.policy, told.why_normal) == ("normal", "a max-rate cell")
    told.restore()
    assert thread_policies(broker.pid) == before


def test_the_cells_processes_take_it_only_beside_a_broker_that_has_it_or_one_elsewhere(broker):
    remote = {"bootstrap_servers": "b-1.msk.example.com:9098,b-2.msk.example.com:9098"}
    local_unknown = {"host": "127.0.0.1", "port": 6379}
    assert priority.on_this_host({"nodes": [{"host": "localhost"}]}) and priority.on_this_host(local_unknown)
    assert not priority.on_this_host(remote)
    on = {priority.SWITCH: "1"}
    grant, why = priority.decide({"rate": 1000}, remote, on)
    assert why is None and grant.why_normal == "no local broker"  # the broker is on another host: nothing to share
    grant, why = priority.decide({"rate": 1000}, local_unknown, on)
    assert why == priority.SHARED_UNKNOWN == grant.why_normal  # a client that would preempt its broker: not raised
    grant, why = priority.decide({"rate": "max"}, {**local_unknown, "pids": [broker.pid]}, on)
    assert why == "a max-rate cell" and grant.policy == "normal"
    if realtime_permitted():
        grant, why = priority.decide({"rate": 1000}, {**local_unknown, "pids": [broker.pid]}, on)
        try:
            assert why is None and grant.policy == "realtime"
            assert set(thread_policies(broker.pid).values()) == {(SCHED_FIFO, priority.LEVEL)}
        finally:
            grant.restore()
