"""Reports and regression checks from DynamoDB Local: baseline choice, RegressionDetected, CLI, browser."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from results_tools import assert_logs_match, lower_bound_logs, read_cells_csv
from synthetic import synthetic_run

from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.reports import regression
from brokerbench.reports.model import build_report
from brokerbench.reports.results import build_results

BIN = Path(sys.executable).parent / "brokerbench"
PAGE_CHECK = Path(__file__).parents[1] / "e2e" / "report_page.mjs"
SPEC = {"brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000], "formats": ["json", "msgpack"],
        "repeats": 2}


@pytest.fixture(scope="module")
def stack_store(stack):
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    store.ensure_table()
    return store


@pytest.fixture(scope="module")
def runs(stack_store):
    """Two older runs and a baseline of one suite (history: run-to-run noise is measured, never assumed), a
    candidate with half the throughput, and a run of another suite."""
    suite = f"reg-{new_run_id()[-6:]}"
    *older, baseline_id, candidate_id = sorted({new_run_id() for _ in range(4)})
    other = synthetic_run({**SPEC, "name": f"{suite}-other"}, intervals=10, seed=5)
    for seed, run_id in enumerate(older, start=1):
        stack_store.append(synthetic_run({**SPEC, "name": suite}, intervals=10, seed=seed, run_id=run_id))
    stack_store.append(synthetic_run({**SPEC, "name": suite}, intervals=10, seed=3, run_id=baseline_id))
    stack_store.append(synthetic_run({**SPEC, "name": suite}, intervals=10, seed=4, run_id=candidate_id, rate_scale=0.5))
    stack_store.append(other)
    return baseline_id, candidate_id, older


def test_the_baseline_is_the_latest_completed_run_of_the_suite_and_regressions_are_recorded(stack_store, runs):
    baseline_id, candidate_id, older = runs
    assert regression.find_baseline(stack_store, candidate_id) == baseline_id
    assert regression.find_baseline(stack_store, older[0]) is None
    checked = regression.check(stack_store, candidate_id)
    throughput = [v for v in checked["verdicts"] if v["metric"] == "throughput_msgs_per_s"]
    assert len(throughput) == 4 and {v["verdict"] for v in throughput} == {"regression"}
    assert all(v["change"] == pytest.approx(-0.5, abs=0.05) for v in throughput)
    latency = [v for v in checked["verdicts"] if v["metric"] == "end_to_end_p99_us"]
    assert {v["verdict"] for v in latency} <= {"unchanged", "unstable"}  # same latency distribution
    # Half the rate: a configuration that falls behind is a regression only when its share of unsustainable
    # repeats is improbable at history's (among these 16 verdicts' 20 comparisons, 3 runs cannot call even 3 of 3),
    # and its verdict gives both shares either way.
    flips = [v for v in checked["regressions"] if v["metric"] == "sustainability"]
    shares = [v for v in checked["verdicts"] if v["metric"] == "sustainability" and v["before"] != v["after"]]
    assert all("unsustainable repeats: candidate" in v["why"] and v["verdict"] in ("unstable", "regression")
               for v in shares)
    assert all(": improbable at one rate" in v["why"] for v in flips)
    assert checked["comparisons"] == 12 + 2 * 4
    called = len(checked["regressions"])
    assert called == 4 + len(flips)
    stored = [e for e in stack_store.read(candidate_id) if e["type"] == "RegressionDetected"]
    assert len(stored) == called and all(e["data"]["baseline_run_id"] == baseline_id for e in stored)
    again = regression.check(stack_store, candidate_id)  # replayed: nothing new
    assert len([e for e in stack_store.read(candidate_id) if e["type"] == "RegressionDetected"]) == called
    assert len(again["regressions"]) == called
    report = build_report(stack_store.read(candidate_id, interval_histograms=False))
    assert len(report["regressions"]) == called


def test_report_and_compare_commands(stack, stack_store, runs, tmp_path):
    baseline_id, candidate_id, older = runs
    regression.check(stack_store, candidate_id)  # its verdicts stored (again: a replay stores nothing new)
    common = [str(BIN), "--state-dir", str(stack.state_dir)]
    md = subprocess.run([*common, "report", candidate_id, "--out", str(tmp_path)], capture_output=True, text=True)
    assert md.returncode == 0, md.stderr
    assert "## Regressions" in md.stdout and "throughput_msgs_per_s" in md.stdout
    assert (tmp_path / candidate_id / "report.md").is_file()
    # ...and the files other tools read, rebuilt from the store as Aggregate writes them.
    results = build_results(stack_store.read(candidate_id, interval_histograms=False))
    assert set(read_cells_csv(tmp_path / candidate_id / "cells.csv")) == {c["cell_id"] for c in results["cells"]}
    assert assert_logs_match(tmp_path / candidate_id, results, {c["cell_id"]: 10 for c in results["cells"]}) == \
        8 * 5 - lower_bound_logs(results)
    as_json = subprocess.run([*common, "report", candidate_id, "--format", "json", "--out", str(tmp_path)],
                             capture_output=True, text=True)
    assert json.loads((tmp_path / candidate_id / "report.json").read_text())["run_id"] == candidate_id, as_json.stderr
    worse = subprocess.run([*common, "compare", baseline_id, candidate_id, "--out", str(tmp_path)],
                           capture_output=True, text=True)
    assert worse.returncode == 1 and "regression" in worse.stdout and "and 2 earlier runs" in worse.stdout
    stored = json.loads((tmp_path / candidate_id / f"compare-{baseline_id}.json").read_text())
    assert stored["history_run_ids"] == [baseline_id, *older[::-1]]
    # Each figure's verdict says the smallest regression it is sure to call, and the table shows it.
    figures = [v for v in stored["verdicts"] if v["metric"] != "sustainability"]
    assert figures and all(0 < v["detectable"] for v in figures) and "detectable" in worse.stdout
    # The two runs alone: run-to-run noise unknown, nothing called, and it says what is needed.
    alone = subprocess.run([*common, "compare", baseline_id, candidate_id, "--no-history", "--out", str(tmp_path)],
                           capture_output=True, text=True)
    assert alone.returncode == 0 and "0 regressions" in alone.stdout and "cannot tell" in alone.stdout, alone.stdout
    assert "2 more completed runs of the suite needed" in alone.stdout
    same = subprocess.run([*common, "compare", baseline_id, baseline_id, "--out", str(tmp_path)],
                          capture_output=True, text=True)
    assert same.returncode == 0 and "0 regressions" in same.stdout


def test_the_html_report_in_a_real_browser(stack, runs, tmp_path):
    _, candidate_id, _ = runs
    done = subprocess.run([str(BIN), "--state-dir", str(stack.state_dir), "report", candidate_id, "--format", "html",
                           "--out", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    page = tmp_path / candidate_id / "report.html"
    screenshot = tmp_path / "report.png"
    seen = subprocess.run(["node", str(PAGE_CHECK), str(page), str(screenshot)], capture_output=True, text=True,
                          timeout=120)
    assert seen.returncode == 0, seen.stderr
    view = json.loads(seen.stdout.strip().splitlines()[-1])
    assert view["errors"] == [] and view["requests"] == []  # no console errors, nothing fetched
    assert view["headings"][:2] == ["Summary", "Comparison"]  # the regression check leads the summary
    charts = view["charts"]
    assert len(charts) >= 8
    assert all(c["points"] > 0 or c["bars"] > 0 for c in charts)  # every chart has data
    assert {"spectrum", "rate per second", "Serialization"} <= {k for c in charts for k in
                                                                 ("spectrum", "rate per second", "Serialization")
                                                                 if k in c["title"]}
    assert screenshot.stat().st_size > 10_000


def test_compare_says_when_the_two_runs_cells_used_different_send_loops(stack, stack_store, tmp_path):
    """reports.model.SEND_LOOP_RULE: the verdicts are the same, each says the loops differ, and so does the summary."""
    suite = f"loops-{new_run_id()[-6:]}"
    baseline_id, candidate_id = sorted({new_run_id() for _ in range(2)})
    for run_id, seed, loop in ((baseline_id, 3, "native"), (candidate_id, 4, "python")):
        events = synthetic_run({**SPEC, "name": suite}, intervals=10, seed=seed, run_id=run_id)
        for e in events:
            if e["type"] == "CellCompleted":
                e["data"]["send_loop"] = loop
        stack_store.append(events)
    done = subprocess.run([str(BIN), "--state-dir", str(stack.state_dir), "compare", baseline_id, candidate_id,
                           "--no-history", "--out", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    stored = json.loads((tmp_path / candidate_id / f"compare-{baseline_id}.json").read_text())["verdicts"]
    assert stored and all(v["send_loops"] == {"baseline": "native", "candidate": "python"} for v in stored)
    summary = " ".join(done.stdout.split())  # rich wraps the line to the terminal's width
    assert f"{len(stored)} between cells of different send loops (native C and Python)" in summary, done.stdout
