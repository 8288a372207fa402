"""A local workflow run: every step's log lines and the run's metrics land in files, none on stdout."""

import json

from brokerbench.events import new_run_id
from brokerbench.local.workflow import LocalWorkflow

STEPS = {"validate_request", "plan_cells", "provision_target", "record_targets_ready", "check_regression",
         "aggregate", "teardown_target"}


def appended(path, start):
    if not path.exists():
        return []
    with open(path, "rb") as lines:
        lines.seek(start)
        return [json.loads(line) for line in lines.read().decode().splitlines()]


def test_a_local_run_logs_each_step_with_its_run_id_and_counts_it_into_files(stack, tmp_path, capfd):
    log, metrics = stack.state_dir / "functions.log", stack.state_dir / "metrics.jsonl"  # the stack is shared
    start = {path: path.stat().st_size if path.exists() else 0 for path in (log, metrics)}
    request = {"name": "obs-run", "brokers": ["redis-streams"], "sizes": [1024], "rates": [1000], "formats": ["raw"],
               "messages": 100, "warmup_s": 0, "warmup_until_steady": False, "drain_timeout_s": 1}
    run_id = new_run_id()
    capfd.readouterr()
    execution = LocalWorkflow(stack, tmp_path / "reports").execute(request, suite=request["name"], run_id=run_id)
    assert execution.status == "SUCCEEDED", (execution.error, execution.cause)

    stdout = capfd.readouterr().out
    assert '"correlation_id"' not in stdout and '"_aws"' not in stdout
    lines = [line for line in appended(log, start[log]) if line.get("correlation_id") == run_id]
    functions = {line["function_name"] for line in lines}
    assert STEPS <= functions and functions & {"run_cell", "start_ec2_worker"}
    assert all(line["service"] == "brokerbench" for line in lines)
    [aggregated] = [line for line in lines if line["function_name"] == "aggregate"]
    assert (aggregated["status"], aggregated["cells_completed"], aggregated["cells_failed"]) == ("completed", 1, 0)
    blobs = appended(metrics, start[metrics])
    assert [b["RunsCompleted"] for b in blobs if "RunsCompleted" in b] == [[1.0]]
    assert all(b["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "brokerbench" for b in blobs)
