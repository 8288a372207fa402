"""The host under a real cell (brokerbench.host): a cell measured beside two busy loops, started by the test for
the cell's run and killed after it, reads the host's CPU pressure in each interval and over the cell, is marked busy,
and its report says so and claims nothing on it. The machine is shared with other tests, so only the busy side is
asserted: no cell is required NOT to be busy here (an idle cell's figures are checked in test_cell_resources)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from brokerbench import host
from brokerbench.reports.model import build_report
from inline_run import execute_run

pytestmark = pytest.mark.skipif(not os.path.exists(host.CPU_PRESSURE), reason="this kernel has no PSI")
# One busy loop more than the host has cores: always a task waiting for a CPU, whatever the cell's own processes
# do (with as many loops as cores, a cell at 1,000 msgs/s that mostly sleeps read 47% CPU pressure in CI)
HOGS = (os.cpu_count() or 1) + 1


def test_a_cell_beside_busy_loops_is_marked_busy(endpoints, store):
    spec = {"name": "it-host-busy", "brokers": ["redis-streams"], "sizes": [1024], "rates": [1000],
            "formats": ["raw"], "duration_s": 3, "warmup_s": 0.5, "warmup_until_steady": False}
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(HOGS)]
    began = time.monotonic()
    try:
        outcome = execute_run(spec, {"redis-streams": endpoints["redis-streams"]}, store)
    finally:
        for hog in hogs:
            hog.kill()
        # The loops' own CPU time, from the kernel's accounting of the reaped children (not from /proc/stat or PSI)
        spent = 0.0
        for hog in hogs:
            _, _, usage = os.wait4(hog.pid, 0)
            hog.returncode = -9
            spent += usage.ru_utime + usage.ru_stime
        lived = time.monotonic() - began
    assert outcome.status == "completed", outcome
    events = store.read(outcome.run_id)
    intervals = [e["data"] for e in events if e["type"] == "IntervalMeasured"]
    completed = next(e["data"] for e in events if e["type"] == "CellCompleted")
    assert intervals and all(i["host"]["cpu_pressure_pct"] is not None for i in intervals)
    figures = completed["host"]
    assert figures["busy"] is True, figures
    assert any(r.startswith("CPU pressure") for r in figures["reasons"]), figures
    assert figures["cpu_pressure_pct"] > host.BUSY_CPU_PRESSURE_PCT and 0.5 <= figures["span_s"] <= 10
    # Outside the cell the loops ran: at least half the share of all CPUs they had over their life shows as the
    # host's CPU used outside the cell (the redis server, not named to this cell, is counted there too).
    share = 100 * spent / lived / os.cpu_count()
    assert figures["others_cpu_pct"] >= 0.5 * share, (figures, share)
    report = build_report(events)
    (config,) = report["groups"][0]["cells"]
    assert config["host"]["busy_repeats"] == [0] and report["configurations_host_busy"] == [config["key"]]
    assert "host busy" in report["host_note"]
