"""The one list of metrics (brokerbench.metrics): every table, the report model, the regression checks and the studies
show what it declares and nothing else, and each declaration points at something that exists."""

import io
import json
import re

import pytest
from rich.console import Console

from brokerbench import metrics
from brokerbench.figures import SUMMARY_FIELDS, _counts
from brokerbench.reports import html, markdown, regression, study, table
from brokerbench.reports.model import build_report
from brokerbench.reports.results import build_results
from brokerbench.series import SERIES_FIELDS
from synthetic import synthetic_run

SPEC = {"name": "metrics", "brokers": ["kafka", "redis-streams"], "formats": ["json"], "sizes": [1024],
        "rates": [1000], "modes": ["batch"], "repeats": 1}


@pytest.fixture(scope="module")
def events():
    """A run of two configurations, the second of which failed (its row is dashes across the metric columns)."""
    found = synthetic_run(SPEC, intervals=3, seed=7)
    last = max(i for i, e in enumerate(found) if e["type"] == "CellCompleted")
    end = found[last]
    found[last] = {**end, "type": "CellFailed",
                   "data": {"cell_id": end["data"]["cell_id"], "attempt": 0, "reason": "broker gone"}}
    return found


@pytest.fixture(scope="module")
def report(events):
    return build_report(events)


def grid_columns(header: list[str]) -> list[str]:
    """The metric columns of a comparison table's header: those between the format and the call floor."""
    return header[header.index("format") + 1:header.index("floor ns (enc / dec)")]


def test_the_markdown_grid_shows_the_declared_metrics_and_counts_its_columns_from_them(report):
    lines = [line for line in markdown.render(report).splitlines() if line.startswith("| ")]
    header = next(line for line in lines if line.startswith("| broker | format |"))
    names = [cell.strip() for cell in header.strip("|").split("|")]
    assert grid_columns(names) == [m.column for m in metrics.shown_in("grid").values()]
    rows = lines[lines.index(header) + 1:lines.index(header) + 3]
    assert {row.split(" | ")[0] for row in rows} == {"| kafka", "| redis-streams"}
    for row in rows:  # the completed row and the failed one have as many cells as the header
        assert row.count(" | ") == header.count(" | "), row
    assert any("FAILED: broker gone" in row for row in rows)


def test_the_html_grid_shows_the_declared_metrics_and_spans_them_on_a_failed_row(report):
    page = html.render(report)
    grid = next(t for t in re.findall(r"<table>.*?</table>", page, re.S) if "<th>floor ns (enc / dec)</th>" in t)
    header = re.findall(r"<th>(.*?)</th>", grid)
    assert grid_columns(header) == [m.column for m in metrics.shown_in("grid").values()]
    # a configuration's row (class 'config'), a failed one, and a verdict's reasons under its row all span the grid
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", grid, re.S)[1:]
    spans = [sum(int(re.search(r"colspan=(\d+)", td).group(1)) if "colspan" in td else 1
                 for td in re.findall(r"<td[^>]*>", row)) for row in rows]
    assert len(rows) >= 2 and spans == [len(header)] * len(rows)


def test_the_terminal_table_shows_the_declared_metrics(events):
    tables = table.comparison_tables(build_results(events))
    header = [str(column.header) for column in tables[0].columns]
    nets = metrics.net_figures()
    assert header[2:-2] == [m.column + (" / net" if key in nets else "")
                            for key, m in metrics.shown_in("terminal").items()]
    Console(file=io.StringIO(), width=250).print(tables[0])  # every row fits the columns (rich raises otherwise)
    assert all(len(column._cells) == 2 for column in tables[0].columns)


def test_the_report_model_figures_every_declared_report_metric_and_no_other(report):
    config = next(c for g in report["groups"] for c in g["cells"] if c["status"] == "completed")
    nets = {m.key for m in metrics.net_figures().values()}
    assert set(config["metrics"]) == set(metrics.shown_in("report")) | nets
    assert set(config["values_by_repeat"]) == set(metrics.shown_in("report")) | {"max_sustainable_rate"}


def test_the_regression_checks_and_the_history_read_the_declared_metrics(report):
    entry = next(e for e in regression.run_figures(report).values() if e["status"] == "completed")
    assert list(entry["repeats"]) == [k for k in metrics.regression_metrics() if k != "max_sustainable_rate"]
    assert list(regression.METRICS) == list(metrics.regression_metrics())


def test_every_study_metric_is_computed_and_an_undeclared_one_is_refused(events):
    run = study.stored_run(events)
    select = {"broker": next(c["broker"] for c in run.results["cells"] if c["status"] == "completed")}
    for key in metrics.shown_in("study"):
        study.our_figure(run, select, key)  # a metric our_figure does not compute raises StudyError
    assert study.our_figure(run, select, "e2e_p99_ms")[0] > 0
    with pytest.raises(study.StudyError, match="'e2e_p42_ms' is not a metric of ours"):
        study.our_figure(run, select, "e2e_p42_ms")


def test_each_declaration_points_at_what_exists(events):
    cell = next(c for c in build_results(events)["cells"] if c["status"] == "completed")
    assert len(metrics.METRICS) == len(metrics.ALL)  # keys are unique
    for m in metrics.ALL:
        assert m.shown <= set(metrics.SHOWN) and (m.shown or m.regression), m.key
        assert set(m.claims) <= set(metrics.CLAIMS) and (m.claim_floor is not None) == bool(m.claims), m.key
        assert m.series is None or m.series in SERIES_FIELDS, m.key
        assert (m.change_floor is not None) == m.regression, m.key
        if m.stat is not None:
            assert m.stat in SUMMARY_FIELDS, m.key
            assert m.sample_of in _counts(cell), m.key
        if m.shown & {"report", "grid", "terminal"} and m.net_of is None:  # read from a cell result
            assert m.field in cell, m.key
        elif m.net_of is not None:  # the measured figure it is net of is declared too
            assert metrics.METRICS[m.net_of].field == m.field.replace("_net_ns", "_ns"), m.key
    assert metrics.sample_of() == table.SAMPLE_OF
    assert {name for name in metrics.HISTOGRAMS} <= set(cell)


def test_a_place_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="place: 'sidebar' is not one of report, grid, terminal, study"):
        metrics.shown_in("sidebar")


def test_the_api_answers_the_list_as_declared():
    from brokerbench.api import build_app
    from brokerbench.api.deps import Deps

    app = build_app(Deps(store=None, starter=None, reports=None, schedules=list, mode="local"))
    event = {"resource": "/metrics", "path": "/metrics", "httpMethod": "GET", "headers": {}, "multiValueHeaders": {},
             "queryStringParameters": None, "multiValueQueryStringParameters": None, "pathParameters": None,
             "stageVariables": None, "body": None, "isBase64Encoded": False,
             "requestContext": {"resourcePath": "/metrics", "httpMethod": "GET", "path": "/prod/metrics",
                                "stage": "prod", "requestId": "r1", "identity": {"sourceIp": "10.0.0.1"}}}
    result = app.resolve(event, None)
    answered = json.loads(result["body"])["metrics"]
    assert result["statusCode"] == 200 and [m["key"] for m in answered] == list(metrics.METRICS)
    p99 = next(m for m in answered if m["key"] == "end_to_end_p99_us")
    assert p99 == {**p99, "label": "end-to-end p99", "unit": "ms", "scale": 1000.0, "stat": "p99",
                   "sample_of": "received", "claims": ["highlight", "best"], "regression": True,
                   "series": "end_to_end_p99_us", "shown": ["report", "grid", "terminal"]}
    # what the console's history page offers (app.js: the metrics with `regression`)
    assert [m["key"] for m in answered if m["regression"]] == list(regression.METRICS)


def test_the_end_to_end_max_column_is_the_stored_histograms_maximum(events, report):
    """Checked against hdrh's own decode of the histogram the cell stored, not against figures.py."""
    from hdrh.histogram import HdrHistogram

    end = next(e["data"] for e in events if e["type"] == "CellCompleted")
    cell = next(c for c in build_results(events)["cells"] if c["cell_id"] == end["cell_id"])
    expected = f"{HdrHistogram.decode(end['histograms']['end_to_end_latency_us']).get_max_value() / 1000:,.2f}"
    lines = markdown.render(report).splitlines()
    header = [part.strip() for part in next(line for line in lines if line.startswith("| broker | format |"))
              .strip("|").split("|")]
    row = next(line for line in lines if line.startswith(f"| {cell['broker']} | {cell['format']} |"))
    assert [part.strip() for part in row.strip("|").split("|")][header.index("e2e max ms")] == expected
    terminal = table.comparison_tables(build_results(events))[0]
    column = next(c for c in terminal.columns if c.header == "e2e max ms")
    row_index = next(i for i, c in enumerate(terminal.columns[0]._cells) if c == cell["broker"])
    assert column._cells[row_index] == expected
