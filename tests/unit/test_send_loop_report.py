"""Which send loop measured each cell, in the report and in comparisons (reports.model.SEND_LOOP_RULE): one loop is
named in the header; a report whose cells mix loops says so in words and names each row's loop; a comparison of
cells measured by different loops says so in each verdict and on `brokerbench compare`'s summary line."""

import copy

import pytest
from synthetic import synthetic_run

from brokerbench.reports import html, markdown
from brokerbench.reports import regression as R
from brokerbench.reports.model import build_report

SPEC = {"name": "loops", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000],
        "formats": ["json", "msgpack"], "repeats": 1}


def with_loops(events, loop_of):
    """The run's events with each CellCompleted's send_loop set to loop_of(cell) (the worker's field)."""
    cells = {c["cell_id"]: c for c in events[0]["data"]["cells"]}
    out = copy.deepcopy(events)
    for e in out:
        if e["type"] == "CellCompleted":
            e["data"]["send_loop"] = loop_of(cells[e["data"]["cell_id"]])
    return out


@pytest.fixture(scope="module")
def run():
    return synthetic_run(SPEC, intervals=6, seed=5)


def rows(text: str) -> list[str]:
    """The grids' rows (the durability table's rows also start with the broker, in 5 columns)."""
    return [line for line in text.splitlines() if (line.startswith("| kafka |") or line.startswith("| redis-streams |"))
            and line.count("|") > 10]


def test_one_loop_is_named_in_the_header_and_nothing_is_flagged(run):
    report = build_report(with_loops(run, lambda c: "python"))
    assert report["send_loops"] == {"python": 4} and report["send_loop_note"] is None
    text = markdown.render(report)
    assert " · Python loop" in text.splitlines()[2] and "Send loops differ" not in text
    assert all("loop" not in row.split("|")[2] for row in rows(text))
    assert "Python loop" in html.render(report) and "Send loops differ" not in html.render(report)
    assert "**Send loop.**" in text  # the rule, under "How to read this report"


def test_cells_of_different_loops_are_flagged_in_words_and_each_row_names_its_loop(run):
    report = build_report(with_loops(run, lambda c: "native" if c["broker"] == "kafka" else "python"))
    assert report["send_loops"] == {"native": 2, "python": 2}
    assert "native C: 2, Python: 2" in report["send_loop_note"]
    text = markdown.render(report)
    assert "**Send loops differ:** these cells were measured by different send loops" in text
    assert " · native C loop" not in text.splitlines()[2] and " · Python loop" not in text.splitlines()[2]
    found = {(row.split("|")[1].strip(), row.split("|")[2].strip()) for row in rows(text)}
    assert found == {("kafka", "json · native C loop"), ("kafka", "msgpack · native C loop"),
                     ("redis-streams", "json · Python loop"), ("redis-streams", "msgpack · Python loop")}
    page = html.render(report)
    assert "Send loops differ:" in page and "<td>json · native C loop</td>" in page


def test_a_cell_with_native_and_python_producers_is_flagged_alone(run):
    report = build_report(with_loops(run, lambda c: "mixed" if c["broker"] == "kafka" and c["format"] == "json"
                                     else "native"))
    assert report["send_loops"] == {"mixed": 1, "native": 3} and "mixed (native C and Python" in report["send_loop_note"]


def test_runs_stored_before_cells_named_their_loop_read_as_python(run):
    report = build_report(run)  # synthetic CellCompleted events carry no send_loop, as runs stored before the native loop
    assert report["send_loops"] == {"python": 4} and report["send_loop_note"] is None
    assert " · Python loop" in markdown.render(report).splitlines()[2]


def test_a_comparison_across_loops_is_flagged_in_every_verdict(run):
    baseline = build_report(with_loops(run, lambda c: "native"))
    later = synthetic_run(SPEC, intervals=6, seed=6)
    verdicts = R.compare(baseline, build_report(with_loops(later, lambda c: "python")))
    assert verdicts and all(v["send_loops"] == {"baseline": "native", "candidate": "python"} for v in verdicts)
    assert all(v["why"].startswith("send loops differ (native C loop → Python loop): the change may be the loop's; ")
               for v in verdicts)
    same = R.compare(baseline, build_report(with_loops(later, lambda c: "native")))
    assert [v["verdict"] for v in same] == [v["verdict"] for v in verdicts]  # the flag changes no verdict
    assert not any("send_loops" in v or "send loops" in v["why"] for v in same)


def with_senders(events, sender_of):
    """The run's events with each CellCompleted's sender set to sender_of(cell) (Pulsar's native path; None: absent,
    as the worker leaves it for the brokers with one path)."""
    cells = {c["cell_id"]: c for c in events[0]["data"]["cells"]}
    out = with_loops(events, lambda c: "native")
    for e in out:
        if e["type"] == "CellCompleted" and sender_of(cells[e["data"]["cell_id"]]):
            e["data"]["sender"] = sender_of(cells[e["data"]["cell_id"]])
    return out


def test_one_native_path_is_named_with_the_loop_in_the_header(run):
    report = build_report(with_senders(run, lambda c: "native-pwire" if c["broker"] == "kafka" else None))
    assert report["senders"] == {"native-pwire": 2} and report["send_loop_note"] is None
    text = markdown.render(report)
    assert " · native C loop (Pulsar binary protocol)" in text.splitlines()[2]
    assert all("Pulsar" not in row.split("|")[2] for row in rows(text))
    assert "native C loop (Pulsar binary protocol)" in html.render(report)


def test_cells_of_both_native_paths_each_name_theirs_in_their_row(run):
    report = build_report(with_senders(run, lambda c: "native-capi" if c["format"] == "json" else "native-pwire"))
    assert report["senders"] == {"native-capi": 2, "native-pwire": 2}
    text = markdown.render(report)
    assert "(Pulsar" not in text.splitlines()[2] and " · native C loop" in text.splitlines()[2]
    found = {row.split("|")[2].strip() for row in rows(text)}
    assert found == {"json · Pulsar C API", "msgpack · Pulsar binary protocol"}
