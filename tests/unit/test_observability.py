"""Handlers' logs and metrics: JSON lines with the run id locally in files, EMF on stdout in AWS."""

import json
import threading
import warnings

import aws_xray_sdk
import pytest

from brokerbench import observability
from brokerbench.local.workflow import _LambdaContext
from brokerbench.observability import count, lambda_entry, logger, set_run, tracer
from brokerbench.workflow import steps
from handlers import aggregate, check_regression, teardown_target, validate_request


@pytest.fixture
def local(tmp_path, monkeypatch):
    monkeypatch.setenv("BROKERBENCH_MODE", "local")
    monkeypatch.setenv("BROKERBENCH_LOG_DIR", str(tmp_path))
    # counts an earlier test left pending in the process's one metric set (test_bounds starts runs through the API,
    # outside a handler) would be published by this test's first handler
    observability.metrics.clear_metrics()
    return tmp_path


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def metric(blobs, name):
    [blob] = [b for b in blobs if name in b]
    [definition] = blob["_aws"]["CloudWatchMetrics"]
    assert definition["Namespace"] == "brokerbench"
    assert {"Name": name, "Unit": "Count"} in definition["Metrics"]
    return blob


def test_a_handler_logs_json_lines_with_the_run_id_and_counts_into_files_locally(local, monkeypatch, capsys):
    summary = {"status": "completed_with_failures", "cells_completed": 3, "cells_failed": 1, "report": "r.html"}
    monkeypatch.setattr(steps, "aggregate", lambda event: summary)
    context = _LambdaContext("local:aggregate")
    assert aggregate.lambda_handler({"run_id": "RUN1", "check": None}, context) == summary
    [line] = lines(local / "functions.log")
    assert line["correlation_id"] == "RUN1" and line["service"] == "brokerbench"
    assert line["function_name"] == "aggregate" and line["function_request_id"] == context.aws_request_id
    assert (line["level"], line["status"], line["cells_completed"], line["cells_failed"]) == (
        "INFO", "completed_with_failures", 3, 1)
    blobs = lines(local / "metrics.jsonl")
    assert metric(blobs, "RunsCompleted")["RunsCompleted"] == [1.0]
    assert metric(blobs, "CellsFailed")["CellsFailed"] == [1.0]
    assert capsys.readouterr().out == ""  # the CLI's progress bars own stdout


def test_in_aws_logs_and_emf_go_to_stdout(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BROKERBENCH_MODE", "aws")
    monkeypatch.setenv("BROKERBENCH_LOG_DIR", str(tmp_path))
    check = {"failed_cells": [], "regressions": [{"cell": "a"}, {"cell": "b"}], "baseline_run_id": "RUN0",
             "check_file": "f", "notify": True}
    monkeypatch.setattr(steps, "check_regression", lambda event: check)
    assert check_regression.lambda_handler({"run_id": "RUN2"}, _LambdaContext("local:check_regression")) == check
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    [log] = [o for o in out if "level" in o]
    assert log["correlation_id"] == "RUN2" and log["regressions"] == 2
    assert metric(out, "RegressionsFound")["RegressionsFound"] == [2.0]
    assert list(tmp_path.iterdir()) == []


def test_a_step_exception_propagates_unchanged_and_is_logged(local, monkeypatch):
    raised = steps.InvalidRequest("sizes[0]: too small")

    def reject(event):
        raise raised

    monkeypatch.setattr(steps, "validate_request", reject)
    with pytest.raises(steps.InvalidRequest) as caught:  # the workflow's Catch matches the class name
        validate_request.lambda_handler({"request": {}, "run_id": "RUN3"}, _LambdaContext("local:validate_request"))
    assert caught.value is raised
    [line] = lines(local / "functions.log")
    assert (line["level"], line["exception_name"], line["correlation_id"]) == ("ERROR", "InvalidRequest", "RUN3")


def test_a_step_that_counts_nothing_publishes_nothing_and_warns_nothing(local, monkeypatch):
    monkeypatch.setattr(steps, "teardown_target", lambda event: {"broker": "kafka", "action": "stopped", "state": "gone",
                                                                 "done": True, "timed_out": False})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        teardown_target.lambda_handler({"run_id": "RUN4", "broker": "kafka", "spec": {}},
                                       _LambdaContext("local:teardown_target"))
    assert caught == []
    assert not (local / "metrics.jsonl").exists()
    assert lines(local / "functions.log")[0]["action"] == "stopped"


def test_dimensions_of_one_count_stay_off_the_others(local):
    @lambda_entry
    def handler(event, context):
        count("RunsStarted")
        count("CellsFailed", 2, broker="kafka")

    handler({"run_id": "RUN5"}, _LambdaContext("local:x"))
    blobs = lines(local / "metrics.jsonl")
    assert metric(blobs, "CellsFailed")["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["broker", "service"]]
    started = metric(blobs, "RunsStarted")
    assert started["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"]] and "broker" not in started


def test_set_run_names_the_run_when_the_event_does_not(local):
    @lambda_entry(correlation_id_path=None)
    def handler(event, context):
        logger.info("before")
        set_run("RUN6")
        logger.info("after")

    handler({"run_id": "not-this-one"}, _LambdaContext("local:api"))
    before, after = lines(local / "functions.log")
    assert "correlation_id" not in before and after["correlation_id"] == "RUN6"


def test_invocations_in_threads_at_once_keep_their_own_run_id(local):
    both_started = threading.Barrier(2)

    @lambda_entry
    def handler(event, context):
        both_started.wait(5)  # the second invocation has set the logger's shared keys by now
        logger.info(event["run_id"])

    threads = [threading.Thread(target=handler, args=({"run_id": run_id}, _LambdaContext(f"local:{run_id}")))
               for run_id in ("RUN7", "RUN8")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    logged = lines(local / "functions.log")
    assert sorted(line["message"] for line in logged) == ["RUN7", "RUN8"]
    assert all(line["correlation_id"] == line["message"] and line["function_name"] == line["message"]
               for line in logged)


def test_disabled_metrics_publish_nothing(local, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    lambda_entry(lambda event, context: count("RunsFailed"))({"run_id": "RUN9"}, _LambdaContext("local:x"))
    assert not (local / "metrics.jsonl").exists()


def test_the_sink_falls_back_to_the_state_dir_then_the_working_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("BROKERBENCH_LOG_DIR", raising=False)
    monkeypatch.setenv("BROKERBENCH_STATE_DIR", str(tmp_path / "state"))
    assert observability.sink_dir() == tmp_path / "state"
    monkeypatch.delenv("BROKERBENCH_STATE_DIR")
    monkeypatch.chdir(tmp_path)
    assert observability.sink_dir() == tmp_path / ".brokerbench"


def test_tracing_is_off_outside_lambda():
    assert tracer.disabled and not aws_xray_sdk.global_sdk_config.sdk_enabled()  # no X-Ray daemon is looked for
    assert lambda_entry(lambda event, context: {"ok": 1})({}, _LambdaContext("local:x")) == {"ok": 1}
