"""docs/performance.md's writer (bench/performance.py) and the timing scripts' parsers: the committed page is what the
committed results write (a result changed without the page, or the page edited by hand, fails here), and a row of a
made-up results folder is written as expected."""

import importlib.util
import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_page_is_what_the_committed_results_write():
    performance = script("performance")
    written = performance.render(performance.load_results(REPO / "bench" / "results"))
    committed = (REPO / "docs" / "performance.md").read_text()
    assert committed == written, "docs/performance.md differs from bench/results: run bench/performance.py --check"


def test_check_exits_1_with_a_diff_when_the_page_was_edited(tmp_path, capsys):
    performance = script("performance")
    page = tmp_path / "performance.md"
    page.write_text((REPO / "docs" / "performance.md").read_text().replace("| 844 passed |", "| 845 passed |"))
    assert performance.main(["--check", "--out", str(page)]) == 1
    diff = capsys.readouterr().out
    assert "-| one process" in diff and "845 passed" in diff and "+| one process" in diff
    page.write_text((REPO / "docs" / "performance.md").read_text())
    assert performance.main(["--check", "--out", str(page)]) == 0


def made_up_results(folder: Path) -> Path:
    """The committed results, with one made-up test-suite row and one made-up first run."""
    results = folder / "results"
    shutil.copytree(REPO / "bench" / "results", results)
    suite = {"rows": [{"label": "quiet", "how": "make test, one process", "date": "2030-01-02 03:04 UTC",
                       "commit": "abc1234", "load_start": 0.5, "load_end": 2.25, "pytest_wall_s": 1125.4,
                       "make_test_wall_s": 1200, "cpu_s": 1500, "passed": 700, "failed": 1, "errors": 0,
                       "skipped": 3, "finished": True, "source": "bench/test_suite.py"}]}
    (results / "test_suite.json").write_text(json.dumps(suite))
    first = {"rows": [{"label": "fresh", "how": "fresh clone, CI=true", "date": "2030-01-02 04:00 UTC",
                       "commit": "abc1234", "setup_wall_s": 121, "run_wall_s": 239.6, "total_wall_s": 360.6,
                       "exit_code": 0, "load_start": 1, "load_end": 3.5}]}
    (results / "first_run.json").write_text(json.dumps(first))
    return results


def test_a_test_suite_row_and_a_first_run_are_written_from_their_results(tmp_path):
    performance = script("performance")
    results = performance.load_results(made_up_results(tmp_path))
    suite = performance.render_section("test_suite", results)
    assert ("| make test, one process | 0.5 → 2.25 | **18 min 45 s** | 20 min 0 s | 25 min 0 s | "
            "700 passed, 1 failed, 3 skipped | 2030-01-02 03:04 UTC, abc1234 |") in suite
    assert "844 passed" not in suite  # only the folder's rows
    first = performance.render_section("first_run", results)
    assert ("| fresh | fresh clone, CI=true | 2 min 1 s | **4 min 0 s** | 6 min 1 s | 0 | 1 → 3.5 | "
            "2030-01-02 04:00 UTC, abc1234 |") in first
    assert "not measured yet" not in first


def test_a_harness_figure_follows_its_result_file(tmp_path):
    performance = script("performance")
    results = performance.load_results(REPO / "bench" / "results")
    results["harness"] = {**results["harness"], "kafka_vs_bare": 1.234}
    assert "| **1.23** (" in performance.render_section("harness", results)


def test_a_harness_run_is_titled_with_the_time_and_load_the_harness_recorded():
    performance, harness = script("performance"), script("harness")
    results = performance.load_results(REPO / "bench" / "results")
    results["harness"] = {**results["harness"], "conditions": harness.conditions("2030-01-01 00:00 UTC", 1.234, 4.5)}
    assert "| 2030-01-01 00:00 UTC (load average 1.2 before, 4.5 after, 3 trials of 5 s) |" in (
        performance.render_section("harness", results))


def test_pytest_summary_lines_are_read():
    test_suite = script("test_suite")
    out = "....\nFAILED tests/x.py::t\n= 803 passed, 2 failed, 7 errors, 4 skipped, 3 warnings in 2143.50s (0:35:43) ="
    assert test_suite.parse_summary(out) == {"passed": 803, "failed": 2, "errors": 7, "skipped": 4,
                                             "pytest_wall_s": 2143.5}
    assert test_suite.parse_summary("21 passed in 0.40s") == {"passed": 21, "failed": 0, "errors": 0, "skipped": 0,
                                                             "pytest_wall_s": 0.4}
    assert test_suite.parse_summary("collecting ... interrupted") is None


def test_the_workers_timeline_gives_each_workers_busy_seconds_and_last_end(tmp_path):
    test_suite = script("test_suite")
    timeline = tmp_path / "timeline.jsonl"
    marks = [("gw0", "a", "start", 100.0), ("gw1", "b", "start", 101.0), ("gw0", "a", "end", 130.0),
             ("gw0", "c", "start", 131.0), ("gw1", "b", "end", 111.0), ("gw0", "c", "end", 141.5)]
    timeline.write_text("".join(json.dumps({"worker": w, "test": t, when: at}) + "\n" for w, t, when, at in marks))
    assert test_suite.workers(timeline) == {"gw0": {"tests": 2, "busy_s": 40.5, "last_end_s": 41.5},
                                            "gw1": {"tests": 1, "busy_s": 10.0, "last_end_s": 11.0}}
    assert test_suite.workers(tmp_path / "none.jsonl") is None


def test_a_test_suite_row_is_appended_under_its_label(tmp_path):
    test_suite = script("test_suite")
    out = tmp_path / "suite.json"
    out.write_text(json.dumps({"rows": [{"label": "earlier"}]}))
    run = {"exit_code": 1, "wall_s": 30.0, "cpu_s": 12.5, "load_samples": [0.5, 3.0, 2.0]}
    entry = test_suite.row("trial", "make test", ["make", "test"], REPO, run, "x\n1 passed, 1 failed in 25.00s\n")
    test_suite.append(out, entry)
    rows = json.loads(out.read_text())["rows"]
    assert [r["label"] for r in rows] == ["earlier", "trial"]
    assert (rows[1]["load_start"], rows[1]["load_end"], rows[1]["load_max"]) == (0.5, 2.0, 3.0)
    figures = [rows[1][k] for k in ("pytest_wall_s", "make_test_wall_s", "cpu_s", "passed", "failed", "finished")]
    assert figures == [25.0, 30.0, 12.5, 1, 1, True]
