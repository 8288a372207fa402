"""Messages not received in time count in latency at +infinity; an unknown backlog is not loss; a residual shows."""

import copy

import numpy as np
import pytest
from rich.console import Console
from synthetic import synthetic_run

from brokerbench import histogram
from brokerbench.reports import html, markdown, rows, table
from brokerbench.reports.model import build_report
from brokerbench.reports.results import build_results, decode_buckets, latency_object, with_missing

SPEC = {"name": "missing", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000],
        "formats": ["json"], "repeats": 3}


def test_percentiles_over_all_sent_messages_with_the_missing_ones_at_infinity():
    # 1,000 received, one of each latency 1..1000 µs (exact at 3 significant digits), and 100 missing: 1,100 in all.
    blob = histogram.encode(histogram.from_values(np.arange(1, 1001)))
    values, bounds = with_missing(decode_buckets(blob), 100, {"p50": 50.0, "p75": 75.0, "p90": 90.0, "p95": 95.0,
                                                              "p99": 99.0})
    # rank of p among 1,100 = int(p × 1100 / 100 + 0.5): p50 → 550, p75 → 825, p90 → 990 (all received);
    # p95 → 1045 and p99 → 1089 fall among the missing: only "at least 1,000".
    assert values == {"p50": 550.0, "p75": 825.0, "p90": 990.0, "p95": None, "p99": None, "mean": None, "max": None}
    assert bounds["p95"] == bounds["p99"] == bounds["max"] == 1000.0
    assert bounds["mean"] == pytest.approx(500.5, rel=1e-3)
    # nothing missing: the histogram's own percentiles
    values, bounds = with_missing(decode_buckets(blob), 0, {"p50": 50.0, "p99": 99.0})
    assert values == {"p50": 500.0, "p99": 990.0} and bounds == {}
    # a cell's result carries the values, and the bounds beside them
    obj = latency_object(blob, missing=100)
    assert (obj["p50"], obj["p99"], obj["max"], obj["missing"]) == (550.0, None, None, 100)
    assert obj["lower_bounds"]["p99"] == 1000.0


def _with_totals(events, cell_ids, **changes):
    out = copy.deepcopy(events)
    for e in out:
        if e["type"] == "CellCompleted" and e["data"]["cell_id"] in cell_ids:
            totals = e["data"]["totals"]
            totals.update({k: v(totals) if callable(v) else v for k, v in changes.items()})
    return out


@pytest.fixture(scope="module")
def run():
    return synthetic_run(SPEC, intervals=5, seed=3)


def _cells(events, broker):
    return [c["cell_id"] for c in events[0]["data"]["cells"] if c["broker"] == broker]


def test_a_lower_bound_is_shown_as_such_and_enters_no_comparison(run):
    # Every kafka repeat missed 5% of what it sent: its p99 is among the missing, known only as "at least".
    kafka = _cells(run, "kafka")
    events = _with_totals(run, kafka, received=lambda t: t["sent"] - t["sent"] // 20,
                          missing=lambda t: t["sent"] // 20, undelivered_or_lost=lambda t: t["sent"] // 20,
                          lost=lambda t: t["sent"] // 20, undelivered=0, residual=0)
    results = {c["cell_id"]: c for c in build_results(events)["cells"]}
    e2e = results[kafka[0]]["end_to_end_latency_us"]
    assert e2e["p99"] is None and e2e["lower_bounds"]["p99"] == e2e["lower_bounds"]["max"] > 0
    assert e2e["p50"] is not None and e2e["missing"] == results[kafka[0]]["sent"] // 20
    report = build_report(events)
    config = next(c for g in report["groups"] for c in g["cells"] if c["broker"] == "kafka")
    p99 = config["metrics"]["end_to_end_p99_us"]
    assert p99["median"] is None and p99["lower_bound"] > 0
    assert config["latency"]["end_to_end_latency_us"]["p99"] is None
    assert config["latency"]["end_to_end_latency_us"]["lower_bounds"]["p99"] > 0
    for c in report["groups"][0]["cells"]:  # no "best" on a metric where a configuration is only bounded
        assert "end_to_end_p99_us" not in c.get("best", [])
    assert not [h for h in report["highlights"] if h["metric"] == "end_to_end_p99_us"]
    md = markdown.render(report)
    assert f"≥ {p99['lower_bound'] / 1000:,.2f}" in md
    assert "≥" in html.render(report) and "Missing messages" in md


def test_an_unknown_backlog_is_shown_as_undelivered_or_lost_not_as_loss(run):
    kafka = _cells(run, "kafka")
    events = _with_totals(run, kafka, received=lambda t: t["sent"] - 120, missing=120, undelivered_or_lost=120,
                          lost=None, undelivered=None, residual=0)
    report = build_report(events)
    config = next(c for g in report["groups"] for c in g["cells"] if c["broker"] == "kafka")
    text = markdown.loss_text(rows.config(config))
    assert text == "undelivered or lost 360 (broker backlog unknown)"  # 3 repeats × 120, never flagged ⚠ as loss
    assert "<td class='warn'>undelivered or lost 360 (broker backlog unknown)</td>" in html.render(report)
    results = build_results(events)
    cell = next(c for c in results["cells"] if c["cell_id"] == kafka[0])
    assert cell["lost"] is None and cell["undelivered_or_lost"] == 120
    rendered = table.loss_cell(cell)
    assert "[yellow]undelivered or lost 120 (broker backlog unknown)[/]" == rendered and "[red]" not in rendered
    console = Console(record=True, width=250)
    for t in table.comparison_tables(results):
        console.print(t)
    assert "undelivered or lost 120 (broker backlog unknown)" in console.export_text()


def test_an_accounting_residual_is_shown_as_an_error(run):
    kafka = _cells(run, "kafka")
    events = _with_totals(run, kafka[:1], residual=-30)
    report = build_report(events)
    config = next(c for g in report["groups"] for c in g["cells"] if c["broker"] == "kafka")
    assert markdown.loss_text(rows.config(config)) == "⚠ accounting residual -30"
    cell = next(c for c in build_results(events)["cells"] if c["cell_id"] == kafka[0])
    assert table.loss_cell(cell) == "[red]accounting residual -30[/]"


def test_brokers_are_compared_on_delivery_latency_and_formats_are_not():
    # Delivery latency (no codec) of every repeat: redis-streams' about twice kafka's, the same for both formats.
    spec = {**SPEC, "formats": ["json", "msgpack"]}
    events = copy.deepcopy(synthetic_run(spec, intervals=5, seed=4))
    cells = {c["cell_id"]: c for c in events[0]["data"]["cells"]}
    rng = np.random.default_rng(1)
    for e in events:
        if e["type"] == "IntervalMeasured":  # every second exactly on target: each cell is judged sustainable
            e["data"]["counters"].update(sent=1000, acked=1000, received=1000)
        if e["type"] == "CellCompleted":
            e["data"].pop("digest", None)  # its verdict is judged again from the steady intervals
            e["data"]["totals"].update(sent=5000, acked=5000, received=5000)
            scale = 2000 if cells[e["data"]["cell_id"]]["broker"] == "redis-streams" else 1000
            values = rng.lognormal(np.log(scale), 0.3, 5000).astype(np.int64)
            e["data"]["histograms"]["delivery_latency_us"] = histogram.encode(histogram.from_values(values))
    report = build_report(events)
    assert {c["sustainability"]["verdict"] for g in report["groups"] for c in g["cells"]} == {"sustainable"}
    claims = [h for h in report["highlights"] if h["metric"] == "delivery_p99_us"]
    assert claims and {h["axis"] for h in claims} == {"broker"}
    assert all("delivery p99" in h["text"] and h["ratio"] > 1.5 for h in claims)  # redis-streams against kafka
    config = report["groups"][0]["cells"][0]
    assert config["metrics"]["delivery_p99_us"]["median"] > 0 and "deliv p99 ms" in markdown.render(report)
