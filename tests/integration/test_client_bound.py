"""A cell whose load generator is the limit on purpose is marked client-bound, and its rate is never the broker's.

A Redis producer at rate max whose encode is slow (Avro through fastavro, on the Python send loop: a few µs a
message, where Redis takes an XADD in about one) with a window Redis never fills: 10,000 XADDs in flight at most,
half a second of what the producer can hand over, so only a stall of Redis longer than that could make it wait for
room. Publish-only, so no consumer competes with Redis for the 2 cores. Whatever the host's load, the producer
waits for Redis a small share of its time, and the cell is client-bound: its recorded inputs say why. The other
side, a broker that holds its producer back (a Kafka producer quota), is checked in test_quota.py.
"""

import pytest
from rich.console import Console

from brokerbench import limit
from brokerbench.reports import html, markdown
from brokerbench.reports.model import build_report
from brokerbench.reports.results import build_results
from brokerbench.reports.table import comparison_tables, limit_note
from inline_run import execute_run

DEPTH = 10_000


@pytest.fixture(scope="module")
def slow_producer(stack, endpoints, store):
    """One max-rate cell: its events, its results and its report."""
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", "python")  # the cell's processes start with the worker's environment
    try:
        with_pids = {**endpoints, "redis-streams": stack.endpoint("redis")}  # the broker's CPU is sampled too
        outcome = execute_run({"brokers": ["redis-streams"], "sizes": [1024], "rates": ["max"], "formats": ["avro"],
                               "consumers": 0, "duration_s": 3, "warmup_s": 1, "warmup_until_steady": False,
                               "client": {"pipeline_depth": DEPTH}}, with_pids, store)
    finally:
        monkeypatch.undo()
    events = store.read(outcome.run_id)
    return events, build_results(events), build_report(events)


def test_a_producer_that_seldom_waits_for_the_broker_is_client_bound(slow_producer):
    events, results, _ = slow_producer
    [cell] = results["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    assert cell["send_loop"] == "python"
    found = cell["limit"]
    print(cell["throughput_msgs_per_s"], found)
    assert found["by"] == "client"
    assert found["window"] == DEPTH  # the driver's window: pipeline_depth XADDs in flight
    # The inputs that decided it: the producer seldom waited for room, and little of its window was in use.
    assert found["window_wait_share"] < limit.WAIT_SHARE
    assert found["window_full_share"] < 0.05 and found["in_flight_mean_share"] < 0.5
    assert found["producer_cpu_pct"] > 0 and found["broker_cpu_pct"] is not None  # both processes sampled
    # stored with the cell, and per interval the producers' CPU beside the broker's
    [completed] = [e["data"] for e in events if e["type"] == "CellCompleted"]
    assert completed["limit"] == found
    intervals = [e["data"] for e in events if e["type"] == "IntervalMeasured"]
    assert intervals and all({"producers", "broker", "workers"} <= set(i["resources"]) for i in intervals)


def test_every_table_marks_it(slow_producer):
    _, results, report = slow_producer
    console = Console(width=400, record=True)
    for table in comparison_tables(results):
        console.print(table)
    assert "client-bound" in console.export_text()
    assert limit_note(results).startswith("client-bound: the load generator")
    [config] = [c for g in report["groups"] for c in g["cells"]]
    assert config["limit"]["client_bound"] == 1 and report["configurations_client_bound"] == [config["key"]]
    for text in (markdown.render(report), html.render(report)):
        assert "max-rate · client-bound" in text and "Client-bound in 1 configuration(s)" in text
        assert "What limited a cell" in text
