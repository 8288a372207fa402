"""A study suite as a user runs it, scaled down: `brokerbench run --suite tallberg --scale 0.02`, each run then cut
to the tests' smallest shape (tests/study_scale.py: 1 kB for the throughput run; 1 kB at both its rates and 65 kB
at one for the latency run; every broker in both).

Both of the study's runs (producer-only maximum throughput; latency at the paired sizes and rates) on the
local stack, one after another, each with its own run id. Pulsar and Kafka with ZooKeeper are started
once for the module, so the two runs reuse them instead of each starting and stopping them. What the scale
alone leaves of the study (both runs, the six pairs, one repeat) is checked in tests/unit/test_study_suites.py.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from study_scale import SHAPES, check_figures, command

BIN = Path(sys.executable).parent / "brokerbench"
TALLBERG_PAIRS = {(1000, 1000), (1000, 5000), (65000, 100), (65000, 500), (600000, 50), (600000, 200)}
PAIRS = {(p["size"], r) for p in SHAPES["tallberg-latency"]["size_rates"] for r in p["rates"]}
DECIDED = ("1.", "2.", "9.", "10.")  # the conclusions whose figures are all in the tests' shape (1 kB, 65 kB at 100/s)


def test_tallberg_scaled_runs_both_runs_with_the_studys_pairs(stack, extra_brokers, tmp_path):
    extra_brokers("kafka-zookeeper", "pulsar")
    started = time.monotonic()
    done = subprocess.run(command("--state-dir", str(stack.state_dir), "run", "--suite", "tallberg",
                                  "--scale", "0.02", "--out", str(tmp_path / "out")),
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
    assert {(c["size_bytes"], c["rate_target"]) for c in latency} == PAIRS < TALLBERG_PAIRS  # paired, not crossed
    assert (65000, 1000) not in PAIRS and len({size for size, _ in PAIRS}) == 2
    assert len(latency) == 3 * 3  # one repeat: 3 brokers x the 3 pairs, nothing else
    assert all(c["received"] > 0 and c["lost"] == 0 for c in latency)
    throughput = results["tallberg-throughput"]["cells"]
    assert {(c["size_bytes"], c["rate_target"]) for c in throughput} == {(1000, "max")}
    assert all(c["received"] is None and c["throughput_msgs_per_s"] > 0 for c in throughput)  # producer-only

    # the study, its deviations and the scale are stored with each run
    from brokerbench.events.dynamodb import DynamoEventStore

    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    events = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    requested = events.read(results["tallberg-latency"]["run_id"], prefix="00#run")[0]["data"]
    assert requested["suite"] == "tallberg" and requested["spec"]["study"] == "Tallberg 2020"
    assert requested["spec"]["notes"][-1].startswith("scaled by 0.02")
    assert requested["spec"]["notes"][-2].startswith("test shape: ")
    assert requested["spec"]["size_rates"][0] == {"size": 1000, "rates": [1000, 5000]}
    print(f"tallberg at scale 0.02: {took:.0f} s")

    # the study beside these runs: `brokerbench study tallberg` takes the newest stored run of each
    shown = subprocess.run([str(BIN), "--state-dir", str(stack.state_dir), "study", "tallberg", "--json"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    comparison = json.loads(shown.stdout)
    assert {r["name"]: r["run_id"] for r in comparison["runs"]} == {n: r["run_id"] for n, r in results.items()}
    assert check_figures("tallberg", comparison, results) == {  # 1 kB at max; the 3 pairs' mean, min and max
        "table2-msgs": 3, "table2-mb": 3, "table3": 9, "table4": 9, "table5": 9, "table6": 0, "table7": 0, "table8": 0}
    tables = {t["id"]: t for t in comparison["tables"]}
    by_key = {(c["broker"], c["size_bytes"], c["rate_target"]): c for r in results.values() for c in r["cells"]}
    kafka_1kb = tables["table2-msgs"]["rows"][0]["figures"][0]  # one repeat: the cell's own figure
    assert kafka_1kb["ours"] == by_key[("kafka-zookeeper", 1000, "max")]["throughput_msgs_per_s"]
    assert kafka_1kb["ratio"] == pytest.approx(kafka_1kb["ours"] / 137676)
    pulsar_mean = tables["table3"]["rows"][1]["figures"][0]
    cell_mean = by_key[("pulsar", 1000, 1000)]["end_to_end_latency_us"]["mean"]
    if cell_mean is None:  # messages due and never sent (a producer behind at the cell's end, on a loaded host): its
        assert pulsar_mean["ours"] is None  # percentiles are lower bounds, it has no mean, and the study gives none
    else:
        assert pulsar_mean["ours"] == pytest.approx(cell_mean / 1000, rel=1e-3)
    # a conclusion is decided on the figures it needs; one that lacks some of them (points the shape leaves out)
    # never holds, and fails only on a check it has the figures for (with the whole matrix every checked one is
    # decided: tests/unit/test_study_compare.py)
    # A decided one may still read "cannot tell" where a mean it needs is out of reach: a latency cell with messages
    # missing or due and never sent (a producer behind at its end on a loaded host) has no mean, its figure "n/r".
    unmeasured = [c["cell_id"] for c in latency if c["end_to_end_latency_us"]["mean"] is None
                  and (c["missing"] or 0) + (c["not_sent"] or 0) > 0]
    for conclusion in comparison["conclusions"]:
        decided = conclusion["claim"].startswith(DECIDED)
        wanted = ("holds", "does not hold") if decided else ("cannot tell", "does not hold", "not checked")
        if decided and conclusion["ours"]["verdict"] == "cannot tell":
            assert unmeasured and any("n/r" in f for f in conclusion["ours"]["figures"]), conclusion
            continue
        assert conclusion["ours"]["verdict"] in wanted, conclusion
    assert sum(c["claim"].startswith(DECIDED) for c in comparison["conclusions"]) == len(DECIDED)
