"""Whether this machine gave the processes of a cell a CPU when they needed one, measured while the cell ran: the
rule by which a timing-bound check is judged or skipped (test_latency_truth), and what a proxy really added.

A latency figure checked against a timed truth (Toxiproxy's delay) holds to a bound only where the proxy, the
broker and the clients ran when their timers fired. The load average says that poorly: a one-minute mean read at
one moment. A busy loop beside the latency-truth module read 2.5 to 2.8 per core by it, yet its Kafka cells at
1,000 msgs/s read a publish p50 of 34 ms direct and 84 ms through the proxy (5 and 10 ms on an idle machine),
and on a CI host at 2.1 per core a Kafka end-to-end p50 grew 12.3 ms for a 5 ms delay. What tells those cells
apart is the kernel's CPU pressure in the cell's own seconds (/proc/pressure/cpu, "some": the share of time in
which some runnable task waited for a CPU): 78 to 96% in those cells, 56 to 61% in cells already a few ms off,
at most 43% in any cell of an idle run, and up to 52% in cells whose figures were still right; BUSY_PRESSURE is
set between. The module runs alone (tests/conftest.py, QUIET_MODULES), where its cells read 6 to 43%. Measured idle, beside another test module and beside a busy loop (docs/testing.md).

A timer's lateness was measured too and did not tell them apart: a process sleeping 1 ms at a time is woken
promptly by the scheduler however busy the machine (a sleeper is owed CPU time), so it stayed under 1 ms at its
90th percentile while the cells above stalled.

`MachineWatch` samples the pressure (and the load average, the rule where the kernel has no pressure file) once
a second; with `ping_ports` it also times a Redis PING straight to Redis and through its Toxiproxy proxy, so the
delay the proxy really added (its 5 ms and its own copying) is known for the same seconds. `during(start, end)`
sums up the seconds of one cell.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from brokerbench import host
from inline_run import RunHooks, RunOutcome, execute_run

# A cell in whose seconds some task waited for a CPU more than half the time: not steady (the product's rule,
# brokerbench.host, took its threshold from these figures)
BUSY_PRESSURE = host.BUSY_CPU_PRESSURE_PCT / 100
BUSY_LOAD = 3.0  # without /proc/pressure: a one-minute load average per core above this in the cell's seconds
SAMPLE_S = 1.0

# The proxy probe: a Redis PING every 20 ms, straight to Redis and through its proxy in turn; one line per second,
# "<unix time> <p50 µs direct> <p50 µs proxied>" of the round trips.
PING_PROBE = """
import socket, sys, time
def connect(port):
    s = socket.create_connection(("127.0.0.1", port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); return s
links = [connect(int(p)) for p in sys.argv[1:3]]
while True:
    trips, until = ([], []), time.monotonic() + 1.0
    while time.monotonic() < until:
        for n, link in enumerate(links):
            t = time.perf_counter_ns(); link.sendall(b"PING\\r\\n"); link.recv(64)
            trips[n].append((time.perf_counter_ns() - t) // 1000)
        time.sleep(0.02)
    print(time.time(), *(sorted(t)[len(t) // 2] for t in trips), flush=True)
"""


@dataclass(frozen=True)
class Conditions:
    seconds: int
    pressure: float | None  # mean share of the window's seconds some task waited for a CPU; None: no PSI here
    load: float  # highest one-minute load average per core read in the window
    proxy_added_ms: float | None = None  # median over the window's seconds of (proxied - direct) PING p50s

    @property
    def steady(self) -> bool:
        if self.pressure is not None:
            return self.pressure <= BUSY_PRESSURE
        return self.load <= BUSY_LOAD

    def __str__(self) -> str:
        pressure = "no /proc/pressure" if self.pressure is None else f"CPU pressure {self.pressure:.0%}"
        proxy = "" if self.proxy_added_ms is None else f", the proxy added {self.proxy_added_ms:.2f} ms to a PING"
        return f"over {self.seconds} s: {pressure}, load average up to {self.load:.1f} per core{proxy}"


class MachineWatch:
    """Samples the machine each second from start() to stop(); a context manager."""

    def __init__(self, ping_ports: tuple[int, int] | None = None) -> None:
        """`ping_ports`: a Redis's port and its proxy's, to time what the proxy adds (PING_PROBE)."""
        self.samples: list[tuple[float, float | None, float]] = []  # (unix time, pressure, load per core)
        self.pings: list[tuple[float, int, int]] = []  # (unix time, direct p50 µs, proxied p50 µs)
        self.ping_ports = ping_ports
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._probe: subprocess.Popen | None = None

    def __enter__(self) -> MachineWatch:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._threads.append(threading.Thread(target=self._sample, daemon=True))
        if self.ping_ports:
            self._probe = subprocess.Popen([sys.executable, "-c", PING_PROBE, *map(str, self.ping_ports)],
                                           stdout=subprocess.PIPE, text=True)
            self._threads.append(threading.Thread(target=self._read_pings, daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._probe is not None:
            self._probe.terminate()
            self._probe.wait(10)
        for thread in self._threads:
            thread.join(10)

    def _sample(self) -> None:
        stalled, at = _stalled_us(), time.monotonic()
        while not self._stop.wait(SAMPLE_S):
            now, now_at = _stalled_us(), time.monotonic()
            pressure = None if now is None or stalled is None else min(1.0, (now - stalled) / 1e6 / (now_at - at))
            stalled, at = now, now_at
            self.samples.append((time.time(), pressure, os.getloadavg()[0] / (os.cpu_count() or 1)))

    def _read_pings(self) -> None:
        for line in self._probe.stdout:
            at, direct, proxied = line.split()
            self.pings.append((float(at), int(direct), int(proxied)))

    def during(self, start: float, end: float) -> Conditions:
        """The seconds that ended within (start, end + SAMPLE_S] (unix times): the window's conditions."""
        window = [s for s in self.samples if start < s[0] <= end + SAMPLE_S]
        pressures = [p for _, p, _ in window if p is not None]
        added = sorted(proxied - direct for at, direct, proxied in self.pings if start < at <= end + SAMPLE_S)
        return Conditions(len(window), sum(pressures) / len(pressures) if pressures else None,
                          max((load for *_, load in window), default=os.getloadavg()[0] / (os.cpu_count() or 1)),
                          added[len(added) // 2] / 1000 if added else None)


class CellWindows(RunHooks):
    """When each cell measured (unix times): from its first "measuring" report (or its first report of any phase)
    to its end."""

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}
        self.measuring: dict[str, float] = {}
        self.ended: dict[str, float] = {}

    def cell_progress(self, progress) -> None:
        self.seen.setdefault(progress.cell_id, time.time())
        if progress.phase == "measuring":
            self.measuring.setdefault(progress.cell_id, time.time())

    def window(self, cell_id: str) -> tuple[float, float]:
        return self.measuring.get(cell_id, self.seen[cell_id]), self.ended[cell_id]

    def cell_finished(self, outcome) -> None:
        self.ended[outcome.cell_id] = time.time()


def run_watched(spec: dict, endpoints: dict, store, ping_ports: tuple[int, int] | None = None
                ) -> tuple[RunOutcome, dict[str, Conditions]]:
    """execute_run(spec) with the machine watched: its outcome, and each cell's Conditions by cell_id (the seconds
    from its measured start to its end)."""
    windows = CellWindows()
    with MachineWatch(ping_ports=ping_ports) as watch:
        outcome = execute_run(spec, endpoints, store, hooks=windows)
    return outcome, {c.cell_id: watch.during(*windows.window(c.cell_id)) for c in outcome.cells}


def _stalled_us() -> int | None:
    """The kernel's running total of µs in which some runnable task waited for a CPU; None where it has none."""
    return host.read().cpu_stalled_us
