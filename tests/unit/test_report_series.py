"""The suite's series in a run's report (reports.history_view): the change points of the scheduled check's result
as a Markdown table and as small SVG charts, the run a change began with and the run before it marked."""

import json
import re

import pytest
from synthetic import synthetic_run

from brokerbench.events import read_report_events
from brokerbench.events.memory import MemoryEventStore
from brokerbench.reports import history, history_view, html, markdown
from brokerbench.reports.model import build_report

RUNS = [f"r{i}" for i in range(6)]
P99 = "end_to_end_p99_us"
VERSIONS = {"before": {"code_version": "1.0", "brokers": {"redis-streams": "7.2"}},
            "after": {"code_version": "1.1", "brokers": {"redis-streams": "7.2"}}}


def hand_series(key: str, values: list[float], change_points: list[dict]) -> dict:
    return {"key": key, "cell": f"{key} cell", "metric": P99, "higher_is_better": False, "checked": True,
            "searched": True,
            "points": [{"run_id": r, "requested_at": f"2025-01-0{i + 1}T00:00:00Z", "value": v, "repeats": [v, v],
                        "code_version": "1.0", "brokers": {}} for i, (r, v) in enumerate(zip(RUNS, values))],
            "change_points": change_points}


# p99 of 100 µs in runs r0–r3, 200 µs in r4 and r5: one change point, at index 4 (run r4), +100%.
STEP = {"index": 4, "began_run_id": "r4", "before_run_id": "r3", "before_mean": 100.0, "after_mean": 200.0,
        "before_runs": 4, "after_runs": 2, "change": 1.0, "p_value": 0.001, "min_effect": 0.2, "large": True,
        "direction": "regression", "alert": True, "versions": VERSIONS,
        "differences": [{"setting": "code_version", "before": "1.0", "after": "1.1"},
                        {"setting": "spec.client.acks", "before": "all", "after": "1"}]}


def hand_report(alerts: list[dict]) -> dict:
    changes = {"runs": [{"run_id": r} for r in RUNS], "method": {}, "alerts": alerts,
               "series": [hand_series("a", [100, 100, 100, 100, 200, 200], [STEP]),
                          hand_series("b", [100] * 6, [])]}
    return {"regression_check": {"verdicts": [], "changes": changes}}


def test_markdown_has_one_row_per_change_point_with_its_runs_figures_and_status():
    lines = history_view.markdown_lines(hand_report([{"key": "a", "metric": P99, "began_run_id": "r4"}]))
    assert lines[0] == "## The suite's series"
    assert "newest 6 completed runs (r0 to r5)" in lines[2] and "2 of 2 series have the 6 runs" in lines[2]
    assert "1 change point found, 1 of them alert (1 raised by this run)" in lines[2]
    rows = [line for line in lines if line.startswith("| a cell")]
    assert rows == ["| a cell | end_to_end_p99_us | r4 | r3 | 100.0 → 200.0 | +100.0% | 0.001 | alert, raised by this "
                    "run | code 1.0 → 1.1 | spec.client.acks |"]
    assert not any(line.startswith("| b cell") for line in lines)  # no change point: counted, not listed
    # told on an earlier run: the same change point, not raised again
    told = history_view.markdown_lines(hand_report([]))
    assert "| alert (told on an earlier run) |" in next(line for line in told if line.startswith("| a cell"))


def test_the_chart_marks_the_change_between_the_run_before_and_the_run_it_began_with():
    svg = history_view.series_chart(hand_report([])["regression_check"]["changes"]["series"][0])
    # x: runs 1..6 across 72..402 px; the change line between run 4 (r3) and run 5 (r4): 72 + 3.5 / 5 × 330 = 303
    mark = re.search(r'<g class="change-point" data-x="4.5"><title>began with run r4; the run before: r3</title>'
                     r'<line x1="([\d.]+)"', svg)
    assert mark and mark.group(1) == "303.0"
    assert ">+100.0%</text>" in svg
    # the two runs on either side drawn larger, at their figures: run 4 at 72 + 3 / 5 × 330 = 270, run 5 at 336;
    # 0.1 and 0.2 ms on 0–0.21 ms over 256..34 px: 256 − 222 × 0.1 / 0.21 = 150.3 and 44.6
    sides = re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)" r="4.5" fill="[^"]+" data-label="(r\d)">', svg)
    assert sides == [("270.0", "150.3", "r3"), ("336.0", "44.6", "r4")]
    # every run is a point named by its run id; the segment means a dashed step at 0.1 then 0.2 ms
    assert re.findall(r'r="2.6" fill="[^"]+" data-label="(r\d)"', svg) == RUNS
    step = re.search(r'data-name="segment mean" points="([^"]+)"[^>]*stroke-dasharray', svg).group(1).split()
    assert [p.split(",")[1] for p in step] == ["150.3", "150.3", "44.6", "44.6"]


def test_html_draws_only_series_with_a_change_point_and_says_what_each_shows():
    page = "\n".join(history_view.html_parts(hand_report([{"key": "a", "metric": P99, "began_run_id": "r4"}])))
    assert page.count("<figure class='series-chart'") == 1 and "data-key='a'" in page
    assert "alert, raised by this run:</b> +100.0% from run r4 on" in page
    assert "the run before it: r3" in page and "code 1.0 → 1.1" in page
    assert "<td class='run-id'>r4</td><td class='run-id'>r3</td>" in page


def test_no_check_or_a_check_without_series_has_no_section_and_short_series_say_so():
    assert history_view.markdown_lines({}) == [] and history_view.html_parts({"regression_check": {}}) == []
    short = {"regression_check": {"changes": {"runs": [{"run_id": "r0"}, {"run_id": "r1"}], "alerts": [],
                                              "series": [{**hand_series("a", [1, 1], []), "checked": False,
                                                          "searched": False}]}}}
    assert "0 of 1 series have the 6 runs" in history_view.markdown_lines(short)[2]
    assert "pairwise verdicts above stand alone" in history_view.markdown_lines(short)[2]
    young = {"regression_check": {"changes": {**short["regression_check"]["changes"], "series": [
        {**hand_series("a", [1, 1, 1, 1], []), "checked": True, "searched": False}]}}}
    line = history_view.markdown_lines(young)[2]
    assert "0 of 1 series have the 6 runs" in line and "1 more the 4 a test of their newest runs needs" in line
    assert "stand alone" not in line


@pytest.fixture(scope="module")
def checked_report():
    """Seven runs of a suite, the last two delivering 25% less, checked as the workflow checks the last one."""
    spec = {"name": "series", "brokers": ["redis-streams"], "sizes": [1024], "rates": [2000], "formats": ["raw"],
            "repeats": 2}
    store = MemoryEventStore()
    ids = [f"20250101T{i:06d}Z-abcdef" for i in range(7)]
    for i, run_id in enumerate(ids):
        store.append(synthetic_run(spec, intervals=3, seed=i, run_id=run_id, rate_scale=0.75 if i >= 5 else 1.0))
    check = json.loads(json.dumps(history.watch(store, ids[-1], record=False)))  # as regression.json stores it
    report = build_report(read_report_events(store, ids[-1]))
    report["regression_check"] = check
    return ids, report


def test_a_checked_runs_reports_show_the_change_the_check_found(checked_report):
    ids, report = checked_report
    page, text = html.render(report), markdown.render(report)
    section = text[text.index("## The suite's series"):]
    row = next(line for line in section.splitlines() if line.startswith("| redis-streams raw"))
    assert f"| throughput_msgs_per_s | {ids[5]} | {ids[4]} |" in row and "alert, raised by this run" in row
    assert float(re.search(r"\| ([+-][\d.]+)% \|", row).group(1)) == pytest.approx(-25, abs=3)
    assert page.count("<figure class='series-chart'") == 1
    assert f'data-label="{ids[4]}"' in page and f'data-label="{ids[5]}"' in page
    assert '<g class="change-point" data-x="5.5">' in page  # between the 5th and 6th runs


def test_the_consoles_history_metrics_are_the_checks():
    from pathlib import Path

    from brokerbench.metrics import METRICS as DECLARED
    from brokerbench.reports.regression import METRICS

    app = (Path(history.__file__).parents[1] / "api" / "console" / "app.js").read_text()
    # the console reads the checked metrics from GET /metrics (tests/unit/test_metrics.py) and names none itself
    assert "filter((m) => m.regression)" in app
    assert not [key for key in DECLARED if f"'{key}'" in app]
    assert set(history_view.METRIC_LABELS) == set(METRICS)