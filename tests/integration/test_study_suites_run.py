"""Every study suite as a user runs it, scaled down to seconds, then `brokerbench study` on the runs it stored.

tallberg is in test_study_run.py; here helenius (its three topologies, the 3-node clusters included), myastovskiy,
downard (by size and by partition count on a 3-node cluster) and vandongen (latency, the sustainable-rate search, the
startup backlog and the periodic bursts).
Each runs as `run --suite NAME --scale F`, each run then cut to the tests' smallest shape (tests/study_scale.py:
fewer points per axis, one-interval cells, small bursts and backlog, a two-step search); what F alone leaves of each
study, and that the whole matrix fills every figure, is checked in tests/unit (test_study_suites.py,
test_study_compare.py).
The brokers and clusters they need are started once for the module, so the runs do not each start and stop them.
Each figure of ours is there exactly when the runs have cells it selects, from those cells and the run it names.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from study_scale import SHAPES, check_figures, command

from brokerbench.events.dynamodb import DynamoEventStore

BIN = Path(sys.executable).parent / "brokerbench"
SCALES = {"helenius": "0.002", "myastovskiy": "0.002", "downard": "0.05", "vandongen": "0.005"}


@pytest.fixture(scope="module")
def brokers(extra_brokers):
    extra_brokers("kafka-zookeeper", "kafka@3", "kafka-zookeeper@3")


def failed_cells(stack, results: dict[str, dict]) -> list[dict]:
    """What each run's failed cells say: their reason, and a search's steps (rate, verdict, reasons) as its
    CellFailed stored them."""
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    out = []
    for run in results.values():
        if run["status"] == "completed":
            continue
        ends = {e["data"]["cell_id"]: e["data"] for e in store.read(run["run_id"], interval_histograms=False)
                if e["type"] == "CellFailed"}
        out += [{"run": run["name"], "status": run["status"], "run_reason": run["reason"], "cell": cell_id,
                 "reason": data["reason"], "steps": [(step["rate"], step["verdict"], step["reasons"])
                                                     for step in (data.get("search") or {}).get("steps", [])]}
                for cell_id, data in ends.items()]
    return out


NO_RATE = "no sustainable rate found: "


def check_no_rate_stands(search: dict) -> None:
    """A search that found no rate: it measured, every rate it tried stands by no majority of its steps, and every
    step that did not hold says which rule it failed."""
    steps = search["steps"]
    assert steps, search
    by_rate: dict[float, list[str]] = {}
    for rate, verdict, reasons in steps:
        by_rate.setdefault(rate, []).append(verdict)
        assert verdict == "sustainable" or reasons, search
    assert all(2 * verdicts.count("sustainable") <= len(verdicts) for verdicts in by_rate.values()), search


def run_and_compare(stack, tmp_path, name: str, unfound_allowed: bool = False) -> tuple[dict, dict]:
    """Run the study and compare it. `unfound_allowed`: a rate search may end without a rate (on a loaded host
    no rate may hold in 5 s steps, a timing); its cell must then be failed by the search's own rule, and the CLI
    exit 1 for it alone."""
    out = tmp_path / "out"
    done = subprocess.run(command("--state-dir", str(stack.state_dir), "run", "--suite", name,
                                  "--scale", SCALES[name], "--out", str(out)),
                          capture_output=True, text=True, timeout=900)
    results = {}
    for path in out.glob("*/results.json"):
        found = json.loads(path.read_text())
        results[found["name"]] = found
    failed = failed_cells(stack, results)
    unfound = [f for f in failed if unfound_allowed and f["reason"].startswith(NO_RATE)]
    told = json.dumps(failed, indent=1) + "\n" + done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == (1 if unfound else 0) and failed == unfound, told
    for found in results.values():
        expected = "completed_with_failures" if any(f["run"] == found["name"] for f in unfound) else "completed"
        assert found["status"] == expected, (found["name"], found["reason"], told)
        assert [c["cell_id"] for c in found["cells"] if c["status"] != "completed"] == [
            f["cell"] for f in unfound if f["run"] == found["name"]], told
    for search in unfound:
        check_no_rate_stands(search)
    shown = subprocess.run([str(BIN), "--state-dir", str(stack.state_dir), "study", name, "--json"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    comparison = json.loads(shown.stdout)
    assert {r["name"]: r["run_id"] for r in comparison["runs"]} == {n: r["run_id"] for n, r in results.items()}
    filled = check_figures(name, comparison, results)
    # Every table has figures of ours in the tests' shape (a search that found no rate fills none of its table's).
    assert all(n or (unfound and table == "sustainable") for table, n in filled.items()), filled
    for table in comparison["tables"]:
        for row in table["rows"]:
            if "Redpanda" in row["label"]:  # cannot run here: no cell, no figure
                assert all(f["cells"] == [] and f["ours"] is None for f in row["figures"])
    return results, comparison


@pytest.mark.timeout(600)  # the module's first test: its time includes starting Kafka with ZooKeeper and two clusters
def test_helenius_scaled(stack, brokers, tmp_path):
    results, comparison = run_and_compare(stack, tmp_path, "helenius")
    assert set(results) == {"helenius-1p1c1b", "helenius-4p1c1b", "helenius-4p1c3b"}
    three = results["helenius-4p1c3b"]
    assert {c["broker"] for c in three["cells"]} == {"kafka-zookeeper", "kafka"}
    assert all(c["partitions"] == 3 and c["producers"] == 4 for c in three["cells"])
    assert all(t["nodes"] == 3 for t in three["environment"]["brokers"].values())
    lag = next(t for t in comparison["tables"] if t["id"] == "lag")
    assert all(f["ours"] >= 0 for row in lag["rows"] if "Redpanda" not in row["label"] for f in row["figures"])


def test_myastovskiy_scaled(stack, brokers, tmp_path):
    results, comparison = run_and_compare(stack, tmp_path, "myastovskiy")
    cells = results["myastovskiy"]["cells"]
    assert len(cells) == 1 * 4 * 2  # the shape's size x formats x modes
    assert {(c["format"], c["mode"]) for c in cells} == {(f, m) for f in ("json", "avro", "protobuf", "msgpack")
                                                         for m in ("batch", "single")}
    messages = SHAPES["myastovskiy"]["messages"]
    short = [{k: c.get(k) for k in ("broker", "format", "mode", "size", "sent", "received", "late", "lost",
                                    "undelivered", "duplicated", "send_errors", "unacked", "reason")}
             for c in cells if not c["received"] == c["sent"] == messages]
    assert not short, short  # every one of the counted messages delivered once


def test_downard_scaled(stack, brokers, tmp_path):
    results, comparison = run_and_compare(stack, tmp_path, "downard")
    assert {n: results[n]["cells"][0]["partitions"] for n in results if "partitions" in n} == {
        "downard-partitions-10": 10, "downard-partitions-100": 100, "downard-partitions-400": 400}
    assert all(c["publish_only"] and c["mode"] == "single" for r in results.values() for c in r["cells"])


def test_vandongen_scaled(stack, brokers, tmp_path):
    results, comparison = run_and_compare(stack, tmp_path, "vandongen", unfound_allowed=True)
    found = results["vandongen-sustainable"]["cells"][0]
    table = next(t for t in comparison["tables"] if t["id"] == "sustainable")
    if found["status"] == "completed":  # the study's figure is the rate the search found
        assert found["max_sustainable_rate"] > 0, found["search"]
        assert table["rows"][0]["figures"][0]["ours"] == found["max_sustainable_rate"]
    else:  # no rate held on this (loaded) host: checked by run_and_compare, and the study shows no figure
        assert found["reason"].startswith(NO_RATE) and table["rows"][0]["figures"][0]["ours"] is None, found
    backlog = SHAPES["vandongen-startup-burst"]["backlog"]["messages"]
    cell = results["vandongen-startup-burst"]["cells"][0]
    startup = cell["startup"]
    accounting = {k: cell.get(k) for k in ("sent", "received", "lost", "late", "undelivered", "broker_count",
                                           "startup")}
    assert startup["messages"] == startup["received"] == backlog, accounting  # all read from the broker
    # The broker's own count just before the consumers attach holds what had reached it then: the whole backlog
    # on an idle host, less when a loaded one sent it late (a timing, not a defect); never more than was sent.
    assert 0 < startup["at_attach"]["broker_messages"] <= cell["sent"], accounting
    assert cell["broker_count"]["difference"] == 0, accounting  # at the end the broker holds what was sent
    bursts = results["vandongen-periodic-burst"]["cells"][0]["bursts"]
    assert bursts["measured"] == bursts["delivered"] == 2  # two whole periods measured: two bursts
    table = next(t for t in comparison["tables"] if t["id"] == "periodic-burst")
    assert table["rows"][0]["figures"][1]["ours"] == bursts["delivered_in_ms"]["max"]
