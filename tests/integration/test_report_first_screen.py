"""The HTML report's first screen in Chromium, as a user opens it: a quick-suite run checked against three earlier
runs of its suite. At 1280×800 the page leads with the summary and the comparison table; the regression verdicts that
found nothing are one line, their table a click away; a verdict cell of the comparison takes at most two lines.
report.md has the same order (its full verdict table after the grids).
The figures are synthetic runs' (tests/synthetic.py) in the in-memory event store: the page, not the store, is what is
tested here (tests/integration/test_reports.py builds reports from DynamoDB Local)."""

import json
import re
import subprocess
from html import unescape
from pathlib import Path

import pytest
from synthetic import synthetic_run

from brokerbench.events import new_run_id
from brokerbench.events.memory import MemoryEventStore
from brokerbench.reports import html, markdown, regression
from brokerbench.reports.model import build_report
from brokerbench.spec import load_suite

PAGE_CHECK = Path(__file__).parents[1] / "e2e" / "report_page.mjs"
MAX_VERDICT_LINES = 2  # a verdict and its marks; its reasons go in a row under it


@pytest.fixture(scope="module")
def checked():
    """Three earlier runs of the quick suite, a candidate like them and one at half the rate: each candidate's
    report with its regression check, as Aggregate builds it."""
    spec = {k: v for k, v in load_suite("quick").items() if k != "description"}
    ids: list[str] = []
    while len(ids) < 5:  # ids of the same second differ in their random tail: five distinct ones
        ids = sorted({new_run_id() for _ in range(5)})
    *older, quiet, slow = ids
    store = MemoryEventStore()
    for seed, run_id in enumerate([*older, quiet], start=1):
        store.append(synthetic_run(spec, intervals=8, seed=seed, run_id=run_id))
    store.append(synthetic_run(spec, intervals=8, seed=9, run_id=slow, rate_scale=0.5))
    reports = {}
    for run_id in (quiet, slow):
        report = build_report(store.read(run_id, interval_histograms=False))
        report["regression_check"] = regression.check(store, run_id, record=False)
        reports[run_id] = report
    return reports[quiet], reports[slow]


def _view(page: Path, screenshot: Path) -> dict:
    seen = subprocess.run(["node", str(PAGE_CHECK), str(page), str(screenshot)], capture_output=True, text=True,
                          timeout=120)
    assert seen.returncode == 0, seen.stderr
    return json.loads(seen.stdout.strip().splitlines()[-1])


def _text(fragment: str) -> str:
    return unescape(re.sub(r"<[^>]+>", "", fragment))


def test_the_first_screen_leads_with_the_summary_and_the_comparison(checked, tmp_path):
    report, _ = checked
    verdicts = report["regression_check"]["verdicts"]
    assert len(verdicts) == 40 and {v["verdict"] for v in verdicts} <= {"unchanged", "unstable"}
    page = tmp_path / "report.html"
    page.write_text(html.render(report))
    view = _view(page, tmp_path / "first-screen.png")  # kept with the test's files: what the reader saw
    assert view["errors"] == [] and view["requests"] == []
    screen, height = view["first_screen"], view["first_screen"]["viewport"]["height"]
    assert height == 800 and view["headings"][:2] == ["Summary", "Comparison"]
    assert screen["summary"]["visible"] and screen["summary"]["bottom"] <= height
    assert screen["regression_line"]["visible"] and screen["regression_line"]["bottom"] <= height
    assert screen["comparison_header"]["bottom"] <= height or screen["first_chart"]["top"] < height
    # The 40 verdicts are one line: their table is not drawn until its summary is clicked.
    line = _text(re.search(r"<p id='regressions'[^>]*>(.*?)</p>", page.read_text()).group(1))
    assert line == ("Regression check: 40 verdicts on 10 configurations against 3 earlier runs: no change beyond "
                    f"noise ({', '.join(f'{n} {k}' for k, n in _tally(verdicts))}).")
    assert not screen["all_verdicts_table"]["visible"]
    assert screen["all_verdicts"]["bottom"] <= height
    assert view["opened"]["all_verdicts_table"]["visible"] and view["opened"]["all_verdicts_table"]["height"] > 0
    # Every configuration's verdict cell, sustainable or not, is a line or two, not a narrow strip.
    lines = screen["verdict_lines"]
    assert len(lines) == 10 and all(1 <= n <= MAX_VERDICT_LINES for n in lines), lines
    assert (tmp_path / "first-screen.png").stat().st_size > 10_000


def _tally(verdicts: list[dict]) -> list[tuple[str, int]]:
    counts: dict = {}
    for v in verdicts:
        counts[v["verdict"]] = counts.get(v["verdict"], 0) + 1
    return sorted(counts.items(), key=lambda kv: ("regression", "unstable", "improvement", "unchanged").index(kv[0]))


def test_changes_found_stay_at_the_top_and_the_rest_collapse(checked):
    _, report = checked
    found = [v for v in report["regression_check"]["verdicts"] if v["verdict"] == "regression"]
    throughput = [v for v in found if v["metric"] == "throughput_msgs_per_s"]
    assert len(throughput) == 10  # every configuration at half its rate
    page = html.render(report)
    top = page[page.index("id='summary'"):page.index("<details class='all-verdicts'>")]
    assert "id='comparison'" not in top
    shown = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td><td class='bad'>regression</td>", top)
    assert sorted(shown) == sorted((v["cell"], v["metric"]) for v in found)
    # The quiet verdicts are only in the collapsed table.
    assert "<td class=''>unchanged</td>" not in top and "<td class='warn'>unstable</td>" not in top
    assert "<td class=''>unchanged</td>" in page[page.index("<details class='all-verdicts'>"):]
    assert f"{len(found)} change{'s' if len(found) != 1 else ''} beyond noise" in _text(top)


def test_the_markdown_report_has_the_same_order(checked):
    quiet, slow = checked
    md = markdown.render(quiet)
    assert md.index("## Summary") < md.index("## 1,024 B") < md.index("## Regressions") < md.index("## How to read")
    summary = md[md.index("## Summary"):md.index("## 1,024 B")]
    assert "no change beyond noise" in summary and "| unchanged |" not in summary
    md = markdown.render(slow)
    summary = md[md.index("## Summary"):md.index("## 1,024 B")]
    found = [v for v in slow["regression_check"]["verdicts"] if v["verdict"] == "regression"]
    assert summary.count("| **regression** |") == len(found) and "| unchanged |" not in summary
    assert "| unchanged |" in md[md.index("## Regressions"):]
