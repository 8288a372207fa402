"""The workflow definition: valid ASL, every placeholder backed by a handler, failures routed to teardown."""

import importlib
import json
import re
import subprocess

from brokerbench.local.workflow import DEFINITION, REPO_DIR, load_definition, substitutions

VALIDATOR = REPO_DIR / "node_modules" / ".bin" / "asl-validator"


def all_states(states):
    for name, state in states.items():
        yield name, state
        if state["Type"] == "Map":
            yield from all_states(state["ItemProcessor"]["States"])


def test_asl_validator_accepts_the_definition():
    done = subprocess.run([str(VALIDATOR), "--json-path", str(DEFINITION)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "is valid" in done.stdout


def test_asl_validator_rejects_a_broken_definition(tmp_path):
    broken = json.loads(DEFINITION.read_text())
    broken["States"]["PlanCells"]["Next"] = "NoSuchState"
    path = tmp_path / "broken.asl.json"
    path.write_text(json.dumps(broken))
    assert subprocess.run([str(VALIDATOR), "--json-path", str(path)], capture_output=True).returncode != 0


def test_every_placeholder_is_a_handler_module_with_lambda_handler():
    names = substitutions(DEFINITION.read_text())
    assert len(names) == 13
    for value in names.values():
        module = importlib.import_module(f"handlers.{value.split(':', 1)[1]}")
        assert callable(module.lambda_handler)
    assert set(re.findall(r"\$\{(\w+)\}", json.dumps(load_definition()))) == set()


def test_every_task_is_a_thin_lambda_invoke_and_teardown_is_always_reached():
    definition = json.loads(DEFINITION.read_text())
    states = dict(all_states(definition["States"]))
    for name, state in states.items():
        if state["Type"] == "Task":
            assert state["Resource"].startswith("arn:aws:states:::lambda:invoke"), name
            assert "Retry" in state, name
    top = definition["States"]
    # After the request is accepted, every step either goes on or is caught into a path that tears down.
    # States.ALL does not match States.DataLimitExceeded (a result larger than a state may hold): it is named
    # first. States.Runtime no catcher takes; the RunEnded rule tears such a run down (docs/workflow.md).
    for name in ("PlanCells", "ProvisionTargets", "RecordTargetsReady", "RunCells", "RunCellsDistributed",
                 "Aggregate", "CheckRegression"):
        assert [c["Next"] for c in top[name]["Catch"]] == ["RecordRunFailed", "RecordRunFailed"], name
        assert [c["ErrorEquals"] for c in top[name]["Catch"]] == [["States.DataLimitExceeded"], ["States.ALL"]], name
        assert {c["ResultPath"] for c in top[name]["Catch"]} == {"$.failure"}, name
    assert top["RecordRunFailed"]["Next"] == "TeardownTargets"
    assert top["Notify"]["Next"] == "TeardownTargets" and top["Notify?"]["Default"] == "TeardownTargets"
    # Inside RunCells a failed cell is recorded and the map goes on.
    cells = top["RunCells"]["ItemProcessor"]["States"]
    for name in ("RunCellOnLambda", "RunCellOnEc2"):
        assert cells[name]["Catch"][0]["Next"] == "RecordCellFailed"
    assert cells["RunCellOnEc2"]["Resource"].endswith(".waitForTaskToken")
    assert top["RunCells"]["MaxConcurrencyPath"] == "$.plan.max_concurrency"


def test_the_regression_check_comes_before_the_report_and_the_run_ends_after_it():
    """CheckRegression before Aggregate, so the report shows the check; Aggregate writes the run's end
    (RunCompleted) after publishing, so nothing after it but Notify (caught) and Teardown can fail."""
    top = json.loads(DEFINITION.read_text())["States"]
    path, state = [], "RunCells"
    while state in top and "Next" in top[state]:
        path.append(state)
        state = top[state]["Next"]
    assert path == ["RunCells", "CheckRegression", "Aggregate"] and state == "Notify?"
    assert top["Aggregate"]["Parameters"]["Payload"] == {"run_id.$": "$.run.run_id", "check.$": "$.check"}
    assert {"notify.$", "failed_cells.$", "regressions.$", "baseline_run_id.$",
            "check_file.$"} <= set(top["CheckRegression"]["ResultSelector"])
    # Cells are handed to the map in the plan's order (the run order); the map keeps list order.
    assert top["RunCells"]["ItemsPath"] == "$.plan.cells"


def test_a_large_plan_runs_through_a_distributed_map_that_reads_the_plan_from_s3_and_runs_the_same_cells():
    states = json.loads(DEFINITION.read_text())["States"]
    plan = states["PlanCells"]["ResultSelector"]
    assert plan["cells_location.$"] == "$.Payload.cells_location" and plan["cells.$"] == "$.Payload.cells"
    choice = states["CellsInState?"]
    assert choice["Choices"] == [{"Variable": "$.plan.cells_location", "IsNull": False, "Next": "RunCellsDistributed"}]
    assert choice["Default"] == "RunCells" and states["RecordTargetsReady"]["Next"] == "CellsInState?"
    inline, distributed = states["RunCells"], states["RunCellsDistributed"]
    assert distributed["ItemReader"] == {
        "Resource": "arn:aws:states:::s3:getObject", "ReaderConfig": {"InputType": "JSON"},
        "Parameters": {"Bucket.$": "$.plan.cells_location.Bucket", "Key.$": "$.plan.cells_location.Key"}}
    assert distributed["ItemProcessor"]["ProcessorConfig"] == {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
    assert distributed["ResultPath"] is None  # 2,000 cells' results would not fit the 256 KB state either
    # The same cells, run the same way: the processors differ only in their state names (unique per machine).
    processor = json.loads(json.dumps(distributed["ItemProcessor"]).replace('"Large', '"'))
    del processor["ProcessorConfig"]
    assert processor == inline["ItemProcessor"]
    for key in ("ItemSelector", "MaxConcurrencyPath", "Catch", "Next"):
        assert distributed[key] == inline[key], key


def test_every_lambda_task_times_out_with_its_function():
    """The States Language's default task timeout is 60 s (the local interpreter applies it): a Lambda task
    without TimeoutSeconds would fail a cell of 61 s to 600 s that runs on a Lambda worker. Each task waits as
    long as its function may run (the CDK app's timeout); callback tasks have their own bound and heartbeat."""
    import sys

    if str(REPO_DIR) not in sys.path:
        sys.path.insert(0, str(REPO_DIR))
    from cdk.constructs.functions import SIZING, Sizing

    handlers = {f"${{{name}}}": value.split(":", 1)[1] for name, value in substitutions(DEFINITION.read_text()).items()}
    definition = json.loads(DEFINITION.read_text())
    tasks = [(n, s) for n, s in all_states(definition["States"]) if s["Type"] == "Task"]
    assert tasks
    for name, state in tasks:
        if state["Resource"].endswith(".waitForTaskToken"):
            assert state["TimeoutSeconds"] >= 3600 and state["HeartbeatSeconds"] < state["TimeoutSeconds"], name
            continue
        handler = handlers[state["Parameters"]["FunctionName"]]
        assert state["TimeoutSeconds"] == SIZING.get(handler, Sizing()).timeout.to_seconds(), (name, handler)
    run_cell = next(s for n, s in tasks if n == "RunCellOnLambda")
    assert run_cell["TimeoutSeconds"] == 900  # a Lambda cell is at most lambda_max_cell_s (600 s) of estimate


TEARDOWN_DEFINITION = REPO_DIR / "statemachines" / "teardown_run.asl.json"


def test_teardown_asks_again_until_the_target_is_gone_within_a_bound():
    """TeardownTarget is a loop like provisioning's: done -> the target's result; timed out -> the target reported
    not deleted; otherwise wait and ask again. The bound is long enough for an MSK cluster still creating."""
    from brokerbench.targets import TEARDOWN_TIMEOUT_S, TEARDOWN_WAIT_S

    states = json.loads(DEFINITION.read_text())["States"]["TeardownTargets"]["ItemProcessor"]["States"]
    assert states["TeardownTarget"]["Next"] == "TargetGone?"
    assert states["TargetGone?"]["Choices"] == [
        {"Variable": "$.teardown.done", "BooleanEquals": True, "Next": "TargetTornDown"},
        {"Variable": "$.teardown.timed_out", "BooleanEquals": True, "Next": "TargetTimedOut"}]
    assert states["TargetGone?"]["Default"] == "WaitForTeardown"
    assert states["WaitForTeardown"] == {"Type": "Wait", "SecondsPath": "$.teardown.wait_s", "Next": "TeardownTarget"}
    assert states["TargetTornDown"]["End"] is True
    assert TEARDOWN_TIMEOUT_S >= 60 * 60 and TEARDOWN_WAIT_S <= 60  # MSK: 20-30+ min to create, then ~15 to delete
    # A standard execution keeps 25,000 history events; a round is 3 states (about 8 events).
    assert TEARDOWN_TIMEOUT_S / TEARDOWN_WAIT_S * 8 < 25_000 / 4


def test_one_targets_failure_ends_its_own_loop_and_the_others_go_on():
    """An inline Map stops every iteration once one fails: a target that times out or whose TeardownTarget fails
    (its retries too) ends its own iteration with `not_deleted` instead, so the other targets' loops go on; after the
    Map, TargetsLeft? sends a run with any target not deleted to RecordTeardownFailed (StepFailed names each)."""
    top = json.loads(DEFINITION.read_text())["States"]
    inner = top["TeardownTargets"]["ItemProcessor"]["States"]
    assert not [n for n, s in inner.items() if s["Type"] == "Fail"]  # no iteration fails the Map
    assert inner["TeardownTarget"]["Retry"][0]["MaxAttempts"] == 5  # the failing target alone is retried
    assert inner["TeardownTarget"]["Catch"] == [
        {"ErrorEquals": ["States.ALL"], "ResultPath": "$.teardown_error", "Next": "TargetNotTornDown"}]
    assert inner["TargetNotTornDown"]["Parameters"]["not_deleted.$"] == "$.teardown_error"
    assert inner["TargetTimedOut"]["Parameters"]["not_deleted"]["Error"] == "TeardownTimedOut"
    assert "not_deleted" not in json.dumps(inner["TargetTornDown"])
    assert top["TeardownTargets"]["Next"] == "TargetsLeft" and top["TargetsLeft"]["Next"] == "TargetsLeft?"
    [rule] = top["TargetsLeft?"]["Choices"]
    assert rule["Next"] == "TargetsNotDeleted" and top["TargetsLeft?"]["Default"] == "RunFailed?"
    assert top["TargetsNotDeleted"]["Next"] == "RecordTeardownFailed"
    assert top["RecordTeardownFailed"]["Parameters"]["Payload"]["failure.$"] == top["TargetsNotDeleted"]["ResultPath"]


def test_the_targets_left_rule_matches_only_a_result_that_carries_not_deleted():
    """TargetsLeft? matches the Map's results as JSON text (States.JsonToString: compact, as json.dumps with
    separators below): a key `not_deleted` matches; the same words inside a target's action do not (the quotes are
    escaped there)."""
    from fnmatch import fnmatchcase

    [rule] = json.loads(DEFINITION.read_text())["States"]["TargetsLeft?"]["Choices"]

    def text(results):
        return json.dumps(results, separators=(",", ":"))

    torn_down = [{"broker": "kafka", "action": "stopped"}, {"broker": "redis-streams", "action": 'odd "not_deleted":'}]
    left = [{"broker": "kafka", "action": "stopped"},
            {"broker": "redis-streams", "action": "not deleted", "not_deleted": {"Error": "E", "Cause": "c"}}]
    assert not fnmatchcase(text(torn_down), rule["StringMatches"])
    assert fnmatchcase(text(left), rule["StringMatches"])


def test_the_teardown_machine_runs_the_run_workflows_own_teardown_states():
    run = json.loads(DEFINITION.read_text())["States"]
    alone = json.loads(TEARDOWN_DEFINITION.read_text())
    assert alone["StartAt"] == "TeardownTargets"
    assert set(alone["States"]) == {"TeardownTargets", "TargetsLeft", "TargetsLeft?", "TargetsNotDeleted",
                                    "RecordTeardownFailed", "TeardownFailed", "TornDown"}
    for name in ("TeardownTargets", "TargetsLeft", "TargetsNotDeleted", "RecordTeardownFailed", "TeardownFailed"):
        assert alone["States"][name] == run[name], name
    assert {**alone["States"]["TargetsLeft?"], "Default": "RunFailed?"} == run["TargetsLeft?"]
    assert alone["States"]["TargetsLeft?"]["Default"] == "TornDown"
    assert alone["States"]["TornDown"] == {"Type": "Succeed"}
    done = subprocess.run([str(VALIDATOR), "--json-path", str(TEARDOWN_DEFINITION)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
