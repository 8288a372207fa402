"""A broker a run starts is warmed up before its first cell (brokerbench.local.warmup): traffic through the cell's own
driver, every message acknowledged and received, the group's position committed until the broker's own backlog
reads 0 (a new Kafka's offsets topic is made then), the topic deleted after; a broker the run found running is not
warmed."""

from __future__ import annotations

import logging

import pytest

from brokerbench.local.stack import LocalStack
from brokerbench.local.warmup import BATCHED, SINGLE, warm_up
from brokerbench.spec import validate
from brokerbench.targets.local import LocalTargets


@pytest.mark.parametrize("broker", ["kafka", "redis-streams"])
def test_warm_up_traffic_is_acknowledged_received_and_committed(endpoints, broker):
    done = warm_up(broker, endpoints[broker])
    # every message sent was acknowledged and received (batched sending may stop early on a slow broker)
    assert SINGLE < done["sent"] <= BATCHED + SINGLE
    assert done["acknowledged"] == done["received"] == done["sent"], done
    assert done["committed"] is True  # the broker's backlog of the warm-up's group read 0


def test_a_broker_the_run_starts_is_warmed_and_one_it_found_running_is_not(tmp_path, caplog):
    stack = LocalStack(tmp_path / "stack")
    targets = LocalTargets(stack)
    spec = validate({"brokers": ["redis-streams"], "sizes": [1024], "rates": [1], "formats": ["raw"]})
    try:
        with caplog.at_level(logging.INFO, logger="brokerbench.local.warmup"):
            first = targets.provision("run-a", "redis-streams", spec)
            warmed = [r for r in caplog.records if r.getMessage() == "warmed up a new redis-streams"]
            assert first["ready"] and len(warmed) == 1
            assert warmed[0].warm_up["received"] == warmed[0].warm_up["sent"] > SINGLE
            caplog.clear()
            targets.provision("run-b", "redis-streams", spec)  # already running: served before, not warmed again
            assert not [r for r in caplog.records if r.getMessage().startswith("warm")]
    finally:
        stack.down(log=lambda m: None)
