"""Loss and drain checked against the broker's own truth: a consumer group the broker never serves, and
several consumers sharing one cell's messages."""

import contextlib
import threading
import time

import pytest
import redis

from brokerbench.events import new_run_id
from brokerbench.reports.results import build_results
from brokerbench.worker.cell import topic_name
from inline_run import execute_run
from steady import assert_sent_on_schedule
from toxiproxy import ClimbingDelay

def run(spec, endpoints, store, run_id=None):
    outcome = execute_run(spec, endpoints, store, run_id=run_id)
    events = store.read(outcome.run_id)
    return events, build_results(events)


def test_a_cell_that_loses_everything_fails(endpoints, store):
    """Once the readiness probe has been delivered, the cell's consumer group is moved past every id the
    stream will ever get (XGROUP SETID): Redis acknowledges every XADD and delivers nothing. Its group lag is
    then unknown (XINFO GROUPS lag: nil), so undelivered and lost are too: only their sum is reported."""
    spec = {"name": "it-loss", "brokers": ["redis-streams"], "sizes": [1024], "formats": ["raw"], "rates": [500],
            "duration_s": 1, "warmup_s": 0.5, "warmup_until_steady": False, "drain_timeout_s": 1}
    run_id = new_run_id()
    topic = topic_name(run_id, {"index": 0})
    key, group = f"{topic}-0", f"{topic}-g"
    client = redis.Redis(host=endpoints["redis-streams"]["host"], port=endpoints["redis-streams"]["port"])
    stop = threading.Event()
    lags = []  # the group's lag as Redis reports it after the move, and once the messages were sent

    def move_group_ahead_after_the_probe():
        while not stop.is_set():
            with contextlib.suppress(redis.ResponseError):
                groups = client.xinfo_groups(key)
                if groups and groups[0]["last-delivered-id"] not in (b"0-0", "0-0"):
                    client.xgroup_setid(key, group, id="9999999999999-0")
                    break
            time.sleep(0.001)
        while not stop.is_set():
            with contextlib.suppress(redis.ResponseError):
                lags[:] = [g["lag"] for g in client.xinfo_groups(key)]
            time.sleep(0.05)

    thread = threading.Thread(target=move_group_ahead_after_the_probe, daemon=True)
    thread.start()
    try:
        events, results = run(spec, endpoints, store, run_id=run_id)
    finally:
        stop.set()
        thread.join()
    [cell] = results["cells"]
    assert cell["status"] == "failed"
    assert cell["reason"].startswith("no message was delivered")
    assert cell["sent"] > 0 and cell["received"] == 0
    assert lags == [None]  # Redis's own view: it cannot tell the group's backlog
    # Neither class is guessed: the sum is all the tool knows, and it says so instead of reporting loss.
    assert cell["lost"] is None and cell["undelivered"] is None and cell["undelivered_or_lost"] == cell["sent"]
    assert "undelivered or lost" in cell["reason"] and "(broker backlog unknown)" in cell["reason"]
    assert cell["residual"] == 0
    assert cell["broker_count"]["observed"] == cell["broker_count"]["expected"] > 0  # the broker had them all
    assert results["status"] == "completed_with_failures"
    assert [e for e in events if e["type"] == "IntervalMeasured"]  # what was measured is kept


@pytest.mark.timeout(420)
def test_several_consumers_drain_without_waiting_out_the_timeout(endpoints, store):
    # A drain bound far beyond the run's own time (about 15 s idle, under a minute on a loaded host), so the wall
    # clock tells only whether a drain was waited out.
    spec = {"name": "it-drain", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "formats": ["raw"],
            "rates": [1000], "consumers": 2, "partitions": 2, "duration_s": 2, "warmup_s": 0.5,
            "warmup_until_steady": False, "drain_timeout_s": 300}
    started = time.monotonic()
    _, results = run(spec, endpoints, store)
    assert time.monotonic() - started < 300  # two cells; either waiting out its drain would take 300 s
    for cell in results["cells"]:
        assert cell["status"] == "completed", cell.get("reason")
        assert cell["sent"] == cell["received"] and cell["late"] == cell["lost"] == 0


def test_an_adaptive_warm_up_is_bounded_and_every_message_is_accounted_for(endpoints, store):
    spec = {"name": "it-warm", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "formats": ["json"],
            "rates": [1000], "duration_s": 3, "warmup_s": 0.5, "warmup_max_s": 8, "drain_timeout_s": 5}
    _, results = run(spec, endpoints, store)
    for cell in results["cells"]:
        assert cell["status"] == "completed", cell.get("reason")
        warmup = cell["warmup"]
        assert warmup["until_steady"] and 0.5 <= warmup["used_s"] <= 8 + 0.5
        assert len(warmup["p99_us"]) >= 2  # judged on at least two half-seconds
        # Measured from the start the warm-up chose: the schedule's 3,000 messages, nothing lost either side of
        # it. A producer still behind when the schedule ends stops on time (the shortfall shows as a lower rate),
        # so a loaded host may send the last ones fewer (how many is a timing, tests/steady.py); never more.
        assert cell["sent"] == cell["received"]
        assert_sent_on_schedule(cell, 1000)
        assert cell["sent"] <= 3000
        count = cell["broker_count"]
        assert count["difference"] == 0 and count["observed"] > 3000  # warm-up messages are in the topic too


def test_a_warm_up_that_never_settles_ends_at_its_bound(endpoints, store, toxiproxy):
    """Latency that climbs through the whole warm-up: Toxiproxy, between the clients and a real Redis, triples its
    delay every half second (2, 6, 18, 54, 162 ms), so no three half-second p99s agree and the warm-up runs to
    its bound (2 s), unsteady. At 200 msgs/s of 1 KB the clients keep up on any host (a CPU-bound version of this
    test, 64 KB Avro records at 2,000 msgs/s, measured nothing when a loaded host slowed the producer down)."""
    redis = endpoints["redis-streams"]
    port = toxiproxy.proxy("warming-redis", int(redis["port"]))
    target = {"driver": "redis", "host": "127.0.0.1", "port": port}
    spec = {"name": "it-unsettled", "brokers": ["climbing-redis"], "sizes": [1024], "formats": ["raw"],
            "rates": [200], "duration_s": 2, "warmup_s": 0.5, "warmup_max_s": 2, "drain_timeout_s": 5,
            "targets": {"climbing-redis": target}}
    climb = ClimbingDelay(toxiproxy, "warming-redis", "warm-up", first_ms=2, factor=3, step_s=0.5, max_ms=200)
    try:
        outcome = execute_run(spec, {**endpoints, "climbing-redis": target}, store, hooks=climb)
        results = build_results(store.read(outcome.run_id))
    finally:
        climb.stop()
    assert len(climb.set_ms) >= 4, climb.set_ms  # the delay climbed through the warm-up's bound
    [cell] = results["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    warmup = cell["warmup"]
    assert warmup["steady"] is False and warmup["used_s"] >= 2
    assert len([p for p in warmup["p99_us"] if p is not None]) >= 3  # it judged measured latency, window by window
    # Every measured message is accounted for, none lost.
    assert cell["lost"] == 0 and cell["sent"] > 0
    assert cell["sent"] == cell["received"] + cell["late"] + cell["undelivered"]
