"""The commands that read the store need no setup step: on a local stack that is down, `import`, `show` and `compare`
start DynamoDB Local themselves, answer from the stored runs and stop it again, as `brokerbench run` does; a store that
was up is left as found, and one another command still uses is left running."""

import fcntl
import json
import re
import subprocess
import sys
from pathlib import Path

from archives import read_archive

from brokerbench.local.stack import LocalStack, pid_alive
from brokerbench.reports.model import build_report
from brokerbench.reports.regression import compare
from brokerbench.reports.results import build_results

BIN = Path(sys.executable).parent / "brokerbench"
ARCHIVE = Path(__file__).resolve().parents[2] / "docs" / "studies" / "20261122T133050Z-d180a2.jsonl.gz"
RUN_ID = "20261122T133050Z-d180a2"  # vandongen-latency: one Kafka cell, stored by a real run


def brokerbench(stack, *args):
    return subprocess.run([str(BIN), "--state-dir", str(stack.state_dir), *args], capture_output=True, text=True,
                          timeout=120)


def stopped_here(done) -> int:
    """The pid of the DynamoDB Local the command started, from its own lines (stderr: stdout stays its answer)."""
    assert "starting dynamodb ..." in done.stderr, done.stderr
    [pid] = re.findall(r"stopping dynamodb \(pid (\d+)\)", done.stderr)
    return int(pid)


def assert_nothing_left(stack, pid: int) -> None:
    assert stack.status()["dynamodb"] == {"state": "stopped"}
    assert not pid_alive(pid)


def test_import_show_and_compare_on_a_stack_that_is_down(tmp_path):
    stack = LocalStack(tmp_path / "stack")
    events = read_archive(ARCHIVE)

    loaded = brokerbench(stack, "import", str(ARCHIVE))
    assert loaded.returncode == 0, loaded.stderr
    assert f"{RUN_ID}: {len(events)} events" in loaded.stdout
    assert_nothing_left(stack, stopped_here(loaded))

    shown = brokerbench(stack, "show", RUN_ID, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == json.loads(json.dumps(build_results(events)))  # what was stored, all of it
    assert_nothing_left(stack, stopped_here(shown))

    out = tmp_path / "out"
    compared = brokerbench(stack, "compare", RUN_ID, RUN_ID, "--out", str(out))
    verdicts = compare(build_report(events), build_report(events), [])  # the same run: nothing can have regressed
    assert compared.returncode == 0, compared.stderr
    assert f"{len(verdicts)} comparisons, 0 regressions" in compared.stdout
    written = json.loads((out / RUN_ID / f"compare-{RUN_ID}.json").read_text())
    assert written["verdicts"] == json.loads(json.dumps(verdicts)) and written["history_run_ids"] == [RUN_ID]
    assert_nothing_left(stack, stopped_here(compared))


def test_a_store_that_was_up_or_is_still_in_use_is_left_running(tmp_path):
    stack = LocalStack(tmp_path / "stack")
    with stack.serving(["dynamodb"], log=lambda m: None):  # up before the command: left as found
        before = stack.status()["dynamodb"]["pid"]
        loaded = brokerbench(stack, "import", str(ARCHIVE))
        assert loaded.returncode == 0, loaded.stderr
        assert "dynamodb" not in loaded.stderr and stack.status()["dynamodb"]["pid"] == before and pid_alive(before)
    assert_nothing_left(stack, before)  # stopped by the one that started it

    with open(stack.state_dir / "users.lock") as users:  # another command is using the store
        fcntl.flock(users, fcntl.LOCK_SH)
        try:
            listed = brokerbench(stack, "runs")
            assert listed.returncode == 0, listed.stderr
            assert RUN_ID in listed.stdout  # the store keeps its data from one start to the next
            assert "leaving dynamodb running: another command is using it" in listed.stderr
            assert stack.is_up(["dynamodb"])
        finally:
            stack.down(log=lambda m: None)
