"""A cell whose load generator is the limit on purpose is marked client-bound, and its rate is never the broker's.

A Redis producer at rate max whose encode is slow (Avro through fastavro, on the Python send loop: a few µs a
message, where Redis takes an XADD in about one) with a window Redis never fills: 10,000 XADDs in flight at most,
half a second of what the producer can hand over, so only a stall of Redis longer than that could make it wait for
room. Publish-only, so no consumer competes with Redis for the 2 cores. Whatever the host's load, the producer
waits for Redis a small share of its time, and the cell is client-bound: its recorded inputs say why. The same
producer in a sustainable-rate search: the steps it cannot keep up with fail because it fell behind, not because Redis
did, so the search ends client-bound and its maximum reads "≥ X (client-bound)". The other side, a broker that holds
its producer back (a Kafka producer quota), is checked in test_quota.py, whose search ends broker-bound.
"""

import pytest
from rich.console import Console

from brokerbench import limit
from brokerbench.reports import html, markdown
from brokerbench.reports.model import build_report
from brokerbench.reports.results import build_results
from brokerbench.reports.table import comparison_tables, limit_note
from machine_load import run_watched

DEPTH = 10_000


def slow_run(stack, endpoints, store, **request) -> tuple[list, dict, dict, dict]:
    """One run of the slow producer against Redis: its events, its results, its report and each cell's machine
    conditions (machine_load.Conditions by cell_id)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BROKERBENCH_SEND_LOOP", "python")  # the cell's processes start with the worker's environment
        with_pids = {**endpoints, "redis-streams": stack.endpoint("redis")}  # the broker's CPU is sampled too
        outcome, conditions = run_watched(
            {"brokers": ["redis-streams"], "sizes": [1024], "formats": ["avro"], "consumers": 0, "warmup_s": 1,
             "warmup_until_steady": False, "client": {"pipeline_depth": DEPTH}, **request}, with_pids, store)
    events = store.read(outcome.run_id)
    return events, build_results(events), build_report(events), conditions


@pytest.fixture(scope="module")
def slow_producer(stack, endpoints, store):
    """One max-rate cell."""
    return slow_run(stack, endpoints, store, rates=["max"], duration_s=3)


@pytest.fixture(scope="module")
def slow_search(stack, endpoints, store):
    """A sustainable-rate search from 90% of a max-rate probe, coarse (precision 50%: a few steps of 5 s, the fewest
    seconds a step is judged on)."""
    return slow_run(stack, endpoints, store, rates=["sustainable"], duration_s=5, drain_timeout_s=3,
                    search={"start_rate": None, "precision": 0.5})


def test_a_producer_that_seldom_waits_for_the_broker_is_client_bound(slow_producer):
    events, results, _, _ = slow_producer
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
    _, results, report, _ = slow_producer
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


def test_a_search_the_producer_stopped_reads_as_a_lower_bound(slow_search):
    events, results, report, conditions = slow_search
    [cell] = results["cells"]
    steps = cell["search"]["steps"]
    said = [(s["rate"], s["verdict"], (s.get("limit") or {}).get("by"), s["reasons"]) for s in steps]
    print(cell.get("max_sustainable_rate"), conditions[cell["cell_id"]], *said, sep="\n")
    assert cell["status"] == "completed", cell.get("reason")
    found = cell["max_sustainable_rate"]
    assert found, said
    limit_found = cell["limit"]
    [completed] = [e["data"] for e in events if e["type"] == "CellCompleted"]
    assert completed["limit"] == limit_found
    # Every table and the report read the maximum as a lower bound exactly when the search ended client-bound.
    console = Console(width=400, record=True)
    for table in comparison_tables(results):
        console.print(table)
    text = console.export_text()
    bound = limit_found["by"] == "client"
    assert (f"max sustainable ≥ {found:,.0f} msgs/s (client-bound)" in text) == bound, text
    assert (f"≥ {found:,.0f} msgs/s (client-bound)" in markdown.render(report)) == bound
    # The rate above the one found failed because the producer fell behind with its window seldom full (or its core
    # saturated): each of its failed measurements says so, and the search's limit names that rate. Judged where the
    # search ran on a steady machine: on a CI host at a CPU pressure past machine_load.BUSY_PRESSURE, Redis and the
    # producer's own reading of its replies stalled for part of a second in a step the producer sent on schedule
    # (13,036 of 17,754 msgs/s acknowledged in one second), which reads as the broker's limit.
    if not conditions[cell["cell_id"]].steady:
        pytest.skip(f"who limited the search is not judged on a busy machine ({conditions[cell['cell_id']]}): {said}")
    assert bound, said
    above = [s for s in steps if s["rate"] == limit_found["rate"]]
    assert limit_found["rate"] > found and above, said
    assert any(s["verdict"] != "sustainable" and s["limit"]["by"] == "client" for s in above), said
    assert all(s["limit"]["by"] != "broker" for s in above if s["verdict"] != "sustainable"), said
