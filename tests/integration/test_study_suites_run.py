"""Every study suite as a user runs it, scaled down to seconds, then `brokerbench study` on the runs it stored.

tallberg is in test_study_run.py; here helenius (its three topologies, the 3-node clusters included), myastovskiy,
downard (by size and by partition count on a 3-node cluster) and vandongen (latency, the sustainable-rate search, the
startup backlog and the periodic bursts).
The brokers and clusters they need are started once for the module, so the runs do not each start and stop them.
Each study's figures of ours must all be there (but for a broker that cannot run here), each from a run it names.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "brokerbench"
SCALES = {"helenius": "0.002", "myastovskiy": "0.002", "downard": "0.05", "vandongen": "0.005"}


@pytest.fixture(scope="module")
def brokers(extra_brokers):
    extra_brokers("kafka-zookeeper", "kafka@3", "kafka-zookeeper@3")


def run_and_compare(stack, tmp_path, name: str) -> tuple[dict, dict]:
    out = tmp_path / "out"
    done = subprocess.run([str(BIN), "--state-dir", str(stack.state_dir), "run", "--suite", name,
                           "--scale", SCALES[name], "--out", str(out)], capture_output=True, text=True, timeout=900)
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
    run_ids = {r["run_id"] for r in results.values()}
    for table in comparison["tables"]:
        assert set(table["run_ids"]) <= run_ids
        for row in table["rows"]:
            if "Redpanda" in row["label"]:  # cannot run here: no cell, no figure
                assert all(f["cells"] == [] and f["ours"] is None for f in row["figures"])
                continue
            assert all(f["ours"] is not None and f["cells"] for f in row["figures"]), (table["id"], row)
    return results, comparison


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
    assert len(cells) == 3 * 4 * 2  # sizes x formats x modes
    short = [{k: c.get(k) for k in ("broker", "format", "mode", "size", "sent", "received", "late", "lost",
                                    "undelivered", "duplicated", "send_errors", "unacked", "reason")}
             for c in cells if not c["received"] == c["sent"] == 2098]
    assert not short, short  # 1,048,575 x 0.002, every one delivered once


def test_downard_scaled(stack, brokers, tmp_path):
    results, comparison = run_and_compare(stack, tmp_path, "downard")
    assert {n: results[n]["cells"][0]["partitions"] for n in results if "partitions" in n} == {
        "downard-partitions-10": 10, "downard-partitions-100": 100, "downard-partitions-400": 400}
    assert all(c["publish_only"] and c["mode"] == "single" for r in results.values() for c in r["cells"])


@pytest.mark.timeout(900)  # the search measures both ends of its bracket twice: up to 12 whole steps
def test_vandongen_scaled(stack, brokers, tmp_path):
    results, comparison = run_and_compare(stack, tmp_path, "vandongen")
    found = results["vandongen-sustainable"]["cells"][0]
    assert found["max_sustainable_rate"] > 0
    table = next(t for t in comparison["tables"] if t["id"] == "sustainable")
    assert table["rows"][0]["figures"][0]["ours"] == found["max_sustainable_rate"]
    startup = results["vandongen-startup-burst"]["cells"][0]["startup"]
    assert startup["messages"] == startup["received"] == 9000  # 1,800,000 x 0.005, all read from the broker
    assert startup["at_attach"]["broker_messages"] >= 9000
    bursts = results["vandongen-periodic-burst"]["cells"][0]["bursts"]
    assert bursts["measured"] == bursts["delivered"] == 2  # 20.175 s measured: the scaled run keeps two bursts
    table = next(t for t in comparison["tables"] if t["id"] == "periodic-burst")
    assert table["rows"][0]["figures"][1]["ours"] == bursts["delivered_in_ms"]["max"]
