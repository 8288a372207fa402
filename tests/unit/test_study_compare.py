"""`brokerbench study`: the published tables and conclusions of each study, and our figures beside them.

The published sections are checked against themselves (every check, run on the study's own figures, must not
contradict the claim it stands for) and against the suite (every table can be filled from the study's runs).
Our figures are checked on synthetic runs against independent computations: hdrh's own histogram merge for
latency, the median of the cells' results for throughput, the stored backlog samples for lag.
"""

import copy
import statistics

from hdrh.histogram import HdrHistogram
import pytest
from synthetic import synthetic_run

from brokerbench.reports import study
from brokerbench.spec import expand, load_suite_file, suite_runs, validate

STUDIES = study.study_names()
PLANNED = {**study.SELECTORS, "rate": "rate"}  # a planned cell's names for the selectors (results say rate_target)


def test_the_five_studies_have_published_sections():
    assert STUDIES == ["downard", "helenius", "myastovskiy", "tallberg", "vandongen"]


@pytest.mark.parametrize("name", STUDIES)
def test_every_table_fits_its_rows_columns_and_the_studys_runs(name):
    runs = {run["name"]: run for run in suite_runs(name)}
    for table in load_suite_file(name)["published"]["tables"]:  # as written
        assert len(table["values"]) == len(table["rows"]), table["id"]
        assert all(len(values) == len(table["columns"]) for values in table["values"]), table["id"]
        for row in table["rows"]:
            run_name = row.get("run", table["run"])
            assert run_name in runs, (table["id"], run_name)
            cells = expand(validate(runs[run_name]))
            for column in table["columns"]:
                metric = column.get("metric") or row.get("metric") or table.get("metric")
                assert metric in study.METRICS, (table["id"], metric)
                select = study._selector(table.get("select", {}), row, column)
                matched = [c for c in cells if all(c[PLANNED[k]] == v for k, v in select.items())]
                # a row for a broker that cannot run here (Redpanda) is the only one allowed to match nothing
                assert matched or row.get("broker") == "redpanda", (table["id"], row["label"], column["label"])


@pytest.mark.parametrize("name", STUDIES)
def test_no_conclusion_is_contradicted_by_the_studys_own_figures(name):
    comparison = study.compare(study.load_study(name), {})
    for conclusion in comparison["conclusions"]:
        assert conclusion["theirs"]["verdict"] in (study.HOLDS, study.UNKNOWN, "not checked"), conclusion
        # with no run stored, nothing of ours can be decided
        assert conclusion["ours"]["verdict"] in (study.UNKNOWN, "not checked"), conclusion


def test_the_checks_decide_as_the_figures_say():
    tables = {"t": {"short": "t", "unit": "u", "columns": ["c"],
                    "rows": [{"label": "a", "figures": [{"ours": 10.0, "theirs": 1.0}]},
                             {"label": "b", "figures": [{"ours": 5.0, "theirs": 2.0}]},
                             {"label": "c", "figures": [{"ours": None, "theirs": 3.0}]}]}}
    order = {"kind": "order", "table": "t", "column": "c", "rows": ["a", "b"]}
    assert study.evaluate(order, tables, "ours")[0] == study.HOLDS
    assert study.evaluate(order, tables, "theirs")[0] == study.FAILS
    assert study.evaluate({**order, "rows": ["a", "c"]}, tables, "ours")[0] == study.UNKNOWN
    highest = {"kind": "highest", "table": "t", "column": "c", "row": "a"}
    assert study.evaluate(highest, tables, "ours")[0] == study.HOLDS  # c has no figure: among those given
    assert study.evaluate(highest, tables, "theirs")[0] == study.FAILS
    assert study.evaluate({**highest, "kind": "lowest", "row": "b"}, tables, "ours")[0] == study.HOLDS
    ratio = {"kind": "ratio", "table": "t", "a": {"row": "a", "column": "c"}, "b": {"row": "b", "column": "c"},
             "min": 1.5, "max": 2.5}
    verdict, text = study.evaluate(ratio, tables, "ours")
    assert verdict == study.HOLDS and "= 2.00" in text
    assert study.evaluate(ratio, tables, "theirs")[0] == study.FAILS  # 0.5
    assert study.evaluate({**ratio, "b": {"row": "c", "column": "c"}}, tables, "ours")[0] == study.UNKNOWN
    ranged = {"kind": "range", "table": "t", "row": "b", "column": "c", "max": 4}
    assert study.evaluate(ranged, tables, "ours")[0] == study.FAILS
    assert study.evaluate(ranged, tables, "theirs")[0] == study.HOLDS
    both = {"claim": "x", "checks": [order, ranged]}
    assert study.judge(both, tables, "ours")["verdict"] == study.FAILS


SPEC = {"name": "tallberg-latency", "brokers": ["kafka-zookeeper", "pulsar", "redis-streams"],
        "sizes": [1000], "rates": [1000, 5000], "formats": ["raw"], "repeats": 3}


def synthetic(seed=5):
    return study.stored_run(synthetic_run(SPEC, intervals=4, seed=seed))


def hdrh_merge(blobs):
    merged = HdrHistogram(1, 3_600_000_000, 3)
    for blob in blobs:
        merged.add(HdrHistogram.decode(blob))
    return merged


def test_latency_figures_are_the_repeats_messages_merged():
    run = synthetic()
    select = {"broker": "pulsar", "size": 1000, "rate": 5000}
    cells = [c for c in run.results["cells"] if c["broker"] == "pulsar" and c["rate_target"] == 5000]
    assert len(cells) == 3
    merged = hdrh_merge([run.completed[c["cell_id"]]["histograms"]["end_to_end_latency_us"] for c in cells])
    mean, ids = study.our_figure(run, select, "e2e_mean_ms")
    assert sorted(ids) == sorted(c["cell_id"] for c in cells)
    assert mean == pytest.approx(merged.get_mean_value() / 1000, rel=2e-3)
    assert study.our_figure(run, select, "e2e_max_ms")[0] == pytest.approx(merged.get_max_value() / 1000, rel=2e-3)
    assert study.our_figure(run, select, "e2e_min_ms")[0] == pytest.approx(merged.get_min_value() / 1000, rel=2e-3)
    assert study.our_figure(run, select, "e2e_p50_ms")[0] == pytest.approx(
        merged.get_value_at_percentile(50) / 1000, rel=2e-3)


def test_throughput_is_the_median_of_the_repeats():
    run = synthetic()
    cells = [c for c in run.results["cells"] if c["broker"] == "redis-streams" and c["rate_target"] == 1000]
    value, _ = study.our_figure(run, {"broker": "redis-streams", "rate": 1000}, "throughput_msgs_per_s")
    assert value == statistics.median(c["throughput_msgs_per_s"] for c in cells)
    # MB of 2^20 bytes, as Tallberg's figures: the delivered bytes over the window, independently
    mib, _ = study.our_figure(run, {"broker": "redis-streams", "rate": 1000}, "throughput_mib_per_s")
    assert mib == pytest.approx(statistics.median(
        c["received"] * 1000 / c["delivery_window_s"] / 2**20 for c in cells), rel=1e-3)


def test_lag_figures_are_the_stored_backlog_samples():
    events = copy.deepcopy(synthetic_run(SPEC, intervals=4, seed=6))
    samples = {}
    for event in events:
        if event["type"] == "CellCompleted":
            index = event["sk"]
            digest = event["data"]["digest"]
            backlog = [len(samples) * 10 + i for i in range(len(digest["backlog"]))]
            digest["backlog"] = backlog
            samples[index] = backlog
            for column, values in digest.items():  # a drain interval after the schedule: not a lag sample
                if isinstance(values, list) and len(values) == len(backlog):
                    values.append(values[-1])
            digest["interval"][-1], digest["backlog"][-1] = len(backlog) - 1, 10**9
    run = study.stored_run(events)
    cells = [c["cell_id"] for c in run.results["cells"] if c["broker"] == "kafka-zookeeper"]
    wanted = [v for c in cells for v in run.completed[c]["digest"]["backlog"][:-1]]
    assert all(run.completed[c]["digest"]["backlog"][-1] == 10**9 for c in cells)
    select = {"broker": "kafka-zookeeper"}
    assert study.our_figure(run, select, "lag_mean")[0] == pytest.approx(sum(wanted) / len(wanted))
    assert study.our_figure(run, select, "lag_max")[0] == max(wanted)
    assert study.our_figure(run, select, "lag_min")[0] == min(wanted)


def test_a_table_shows_theirs_ours_and_the_ratio_and_names_the_run():
    run = synthetic()
    definition = study.load_study("tallberg")
    comparison = study.compare(definition, {"tallberg-latency": run})
    table4 = next(t for t in comparison["tables"] if t["id"] == "table4")
    assert table4["run_ids"] == [run.run_id]
    kafka_mean = table4["rows"][0]["figures"][0]
    assert kafka_mean["theirs"] == 1.995
    assert kafka_mean["ratio"] == pytest.approx(kafka_mean["ours"] / 1.995)
    throughput = next(t for t in comparison["tables"] if t["id"] == "table2-msgs")
    assert throughput["run_ids"] == [] and all(f["ours"] is None for r in throughput["rows"] for f in r["figures"])
    text = study.markdown(comparison)
    assert f"ours from run `{run.run_id}`" in text
    assert "no stored run" in text  # the throughput run is missing, and says so
    assert study.fmt(kafka_mean["ours"]) in text
    # the conclusions on latency are decided from the run; those on throughput cannot be
    verdicts = {c["claim"][:2]: c["ours"]["verdict"] for c in comparison["conclusions"]}
    assert verdicts["1."] == study.UNKNOWN
    assert verdicts["9."] in (study.HOLDS, study.FAILS)


def test_a_run_of_another_study_or_an_unknown_study_is_refused():
    with pytest.raises(study.StudyError) as raised:
        study.load_study("quick")
    assert raised.value.field == "study"
    with pytest.raises(study.StudyError) as raised:
        study.load_study("../tallberg")
    assert raised.value.field == "study"


def test_the_document_opens_with_each_study_at_a_glance():
    run = synthetic()
    comparisons = [study.compare(study.load_study("tallberg"), {"tallberg-latency": run}),
                   study.compare(study.load_study("vandongen"), {})]
    text = study.document(comparisons)
    tallberg = next(line for line in text.splitlines() if line.startswith("| [Tallberg 2020](#tallberg-2020-tallberg)"))
    verdicts = [c["ours"]["verdict"] for c in comparisons[0]["conclusions"]]
    cells = [cell.strip() for cell in tallberg.strip("|").split("|")]
    assert cells[1] == "1 of 2"  # the throughput run is not stored
    assert cells[2].endswith("UTC") and run.results["requested_at"][:10] in cells[2]
    assert cells[3:] == [str(len([v for v in verdicts if v != "not checked"])), str(verdicts.count(study.HOLDS)),
                         str(verdicts.count(study.FAILS)), str(verdicts.count(study.UNKNOWN))]
    assert "| [van Dongen 2020](#van-dongen-2020-vandongen) | 0 of 4 | not measured |" in text
    assert text.index("| [Tallberg 2020]") < text.index("## Tallberg 2020 (`tallberg`)")


def test_startup_and_burst_figures_of_a_study_by_hand():
    """first message and read rate: the median over the cells; bursts: over every measured burst, none if any was
    not wholly delivered."""
    def cell(cell_id, startup, cycles):
        return {"cell_id": cell_id, "status": "completed", "broker": "kafka", "startup": startup,
                "bursts": {"cycles": [{"delivered_in_ms": v} for v in cycles]}}
    cells = [cell("a", {"first_delivery_s": 0.1, "backlog_read_s": 2.0, "read_rate_msgs_per_s": 500.0}, [200, 300]),
             cell("b", {"first_delivery_s": 0.3, "backlog_read_s": None, "read_rate_msgs_per_s": None}, [250]),
             cell("c", {"first_delivery_s": 0.2, "backlog_read_s": 4.0, "read_rate_msgs_per_s": 250.0}, [400])]
    run = study.StoredRun("r", "n", {"cells": cells}, [])
    select = {"broker": "kafka"}
    assert study.our_figure(run, select, "first_delivery_s") == (0.2, ["a", "b", "c"])
    assert study.our_figure(run, select, "backlog_read_s")[0] == 3.0  # b's backlog never wholly arrived
    assert study.our_figure(run, select, "backlog_read_rate")[0] == 375.0
    assert study.our_figure(run, select, "burst_delivered_p50_ms")[0] == 275.0  # of 200, 250, 300, 400
    assert study.our_figure(run, select, "burst_delivered_max_ms")[0] == 400.0
    cells[1]["bursts"]["cycles"].append({"delivered_in_ms": None})
    assert study.our_figure(run, select, "burst_delivered_max_ms")[0] is None


# The scales the study tests run at (tests/integration/test_study_run.py, test_study_suites_run.py): those runs are
# cut further to the smallest shape (tests/study_scale.py), so what the whole scaled matrix gives is
# checked here, on synthetic runs of every run of the study as the user's scale leaves it.
USER_SCALES = {"tallberg": 0.02, "helenius": 0.002, "myastovskiy": 0.002, "downard": 0.05}
FROM_REAL_RUNS_ONLY = ("lag_",)  # broker backlog samples: a synthetic run has none (helenius' lag table)


@pytest.mark.parametrize("name", sorted(USER_SCALES))
def test_the_user_scaled_study_fills_every_figure_and_decides_every_checked_conclusion(name):
    from brokerbench.spec import scaled

    definition = study.load_study(name)
    runs = {}
    for number, request in enumerate(suite_runs(name)):
        small = scaled(request, USER_SCALES[name])
        small = {k: v for k, v in small.items() if k not in ("duration_s", "messages")}  # synthetic intervals instead
        runs[request["name"]] = study.stored_run(synthetic_run(small, intervals=3, seed=number))
    comparison = study.compare(definition, runs)
    metrics = {t["id"]: t for t in load_suite_file(name)["published"]["tables"]}
    for table in comparison["tables"]:
        published = metrics[table["id"]]
        for r, row in enumerate(table["rows"]):
            for c, figure in enumerate(row["figures"]):
                metric = study._metric(published, published["rows"][r], published["columns"][c])
                if published["rows"][r].get("broker") == "redpanda" or metric.startswith(FROM_REAL_RUNS_ONLY):
                    continue
                assert figure["ours"] is not None and figure["cells"], (table["id"], row["label"], c)
    if name == "helenius":  # its checked conclusions need the lag samples or Redpanda
        return
    for conclusion in comparison["conclusions"]:
        assert conclusion["ours"]["verdict"] in (study.HOLDS, study.FAILS, "not checked"), conclusion


def test_a_malformed_check_or_conclusion_names_the_field():
    tables = {"t": {"short": "t", "unit": "u", "columns": ["c"], "rows": [{"label": "a", "figures": [{"ours": 1.0}]}]}}
    with pytest.raises(study.StudyError, match=r"^check: .*\$\.table") as found:
        study.evaluate({"kind": "range", "table": 3, "row": "a", "column": "c"}, tables, "ours")
    assert found.value.field == "check"
    with pytest.raises(study.StudyError, match=r"^conclusion: .*`kind` - at `\$\.checks\[0\]`"):
        study.judge({"claim": "x", "checks": [{"table": "t"}]}, tables, "ours")


def test_a_malformed_table_or_a_misspelled_selector_names_the_field():
    """A published table is read as study.Table: a selector key it does not know fails naming it (read as a dict,
    it was ignored, and the figure taken over more cells than meant); a figure of the wrong type names its place."""
    table = load_suite_file("tallberg")["published"]["tables"][0]
    assert study.compare_table(table, {})["short"] == table["short"]  # as written
    table["rows"][0]["brokr"] = table["rows"][0].pop("broker")
    with pytest.raises(study.StudyError, match=r"^table: .*unknown field `brokr` - at `\$\.rows\[0\]`") as found:
        study.compare_table(table, {})
    assert found.value.field == "table"
    table["rows"][0]["broker"] = table["rows"][0].pop("brokr")
    table["values"][0][0] = "137k"
    with pytest.raises(study.StudyError, match=r"\$\.values\[0\]\[0\]"):
        study.compare_table(table, {})
    with pytest.raises(study.StudyError, match=r"^selection: .*unknown field `formt`"):
        study._selector({"formt": "json"})


def test_latency_counts_what_was_never_measured_as_the_report_does():
    """Messages not received in time sit at +infinity in a study's latency figures, as in the report's
    (results.MISSING_RULE): a percentile whose rank falls among them, the mean and the maximum are out of reach and
    shown as the least they can be, never as the figure of the messages that happened to arrive."""
    events = copy.deepcopy(synthetic_run(SPEC, intervals=4, seed=5))
    missing = 40
    for event in events:
        if event["type"] == "CellCompleted" and event["data"]["cell_id"].startswith("pulsar."):
            event["data"]["totals"]["received"] -= missing  # sent, never received in time
    run = study.stored_run(events)
    select = {"broker": "pulsar", "size": 1000, "rate": 5000}
    cells = [c for c in run.results["cells"] if c["broker"] == "pulsar" and c["rate_target"] == 5000]
    merged = hdrh_merge([run.completed[c["cell_id"]]["histograms"]["end_to_end_latency_us"] for c in cells])
    measured, never = merged.get_total_count(), missing * len(cells)
    # the median's rank, over every message, falls among the measured ones: read there
    rank = max(int(50 * (measured + never) / 100 + 0.5), 1)
    assert study.our_figure(run, select, "e2e_p50_ms")[0] == pytest.approx(
        merged.get_value_at_percentile(100 * rank / measured) / 1000, rel=2e-3)
    # the mean and the maximum are not known: no figure, and at least the mean of what was measured
    assert study.our_figure(run, select, "e2e_mean_ms")[0] is None
    assert study.our_bound(run, select, "e2e_mean_ms") == pytest.approx(merged.get_mean_value() / 1000, rel=2e-3)
    assert study.our_figure(run, select, "e2e_max_ms")[0] is None
    assert study.our_figure(run, select, "e2e_min_ms")[0] == pytest.approx(merged.get_min_value() / 1000, rel=2e-3)
    table4 = next(t for t in study.compare(study.load_study("tallberg"), {"tallberg-latency": run})["tables"]
                  if t["id"] == "table4")
    pulsar = [f for r in table4["rows"] for f in r["figures"] if f["cells"] and set(f["cells"]) <= {
        c["cell_id"] for c in run.results["cells"] if c["broker"] == "pulsar"}]
    out_of_reach = [f for f in pulsar if f["ours"] is None]  # the mean; the minimum stays a figure
    assert out_of_reach and all(f["ours_at_least"] > 0 for f in out_of_reach)
    assert f"≥ {study.fmt(out_of_reach[0]['ours_at_least'])}" in study.markdown(
        study.compare(study.load_study("tallberg"), {"tallberg-latency": run}))
