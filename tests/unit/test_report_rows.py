"""The typed rows the renderers read (reports.rows): every figure a table shows has a declared field, a field of the
wrong type fails at conversion naming it, and an absent value reads as the rule says (None, empty, a dash)."""

import msgspec
import pytest
from synthetic import synthetic_run

from brokerbench.metrics import regression_metrics, shown_in
from brokerbench.reports import export, markdown, rows
from brokerbench.reports.model import build_report
from brokerbench.reports.results import build_results

SPEC = {"brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000], "formats": ["json"]}


def synthetic_events() -> list[dict]:
    return synthetic_run(SPEC, intervals=3)


def test_every_terminal_column_is_a_field_of_the_typed_cell():
    # The terminal's table reads a plain metric as an attribute: a metric shown there must be declared on the row.
    for metric in shown_in("terminal").values():
        assert metric.field in rows.ResultCell.__struct_fields__, metric.key


def test_every_csv_column_and_regression_series_is_a_declared_field():
    # cells.csv and the regression check read by attribute: a column or a series must be declared on its row.
    for name in (*export.CONFIGURATION, *export.FIGURES, *export.COUNTS, *export.SHOWN_PERCENTILES,
                 *export.NET.values()):
        assert name in rows.ResultCell.__struct_fields__, name
    for metric in regression_metrics().values():
        assert metric.series is None or metric.series in rows.Series.__struct_fields__, metric.key


def test_the_readers_typed_rows_hold_what_the_report_and_results_hold():
    events = synthetic_events()
    data = build_report(events)
    config = data["groups"][0]["cells"][0]
    typed = rows.config(config)
    assert typed.cell_ids == config["cell_ids"] and typed.values_by_repeat == config["values_by_repeat"]
    assert [r.verdict for r in typed.sustainability.repeats] == [r["verdict"] for r in config["sustainability"]["repeats"]]
    assert typed.intervals[0].in_schedule == config["intervals"][0]["in_schedule"]
    assert typed.intervals[0].of("throughput") == config["intervals"][0]["throughput"]
    cell = build_results(events)["cells"][0]
    assert export.csv_row(cell)["repeat"] == cell["repeat"] and export.csv_row(cell)["sent"] == cell["sent"]
    # a comparison's figures before its label: None for what it has not (no SE for too few samples)
    figures = rows.verdict({"metric": "throughput_msgs_per_s", "verdict": "unstable", "higher_is_better": True})
    assert figures.se is None and figures.projection is None and figures.p_tests == {}


def test_a_built_report_converts_and_keeps_its_figures():
    events = synthetic_events()
    data = build_report(events)
    report = rows.report(data)
    config, typed = data["groups"][0]["cells"][0], report.groups[0].cells[0]
    assert typed.key == config["key"] and typed.sustainability.verdict == config["sustainability"]["verdict"]
    for name, est in config["metrics"].items():
        assert typed.metrics[name].median == est["median"] and typed.metrics[name].n == est["n"]
    cell = build_results(events)["cells"][0]
    typed_cell = rows.result_cell(cell)
    assert typed_cell.end_to_end_latency_us.p99 == cell["end_to_end_latency_us"]["p99"]
    assert type(typed_cell.sent) is type(cell["sent"])  # an integer stays an integer (it prints as stored)


def test_a_field_of_the_wrong_type_fails_at_conversion_naming_it():
    data = build_report(synthetic_events())
    data["groups"][0]["cells"][0]["metrics"]["end_to_end_p99_us"]["median"] = "fast"
    with pytest.raises(msgspec.ValidationError, match=r"metrics\[\.\.\.\]\.median"):
        rows.report(data)
    whole = build_report(synthetic_events())
    del whole["environment"]
    with pytest.raises(msgspec.ValidationError, match="environment"):
        rows.report(whole)


def test_absent_values_read_by_rule():
    config = rows.config({"status": "completed", "sustainability": {"verdict": "sustainable"}})
    assert config.loss.lost is None and config.searches == [] and config.ratio("format", "lost") is None
    assert markdown.loss_text(config) == "–" and markdown.floor_text(config) == "–"
    verdict = rows.Verdict(key="k")
    assert verdict.name == "k" and rows.Verdict().name == "–"
