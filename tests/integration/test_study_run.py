"""A study suite as a user runs it, scaled down: `brokerbench run --suite tallberg --scale 0.02`.

Both of the study's runs (producer-only maximum throughput; latency at the paired sizes and rates) on the
local stack, one after another, each with its own run id. Pulsar and Kafka with ZooKeeper are started
once for the module, so the two runs reuse them instead of each starting and stopping them.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "brokerbench"
TALLBERG_PAIRS = {(1000, 1000), (1000, 5000), (65000, 100), (65000, 500), (600000, 50), (600000, 200)}


def test_tallberg_scaled_runs_both_runs_with_the_studys_pairs(stack, extra_brokers, tmp_path):
    extra_brokers("kafka-zookeeper", "pulsar")
    started = time.monotonic()
    done = subprocess.run([str(BIN), "--state-dir", str(stack.state_dir), "run", "--suite", "tallberg",
                           "--scale", "0.02", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "suite tallberg: 2 runs, one after another: tallberg-throughput, tallberg-latency" in done.stdout
    assert "scaled by 0.02" in done.stdout

    results = {}
    for path in (tmp_path / "out").glob("*/results.json"):
        found = json.loads(path.read_text())
        results[found["name"]] = found
    assert set(results) == {"tallberg-throughput", "tallberg-latency"}
    for name, found in results.items():
        assert f"{found['run_id']}  {name}  exit 0" in done.stdout  # each run id reported
        assert found["status"] == "completed"
        assert all(c["status"] == "completed" for c in found["cells"]), [c.get("reason") for c in found["cells"]]
        assert {c["broker"] for c in found["cells"]} == {"kafka-zookeeper", "pulsar", "redis-streams"}

    latency = results["tallberg-latency"]["cells"]
    assert {(c["size_bytes"], c["rate_target"]) for c in latency} == TALLBERG_PAIRS
    assert len(latency) == 3 * 6  # scaled to one repeat: 3 brokers x the 6 pairs, nothing else
    assert all(c["received"] > 0 and c["lost"] == 0 for c in latency)
    throughput = results["tallberg-throughput"]["cells"]
    assert {(c["size_bytes"], c["rate_target"]) for c in throughput} == {(1000, "max"), (65000, "max"),
                                                                         (600000, "max")}
    assert all(c["received"] is None and c["throughput_msgs_per_s"] > 0 for c in throughput)  # producer-only

    # the study, its deviations and the scale are stored with each run
    from brokerbench.events.dynamodb import DynamoEventStore

    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    events = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    requested = events.read(results["tallberg-latency"]["run_id"], prefix="00#run")[0]["data"]
    assert requested["suite"] == "tallberg" and requested["spec"]["study"] == "Tallberg 2020"
    assert requested["spec"]["notes"][-1].startswith("scaled by 0.02")
    assert requested["spec"]["size_rates"][0] == {"size": 1000, "rates": [1000, 5000]}
    print(f"tallberg at scale 0.02: {took:.0f} s")

    # the study beside these runs: `brokerbench study tallberg` takes the newest stored run of each
    shown = subprocess.run([str(BIN), "--state-dir", str(stack.state_dir), "study", "tallberg", "--json"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    comparison = json.loads(shown.stdout)
    assert {r["name"]: r["run_id"] for r in comparison["runs"]} == {n: r["run_id"] for n, r in results.items()}
    tables = {t["id"]: t for t in comparison["tables"]}
    by_key = {(c["broker"], c["size_bytes"], c["rate_target"]): c for r in results.values() for c in r["cells"]}
    kafka_1kb = tables["table2-msgs"]["rows"][0]["figures"][0]  # one repeat: the cell's own figure
    assert kafka_1kb["ours"] == by_key[("kafka-zookeeper", 1000, "max")]["throughput_msgs_per_s"]
    assert kafka_1kb["ratio"] == pytest.approx(kafka_1kb["ours"] / 137676)
    pulsar_mean = tables["table3"]["rows"][1]["figures"][0]
    assert pulsar_mean["ours"] == pytest.approx(by_key[("pulsar", 1000, 1000)]["end_to_end_latency_us"]["mean"] / 1000,
                                                rel=1e-3)
    assert all(c["ours"]["verdict"] in ("holds", "does not hold", "not checked") for c in comparison["conclusions"])
