"""Figures checked against truths that do not come from the code that computed them: a Kafka producer
quota (a rate cap the broker enforces), the broker's own counts (end offsets, XLEN), and a consumer
group the broker never serves."""

import contextlib
import subprocess
import threading
import time

import pytest
import redis

from brokerbench.events import new_run_id
from brokerbench.local.install import lib_dir
from brokerbench.reports.results import build_results
from brokerbench.runner import execute_run
from brokerbench.worker.cell import topic_name

QUOTA_BYTES_PER_S = 2 * 1024 * 1024
# Small batches: the broker throttles per request, so 1 MB requests under a 2 MiB/s cap would arrive in
# half-second steps and a short window would catch the cap mid-step.
CAPPED_CLIENT = {"batch_bytes": 32768}


def kafka_config(bootstrap: str, *args: str) -> None:
    subprocess.run(["java", "-cp", f"{lib_dir('kafka')}/*", "kafka.admin.ConfigCommand", "--bootstrap-server",
                    bootstrap, *args, "--entity-type", "clients", "--entity-default"],
                   check=True, capture_output=True, timeout=120)


@contextlib.contextmanager
def producer_quota(endpoints, bytes_per_s: int):
    """A broker-enforced cap on every producer, removed afterwards (the stack is shared by the tests)."""
    bootstrap = endpoints["kafka"]["bootstrap_servers"]
    kafka_config(bootstrap, "--alter", "--add-config", f"producer_byte_rate={bytes_per_s}")
    try:
        time.sleep(1)  # quotas reach the broker's request handlers through its config manager
        yield
    finally:
        kafka_config(bootstrap, "--alter", "--delete-config", "producer_byte_rate")


def run(spec, endpoints, store, run_id=None):
    outcome = execute_run(spec, endpoints, store, run_id=run_id)
    events = store.read(outcome.run_id)
    return events, build_results(events)


def msgs_per_s_under_quota(size: int) -> float:
    # The quota counts record bytes: the 1 KB value, the 20-byte key and about 10 bytes of record framing.
    return QUOTA_BYTES_PER_S / (size + 30)


@pytest.fixture(scope="module")
def capped(endpoints, store):
    """One Kafka cell offered twice the quota, and one at max rate, under a 2 MiB/s producer quota."""
    spec = {"name": "it-quota", "brokers": ["kafka"], "sizes": [1024], "formats": ["raw"], "rates": [4000, "max"],
            "duration_s": 12, "warmup_s": 3, "drain_timeout_s": 10, "client": CAPPED_CLIENT}
    with producer_quota(endpoints, QUOTA_BYTES_PER_S):
        return run(spec, endpoints, store)


def test_throughput_under_a_broker_cap_is_the_cap_not_the_offered_rate(capped):
    _, results = capped
    cap = msgs_per_s_under_quota(1024)
    for cell in results["cells"]:
        assert cell["status"] == "completed", cell.get("reason")
        # Delivered over the delivery window: within 10% of what the broker lets through.
        assert cell["throughput_msgs_per_s"] == pytest.approx(cap, rel=0.10), cell["cell_id"]
        assert cell["throughput_mb_per_s"] * 1e6 <= QUOTA_BYTES_PER_S * 1.10
        assert cell["delivery_window_s"] > cell["measured_s"] + 1  # delivery ran on after the schedule ended
        assert cell["lost"] == 0 and cell["sent"] == cell["received"]
    rated = next(c for c in results["cells"] if c["rate_target"] == 4000)
    assert rated["send_rate"] == pytest.approx(4000, rel=0.05)  # what the client queued: not the figure


def test_the_broker_holds_exactly_what_was_acknowledged(capped):
    _, results = capped
    for cell in results["cells"]:
        count = cell["broker_count"]
        assert count["observed"] == count["expected"] and count["difference"] == 0
        assert count["observed"] >= cell["acked"]  # warm-up messages are in the topic too


def test_broker_side_backlog_is_recorded_per_interval(capped):
    events, _ = capped
    backlog = [e["data"]["backlog"] for e in events if e["type"] == "IntervalMeasured"]
    assert backlog and all(b is not None and b >= 0 for b in backlog)
    assert max(backlog) > 1000  # offered 2x the cap: thousands of messages wait in the topic


def test_a_cell_that_loses_everything_fails(endpoints, store):
    """The cell's consumer group is created in advance at an id after every entry the stream will get,
    so Redis acknowledges every XADD and delivers nothing: all acknowledged, all lost."""
    spec = {"name": "it-loss", "brokers": ["redis-streams"], "sizes": [1024], "formats": ["raw"], "rates": [500],
            "duration_s": 1, "warmup_s": 0.2, "drain_timeout_s": 1}
    run_id = new_run_id()
    topic = topic_name(run_id, {"index": 0})
    key, group = f"{topic}-0", f"{topic}-g"
    client = redis.Redis(host=endpoints["redis-streams"]["host"], port=endpoints["redis-streams"]["port"])
    stop = threading.Event()

    def keep_group_ahead():  # the cell deletes its keys before it starts: keep re-creating the group
        while not stop.is_set():
            with contextlib.suppress(redis.ResponseError):
                client.xgroup_create(key, group, id="9999999999999-0", mkstream=True)
            time.sleep(0.001)

    thread = threading.Thread(target=keep_group_ahead, daemon=True)
    thread.start()
    try:
        events, results = run(spec, endpoints, store, run_id=run_id)
    finally:
        stop.set()
        thread.join()
    [cell] = results["cells"]
    assert cell["status"] == "failed"
    assert cell["reason"].startswith("no message was delivered")
    assert cell["sent"] > 0 and cell["received"] == 0 and cell["lost"] == cell["sent"]
    assert cell["broker_count"]["observed"] == cell["broker_count"]["expected"] > 0  # the broker had them all
    assert results["status"] == "completed_with_failures"
    assert [e for e in events if e["type"] == "IntervalMeasured"]  # what was measured is kept


def test_several_consumers_drain_without_waiting_out_the_timeout(endpoints, store):
    spec = {"name": "it-drain", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "formats": ["raw"],
            "rates": [1000], "consumers": 2, "partitions": 2, "duration_s": 2, "warmup_s": 0.5,
            "drain_timeout_s": 120}
    started = time.monotonic()
    _, results = run(spec, endpoints, store)
    assert time.monotonic() - started < 120  # two cells; either waiting out its drain would take 120 s
    for cell in results["cells"]:
        assert cell["status"] == "completed", cell.get("reason")
        assert cell["sent"] == cell["received"] and cell["late"] == cell["lost"] == 0


def test_publish_only_throughput_counts_acknowledgements_over_their_window(capped, endpoints, store):
    spec = {"name": "it-pub", "brokers": ["kafka"], "sizes": [1024], "formats": ["raw"], "rates": ["max"],
            "consumers": 0, "duration_s": 12, "warmup_s": 3, "drain_timeout_s": 10, "client": CAPPED_CLIENT}
    with producer_quota(endpoints, QUOTA_BYTES_PER_S):
        _, results = run(spec, endpoints, store)
    [cell] = results["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    assert cell["throughput_msgs_per_s"] == pytest.approx(msgs_per_s_under_quota(1024), rel=0.10)
    assert cell["latency_basis"] == "enqueue"
