"""The comparison report built from events (synthetic runs shaped exactly like real ones)."""

import pytest

from brokerbench import histogram
from brokerbench.reports import html, markdown
from brokerbench.reports.model import build_report
from brokerbench.reports.synthetic import synthetic_run

SPEC = {"name": "syn", "brokers": ["kafka", "redis-streams"], "sizes": [1024, 4096], "rates": [1000],
        "formats": ["json", "msgpack"], "repeats": 3}


@pytest.fixture(scope="module")
def events():
    return synthetic_run(SPEC, intervals=8, seed=1)


@pytest.fixture(scope="module")
def report(events):
    return build_report(events)


def test_repeats_form_one_configuration_with_exactly_merged_percentiles(events, report):
    config = report["groups"][0]["cells"][0]
    assert config["repeats"] == 3 and len(config["cell_ids"]) == 3
    blobs = [e["data"]["histograms"]["end_to_end_latency_us"] for e in events
             if e["type"] == "CellCompleted" and e["data"]["cell_id"] in config["cell_ids"]]
    merged = histogram.summary(histogram.merge(blobs))
    assert config["latency"]["end_to_end_latency_us"]["p99"] == merged["p99"]
    # The merged p99 is not the mean of the repeats' p99s (which would be wrong).
    per_repeat = [histogram.summary(histogram.decode(b))["p99"] for b in blobs]
    assert min(per_repeat) <= merged["p99"] <= max(per_repeat)


def test_metrics_have_a_median_and_a_confidence_interval(report):
    est = report["groups"][0]["cells"][0]["metrics"]["throughput_msgs_per_s"]
    assert est["n"] == 3 and est["ci_low"] <= est["median"] <= est["ci_high"]
    assert est["median"] == pytest.approx(1000, rel=0.05)


def test_groups_best_marks_and_ratios(report):
    assert [g["title"] for g in report["groups"]] == ["1,024 B · 1,000 msgs/s · batch", "4,096 B · 1,000 msgs/s · batch"]
    for group in report["groups"]:
        best_throughput = [c for c in group["cells"] if "throughput_msgs_per_s" in c.get("best", [])]
        assert len(best_throughput) == 1
        top = max(c["metrics"]["throughput_msgs_per_s"]["median"] for c in group["cells"])
        assert best_throughput[0]["metrics"]["throughput_msgs_per_s"]["median"] == top
        by = {(c["broker"], c["format"]): c for c in group["cells"]}
        ratio = by[("kafka", "msgpack")]["ratios"]["format"]["throughput_msgs_per_s"]
        assert ratio == pytest.approx(by[("kafka", "msgpack")]["metrics"]["throughput_msgs_per_s"]["median"]
                                      / by[("kafka", "json")]["metrics"]["throughput_msgs_per_s"]["median"], rel=1e-3)
        assert "format" not in by[("kafka", "json")]["ratios"]  # json is the reference itself
        assert "broker" in by[("redis-streams", "json")]["ratios"]


def test_a_cell_that_could_not_keep_up_is_flagged_not_compared():
    events = synthetic_run({**SPEC, "repeats": 1, "sizes": [1024]}, intervals=6, rate_scale=0.9, seed=2)
    report = build_report(events)
    for config in report["groups"][0]["cells"]:
        assert config["sustainability"]["verdict"] == "unsustainable"
        assert "achieved" in config["sustainability"]["reasons"][0]
        assert "best" not in config
    assert "unsustainable" in markdown.render(report)


def test_renderers_show_regressions_first_and_every_chart_kind(report):
    md = markdown.render(report)
    assert md.index("## Regressions") < md.index("## 1,024 B")
    page = html.render(report)
    for title in ("End-to-end latency spectrum", "Throughput vs message size", "Serialization cost",
                  "Encoded size", "rate per second", "p99 per second"):
        assert title in page, title
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert page.index("id='regressions'") < page.index("Comparison")


def test_highlights_do_not_compare_the_latency_of_cells_that_fell_behind():
    behind = synthetic_run({**SPEC, "repeats": 1, "sizes": [1024], "formats": ["json"]}, intervals=6, seed=8)
    slow = synthetic_run({**SPEC, "repeats": 1, "sizes": [1024], "formats": ["msgpack"]}, intervals=6, seed=9,
                         rate_scale=0.5, latency_scale=10)
    run_id = behind[0]["run_id"]
    # One run: json keeps up, msgpack falls behind with 10× the latency.
    events = [e for e in behind if e["type"] != "RunCompleted"]
    requested = events[0]
    cells = requested["data"]["cells"] + [{**c, "index": c["index"] + 10, "cell_id": c["cell_id"] + "x"}
                                          for c in slow[0]["data"]["cells"]]
    events[0] = {**requested, "data": {**requested["data"], "cells": cells,
                                       "spec": {**requested["data"]["spec"], "formats": ["json", "msgpack"]}}}
    for e in slow[2:-1]:
        data = {**e["data"], "cell_id": e["data"]["cell_id"] + "x"}
        if e["type"] == "CellStarted":
            data["cell"] = {**data["cell"], "cell_id": data["cell_id"], "index": data["cell"]["index"] + 10}
        events.append({**e, "run_id": run_id, "data": data})
    report = build_report(events)
    text = " ".join(report["highlights"])
    assert "msgpack 0." in text and "could not keep up" in text
    assert "msgpack end-to-end p99" not in text
