"""CPU and memory sampling from /proc, checked against work whose cost is known."""

import os
import subprocess
import sys
import time

from brokerbench.worker.resources import TICKS_PER_S, CpuSpan, ResourceSampler, cpu_ticks, rss_bytes, summarize


def test_a_busy_process_shows_about_one_core_and_an_idle_one_almost_none():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # The scheduler's own run time (/proc/PID/schedstat, ns), read around the sampler's window: a second
        # counter of the kernel's, beside the tick counts the sampler reads, that holds on a loaded host too.
        ran, at = _run_ns(busy.pid), time.monotonic_ns()
        sampler = ResourceSampler({"busy": [busy.pid], "idle": [idle.pid], "none": []})
        time.sleep(1.0)
        used = sampler.sample()
        kernel_pct = 100 * (_run_ns(busy.pid) - ran) / (time.monotonic_ns() - at)
        assert set(used) == {"busy", "idle"}  # a group with no processes is not sampled
        assert used["busy"]["cpu_pct"] <= 110  # at most one core
        assert abs(used["busy"]["cpu_pct"] - kernel_pct) <= 10 + 0.1 * kernel_pct, (used["busy"], kernel_pct)
        assert used["idle"]["cpu_pct"] <= 5
        with open(f"/proc/{idle.pid}/status") as status:  # the kernel's own figure, read another way
            vm_rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        assert abs(used["idle"]["rss_mb"] - vm_rss_kb / 1024) <= 1
    finally:
        busy.kill()
        idle.kill()
        busy.wait()
        idle.wait()
    assert cpu_ticks(busy.pid) is None and rss_bytes(busy.pid) is None  # gone: counts as nothing


def _run_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as schedstat:
        return int(schedstat.read().split()[0])


def test_own_process_is_readable():
    assert cpu_ticks(os.getpid()) >= 0 and rss_bytes(os.getpid()) > 10 * 1024 * 1024


def test_summary_over_samples():
    samples = [{"broker": {"cpu_pct": 10.0, "rss_mb": 300.0}}, {"broker": {"cpu_pct": 30.0, "rss_mb": 320.0},
                                                                 "workers": {"cpu_pct": 50.0, "rss_mb": 80.0}}]
    assert summarize(samples) == {"broker": {"cpu_pct_mean": 20.0, "cpu_pct_max": 30.0, "rss_mb_max": 320.0, "samples": 2},
                                  "workers": {"cpu_pct_mean": 50.0, "cpu_pct_max": 50.0, "rss_mb_max": 80.0, "samples": 1}}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_cpu_over_a_span_ends_at_the_last_reading_a_process_was_still_there():
    """A producer's process ends soon after its schedule: its ticks go with it, so the span's figure is the ticks
    of its last whole reading over the time to that reading, and none when the readings cover too little."""
    clock = Clock()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        span = CpuSpan({"producers": [spinner.pid], "none": []}, clock=clock)
        first = cpu_ticks(spinner.pid)
        time.sleep(0.5)
        clock.now = 2.0  # a stand-in clock: the figure is the ticks over the clock's seconds, by hand
        span.update()
        ticks = cpu_ticks(spinner.pid) - first
    finally:
        spinner.kill()
        spinner.wait()
    clock.now = 2.5
    span.update()  # gone: this reading leaves the last one standing
    assert set(span.cpu_pct(2.5)) == {"producers"}
    assert abs(span.cpu_pct(2.5)["producers"] - ticks / TICKS_PER_S / 2.0 * 100) <= 100 / TICKS_PER_S / 2.0 * 2
    assert span.cpu_pct(2.6, min_cover=0.8)["producers"] is None  # 2.0 s read of 2.6: less than 80%
