"""results.json's documented format (schemas/results.schema.json, docs/results.md) and the files other tools read
beside it: cells.csv and the HdrHistogram logs under hlog/."""

import copy
import json
import re
from pathlib import Path

import pytest
from archives import archives, read_archive
from results_tools import assert_logs_match, number, read_cells_csv, read_hlog
from synthetic import synthetic_run

from brokerbench import histogram
from brokerbench.events.memory import MemoryEventStore
from brokerbench.reports import export
from brokerbench.reports.model import PERCENTILES, min_samples, need_label
from brokerbench.reports.results import RESULTS_SCHEMA, SCHEMA_VERSION, build_results, problems
from brokerbench.reports.table import comparison_tables
from brokerbench.spec import SpecError, all_suite_names, suite_runs, validate
from brokerbench.workflow import steps
from brokerbench.workflow.outputs import FolderReports

REPO = Path(__file__).resolve().parents[2]
SHORT_S = 2  # intervals per synthetic cell, where the run's request allows so short a run


def _suite_run_ids():
    return [(name, i) for name in all_suite_names() for i in range(len(suite_runs(name)))]


def _intervals(request: dict) -> int:
    """The fewest intervals a synthetic run of this request may have: SHORT_S, or its own duration where faults or
    a rate search need it."""
    try:
        validate({**request, "duration_s": SHORT_S})
        return SHORT_S
    except SpecError:
        return request["duration_s"]


@pytest.mark.parametrize("suite,index", _suite_run_ids(), ids=lambda v: str(v))
def test_every_suite_run_gives_results_the_schema_accepts(suite, index):
    request = suite_runs(suite)[index]
    results = build_results(synthetic_run(request, intervals=_intervals(request), seed=index))
    assert results["schema_version"] == SCHEMA_VERSION
    assert problems(results) == []
    assert len(results["cells"]) > 0 and all(c["status"] == "completed" for c in results["cells"])


ARCHIVED = [p for folder in ("guarantees", "studies") for p in archives(REPO / "docs" / folder).values()]


@pytest.mark.parametrize("path", ARCHIVED, ids=lambda p: p.name.removesuffix(".jsonl.gz"))
def test_every_archived_real_run_gives_results_the_schema_accepts(path):
    """Real runs stored by earlier releases: faults applied, rate searches, backlogs and bursts."""
    results = build_results(read_archive(path))
    assert problems(results) == []


SMOKE = {"name": "fmt", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000],
         "formats": ["json", "msgpack"], "warmup_s": 0}


def _with_missing(events: list[dict], cell_index: int, missing: int) -> list[dict]:
    """The run with `missing` of one cell's sent messages lost: its end-to-end percentiles then count them at +∞."""
    events = copy.deepcopy(events)
    end = next(e for e in events if e["type"] == "CellCompleted" and e["sk"].startswith(f"10#c{cell_index:05d}#"))
    totals = end["data"]["totals"]
    totals.update(received=totals["received"] - missing, lost=missing,
                  bytes_received=totals["bytes_received"] - missing * 1024)
    return events


def test_results_of_a_failed_and_an_unfinished_cell_conform_too():
    events = synthetic_run(SMOKE, intervals=2)
    ends = [e for e in events if e["type"] == "CellCompleted"]
    failed = {**ends[0], "type": "CellFailed", "data": {"cell_id": ends[0]["data"]["cell_id"], "attempt": 0,
                                                        "reason": "broker did not answer"}}
    events = [failed if e is ends[0] else e for e in events if e is not ends[1]]  # ends[1]'s cell: no end
    results = build_results(events)
    assert [c["status"] for c in results["cells"]].count("completed") == 2
    assert {c["status"] for c in results["cells"]} == {"completed", "failed", "incomplete"}
    assert problems(results) == []


def test_a_departure_from_the_format_is_named_with_its_place():
    results = build_results(synthetic_run(SMOKE, intervals=2))
    broken = copy.deepcopy(results)
    broken["cells"][1]["end_to_end_latency_us"]["p99"] = "fast"
    del broken["cells"][0]["sent"]
    broken["cells"][2]["throughput_msgs_per_second"] = 1.0
    broken["schema_version"] = 2
    found = problems(broken)
    assert any(p.startswith("cells/1/end_to_end_latency_us/p99: 'fast' is not of type") for p in found), found
    assert "cells/0: 'sent' is a required property" in found
    assert any(p.startswith("cells/2: Additional properties are not allowed ('throughput_msgs_per_second'")
               for p in found), found
    assert "schema_version: 1 was expected" in found
    assert len(found) == 4


def _documented_names() -> set[str]:
    return set(re.findall(r"`([a-z_0-9]+)`", (REPO / "docs" / "results.md").read_text()))


def test_every_field_and_column_is_documented():
    schema = json.loads(RESULTS_SCHEMA.read_text())
    fields = {*schema["properties"], *schema["$defs"]["cell"]["properties"], *schema["$defs"]["latency"]["properties"],
              *schema["properties"]["environment"]["properties"]}
    columns = set(export.csv_columns())
    documented = _documented_names()
    assert sorted(fields - documented) == []
    # A CSV column is named, or is a documented metric with a percentile, _at_least or _count after it.
    metric_of = lambda column: re.sub(r"_(p50|p99|p999)(_at_least)?$|_count$", "", column)  # noqa: E731
    assert sorted(c for c in columns if c not in documented and metric_of(c) not in documented) == []


@pytest.fixture(scope="module")
def stored():
    """A synthetic run in the in-memory store, one of its cells with messages missing, and its results."""
    events = _with_missing(synthetic_run(SMOKE, intervals=4, seed=5), cell_index=0, missing=3)
    store = MemoryEventStore(events)
    return store, events, build_results(events)


def test_hlog_files_read_back_to_the_results_percentiles(stored, tmp_path):
    store, events, results = stored
    written = dict(export.hlog_files(store, results["run_id"], events))
    recorded = {(e["data"]["cell_id"], m) for e in events if e["type"] == "CellCompleted" for m in e["data"]["histograms"]}
    assert set(written) == {export.hlog_path(cell_id, metric) for cell_id, metric in recorded}
    for name, text in written.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    checked = assert_logs_match(tmp_path, results, intervals={c["cell_id"]: 4 for c in results["cells"]})
    assert checked == len(written) - 1  # all but the end-to-end latency of the cell with missing messages
    # The intervals added up are the cell's cumulative histogram, as CellCompleted stored it.
    for end in (e["data"] for e in events if e["type"] == "CellCompleted"):
        for metric, blob in end["histograms"].items():
            total, _ = read_hlog(tmp_path / export.hlog_path(end["cell_id"], metric))
            cumulative = histogram.decode(blob)
            assert total.get_total_count() == cumulative.get_total_count() > 0
            assert histogram.summary(total) == histogram.summary(cumulative)


def test_hlog_is_the_hdrhistogram_log_format(stored):
    store, events, results = stored
    name, text = next(iter(export.hlog_files(store, results["run_id"], events)))
    lines = text.splitlines()
    assert lines[0] == "#[Histogram log format version 1.2]"
    assert lines[2] == '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"'
    start, length, most, payload = lines[3].split(",")
    assert (float(start), float(length)) == (0.0, 1.0) and payload.startswith("HISTF")
    cell_id, metric = name.removeprefix("hlog/").removesuffix(".hlog").rsplit(".", 1)
    interval = next(e["data"] for e in events if e["type"] == "IntervalMeasured" and e["data"]["interval"] == 0
                    and e["data"]["cell_id"] == cell_id)
    assert float(most) == histogram.decode(interval["histograms"][metric]).get_max_value()
    assert payload == interval["histograms"][metric]  # the stored encoding, as it was recorded


def test_an_interval_without_values_stays_in_the_log_empty():
    intervals = [{"interval": 0, "histograms": {"publish_latency_us": histogram.encode(histogram.from_values([5, 9]))},
                  "summary": {"publish_latency_us": {"count": 2, "p50": 5, "p99": 9, "max": 9}}},
                 {"interval": 1, "histograms": {}, "summary": {}},
                 {"interval": 2, "histograms": {"publish_latency_us": histogram.encode(histogram.from_values([7]))}}]
    text = export.hlog_text("r", "c", "publish_latency_us", intervals)
    rows = [line.split(",") for line in text.splitlines()[3:]]
    assert [(float(r[0]), float(r[2])) for r in rows] == [(0.0, 9.0), (1.0, 0.0), (2.0, 7.0)]
    assert histogram.decode(rows[1][3]).get_total_count() == 0


def _table_figures(results: dict) -> dict[tuple, dict[str, str]]:
    """The terminal comparison table's cells, by (title's first line, broker, format)."""
    out = {}
    for table in comparison_tables(results):
        columns = {c.header: list(c._cells) for c in table.columns}
        for i, broker in enumerate(columns["broker"]):
            out[(table.title.split("\n")[0], broker, columns["format"][i])] = {k: v[i] for k, v in columns.items()}
    return out


def test_cells_csv_reads_back_to_the_table(stored, tmp_path):
    _, _, results = stored
    (tmp_path / export.CELLS_CSV).write_text(export.cells_csv(results))
    rows = read_cells_csv(tmp_path / export.CELLS_CSV)
    assert list(rows) == [c["cell_id"] for c in results["cells"]]
    table = _table_figures(results)
    ms = lambda text: f"{number(text) / 1000:.2f}"  # noqa: E731 (the table's ms)
    bounded = withheld = 0
    for cell in results["cells"]:
        row = rows[cell["cell_id"]]
        shown = table[(f"1,024 B (record basis) · 1,000 msgs/s · {cell['mode']} mode", cell["broker"], cell["format"])]
        assert number(row["throughput_msgs_per_s"]) == cell["throughput_msgs_per_s"]
        assert f"{number(row['throughput_msgs_per_s']):,.0f}" == shown["delivered msgs/s"]
        assert f"{number(row['throughput_mb_per_s']):,.2f}" == shown["MB/s"]
        assert f"{number(row['encoded_bytes']):,.0f}" == shown["bytes"]
        for column, header in (("end_to_end_latency_us_p50", "e2e p50 ms"), ("end_to_end_latency_us_p99", "e2e p99 ms"),
                               ("end_to_end_latency_us_p999", "e2e p99.9 ms"), ("delivery_latency_us_p99", "deliv p99 ms"),
                               ("publish_delay_us_p99", "delay p99 ms")):
            if row[column] == "" and row[column + "_at_least"] == "":  # not measured (synthetic runs: delivery)
                assert shown[header] == "-"
            elif row[column] == "":  # known from below: the table shows the bound
                bounded += 1
                assert shown[header] == f"[yellow]≥ {ms(row[column + '_at_least'])}[/]"
            else:
                assert row[column + "_at_least"] == ""
                metric, name = column.rsplit("_", 1)
                need = min_samples(PERCENTILES[name])
                if number(row[f"{metric}_count"]) < need:  # the table withholds it; the CSV has its count
                    withheld += 1
                    assert shown[header] == f"[dim]{need_label(need)}[/]"
                else:
                    assert ms(row[column]) == shown[header], (cell["cell_id"], column)
        assert shown["enc ns / net"].startswith(f"{number(row['encode_ns_p50']):,.0f} / ")
        assert shown["dec ns / net"].startswith(f"{number(row['decode_ns_p50']):,.0f} / ")
        assert int(row["lost"]) == cell["lost"] and int(row["sent"]) == cell["sent"]
        assert int(row["end_to_end_latency_us_count"]) == cell["received"]
        assert row["verdict"] == cell["verdict"] and f"]{row['verdict']}[/]" in shown["status"]
        assert (row["client_bound"], row["host_busy"]) == ("", "")  # synthetic cells: neither was recorded
    assert bounded >= 1 and withheld >= 1  # the cell with missing messages; a p99.9 of fewer than 10,000 values


def test_cells_csv_marks_a_client_bound_cell_on_a_busy_host(stored, tmp_path):
    _, _, results = stored
    cells = [{**results["cells"][0], "limit": {"by": "client"}, "host": {"busy": True}},
             {**results["cells"][1], "limit": {"by": "broker"}, "host": {"busy": False}}]
    (tmp_path / export.CELLS_CSV).write_text(export.cells_csv({**results, "cells": cells}))
    rows = list(read_cells_csv(tmp_path / export.CELLS_CSV).values())
    assert [(r["client_bound"], r["host_busy"]) for r in rows] == [("true", "true"), ("false", "false")]


def test_cells_csv_says_how_each_cell_was_stamped_in_its_last_two_columns(stored, tmp_path):
    _, _, results = stored
    cells = [{**results["cells"][0], "ack_stamps": "client:librdkafka", "delivery_stamps": "arrival, client:librdkafka"},
             {**results["cells"][1], "ack_stamps": "arrival", "delivery_stamps": None}]
    (tmp_path / export.CELLS_CSV).write_text(export.cells_csv({**results, "cells": cells}))
    header = (tmp_path / export.CELLS_CSV).read_text().splitlines()[0].split(",")
    assert header[-2:] == ["ack_stamps", "delivery_stamps"] and header[-3] == "host_busy"  # the others keep their place
    rows = list(read_cells_csv(tmp_path / export.CELLS_CSV).values())
    assert [(r["ack_stamps"], r["delivery_stamps"]) for r in rows] == [
        ("client:librdkafka", "arrival, client:librdkafka"), ("arrival", "")]  # as results.json has them; None empty


def test_the_logs_are_written_where_the_reports_are(stored, tmp_path):
    store, events, results = stored
    sink = FolderReports(tmp_path)
    folder = export.write_hlogs(lambda name, text: sink.write(results["run_id"], name, text), store,
                                results["run_id"], events)
    assert folder == str(tmp_path / results["run_id"] / "hlog")
    expected = dict(export.hlog_files(store, results["run_id"], events))
    assert {f"hlog/{p.name}": p.read_text() for p in (tmp_path / results["run_id"] / "hlog").iterdir()} == expected
    assert export.write_hlogs(sink.write, store, results["run_id"], [e for e in events if e["type"] != "CellCompleted"]
                              ) is None  # no completed cell: no logs


def test_aggregate_writes_the_logs_up_to_its_limit_of_intervals(stored, tmp_path, monkeypatch):
    store, events, results = stored
    monkeypatch.setenv("BROKERBENCH_REPORTS", str(tmp_path))
    files = steps.publish_reports(store, results["run_id"], events)
    folder = tmp_path / results["run_id"]
    assert files["csv"] == str(folder / export.CELLS_CSV) and files["hlog"] == str(folder / export.HLOG_DIR)
    assert len(list((folder / export.HLOG_DIR).iterdir())) == 4 * 5
    assert export.run_intervals(events) == 4 * 4  # four cells of four seconds
    monkeypatch.setattr(export, "AGGREGATE_MAX_INTERVALS", 15)
    other = tmp_path / "other"
    monkeypatch.setenv("BROKERBENCH_REPORTS", str(other))
    files = steps.publish_reports(store, results["run_id"], events)
    assert "hlog" not in files and not (other / results["run_id"] / export.HLOG_DIR).exists()
    assert (other / results["run_id"] / export.CELLS_CSV).is_file()
