"""A cell whose consumer is the limit on purpose is marked consumer-bound; the same cell with its consumer free is not.

Redis, raw 1 KB messages on the native send loop, one consumer. At 20,000 msgs/s, while the cell sends, this test
holds its consumer process (`bb-consumer-0`, found by the name it gives itself, among this test's descendants) to a
fortieth of the time: SIGSTOP, then SIGCONT for 1 ms of every 40. The consumer then reads at most a fortieth of what
it can, well under the rate on any host this suite runs on, so the broker's own backlog (XINFO GROUPS lag) grows,
and the consumer, whenever it runs, finds messages waiting: its polls bring many, none waits. The cell is
consumer-bound, with its inputs recorded (the backlog grew, the consumer idle less than limit.IDLE_SHARE), and every
table says so. Unheld, at 4,000 msgs/s (a rate a free consumer keeps on a loaded host), the consumer keeps up: the
backlog does not grow, the consumer waits in most of its polls, and the cell carries no mark.
"""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from brokerbench import limit
from brokerbench.reports import markdown
from brokerbench.reports.model import build_report
from brokerbench.reports.results import build_results
from brokerbench.reports.table import comparison_tables, limit_note
from inline_run import execute_run

HELD_RATE, FREE_RATE = 20_000, 4000
SECONDS = 6  # the backlog rule needs its least number of intervals to call a growth
RUN_S = 1 + SECONDS  # warm-up and schedule: how long the consumer is held from when it appears
STOPPED_S, RUNNING_S = 0.039, 0.001


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def ours(pid: int) -> bool:
    """Whether this test process started `pid` (through the cell's fork server): other runs on the host name their
    consumers alike, and they are not this test's to hold."""
    while pid > 1:
        pid = parent(pid)
        if pid == os.getpid():
            return True
    return False


def consumers() -> list[int]:
    """The pids of this test's cell consumers, by the name they give themselves (processes.name_process)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "bb-consumer-0" and ours(int(entry.name)):
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


# The stop-and-go loop, in a process of its own: run as a thread of this test's process it waited for the GIL (the
# run's own threads hold it) between letting the consumer go and stopping it again, uncounted, and a CI host's
# consumer ran 6% of a core where a fortieth was meant, kept up with the rate and was not consumer-bound. The time the
# consumer ran is read after each SIGSTOP (from the SIGCONT before it): the next stop is as many times longer as it
# really ran, so that it runs a fortieth of the time, as the rule's premise needs, however late this loop wakes.
HOLD = """
import os, signal, sys, time
pid, run_s, stopped_s, running_s = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
start = time.monotonic()
stop_for, let_go = stopped_s, None
try:
    while time.monotonic() - start < run_s:
        os.kill(pid, signal.SIGSTOP)
        if let_go is not None:
            stop_for = max(stopped_s, (time.monotonic() - let_go) * stopped_s / running_s)
        time.sleep(stop_for)
        os.kill(pid, signal.SIGCONT)
        let_go = time.monotonic()
        time.sleep(running_s)
except ProcessLookupError:
    pass
finally:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass
    print(time.monotonic() - start)
"""


class Holder(threading.Thread):
    """Holds the cell's consumer to RUNNING_S of every STOPPED_S + RUNNING_S (at most that share of the time, however
    long it really ran) for RUN_S from when it appears (HOLD, in a process of its own)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.done = threading.Event()
        self.held_s = 0.0

    def run(self) -> None:
        pid = None
        while pid is None and not self.done.is_set():
            pid = next(iter(consumers()), None)
            time.sleep(0.01)
        if pid is None:
            return
        hold = subprocess.run([sys.executable, "-c", HOLD, str(pid), str(RUN_S), str(STOPPED_S), str(RUNNING_S)],
                              capture_output=True, text=True, timeout=RUN_S + 30)
        self.held_s = float(hold.stdout.strip() or 0)


def run(endpoints, store, held: bool, rate: int) -> tuple[list, dict, float]:
    holder = Holder()
    if held:
        holder.start()
    try:
        outcome = execute_run({"brokers": ["redis-streams"], "sizes": [1024], "formats": ["raw"], "rates": [rate],
                               "consumers": 1, "duration_s": SECONDS, "warmup_s": 1, "warmup_until_steady": False,
                               "drain_timeout_s": 30}, endpoints, store)
    finally:
        holder.done.set()
        if held:
            holder.join(5)
    events = store.read(outcome.run_id)
    return events, build_results(events), holder.held_s


@pytest.fixture(scope="module")
def held(endpoints, store):
    return run(endpoints, store, held=True, rate=HELD_RATE)


@pytest.fixture(scope="module")
def free(endpoints, store):
    return run(endpoints, store, held=False, rate=FREE_RATE)


def test_a_consumer_held_to_a_fraction_of_a_core_is_the_limit(held):
    events, results, held_s = held
    [cell] = results["cells"]
    assert held_s >= RUN_S * 0.9  # the consumer was held for the whole schedule
    assert cell["status"] == "completed", cell.get("reason")
    assert cell["received"] == cell["sent"] and cell["lost"] == 0  # all read in the drain, once let go
    found = cell["limit"]["consumers"]
    print(cell["verdict"], found)
    assert found["backlog_grew"] is True and found["idle_share"] < limit.IDLE_SHARE
    assert found["by"] == "consumer" and limit.consumer_bound(cell["limit"])
    assert cell["verdict"] == "unsustainable"  # the grown backlog fails the cell too, as it always did


def test_every_table_marks_it(held):
    events, results, _ = held
    console = Console(record=True, width=250)
    for grid in comparison_tables(results):
        console.print(grid)
    assert limit.CONSUMER_MARK in console.export_text()
    assert limit.CONSUMER_LEGEND in limit_note(results)
    report = build_report(events)
    text = markdown.render(report)
    assert limit.CONSUMER_MARK in text and "Consumer-bound in 1 configuration(s)" in text


def test_a_consumer_that_keeps_up_is_not(free):
    _, results, _ = free
    [cell] = results["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    found = cell["limit"]["consumers"]
    print(cell["verdict"], found)
    assert found["backlog_grew"] is False and found["by"] is None
    assert found["idle_share"] >= limit.IDLE_SHARE  # a consumer that keeps up waits for most of its time
    assert not limit.consumer_bound(cell["limit"])
