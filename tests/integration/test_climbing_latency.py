"""A latency that climbs inside a short cell is never judged sustainable.

The climb is real and known: Toxiproxy sits between the clients and a real Redis, and from the moment the cell
starts measuring its upstream delay doubles every second (1, 2, 4, 8, 16, 32, 64 ms). The send rate (200 msgs/s,
batch: up to 100 XADDs in flight) is far below what the proxied path carries, so the rate holds while each
second's end-to-end p99 is about twice the one before. The cell measures 6 s (below the quick suite's 10 s) and
the verdict's latency check must not pass: it finds the rise, or, when a noisy second leaves the test short of its
level, calls the rise unclear, which makes the verdict inconclusive. On a loaded host a stall can fail another rule
first (a second received 55 of 200 messages, its p99 above the climb's): the verdict is then unsustainable by that
rule, and the latency rule is held to the climb only in a cell where every other rule passed.
"""

from __future__ import annotations

from brokerbench.verdict import interval_inputs, sustainability
from inline_run import execute_run
from toxiproxy import ClimbingDelay

RATE = 200
DURATION_S = 6


def test_a_latency_that_doubles_every_second_is_never_sustainable(endpoints, store, toxiproxy):
    redis = endpoints["redis-streams"]
    port = toxiproxy.proxy("climbing-redis", int(redis["port"]))
    toxiproxy.latency("climbing-redis", 1, "upstream")
    target = {"driver": "redis", "host": "127.0.0.1", "port": port}
    spec = {"name": "it-climbing-latency", "brokers": ["slow-redis"], "sizes": [1024], "formats": ["raw"],
            "rates": [RATE], "modes": ["batch"], "duration_s": DURATION_S, "warmup_s": 1,
            "warmup_until_steady": False, "drain_timeout_s": 10, "targets": {"slow-redis": target}}
    ramp = ClimbingDelay(toxiproxy, "climbing-redis", "measuring", first_ms=1, factor=2, step_s=1,
                         max_ms=2 ** (DURATION_S + 1))
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
    checks = judged["checks"]
    trend = checks["latency_trend"]
    assert trend["n"] >= trend["min_n"], trend
    failed = [name for name in ("rate", "backlog", "publish_delay") if checks[name]["passed"] is False]
    if failed:
        # A loaded host stalled the cell (a second received short, a backlog or a publish delay grew): the stall's
        # own latency can outweigh the climb in the trend test, and the verdict fails on that rule instead.
        assert verdict["verdict"] == "unsustainable" and len(verdict["reasons"]) >= len(failed), (failed, verdict)
        return
    # Every other rule held: the climb is all that moved, and the latency rule must see it.
    assert trend["passed"] is not True, (trend, verdict["reasons"])
    assert any("end-to-end p99 r" in reason for reason in verdict["reasons"]), verdict["reasons"]
