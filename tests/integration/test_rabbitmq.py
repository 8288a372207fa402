"""RabbitMQ end to end on one local node: every format in both modes through a stream and through a quorum queue,
with the accounting set beside the broker's own figures."""

import pytest

from brokerbench.reports.results import build_results
from inline_run import execute_run

TINY = {"sizes": [1024], "rates": [200], "duration_s": 1, "warmup_s": 0.2, "warmup_until_steady": False,
        "drain_timeout_s": 2, "partitions": 2}
FORMATS = ["json", "avro", "protobuf", "msgpack", "raw"]


@pytest.fixture(scope="module")
def rabbit(extra_brokers, stack):
    """The run's endpoints with the one RabbitMQ node (and its pids) under both of its rows."""
    endpoints = extra_brokers("rabbitmq")
    node = stack.endpoint("rabbitmq")
    return {**endpoints, "rabbitmq-streams": node, "rabbitmq-quorum": node}


def run(request, endpoints, store):
    outcome = execute_run(request, endpoints, store)
    events = store.read(outcome.run_id)
    return outcome, events, build_results(events)


@pytest.mark.parametrize("broker", ["rabbitmq-streams", "rabbitmq-quorum"])
def test_every_format_in_both_modes_arrives_whole_and_the_broker_figures_agree(broker, rabbit, store):
    request = {**TINY, "name": f"it-{broker}", "brokers": [broker], "formats": FORMATS, "modes": ["batch", "single"]}
    outcome, events, results = run(request, rabbit, store)
    assert len(results["cells"]) == 10
    for cell in results["cells"]:
        assert cell["status"] == "completed", (cell["format"], cell["mode"], cell.get("reason"))
        assert cell["sent"] == cell["received"] > 0 and cell["lost"] == cell["duplicated"] == 0, cell
        assert 0 < cell["end_to_end_latency_us"]["p50"] < 1_000_000 and cell["publish_latency_us"]["p50"] > 0
        # What the streams hold, and what the management API counts routed into the quorum queues, is what the
        # producers were confirmed, with the readiness probes.
        assert cell["broker_count"]["difference"] == 0 and cell["broker_count"]["observed"] > cell["sent"], cell
    intervals = [e["data"] for e in events if e["type"] == "IntervalMeasured"]
    backlogs = [i["backlog"] for i in intervals]
    assert all(isinstance(b, int) for b in backlogs) and backlogs[-1] == 0, backlogs  # counted by the broker
    # The broker's processes were sampled: the node's beam.smp and its epmd.
    assert any(i.get("resources", {}).get("broker", {}).get("rss_mb", 0) > 10 for i in intervals)
    assert results["environment"]["brokers"][broker]["broker_version"].startswith("3.10")
    settings = events[1]["data"]["targets"][broker]["settings"]
    assert settings["persistence"]["fsync"] is (broker == "rabbitmq-quorum")
    assert settings["modes"]["single"]["in_flight"] == 1
