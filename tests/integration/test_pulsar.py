"""Apache Pulsar end to end on the local standalone: every format in both modes, and a non-persistent cell."""

from brokerbench.reports.results import build_results
from inline_run import execute_run
from steady import assert_sent_on_schedule

TINY = {"brokers": ["pulsar"], "sizes": [1024], "rates": [200], "duration_s": 1, "warmup_s": 0.2,
        "warmup_until_steady": False, "drain_timeout_s": 2}


def run(request, endpoints, store):
    outcome = execute_run(request, endpoints, store)
    events = store.read(outcome.run_id)
    return outcome, events, build_results(events)


def test_every_format_in_both_modes_arrives_whole_and_the_broker_count_reconciles(extra_brokers, store):
    endpoints = extra_brokers("pulsar")
    request = {**TINY, "name": "it-pulsar", "formats": ["json", "avro", "protobuf", "msgpack", "raw"],
               "modes": ["batch", "single"], "partitions": 2}
    outcome, events, results = run(request, endpoints, store)
    assert outcome.status == "completed" and len(results["cells"]) == 10
    for cell in results["cells"]:
        assert cell["status"] == "completed", cell.get("reason")
        assert cell["sent"] == cell["received"] > 0 and cell["lost"] == cell["duplicated"] == 0
        if cell["mode"] == "batch":  # single mode keeps one send in flight: on a busy machine it falls behind 200/s
            assert_sent_on_schedule(cell, 200)
        # What the broker says it stored (msgInCounter) is what the producers were told it stored, probes included.
        assert cell["broker_count"]["difference"] == 0 and cell["broker_count"]["observed"] > cell["sent"]
        assert 0 < cell["end_to_end_latency_us"]["p50"] < 1_000_000 and cell["publish_latency_us"]["p50"] > 0
    ends = [e["data"] for e in events if e["type"] == "CellCompleted"]
    assert all(end["send_loop"] == "python" for end in ends)  # no native loop for Pulsar: the fallback ran
    backlogs = [e["data"]["backlog"] for e in events if e["type"] == "IntervalMeasured"]
    assert all(isinstance(b, int) for b in backlogs) and backlogs[-1] == 0  # counted by the broker, drained
    target = results["environment"]["brokers"]["pulsar"]
    assert target["client_library"] == "pulsar-client" and target["broker_version"].startswith("4.0")
    settings = events[1]["data"]["targets"]["pulsar"]["settings"]
    assert settings["persistence"]["topic_type"] == "persistent" and settings["modes"]["single"]["batching"] is False
    # The local standalone's ack quorum of 1 as its admin API reports it, and its bookie's journalSyncData=false.
    durability = results["durability"]["pulsar"]
    assert (durability["fsync"], durability["replicas"], durability["memory_only"]) == (False, 0, False), durability


def test_a_non_persistent_cell_delivers_everything_and_claims_no_broker_count(extra_brokers, store):
    endpoints = extra_brokers("pulsar")
    request = {**TINY, "formats": ["raw"], "modes": ["batch"], "client": {"pulsar_topic_type": "non-persistent"}}
    _, events, results = run(request, endpoints, store)
    [cell] = results["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    assert cell["sent"] == cell["received"] > 0 and cell["lost"] == 0
    assert cell["broker_count"] is None  # a non-persistent topic stores nothing to count
    assert all(e["data"]["backlog"] is None for e in events if e["type"] == "IntervalMeasured")
    assert events[1]["data"]["targets"]["pulsar"]["settings"]["persistence"]["topic_type"] == "non-persistent"
