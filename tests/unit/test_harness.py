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
