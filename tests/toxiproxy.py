"""Toxiproxy for the tests: a TCP proxy between a client and a real server that adds a known latency, the
independent truth latency figures are checked against (as a Kafka quota is for throughput).

`make test` builds it (brokerbench.local.install.install_toxiproxy). The `toxiproxy` fixture (conftest.py)
starts one server per test module on a free loopback port and stops it at the module's end; a test makes
proxies to its upstreams and sets, changes or removes their latency while traffic flows (a test that ramps the
latency during a cell calls `latency` again with the new figure).
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

from brokerbench.local.install import toxiproxy_path
from brokerbench.local.stack import free_port
from brokerbench.toxiproxy import HOST, ToxiproxyClient, ToxiproxyError
from inline_run import RunHooks

__all__ = ["ClimbingDelay", "Toxiproxy", "ToxiproxyError"]


class Toxiproxy(ToxiproxyClient):
    """One Toxiproxy server (its API on a free loopback port) and the proxies made through it (the API's calls:
    brokerbench.toxiproxy)."""

    def __init__(self, log_dir: Path, binary: Path | None = None) -> None:
        binary = binary or toxiproxy_path()
        if not binary.is_file():
            raise ToxiproxyError(f"Toxiproxy is not installed at {binary}: run "
                                 "`python -m brokerbench.local.install --with-toxiproxy` (make test does)")
        super().__init__(free_port())
        self.log = open(log_dir / "toxiproxy.log", "wb")
        self.process = subprocess.Popen([str(binary), "-host", HOST, "-port", str(self.port)],
                                        stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ToxiproxyError(f"Toxiproxy exited with {self.process.returncode}")
            try:
                self.version()
                return
            except ToxiproxyError:
                time.sleep(0.05)
        self.stop()
        raise ToxiproxyError(f"Toxiproxy's API did not answer on {HOST}:{self.port} within {timeout_s} s")

    def proxy(self, name: str, upstream_port: int, listen_port: int | None = None) -> int:
        """A proxy from 127.0.0.1:<listen_port> (a free one unless given) to 127.0.0.1:<upstream_port>; returns
        the port clients connect to."""
        return super().proxy(name, upstream_port, listen_port or free_port())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


class ClimbingDelay(RunHooks):
    """Run hooks that climb a proxy's upstream delay during a cell: from the moment the cell reports `phase`
    ("warm-up" or "measuring"), the delay starts at `first_ms` and is multiplied by `factor` every `step_s`, up to
    `max_ms`, which it then holds. `set_ms` lists the delays set, in order."""

    def __init__(self, toxiproxy: Toxiproxy, proxy: str, phase: str, first_ms: float, factor: float,
                 step_s: float, max_ms: float) -> None:
        self.toxiproxy, self.proxy, self.phase = toxiproxy, proxy, phase
        self.first_ms, self.factor, self.step_s, self.max_ms = first_ms, factor, step_s, max_ms
        self.started, self.done = threading.Event(), threading.Event()
        self.set_ms: list[float] = []
        self.set_at_ns: list[int] = []  # when each was set (time.monotonic_ns, the cell's clock)
        self.thread = threading.Thread(target=self._climb, daemon=True)
        self.thread.start()

    def cell_progress(self, progress) -> None:
        if progress.phase == self.phase:
            self.started.set()

    def _climb(self) -> None:
        if not self.started.wait(120):
            return
        began, delay = time.monotonic(), self.first_ms
        while not self.done.is_set() and delay <= self.max_ms:
            self.toxiproxy.latency(self.proxy, delay, "upstream")
            self.set_at_ns.append(time.monotonic_ns())
            self.set_ms.append(delay)
            delay *= self.factor
            self.done.wait(max(0.0, began + self.step_s * len(self.set_ms) - time.monotonic()))

    def stop(self) -> None:
        """Ends the climb and takes the delay away."""
        self.done.set()
        self.started.set()
        self.thread.join(30)
        self.toxiproxy.latency(self.proxy, 0, "upstream")
