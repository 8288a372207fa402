"""A latency that climbs inside a short cell is never judged sustainable.

The climb is real and known: Toxiproxy sits between the clients and a real Redis, and from the moment the cell
starts measuring its upstream delay doubles every second (1, 2, 4, 8, 16, 32, 64 ms). The send rate (200 msgs/s,
batch: up to 100 XADDs in flight) is far below what the proxied path carries, so the rate holds while each
second's end-to-end p99 is about twice the one before. The cell measures 6 s (below the quick suite's 10 s) and
the verdict's latency check must not pass: it finds the rise, or, when a noisy second leaves the test short of its
level, calls the rise unclear, which makes the verdict inconclusive.
"""

from __future__ import annotations

import threading
import time

from brokerbench.runner import RunHooks, execute_run
from brokerbench.verdict import interval_inputs, sustainability

RATE = 200
DURATION_S = 6


class _Ramp(RunHooks):
    """Doubles the proxy's upstream delay every second once the cell reports that it measures."""

    def __init__(self, toxiproxy, proxy: str) -> None:
        self.toxiproxy, self.proxy = toxiproxy, proxy
        self.measuring = threading.Event()
        self.done = threading.Event()
        self.set_ms: list[int] = []
        self.thread = threading.Thread(target=self._climb, daemon=True)
        self.thread.start()

    def cell_progress(self, progress) -> None:
        if progress.phase == "measuring":
            self.measuring.set()

    def _climb(self) -> None:
        if not self.measuring.wait(120):
            return
        started = time.monotonic()
        delay = 1
        while not self.done.is_set() and delay <= 2 ** (DURATION_S + 1):
            self.toxiproxy.latency(self.proxy, delay, "upstream")
            self.set_ms.append(delay)
            delay *= 2
            self.done.wait(max(0.0, started + len(self.set_ms) - time.monotonic()))

    def stop(self) -> None:
        self.done.set()
        self.measuring.set()
        self.thread.join(30)
        self.toxiproxy.latency(self.proxy, 0, "upstream")


def test_a_latency_that_doubles_every_second_is_never_sustainable(endpoints, store, toxiproxy):
    redis = endpoints["redis-streams"]
    port = toxiproxy.proxy("climbing-redis", int(redis["port"]))
    toxiproxy.latency("climbing-redis", 1, "upstream")
    target = {"driver": "redis", "host": "127.0.0.1", "port": port}
    spec = {"name": "it-climbing-latency", "brokers": ["slow-redis"], "sizes": [1024], "formats": ["raw"],
            "rates": [RATE], "modes": ["batch"], "duration_s": DURATION_S, "warmup_s": 1,
            "warmup_until_steady": False, "drain_timeout_s": 10, "targets": {"slow-redis": target}}
    ramp = _Ramp(toxiproxy, "climbing-redis")
    try:
        outcome = execute_run(spec, {**endpoints, "slow-redis": target}, store, hooks=ramp)
    finally:
        ramp.stop()
    assert len(ramp.set_ms) >= 5, ramp.set_ms  # the climb happened while the cell measured
    completed = [e["data"] for e in store.read(outcome.run_id, interval_histograms=False)
                 if e["type"] == "CellCompleted"]
    assert len(completed) == 1, outcome.cells
    verdict = completed[0]["verdict"]
    assert verdict["verdict"] != "sustainable", verdict
    # The latency rule itself saw it: rising, or a rise too large to pass that the test could not confirm.
    judged = sustainability(RATE, interval_inputs(
        [e["data"] for e in store.read(outcome.run_id, interval_histograms=False) if e["type"] == "IntervalMeasured"],
        completed[0]["measured_s"]))
    assert judged["verdict"] == verdict["verdict"], (judged, verdict)  # the stored verdict, judged again
    trend = judged["checks"]["latency_trend"]
    assert trend["n"] >= trend["min_n"] and trend["passed"] is not True, (trend, verdict["reasons"])
    assert any("end-to-end p99 r" in reason for reason in verdict["reasons"]), verdict["reasons"]
