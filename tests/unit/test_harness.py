"""The harness code runs and reports what it claims (its figures are benchmarks, not checked here)."""

import importlib.util
from pathlib import Path

import pytest

HARNESS = Path(__file__).parents[2] / "bench" / "harness.py"


@pytest.fixture(scope="module")
def harness():
    spec = importlib.util.spec_from_file_location("harness", HARNESS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_codecs_are_measured_against_other_implementations_of_their_format(harness):
    results = harness.codecs(1024)
    assert set(results) == {"json", "msgpack", "avro", "protobuf"}
    assert {"orjson", "msgspec.json", "stdlib json"} <= set(results["json"]["implementations"])
    for fmt, result in results.items():
        assert result["brokerbench"]["encode_ns"] > 0 and result["brokerbench"]["decode_ns"] > 0
        assert result["fastest"] in result["implementations"]
        assert result["ratio_to_fastest"] > 0
    assert results["json"]["brokerbench"]["bytes"] == pytest.approx(1024, rel=0.01)  # record basis: JSON-sized


def test_instrumentation_cost_has_every_part(harness):
    cost = harness.instrumentation_ns(n=20_000)
    assert cost["producer_ns"] > 0 and cost["consumer_ns"] > 0 and cost["bulk_ns"] > 0
    assert cost["total_ns"] == pytest.approx(cost["producer_ns"] + cost["consumer_ns"] + cost["bulk_ns"])


def test_instrumentation_follows_the_send_loop_choice(harness, monkeypatch):
    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", "python")
    assert harness.instrumentation_ns(n=5_000)["loop"] == "python"
    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", "native")
    assert harness.instrumentation_ns(n=5_000)["loop"] == "native"


def test_schedule_floor_is_measured_idle_and_beside_a_busy_process(harness):
    floor = harness.schedule_floor(rate=2000, seconds=0.2)
    for load in ("idle", "one_core_busy"):
        assert 0 <= floor[load]["p50_ms"] <= floor[load]["p99_ms"] <= floor[load]["max_ms"]


def test_floor_probe_runs_beside_the_block(harness):
    with harness.FloorProbe(seconds=0.2) as probe:
        assert not probe.result  # still running while the block runs
    assert 0 <= probe.result["p50_ms"] <= probe.result["p99_ms"] <= probe.result["max_ms"]


def test_a_failed_trial_is_reported_and_the_other_figures_still_come_out(harness):
    trials = harness.Trials()
    completed = {"status": "completed", "rate_achieved": 1000.0, "lost": 0}
    trials.run("kafka_publish", 1, lambda: {"status": "failed", "reason": "broker unavailable"})
    trials.run("kafka_publish", 2, lambda: completed)
    trials.run("kafka_bare", 1, lambda: 2000.0)
    trials.run("kafka_bare", 2, lambda: 1 / 0)
    trials.run("redis_publish", 1, lambda: {"status": "incomplete"})  # no rate_achieved: the old KeyError
    assert [f["name"] for f in trials.failed] == ["kafka_publish", "kafka_bare", "redis_publish"]
    assert "broker unavailable" in trials.failed[0]["reason"] and "ZeroDivisionError" in trials.failed[1]["reason"]
    assert trials.best("kafka_publish") is completed and trials.best("redis_publish") is None
    assert trials.rates("kafka_bare") == [2000.0, None]
    assert harness.ratio(trials.best("kafka_publish"), trials.best("kafka_bare")) == 0.5
    assert harness.ratio(trials.best("redis_publish"), 1000.0) is None


def test_codec_figures_are_net_of_the_loop_floor_and_every_encode_starts_from_the_dict(harness):
    results = harness.codecs(512)
    assert {"protobuf (upb) keywords", "protobuf (upb) setters"} == set(results["protobuf"]["implementations"])
    for result in results.values():
        assert result["loop_floor_ns"]["encode_ns"] >= 0 and result["loop_floor_ns"]["decode_ns"] >= 0
        for figures in (result["brokerbench"], *result["implementations"].values()):
            for op in ("encode", "decode"):
                assert 0 <= figures[f"{op}_net_ns"] <= figures[f"{op}_ns"]
    # every implementation of a format encodes the same record to the same size (same input, same format)
    assert len({f["bytes"] for f in results["protobuf"]["implementations"].values()}) == 1


def test_the_summary_comes_out_with_every_redis_trial_failed(harness):
    import argparse

    trials = harness.Trials()
    trials.run("kafka_publish", 1, lambda: {"status": "completed", "rate_achieved": 300.0, "lost": 0,
                                            "send_loop": "native"})
    trials.run("kafka_bare", 1, lambda: 200.0)
    trials.run("redis_publish", 1, lambda: {"status": "failed", "reason": "Redis refused"})
    trials.run("redis_bare", 1, lambda: 100.0)
    args = argparse.Namespace(size=1024, trials=1, seconds=1.0)
    result = harness.summary(args, trials, {"json": {"ratio_to_fastest": 1.0}}, {}, {"total_ns": 1.0}, [])
    assert result["kafka_vs_bare"] == 1.5 and result["paired_trial_ratio_medians"]["kafka_vs_bare"] == 1.5
    assert result["redis_vs_bare"] is None and result["redis"]["worker_publish_only_msgs_per_s"] is None
    assert result["rate_error_worst"] is None
    assert result["failed"] == [{"name": "redis_publish", "trial": 1, "reason": "failed: Redis refused"}]
