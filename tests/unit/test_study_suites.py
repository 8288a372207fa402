"""Paired size/rate lists, the study suites (one run request or several), scale, and `brokerbench suites`."""

import copy
import json
import math
import re

import pytest

from brokerbench import plan, spec
from brokerbench.cli import main
from brokerbench.cli import run as run_command

BASE = {"brokers": ["kafka", "redis-streams"], "formats": ["raw", "json"], "order_seed": 11}
PAIRS = [{"size": 1024, "rates": [100, 500]}, {"size": 4096, "rates": ["max"]}, {"size": 65536, "rates": [50]}]
STUDIES = ["downard", "helenius", "myastovskiy", "tallberg"]


def problems_of(doc):
    with pytest.raises(spec.SpecError) as info:
        spec.validate(doc)
    return {p.path: p.message for p in info.value.problems}


def key(cell):
    return cell["broker"], cell["format"], cell["mode"], cell["size_bytes"], cell["rate"]


# -- paired size/rate lists ----------------------------------------------------------------------------------
def test_paired_lists_expand_to_exactly_the_listed_pairs():
    cells = spec.expand(spec.validate({**BASE, "size_rates": PAIRS, "repeats": 2}))
    pairs = {(p["size"], r) for p in PAIRS for r in p["rates"]}
    assert {(c["size_bytes"], c["rate"]) for c in cells} == pairs  # no 1024 B at max, no 4096 B at 100 ...
    assert len(cells) == len(pairs) * 2 * 2 * 2  # pairs x brokers x formats x repeats
    assert len({c["cell_id"] for c in cells}) == len(cells)
    assert sorted(c["index"] for c in cells) == list(range(len(cells)))
    assert [c["order"] for c in cells] == list(range(len(cells)))
    per_repeat = len(cells) // 2
    assert {c["repeat"] for c in cells[:per_repeat]} == {0} and {c["index"] for c in cells[:per_repeat]} == \
        set(range(per_repeat))
    # every (broker, format) at every pair, once per repeat
    assert sorted(key(c) for c in cells if c["repeat"] == 0) == sorted(key(c) for c in cells if c["repeat"] == 1)


def test_paired_lists_are_deterministic_and_shuffled_per_repeat():
    doc = {**BASE, "size_rates": PAIRS, "repeats": 3}
    first, again = spec.expand(spec.validate(doc)), spec.expand(spec.validate(doc))
    assert [c["cell_id"] for c in first] == [c["cell_id"] for c in again]
    orders = [tuple(c["cell_id"].rsplit(".", 1)[0] for c in first if c["repeat"] == r) for r in range(3)]
    assert len(set(orders)) == 3  # each repeat in its own order
    matrix = [c["cell_id"] for c in sorted(first, key=lambda c: c["index"])]
    assert [c["cell_id"] for c in first] != matrix
    fixed = spec.expand(spec.validate({**doc, "order": "fixed"}))
    assert [(c["size_bytes"], c["rate"]) for c in fixed[::4]][:4] == [(1024, 100), (1024, 500), (4096, "max"),
                                                                      (65536, 50)]


def test_pairs_that_form_the_cross_product_expand_like_sizes_times_rates():
    crossed = {**BASE, "sizes": [1024, 4096], "rates": [100, "max"], "repeats": 2}
    paired = {**BASE, "size_rates": [{"size": 1024, "rates": [100, "max"]}, {"size": 4096, "rates": [100, "max"]}],
              "repeats": 2}
    a, b = spec.expand(spec.validate(crossed)), spec.expand(spec.validate(paired))
    assert [(c["cell_id"], c["index"], c["order"]) for c in a] == [(c["cell_id"], c["index"], c["order"]) for c in b]
    assert spec.size_rates(spec.validate(crossed)) == spec.size_rates(spec.validate(paired))


def test_a_validated_paired_spec_validates_again_unchanged():
    full = spec.validate({**BASE, "size_rates": PAIRS})
    assert "sizes" not in full and "rates" not in full
    assert spec.validate(full) == full  # a stored spec (RunRequested) is valid as it is


def test_both_forms_are_refused_naming_the_field():
    found = problems_of({**BASE, "size_rates": PAIRS, "sizes": [1024], "rates": [100]})
    assert set(found) == {"size_rates"}
    assert "not both" in found["size_rates"] and "sizes and rates are given too" in found["size_rates"]
    found = problems_of({**BASE, "size_rates": PAIRS, "rates": [100]})
    assert set(found) == {"size_rates"} and "rates is given too" in found["size_rates"]


def test_neither_form_is_refused_naming_the_fields():
    found = problems_of(BASE)
    assert set(found) == {"sizes", "rates"}
    assert found["sizes"].startswith("'sizes' is a required property") and "size_rates" in found["sizes"]
    assert found["rates"].startswith("'rates' is a required property")
    assert set(problems_of({**BASE, "sizes": [1024]})) == {"rates"}  # half of the cross form


def test_each_pair_gets_the_checks_sizes_and_rates_get():
    found = problems_of({**BASE, "producers": 4, "size_rates": [
        {"size": 1024, "rates": [100, 2]}, {"size": 100, "rates": [10]}, {"size": 1024, "rates": [200]}]})
    assert "below one message per second per producer (4 producers)" in found["size_rates[0].rates[1]"]
    assert "json needs at least" in found["size_rates[1].size"] and "raw" not in found["size_rates[1].size"]
    assert "already paired in size_rates[0]" in found["size_rates[2].size"]
    assert "size_rates[0].rates[0]" not in found and "size_rates[1].rates[0]" not in found


def test_the_schema_checks_each_pair():
    found = problems_of({**BASE, "size_rates": [{"size": 10, "rates": [0]}, {"size": 1024, "rates": []},
                                                 {"size": 1024, "rates": [5, 5]}, {"rates": [1]},
                                                 {"size": 1024, "rates": [1], "mode": "x"}]})
    assert "less than the minimum of 64" in found["size_rates[0].size"]
    assert "0 is not accepted" in found["size_rates[0].rates[0]"]
    assert "size_rates[1].rates" in found and "size_rates[2].rates" in found
    assert "'size' is a required property" in found["size_rates[3]"]
    assert "'mode' was unexpected" in found["size_rates[4]"]
    assert "should be non-empty" in problems_of({**BASE, "size_rates": []})["size_rates"]


def test_the_schema_defines_a_pair_by_sizes_and_rates():
    props = spec.request_schema()["properties"]
    pair = props["size_rates"]["items"]["properties"]
    assert {k: v for k, v in pair["size"].items() if k != "description"} == props["sizes"]["items"]
    assert {k: v for k, v in pair["rates"].items() if k != "description"} == \
        {k: v for k, v in props["rates"].items() if k != "description"}
    assert "sizes" not in spec.request_schema()["required"]


def test_reports_group_paired_runs_by_their_pairs():
    from brokerbench.reports import markdown
    from brokerbench.reports.model import build_report
    from brokerbench.reports.results import build_results
    from synthetic import synthetic_run
    from brokerbench.reports.table import comparison_tables

    doc = {"name": "paired", "brokers": ["kafka", "redis-streams"], "formats": ["json"], "repeats": 1,
           "size_rates": [{"size": 1024, "rates": [1000, 5000]}, {"size": 4096, "rates": [500]}]}
    events = synthetic_run(doc, intervals=5, seed=3)
    results = build_results(events)
    assert {(c["size_bytes"], c["rate_target"]) for c in results["cells"]} == {(1024, 1000), (1024, 5000),
                                                                               (4096, 500)}
    assert len(comparison_tables(results)) == 3  # one per size and rate
    report = build_report(events)
    assert sorted((g["size_bytes"], g["rate_target"]) for g in report["groups"]) == [(1024, 1000), (1024, 5000),
                                                                                    (4096, 500)]
    assert "4,096" in markdown.render(report)


# -- the study suites ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", spec.all_suite_names())
def test_every_suite_validates_and_expands(name):
    for request in spec.suite_runs(name):
        assert spec.expand(spec.validate(request))


@pytest.mark.parametrize("name", STUDIES)
def test_every_study_suite_says_what_it_is_and_how_it_deviates(name):
    doc = spec.load_suite_file(name)
    assert name in spec.all_suite_names()
    assert doc["description"] and "\n" not in doc["description"] and len(doc["description"]) < 400
    assert re.fullmatch(r"[A-Z][a-z]+( [A-Z][a-z]+)? 20\d\d", doc["study"])
    assert len(doc["notes"]) >= 5 and all(isinstance(n, str) and n for n in doc["notes"])
    runs = spec.suite_runs(name)
    assert len({r["name"] for r in runs}) == len(runs)  # each run its own name (runs are compared by name)
    assert all(r["name"] == name or r["name"].startswith(f"{name}-") for r in runs)
    for run in runs:  # the suite's study and notes travel with every run (RunRequested keeps them)
        full = spec.validate(run)
        assert full["study"] == doc["study"] and full["notes"] == doc["notes"] and full["description"]
        assert "redpanda" not in full["brokers"]


def test_a_study_of_several_runs_is_not_one_run_request():
    assert not set(STUDIES) & set(spec.suite_names())  # the API and schedules take plain run requests
    assert {"quick", "smoke"} <= set(spec.suite_names())
    with pytest.raises(spec.SpecError) as info:
        spec.load_suite("helenius")
    [problem] = info.value.problems
    assert problem.path == "suite" and "3 runs" in problem.message and "helenius-4p1c3b" in problem.message
    assert spec.suite_runs("quick") == [spec.load_suite("quick")]
    assert spec.load_suite("myastovskiy") == spec.suite_runs("myastovskiy")[0]  # a study of one run
    with pytest.raises(spec.SpecError, match="tallberg"):
        spec.load_suite("nope")  # the known names include the studies


def test_a_suite_of_runs_takes_only_runs_beside_its_own_fields(tmp_path, monkeypatch):
    monkeypatch.setattr(spec, "SUITES_DIR", tmp_path)
    (tmp_path / "odd.json").write_text(json.dumps({"description": "x", "runs": [], "brokers": ["kafka"]}))
    with pytest.raises(spec.SpecError, match="non-empty list of run requests.*unexpected: brokers"):
        spec.suite_runs("odd")
    (tmp_path / "two.json").write_text(json.dumps({"description": "both", "notes": ["n"], "runs": [
        {"name": "two-a", "brokers": ["kafka"], "sizes": [1024], "rates": [10], "formats": ["raw"]},
        {"name": "two-b", "description": "own", "brokers": ["kafka"], "sizes": [1024], "rates": [10],
         "formats": ["raw"]}]}))
    a, b = spec.suite_runs("two")
    assert (a["description"], b["description"], a["notes"], b["notes"]) == ("both", "own", ["n"], ["n"])


def test_tallberg_pairs_are_the_studys():
    throughput, latency = (spec.validate(r) for r in spec.suite_runs("tallberg"))
    cells = spec.expand(latency)
    assert {(c["size_bytes"], c["rate"]) for c in cells} == {(1000, 1000), (1000, 5000), (65000, 100), (65000, 500),
                                                             (600000, 50), (600000, 200)}
    assert {c["broker"] for c in cells} == {"kafka-zookeeper", "pulsar", "redis-streams"}
    assert (latency["producers"], latency["consumers"], latency["partitions"]) == (1, 2, 2)
    assert {(c["size_bytes"], c["rate"]) for c in spec.expand(throughput)} == {(1000, "max"), (65000, "max"),
                                                                               (600000, "max")}
    assert (throughput["consumers"], throughput["partitions"]) == (0, 2)  # producer-only, as the bundled tools
    assert latency["size_basis"] == throughput["size_basis"] == "wire" and latency["formats"] == ["raw"]
    assert latency["client"]["pipeline_depth"] == 1  # Redis: one XADD in flight, as the study's blocking XADD


def test_helenius_topologies_are_one_run_each():
    runs = [spec.validate(r) for r in spec.suite_runs("helenius")]
    shape = [(r["producers"], r["consumers"], r["provision"].get("kafka", {}).get("nodes", 1), r["partitions"])
             for r in runs]
    assert shape == [(1, 1, 1, 1), (4, 1, 1, 1), (4, 1, 3, 3)]  # 1P1C1B, 4P1C1B, 4P1C3B
    assert runs[2]["provision"]["kafka-zookeeper"] == {"nodes": 3}
    for r in runs:
        assert r["brokers"] == ["kafka-zookeeper", "kafka"] and r["rates"] == ["max"]
        assert r["client"]["replication_factor"] == 1 and r["duration_s"] == 31 * 60
    assert any("Redpanda" in note for note in spec.load_suite_file("helenius")["notes"])


def test_downard_and_myastovskiy_use_the_studys_settings():
    sizes, *partitions = (spec.validate(r) for r in spec.suite_runs("downard"))
    assert [(r["partitions"], r["client"].get("topics", 1)) for r in (sizes, *partitions)] == [
        (1, 1), (10, 1), (100, 1), (400, 1), (1, 10), (1, 100)]  # by size, by partitions, by topics
    for r in (sizes, *partitions):
        assert (r["client"]["acks"], r["client"]["batch_bytes"], r["client"]["linger_ms"]) == ("all", 16384, 0)
        assert r["client"]["replication_factor"] == 3 and r["provision"]["kafka-zookeeper"] == {"nodes": 3}
        assert r["modes"] == ["single"] and r["consumers"] == 0 and r["brokers"] == ["kafka-zookeeper"]
    [m] = (spec.validate(r) for r in spec.suite_runs("myastovskiy"))
    assert set(m["formats"]) == {"json", "avro", "protobuf", "msgpack"} and m["sizes"] == [1176, 4696, 9312]
    assert m["modes"] == ["batch", "single"] and m["messages"] == 1_048_575 and m["size_basis"] == "record"


# -- scale -------------------------------------------------------------------------------------------------------
def shape(request):
    """What a scaled run must keep: its runs' cells per repeat, without timing."""
    cells = spec.expand(spec.validate({**request, "order": "fixed"}))
    return sorted({key(c) for c in cells}), spec.validate(request)["producers"]


@pytest.mark.parametrize("name", spec.all_suite_names())
@pytest.mark.parametrize("factor", [0.5, 0.1, 0.02])
def test_scaling_keeps_the_matrix_and_shortens_the_time(name, factor):
    runs = spec.suite_runs(name)
    before = copy.deepcopy(runs)
    small = [spec.scaled(r, factor) for r in runs]
    assert runs == before  # a pure function
    for full_run, small_run in zip(runs, small):
        full, scaled_ = spec.validate(full_run), spec.validate(small_run)
        assert shape(full_run) == shape(small_run)
        for field in ("brokers", "formats", "modes", "producers", "consumers", "partitions", "client", "provision"):
            assert full[field] == scaled_[field]
        assert 1 <= scaled_["repeats"] <= full["repeats"] and scaled_["duration_s"] <= full["duration_s"]
        assert scaled_["notes"][-1].startswith(f"scaled by {factor:g}")
    full_s, small_s = plan.suite_summary(name)["estimated_s"], plan.suite_summary(name, factor)["estimated_s"]
    assert small_s < full_s


def test_scaled_estimate_by_hand():
    # tallberg: 30 s measured, 2 s warm-up, drain bound 10 s, 15 s start-up per cell (plan.estimated_seconds);
    # throughput run 3 brokers x 3 sizes, latency run 3 brokers x 6 pairs; 3 repeats.
    full = plan.suite_summary("tallberg")
    assert [r["cells"] for r in full["runs"]] == [27, 54]
    assert full["estimated_s"] == 27 * (2 + 30 + 10 + 15) + 54 * (2 + 30 + 10 + 15) == 4617
    # at 0.1: 3 s measured, 0.2 s warm-up, 1 repeat; the drain bound and start-up stay.
    small = plan.suite_summary("tallberg", 0.1)
    assert [r["cells"] for r in small["runs"]] == [9, 18]
    assert [r["estimated_s"] for r in small["runs"]] == [math.ceil(9 * 28.2), math.ceil(18 * 28.2)] == [254, 508]
    # helenius at 0.1: 186 s measured after 18 s warm-up, drain bound 30 s: 2 cells per topology
    assert plan.suite_summary("helenius", 0.1)["estimated_s"] == 3 * 2 * (18 + 186 + 30 + 15)


def test_scaled_request_fields():
    doc = {"brokers": ["kafka"], "sizes": [1024], "rates": [1000], "formats": ["json"], "producers": 4,
           "duration_s": 30, "warmup_s": 4, "repeats": 3, "notes": ["kept"]}
    out = spec.scaled(doc, 0.1)
    assert (out["duration_s"], out["warmup_s"], out["warmup_max_s"], out["repeats"]) == (3.0, 0.4, 1.4, 1)
    assert out["notes"][0] == "kept"
    assert "duration_s 30 -> 3.0" in out["notes"][1] and "repeats 3 -> 1" in out["notes"][1]
    assert spec.scaled(doc, 0.5)["repeats"] == 2  # rounded up
    assert spec.scaled(doc, 0.01)["duration_s"] == 1.0  # at least one interval
    assert spec.scaled({**doc, "duration_s": 0.5}, 0.1)["duration_s"] == 0.5  # ... unless it was already shorter
    counted = spec.scaled({**doc, "messages": 1000, "rates": ["max"]}, 0.001)
    assert counted["messages"] == 4  # at least one per producer
    assert spec.scaled({**doc, "messages": 1001}, 0.1)["messages"] == 101
    fixed = spec.scaled({**doc, "warmup_until_steady": False}, 0.1)
    assert "warmup_max_s" not in fixed  # a fixed warm-up has no bound to shorten
    assert spec.scaled({**doc, "warmup_max_s": 20}, 0.1)["warmup_max_s"] == 2.0
    assert spec.scaled(doc, 1) == doc
    assert spec.validate(spec.scaled(doc, 0.02))


def test_the_adaptive_warmup_bound_is_the_workers():
    from brokerbench.worker.warmup import DEFAULT_EXTRA_S

    assert spec.ADAPTIVE_WARMUP_EXTRA_S == DEFAULT_EXTRA_S


@pytest.mark.parametrize("factor", [0, -0.1, 1.5, float("nan"), float("inf"), True, "0.5", None])
def test_scaled_refuses_factors_outside_0_to_1(factor):
    with pytest.raises(ValueError, match="scale"):
        spec.scaled({"brokers": ["kafka"], "sizes": [1024], "rates": [10], "formats": ["raw"]}, factor)


# -- the CLI -------------------------------------------------------------------------------------------------------
def test_suites_lists_every_suite_with_its_time(capsys):
    assert main(["suites"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if re.match(r"^[a-z][a-z0-9_-]* \(", line)]
    assert [line.split(" ")[0] for line in lines] == spec.all_suite_names()
    for name in spec.all_suite_names():
        line = next(line for line in lines if line.startswith(f"{name} ("))
        summary = plan.suite_summary(name)
        assert f"({summary['cells']} cells" in line and re.search(r"at most \d+ (min|s)|at most \d+ h \d\d min", line)
    assert "tallberg (81 cells, 2 runs, at most 1 h 17 min)" in out
    assert "Redpanda cannot run here" in out  # the one-line description


def test_suites_with_scale_adds_the_scaled_estimate(capsys):
    assert main(["suites", "--scale", "0.1"]) == 0
    out = capsys.readouterr().out
    assert out.count("at scale 0.1:") == len(spec.all_suite_names())
    assert "tallberg (81 cells, 2 runs, at most 1 h 17 min; at scale 0.1: 27 cells, at most 13 min)" in out


@pytest.mark.parametrize("command", [["run", "--suite", "tallberg"], ["validate", "--suite", "tallberg"], ["suites"]])
@pytest.mark.parametrize("value", ["0", "-0.5", "1.5", "abc", "nan", "inf", ""])
def test_bad_scale_values_exit_2_naming_scale(command, value, capsys, tmp_path):
    with pytest.raises(SystemExit) as info:
        main(["--state-dir", str(tmp_path / "state"), *command, "--scale", value])
    assert info.value.code == 2
    assert "argument --scale" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()  # nothing started


def test_validate_a_scaled_study(capsys):
    assert main(["validate", "--suite", "tallberg", "--scale", "0.02"]) == 0
    out = capsys.readouterr().out
    assert "valid: 2 runs, 27 cells at scale 0.02" in out
    assert "tallberg-throughput: 9 cells" in out and "tallberg-latency: 18 cells" in out
    assert main(["validate", "--suite", "myastovskiy"]) == 0
    assert "valid: 24 cells, at most 2 h" in capsys.readouterr().out


def test_run_refuses_a_study_with_an_invalid_run_before_starting_any(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(spec, "SUITES_DIR", tmp_path)
    (tmp_path / "bad.json").write_text(json.dumps({"description": "x", "runs": [
        {"name": "bad-a", "brokers": ["kafka"], "sizes": [1024], "rates": [10], "formats": ["raw"]},
        {"name": "bad-b", "brokers": ["kafka"], "sizes": [1024], "rates": [10], "size_rates": PAIRS,
         "formats": ["raw"]}]}))
    started = []
    monkeypatch.setattr(run_command, "_run_one", lambda *a: started.append(a) or (0, "x"))
    assert main(["--state-dir", str(tmp_path / "state"), "run", "--suite", "bad"]) == 2
    assert started == [] and "size_rates" in capsys.readouterr().err


def fake_runs(monkeypatch, codes):
    """cli.run._run_one replaced: records what it was asked to run, answers the next exit code."""
    calls, answers = [], iter(codes)

    def run_one(args, request, suite):
        calls.append((request, suite))
        return next(answers), f"20261122T1130{len(calls):02d}Z-abcdef"

    monkeypatch.setattr(run_command, "_run_one", run_one)
    return calls


def test_run_runs_a_studys_runs_one_after_another_and_reports_each_run_id(monkeypatch, capsys):
    calls = fake_runs(monkeypatch, [0, 1])
    assert main(["run", "--suite", "tallberg", "--scale", "0.02"]) == 1  # the worst of its runs
    assert [(r["name"], suite) for r, suite in calls] == [("tallberg-throughput", "tallberg"),
                                                           ("tallberg-latency", "tallberg")]
    assert all(r["duration_s"] == 1.0 and r["repeats"] == 1 for r, _ in calls)  # scaled
    out = capsys.readouterr().out
    assert "20261122T113001Z-abcdef  tallberg-throughput  exit 0" in out
    assert "20261122T113002Z-abcdef  tallberg-latency  exit 1" in out


def test_an_interrupted_study_stops_and_says_what_did_not_run(monkeypatch, capsys):
    calls = fake_runs(monkeypatch, [0, 130, 0])
    assert main(["run", "--suite", "helenius", "--scale", "0.01"]) == 130
    assert [r["name"] for r, _ in calls] == ["helenius-1p1c1b", "helenius-4p1c1b"]
    assert "helenius-4p1c3b  not run" in capsys.readouterr().out


def test_a_one_request_suite_runs_as_before(monkeypatch):
    calls = fake_runs(monkeypatch, [0])
    assert main(["run", "--suite", "quick"]) == 0
    assert calls == [(spec.load_suite("quick"), "quick")]  # unscaled, unchanged


def test_only_runs_the_named_runs_of_a_study(capsys):
    from argparse import Namespace

    from brokerbench.cli import _requests, main

    requests, suite = _requests(Namespace(spec=None, suite="helenius", scale=0.1, only=["helenius-4p1c3b"]))
    assert suite == "helenius" and [r["name"] for r in requests] == ["helenius-4p1c3b"]
    assert requests[0]["notes"][-1].startswith("scaled by 0.1")
    with pytest.raises(spec.SpecError) as raised:
        _requests(Namespace(spec=None, suite="helenius", scale=None, only=["helenius-9p"]))
    assert raised.value.problems[0].path == "--only" and "helenius-9p" in raised.value.problems[0].message
    assert main(["run", "--suite", "helenius", "--only", "helenius-9p"]) == 2  # refused before anything starts
    assert "--only" in capsys.readouterr().err


def test_a_scaled_search_keeps_enough_seconds_per_step_to_judge():
    """The sustainable-rate search judges each step on verdict.MIN_INTERVALS intervals: scaled below that,
    every step would be inconclusive and the search could find nothing."""
    from brokerbench import verdict

    latency, search, _, _ = spec.suite_runs("vandongen")
    assert spec.scaled(search, 0.001)["duration_s"] == verdict.MIN_INTERVALS
    assert spec.scaled(search, 0.5)["duration_s"] == 30  # above the floor, scaled as any run
    assert spec.scaled(latency, 0.001)["duration_s"] == 1.8  # a fixed-rate run keeps only one interval's floor
    paired = {"brokers": ["kafka"], "size_rates": [{"size": 100, "rates": [10, "sustainable"]}], "formats": ["raw"],
              "duration_s": 60}
    assert spec.scaled(paired, 0.01)["duration_s"] == verdict.MIN_INTERVALS


# -- the scales the study tests name -------------------------------------------------------------------------------
# tests/integration/test_study_run.py and test_study_suites_run.py run each study as `run --suite NAME --scale F`,
# cut further to the smallest shape (tests/study_scale.py). What F itself leaves of each study is here.
TALLBERG_PAIRS = {(1000, 1000), (1000, 5000), (65000, 100), (65000, 500), (600000, 50), (600000, 200)}


def scaled_runs(name, factor):
    return {r["name"]: spec.validate(spec.scaled(r, factor)) for r in spec.suite_runs(name)}


def test_tallberg_at_the_tests_scale_keeps_both_runs_with_the_studys_pairs():
    runs = scaled_runs("tallberg", 0.02)
    assert list(runs) == ["tallberg-throughput", "tallberg-latency"]
    latency, throughput = spec.expand(runs["tallberg-latency"]), spec.expand(runs["tallberg-throughput"])
    assert {(c["size_bytes"], c["rate"]) for c in latency} == TALLBERG_PAIRS
    assert len(latency) == 3 * 6  # one repeat: 3 brokers x the 6 pairs, nothing else
    assert {(c["size_bytes"], c["rate"]) for c in throughput} == {(1000, "max"), (65000, "max"), (600000, "max")}
    for run in runs.values():
        assert {c["broker"] for c in spec.expand(run)} == {"kafka-zookeeper", "pulsar", "redis-streams"}
        assert run["notes"][-1].startswith("scaled by 0.02") and run["repeats"] == 1
    assert throughput[0]["consumers"] == 0  # producer-only
    assert runs["tallberg-latency"]["size_rates"][0] == {"size": 1000, "rates": [1000, 5000]}


def test_the_other_studies_at_the_tests_scales_keep_their_matrices():
    helenius = scaled_runs("helenius", 0.002)
    assert list(helenius) == ["helenius-1p1c1b", "helenius-4p1c1b", "helenius-4p1c3b"]
    three = helenius["helenius-4p1c3b"]
    assert (three["partitions"], three["producers"], three["brokers"]) == (3, 4, ["kafka-zookeeper", "kafka"])
    assert three["provision"]["kafka"]["nodes"] == three["provision"]["kafka-zookeeper"]["nodes"] == 3
    [myastovskiy] = scaled_runs("myastovskiy", 0.002).values()
    assert len(spec.expand(myastovskiy)) == 3 * 4 * 2  # sizes x formats x modes
    assert myastovskiy["messages"] == 2098  # 1,048,575 x 0.002
    downard = scaled_runs("downard", 0.05)
    assert {n: r["partitions"] for n, r in downard.items() if "partitions" in n} == {
        "downard-partitions-10": 10, "downard-partitions-100": 100, "downard-partitions-400": 400}
    assert all(r["consumers"] == 0 and r["modes"] == ["single"] for r in downard.values())  # publish-only, single
    assert len(spec.expand(downard["downard-sizes"])) == 5


def test_vandongen_at_the_tests_scale_keeps_its_backlog_and_two_bursts():
    from brokerbench.worker import schedule

    runs = scaled_runs("vandongen", 0.005)
    assert runs["vandongen-startup-burst"]["backlog"] == {"messages": 9000, "rate": 6000}  # 1,800,000 x 0.005
    assert runs["vandongen-sustainable"]["search"]["max_steps"] == 12  # the search as the suite has it
    burst = runs["vandongen-periodic-burst"]
    assert burst["duration_s"] == 20.175  # two whole periods of 10 s
    [cell] = spec.expand(burst)
    second = 1_000_000_000
    measure_start = int(burst["warmup_s"] * second)
    windows = schedule.burst_windows(cell, 0, measure_start, measure_start + int(burst["duration_s"] * second))
    assert len(windows) == 2  # the scaled run measures two bursts
