"""The comparison report built from events (synthetic runs shaped exactly like real ones)."""

import copy
import re
from html import escape

import numpy as np
import pytest
from synthetic import synthetic_run

from brokerbench import histogram
from brokerbench.reports import html, markdown
from brokerbench.reports.model import METRICS, build_report, min_samples

SPEC = {"name": "syn", "brokers": ["kafka", "redis-streams"], "sizes": [1024, 4096], "rates": [1000],
        "formats": ["json", "msgpack"], "repeats": 3}


def steady(events, scale=None, seed=0):
    """Every interval of a cell delivers the same count: its target × scale(cell) × (1 ± 0.4%).

    The synthetic generator draws each interval's count independently (2% noise), which a real
    open-loop schedule never does; the verdict's rate rule would see that noise as a shortfall.
    """
    rng = np.random.default_rng(seed)
    cells = {c["cell_id"]: c for c in events[0]["data"]["cells"]}
    per_interval = {}
    out = []
    for e in events:
        e = copy.deepcopy(e)
        cid = e["data"].get("cell_id")
        if cid in cells and cid not in per_interval:
            cell = cells[cid]
            rate = 5000 if cell["rate"] == "max" else cell["rate"]
            per_interval[cid] = int(rate * (scale(cell) if scale else 1.0) * rng.uniform(0.996, 1.004))
        if e["type"] == "IntervalMeasured":
            n = per_interval[cid]
            e["data"]["counters"].update(sent=n, acked=n, received=n, bytes_sent=n * cells[cid]["size_bytes"],
                                         bytes_received=n * cells[cid]["size_bytes"])
        elif e["type"] == "CellCompleted":
            n = per_interval[cid] * e["data"]["intervals"]
            e["data"]["totals"].update(sent=n, acked=n, received=n, bytes_sent=n * cells[cid]["size_bytes"],
                                       bytes_received=n * cells[cid]["size_bytes"])
        out.append(e)
    return out


def merged_run(first, second):
    """One run from two synthetic runs of the same spec shape (cells of the second renamed)."""
    run_id = first[0]["run_id"]
    events = [e for e in first if e["type"] != "RunCompleted"]
    requested = events[0]
    cells = requested["data"]["cells"] + [{**c, "index": c["index"] + 100, "cell_id": c["cell_id"] + "x"}
                                          for c in second[0]["data"]["cells"]]
    formats = sorted({c["format"] for c in cells})
    events[0] = {**requested, "data": {**requested["data"], "cells": cells,
                                       "spec": {**requested["data"]["spec"], "formats": formats}}}
    for e in second[2:-1]:
        data = {**e["data"], "cell_id": e["data"]["cell_id"] + "x"}
        if e["type"] == "CellStarted":
            data["cell"] = {**data["cell"], "cell_id": data["cell_id"], "index": data["cell"]["index"] + 100}
        events.append({**e, "run_id": run_id, "data": data})
    return events


@pytest.fixture(scope="module")
def events():
    return steady(synthetic_run(SPEC, intervals=8, seed=1))


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


def test_metrics_have_a_median_and_an_exact_interval(report):
    est = report["groups"][0]["cells"][0]["metrics"]["throughput_msgs_per_s"]
    assert est["n"] == 3 and est["ci_low"] <= est["median"] <= est["ci_high"]
    assert est["method"] == "order-statistic" and est["coverage"] == 0.75  # 3 repeats: the range covers 75%
    assert est["median"] == pytest.approx(1000, rel=0.01)


def test_verdicts_of_steady_cells_and_the_rules_in_the_report(report):
    verdicts = {c["sustainability"]["verdict"] for g in report["groups"] for c in g["cells"]}
    assert verdicts == {"sustainable"}
    config = report["groups"][0]["cells"][0]
    assert [r["verdict"] for r in config["sustainability"]["repeats"]] == ["sustainable"] * 3
    assert set(report["rules"]) == {"sustainability", "claims", "percentiles", "max_rate", "missing", "not_sent", "accounting",
                                    "codec", "send_loop", "durability", "limit", "host", "stamps"}
    md, page = markdown.render(report), html.render(report)
    for rule in report["rules"].values():
        assert rule in md
        assert escape(rule) in page


def test_groups_ratios_and_no_best_inside_the_noise(report):
    assert [g["title"] for g in report["groups"]] == ["1,024 B · 1,000 msgs/s · batch", "4,096 B · 1,000 msgs/s · batch"]
    for group in report["groups"]:
        # 1,001 vs 1,000 msgs/s: the repeats' intervals overlap, so nothing is the best.
        assert not any("throughput_msgs_per_s" in c.get("best", []) for c in group["cells"])
        by = {(c["broker"], c["format"]): c for c in group["cells"]}
        ratio = by[("kafka", "msgpack")]["ratios"]["format"]["throughput_msgs_per_s"]
        assert ratio == pytest.approx(by[("kafka", "msgpack")]["metrics"]["throughput_msgs_per_s"]["median"]
                                      / by[("kafka", "json")]["metrics"]["throughput_msgs_per_s"]["median"], rel=1e-3)
        assert "format" not in by[("kafka", "json")]["ratios"]  # json is the reference itself
        assert "broker" in by[("redis-streams", "json")]["ratios"]
    assert report["highlights"] == [] and report["claims_note"] is None
    assert "No difference between configurations exceeded the run's own noise." in markdown.render(report)


def test_best_marks_only_a_difference_outside_the_intervals():
    spec = {**SPEC, "sizes": [1024], "rates": ["max"]}
    faster = steady(synthetic_run(spec, intervals=8, seed=3),
                    scale=lambda c: 1.3 if (c["broker"], c["format"]) == ("kafka", "msgpack") else 1.0)
    report = build_report(faster)
    (group,) = report["groups"]
    best = [(c["broker"], c["format"]) for c in group["cells"] if "throughput_msgs_per_s" in c.get("best", [])]
    assert best == [("kafka", "msgpack")]
    # Max-rate latency runs from enqueue: stated, and never a claim.
    assert group["note"].startswith("max-rate cells: latency from enqueue")
    assert {c["sustainability"]["verdict"] for c in group["cells"]} == {"max-rate"}
    assert all(h["metric"] == "throughput_msgs_per_s" for h in report["highlights"])
    assert "latency from enqueue" in markdown.render(report)
    # With fewer than 3 repeats nothing is bold, however far apart.
    two = build_report(steady(synthetic_run({**spec, "repeats": 2}, intervals=8, seed=3),
                              scale=lambda c: 1.3 if c["format"] == "msgpack" else 1.0))
    assert not any(c.get("best") for c in two["groups"][0]["cells"])
    assert two["claims_note"] == "2 repeats: no comparative claims, at least 3 are needed"
    assert two["highlights"] == []


def test_a_cell_that_could_not_keep_up_is_flagged_not_compared():
    events = synthetic_run({**SPEC, "repeats": 1, "sizes": [1024]}, intervals=6, rate_scale=0.9, seed=2)
    report = build_report(events)
    for config in report["groups"][0]["cells"]:
        assert config["sustainability"]["verdict"] == "unsustainable"
        assert "received" in config["sustainability"]["reasons"][0] and "of 1,000" in config["sustainability"]["reasons"][0]
        assert "best" not in config
    assert "unsustainable" in markdown.render(report)
    assert report["claims_note"] == "single run: no comparative claims" and report["highlights"] == []
    assert "Single run: no comparative claims." in markdown.render(report)


def test_a_short_cell_is_inconclusive_and_its_fine_percentiles_are_withheld():
    report = build_report(steady(synthetic_run({**SPEC, "repeats": 1, "sizes": [1024]}, intervals=4, seed=4)))
    config = report["groups"][0]["cells"][0]
    assert config["sustainability"]["verdict"] == "inconclusive"
    assert config["sustainability"]["reasons"] == ["only 4 measured intervals; at least 5 are needed to judge"]
    # 4 intervals × 200 samples: p99 needs 1,000, p99.9 10,000; p50 is fine.
    e2e = config["latency"]["end_to_end_latency_us"]
    assert e2e["count"] == 800 and e2e["p50"] is not None and e2e["p99"] is None and e2e["p999"] is None
    assert e2e["withheld"]["p99"] == "needs 1,000 samples, has 800"
    assert dict(map(tuple, e2e["spectrum"]))[99.0] is None and dict(map(tuple, e2e["spectrum"]))[100.0] is not None
    assert config["metrics"]["end_to_end_p99_us"]["median"] is None
    assert config["metrics"]["end_to_end_p99_us"]["withheld"] == 1000
    assert config["metrics"]["end_to_end_p50_us"]["median"] is not None
    assert "n<1k" in markdown.render(report) and escape("n<1k") in html.render(report)


def test_the_sample_a_percentile_needs():
    assert [min_samples(p) for p in (50, 90, 99, 99.9, 99.99, 100)] == [20, 100, 1000, 10_000, 100_000, 1]


def test_loss_is_summed_over_repeats_and_flagged(events):
    lossy = copy.deepcopy(events)
    target = next(e for e in lossy if e["type"] == "CellCompleted")
    target["data"]["totals"].update(lost=562, received=target["data"]["totals"]["received"] - 562)
    report = build_report(lossy)
    config = next(c for g in report["groups"] for c in g["cells"] if target["data"]["cell_id"] in c["cell_ids"])
    assert config["has_loss"] and config["loss"]["lost"] == 562 and config["lost"] == 562
    assert report["configurations_with_loss"] == [config["key"]]
    assert "⚠ lost 562" in markdown.render(report) and "⚠ lost 562" in html.render(report)


def test_a_broker_holding_fewer_or_more_messages_than_it_acknowledged_is_shown(events):
    """The broker's own count beside the acknowledgements: a shortfall (a broker that lost acknowledged messages
    in a crash) or an excess (retried sends stored twice) is flagged even when no loss class counted anything."""
    for observed, shown in ((1201, "⚠ broker count -2,300"), (3504, "⚠ broker count +3")):
        changed = copy.deepcopy(events)
        target = next(e for e in changed if e["type"] == "CellCompleted")
        target["data"]["broker_count"] = {"observed": observed, "expected": 3501, "difference": observed - 3501}
        report = build_report(changed)
        config = next(c for g in report["groups"] for c in g["cells"] if target["data"]["cell_id"] in c["cell_ids"])
        assert config["loss"]["broker_count_difference"] == observed - 3501
        assert shown in markdown.render(report) and shown in html.render(report)


def test_renderers_show_regressions_first_and_every_chart_kind(report):
    md = markdown.render(report)
    # The summary leads (the regression check in it), then the grids, then the rest.
    assert md.index("## Summary") < md.index("No regression check recorded for this run.") < md.index("## 1,024 B")
    assert md.index("## 1,024 B") < md.index("## How to read this report")
    page = html.render(report)
    for title in ("End-to-end latency spectrum", "Throughput vs message size", "Serialization cost",
                  "Encoded size", "rate per second", "p99 per second"):
        assert title in page, title
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert page.index("id='regressions'") < page.index("Comparison")


def test_the_regression_check_and_its_baseline_are_shown(report):
    checked = {**report, "regression_check": {
        "baseline_run_id": "20260101T000000Z-abcdef", "corrected_alpha": 0.00083,
        "verdicts": [{"cell": "kafka json · 1,024 B", "metric": "throughput_msgs_per_s", "verdict": "unchanged",
                      "baseline_median": 1000.0, "candidate_median": 1001.0, "change": 0.001, "p_value": 0.8},
                     {"cell": "kafka json · 1,024 B", "metric": "end_to_end_p99_us", "verdict": "regression",
                      "baseline_median": 2000.0, "candidate_median": 2600.0, "change": 0.3, "p_value": None}]}}
    md = markdown.render(checked)
    assert "baseline run 20260101T000000Z-abcdef" in md and "corrected α 0.00083" in md
    assert "1 regression, 1 unchanged" in md
    assert md.index("**regression**") < md.index("| unchanged |")
    page = html.render(checked)
    assert "20260101T000000Z-abcdef" in page and "class='bad'>regression" in page
    assert "No regression check recorded" not in page
    # The shape CheckRegression writes: a family-wise alpha, history runs, its method; or no baseline at all.
    holm = {**report, "regression_check": {
        "baseline_run_id": "B", "history_run_ids": ["B", "A"], "alpha": 0.01, "comparisons": 12,
        "method": {"multiplicity": "Holm–Bonferroni"}, "verdicts": checked["regression_check"]["verdicts"]}}
    md = markdown.render(holm)
    assert "baseline run B (run-to-run noise from 2 runs: the baseline and A)" in md
    assert "family-wise α 0.01 over 12 tests" in md and "Rule: multiplicity: Holm–Bonferroni." in md
    none = markdown.render({**report, "regression_check": {"baseline_run_id": None, "verdicts": []}})
    assert "no baseline was found" in none


def test_highlights_need_repeats_beyond_the_noise_and_never_compare_latency_of_cells_that_fell_behind():
    spec = {**SPEC, "sizes": [1024], "brokers": ["kafka"]}
    json_run = steady(synthetic_run({**spec, "formats": ["json"]}, intervals=8, seed=8))
    slow = steady(synthetic_run({**spec, "formats": ["msgpack"]}, intervals=8, seed=9, latency_scale=10),
                  scale=lambda c: 0.5)
    fast = steady(synthetic_run({**spec, "formats": ["avro"]}, intervals=8, seed=10, latency_scale=0.4))
    report = build_report(merged_run(merged_run(json_run, slow), fast))
    by_text = {h["text"].split(" (")[0]: h for h in report["highlights"]}
    throughput = by_text["kafka: msgpack throughput 0.50× json's"]
    assert throughput["metric"] == "throughput_msgs_per_s" and throughput["repeats"] == 3
    assert throughput["ci"][0] <= throughput["ratio"] <= throughput["ci"][1] < 1
    assert "could not keep up" in throughput["text"]
    assert not any(h["metric"] == "end_to_end_p99_us" and "msgpack" in h["text"] for h in report["highlights"])
    latency = [h for h in report["highlights"] if h["metric"] == "end_to_end_p99_us"]
    assert len(latency) == 1 and latency[0]["text"].startswith("kafka: avro end-to-end p99 0.")
    assert latency[0]["ci"][1] < 1 and "95% interval over 3 paired repeats" in latency[0]["text"]
    assert "kafka: avro end-to-end p99" in markdown.render(report)
    # report.html leads with them: each claim's text, and a chart of its two configurations, before the comparison.
    page = html.render(report)
    summary = page[page.index("id='summary'"):page.index("id='comparison'")]
    assert all(escape(h["text"]) in summary for h in report["highlights"])
    titles = re.findall(r'aria-label="([^"]*)"', summary)
    assert titles == [f"{METRICS[h['metric']].label} · {report['groups'][0]['title']}" for h in report["highlights"]]


def _table_text(results) -> str:
    from rich.console import Console

    from brokerbench.reports.table import comparison_tables

    console = Console(width=250, record=True, force_terminal=False)
    for table in comparison_tables(results):
        console.print(table)
    return console.export_text()


def test_cli_table_shows_verdicts_loss_captions_and_only_supported_percentiles():
    from brokerbench.reports.results import build_results

    events = steady(synthetic_run({**SPEC, "sizes": [1024], "rates": [1000, "max"], "repeats": 1}, intervals=6, seed=5))
    results = build_results(events)
    results["environment"]["brokers"]["redis-streams"]["settings"] = {"appendonly": "yes", "appendfsync": "everysec"}
    cells = results["cells"]
    rated = [c for c in cells if c["rate_target"] == 1000]
    rated[0].update(verdict="unsustainable", lost=562, late=3, has_loss=True)
    rated[1].update(verdict="inconclusive")
    for c in cells:
        c["end_to_end_latency_us"]["count"] = 6000  # p99 supported, p99.9 (10,000) not
    text = _table_text(results)
    assert "kafka batch = linger.ms 5 / batch.size 1,048,576 B, acks=" in text
    assert "redis-streams batch = up to 100 XADDs in flight, AOF on, appendfsync everysec" in text
    assert "max rate (latency from enqueue)" in text and "not comparable with rated cells" in text
    assert "unsustainable" in text and "inconclusive" in text and "max-rate" in text
    assert "lost 562, late 3" in text
    assert "n<10k" in text
    # Results stored before cells carried a verdict: only the rate is checked, and it says so.
    for c in cells:
        c.pop("verdict", None)
    assert "rate ok (no verdict)" in _table_text(results)


# -- the claim rule on simulated reports (synthetic.claim_configuration) ----------------------
GRID = [(b, f) for b in ("kafka", "redis-streams") for f in ("json", "msgpack", "avro", "protobuf")]


def simulated_configs(rng, repeats, p99_noise=(0.2, 0.5), scale=None, flags=None):
    """The 2 × 4 grid of a report, every configuration alike unless scale(broker, format) says otherwise: p99s
    scatter by a per-configuration noise drawn from p99_noise, p50 by 10%, throughput by 1%."""
    from synthetic import claim_configuration

    configs = []
    for broker, fmt in GRID:
        values = {}
        for name, level, noise in (("throughput_msgs_per_s", 2000, (0.01, 0.01)), ("end_to_end_p50_us", 800, (0.1, 0.1)),
                                   ("end_to_end_p99_us", 3000, p99_noise), ("publish_latency_p99_us", 2000, p99_noise),
                                   ("encoded_bytes", 1024, (0, 0))):
            sigma = rng.uniform(np.log1p(noise[0]), np.log1p(noise[1]))
            factor = scale(broker, fmt, name) if scale else 1.0
            values[name] = list(level * factor * np.exp(rng.normal(0, sigma, repeats)))
        configs.append(claim_configuration(broker, fmt, values, **(flags or {}).get((broker, fmt), {})))
    return configs


def judged(configs):
    from brokerbench.reports.model import claims, run_noise

    groups = [{"title": "1,024 B · 2,000 msgs/s · batch", "cells": configs}]
    highlights, family = claims(groups, {"format": "json", "broker": "kafka"}, run_noise(configs))
    return highlights, [(c["key"], name) for c in configs for name in c.get("best", [])], family


def test_reports_of_identical_configurations_carry_a_false_claim_in_at_most_5_percent():
    """200 A/A reports, 3 repeats, p99 noise 20–50% per configuration: the previous rule (the range of 3 paired
    ratios beyond the median spread, uncorrected) claimed something in about half of them."""
    rng = np.random.default_rng(31)
    false = 0
    for _ in range(200):
        highlights, best, family = judged(simulated_configs(rng, 3))
        false += bool(highlights or best)
    assert family["comparisons"] >= 20 and family["alpha"] == 0.05
    assert false / 200 <= 0.05


def test_a_real_difference_is_claimed_with_its_interval_and_nothing_else():
    rng = np.random.default_rng(32)
    tripled = lambda b, f, name: 3.0 if (b, f, name) == ("kafka", "avro", "end_to_end_p99_us") else 1.0  # noqa: E731
    found = other = 0
    for _ in range(100):
        highlights, best, family = judged(simulated_configs(rng, 5, scale=tripled))
        hit = [h for h in highlights if (h["cell"], h["reference"], h["metric"]) ==
               ("kafka|avro", "kafka|json", "end_to_end_p99_us")]
        if hit:
            found += 1
            h = hit[0]
            assert h["ci"][0] <= h["ratio"] <= h["ci"][1] and h["ci"][0] > 1 and h["coverage"] == 0.95
            assert h["p_value"] < 0.05 and h["comparisons"] == family["comparisons"]
            assert "95% interval over 5 paired repeats; Holm p" in h["text"]
        real = {("kafka|avro", "kafka|json"), ("redis-streams|avro", "kafka|avro")}
        other += any((h["cell"], h["reference"]) not in real for h in highlights)
    assert found >= 80 and other <= 8  # about 93% and 1.6% (400 reports)


def test_a_lossy_or_unsustainable_cell_enters_no_latency_claim():
    rng = np.random.default_rng(33)
    doubled = lambda b, f, name: 4.0 if (b, f) == ("kafka", "avro") and name.endswith("_us") else 1.0  # noqa: E731
    clean = judged(simulated_configs(rng, 5, p99_noise=(0.05, 0.05), scale=doubled))
    assert any(h["cell"] == "kafka|avro" and h["metric"] == "end_to_end_p99_us" for h in clean[0])
    for flags in ({"has_loss": True}, {"verdict_name": "unsustainable"}, {"verdict_name": "inconclusive"}):
        configs = simulated_configs(np.random.default_rng(33), 5, p99_noise=(0.05, 0.05), scale=doubled,
                                    flags={("kafka", "avro"): flags})
        highlights, best, _ = judged(configs)
        assert not any("kafka|avro" in (h["cell"], h["reference"]) and h["metric"] == "end_to_end_p99_us"
                       for h in highlights), flags
        assert not any(key == "kafka|avro" and name.endswith("_us") for key, name in best), flags


def test_best_needs_the_effect_floor_as_well_as_significance():
    """p99 noise 1%: a 10% lead is far beyond the noise and significant, but below the 20% floor of a latency."""
    def best_p99(lead):
        faster = lambda b, f, name: lead if (b, f) == ("redis-streams", "avro") else 1.0  # noqa: E731
        _, best, _ = judged(simulated_configs(np.random.default_rng(34), 5, p99_noise=(0.01, 0.01), scale=faster))
        return [key for key, name in best if name == "end_to_end_p99_us"]

    assert best_p99(0.90) == []
    assert best_p99(0.70) == ["redis-streams|avro"]
