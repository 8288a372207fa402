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

BIN = Path(sys.executable).parent / "brokerbench"
SCALES = {"helenius": "0.002", "myastovskiy": "0.002", "downard": "0.05", "vandongen": "0.005"}


@pytest.fixture(scope="module")
def brokers(extra_brokers):
    extra_brokers("kafka-zookeeper", "kafka@3", "kafka-zookeeper@3")


def run_and_compare(stack, tmp_path, name: str) -> tuple[dict, dict]:
    out = tmp_path / "out"
    done = subprocess.run(command("--state-dir", str(stack.state_dir), "run", "--suite", name,
                                  "--scale", SCALES[name], "--out", str(out)),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = {}
    for path in out.glob("*/results.json"):
        found = json.loads(path.read_text())
        results[found["name"]] = found
        assert found["status"] == "completed", (found["name"], found["reason"])
        assert all(c["status"] == "completed" for c in found["cells"]), [c.get("reason") for c in found["cells"]]
    shown = subprocess.run([str(BIN), "--state-dir", str(stack.state_dir), "study", name, "--json"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    comparison = json.loads(shown.stdout)
    assert {r["name"]: r["run_id"] for r in comparison["runs"]} == {n: r["run_id"] for n, r in results.items()}
    filled = check_figures(name, comparison, results)
    assert all(filled.values()), filled  # every table has figures of ours in the tests' shape
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
    results, comparison = run_and_compare(stack, tmp_path, "vandongen")
    found = results["vandongen-sustainable"]["cells"][0]
    assert found["max_sustainable_rate"] > 0
    table = next(t for t in comparison["tables"] if t["id"] == "sustainable")
    assert table["rows"][0]["figures"][0]["ours"] == found["max_sustainable_rate"]
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
