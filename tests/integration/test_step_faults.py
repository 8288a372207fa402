"""A workflow step that fails after the cells have measured (CheckRegression, Aggregate, Notify, Teardown): the real
definition on the local ASL interpreter, through `brokerbench run` as a user starts it (in this process, so the
step's Lambda handler, which the local bridge calls here, can be made to raise). The run's last stored event and
the CLI's exit code must say what failed; what was measured stays stored, once."""

import json

import pytest

from brokerbench.cli import main
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.reports.results import build_results
from fault_tools import event_facts
from reliability_log import observe



def run_with_failing(step_module: str, stack, tmp_path, monkeypatch, capsys, *, failing_cell: bool = False):
    import importlib

    module = importlib.import_module(f"handlers.{step_module}")

    def broken(event, context):
        raise RuntimeError(f"injected failure of {step_module}")

    monkeypatch.setattr(module, "lambda_handler", broken)
    spec = {"name": f"step-fault-{step_module}", "brokers": ["kafka", "redis-streams"], "sizes": [512],
            "rates": [200], "formats": ["raw"], "duration_s": 1, "warmup_s": 0, "warmup_until_steady": False,
            "drain_timeout_s": 1}
    if failing_cell:  # Notify runs only when there is something to tell: the Kafka cell's worker crashes
        from handlers import run_cell

        measure = run_cell.lambda_handler

        def crashing_on_kafka(event, context):
            if event["cell"]["broker"] == "kafka":
                raise RuntimeError("injected crash of the Kafka cell's worker")
            return measure(event, context)

        monkeypatch.setattr(run_cell, "lambda_handler", crashing_on_kafka)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    code = main(["--state-dir", str(stack.state_dir), "run", "--spec", str(tmp_path / "spec.json"),
                 "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    [run_id] = [e["run_id"] for e in store.list_runs(limit=50) if e["data"]["spec"].get("name") == spec["name"]] or [None]
    events = store.read(run_id) if run_id else []
    return code, " ".join((captured.out + captured.err).split()), events


@pytest.mark.parametrize("step", ["check_regression", "aggregate"])
def test_a_failing_report_step_fails_the_run_and_keeps_the_measurements(step, stack, tmp_path, monkeypatch, capsys):
    code, said, events = run_with_failing(step, stack, tmp_path, monkeypatch, capsys)
    types = [e["type"] for e in events]
    assert code == 1
    assert types[-2:] == ["RunFailed", "Notified"] and f"injected failure of {step}" in events[-2]["data"]["reason"]
    assert types.count("CellCompleted") == 2 and len(events) == len({e["event_id"] for e in events})
    assert f"injected failure of {step}" in said
    observe(f"step-fails-{step}", fault=f"the {step} step's handler raised (every retry of it too) after both cells "
                                        "had measured", run_status=build_results(events)["status"], exit_code=code,
            observed=["the run's end is RunFailed naming the step's error; RunCompleted never written",
                      "both cells' CellCompleted kept, each event once", "the CLI printed the error and exited 1"],
            **event_facts(events))


def test_a_failing_notify_is_stored_said_and_not_a_success(stack, tmp_path, monkeypatch, capsys):
    """Notify runs after the run's end (RunCompleted) was stored: its failure is a StepFailed after it, the run
    reads completed_with_failures with Notify named, and the CLI exits 1."""
    code, said, events = run_with_failing("notify", stack, tmp_path, monkeypatch, capsys, failing_cell=True)
    types = [e["type"] for e in events]
    assert code == 1
    assert types[-3:] == ["RunCompleted", "StepFailed", "ReportBuilt"] or types[-3:] == ["RunCompleted", "ReportBuilt",
                                                                                          "StepFailed"]
    [failed] = [e["data"] for e in events if e["type"] == "StepFailed"]
    assert failed["step"] == "Notify" and "injected failure of notify" in failed["reason"]
    results = build_results(events)
    assert results["status"] == "completed_with_failures" and "Notify failed" in results["reason"]
    assert "run completed with failures: Notify failed: RuntimeError: injected failure of notify" in said
    observe("step-fails-notify", fault="the Notify step's handler raised (every retry of it too) after the run's "
                                       "end was stored", run_status=results["status"], exit_code=code,
            observed=["StepFailed(Notify) stored after RunCompleted", "the run reads completed_with_failures, Notify "
                      "named in its reason", "the CLI said so and exited 1"], **event_facts(events))


@pytest.fixture
def quick_teardown_retries(tmp_path, monkeypatch):
    """The real definition with TeardownTarget's five retries 0.1 s apart instead of 5 s doubling (155 s)."""
    from brokerbench.local import workflow

    definition = json.loads(workflow.DEFINITION.read_text())
    retry = definition["States"]["TeardownTargets"]["ItemProcessor"]["States"]["TeardownTarget"]["Retry"][0]
    assert retry["MaxAttempts"] == 5
    retry.update(IntervalSeconds=0.1, BackoffRate=1)
    quick = tmp_path / "definition.asl.json"
    quick.write_text(json.dumps(definition))
    monkeypatch.setattr(workflow.LocalWorkflow.__init__, "__defaults__", (quick,))


def test_a_failing_teardown_is_stored_said_and_not_a_success(stack, tmp_path, monkeypatch, capsys,
                                                              quick_teardown_retries):
    """Every cell completed, then tearing down failed (its retries too): StepFailed, the run reads
    completed_with_failures (not completed), the CLI says brokers may still run and exits 1: state, events and exit
    code agree."""
    code, said, events = run_with_failing("teardown_target", stack, tmp_path, monkeypatch, capsys)
    assert code == 1
    [failed] = [e["data"] for e in events if e["type"] == "StepFailed"]
    assert failed["step"] == "TeardownTargets" and "injected failure of teardown_target" in failed["reason"]
    results = build_results(events)
    assert [c["status"] for c in results["cells"]] == ["completed", "completed"]
    assert results["status"] == "completed_with_failures" and "TeardownTargets failed" in results["reason"]
    assert "brokers this run started may still be running" in said
    stored = json.loads(next((tmp_path / "out").glob("*/results.json")).read_text())
    assert stored["status"] == "completed_with_failures"
    observe("step-fails-teardown", fault="the TeardownTarget step's handler raised (its five retries too) after "
                                         "every cell completed", run_status=results["status"], exit_code=code,
            observed=["StepFailed(TeardownTargets) stored", "the run and results.json read completed_with_failures",
                      "the CLI said brokers the run started may still be running and exited 1"],
            **event_facts(events))


def run_with_teardown_answers(answers, stack, tmp_path, monkeypatch, capsys):
    """A run whose TeardownTarget answers, per broker, `answers` first (each merged over the real answer), then the
    real one: the workflow's teardown loop (TargetGone?, WaitForTeardown) on the local interpreter."""
    from handlers import teardown_target

    real = teardown_target.lambda_handler
    rounds = {}

    def answering(event, context):
        answer = real(event, context)
        rounds[event["broker"]] = rounds.get(event["broker"], 0) + 1
        if rounds[event["broker"]] <= len(answers):
            return {**answer, **answers[rounds[event["broker"]] - 1]}
        return answer

    monkeypatch.setattr(teardown_target, "lambda_handler", answering)
    spec = {"name": "teardown-loop", "brokers": ["kafka", "redis-streams"], "sizes": [512], "rates": [200],
            "formats": ["raw"], "duration_s": 1, "warmup_s": 0, "warmup_until_steady": False, "drain_timeout_s": 1}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    code = main(["--state-dir", str(stack.state_dir), "run", "--spec", str(tmp_path / "spec.json"),
                 "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    said = " ".join((captured.out + captured.err).split())
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    [run_id] = [e["run_id"] for e in store.list_runs(limit=50) if e["data"]["spec"].get("name") == spec["name"]][:1]
    return code, rounds, store.read(run_id), said


NOT_YET = {"state": "not deletable yet", "done": False, "timed_out": False, "wait_s": 1}


def test_teardown_waits_while_a_target_cannot_be_deleted_and_asks_again(stack, tmp_path, monkeypatch, capsys):
    """A target that refuses deletion twice (still being created, in AWS): the loop waits and asks again, a third
    round deletes it, and the run ends as a success with no StepFailed."""
    code, rounds, events, _ = run_with_teardown_answers([NOT_YET, NOT_YET], stack, tmp_path, monkeypatch, capsys)
    assert code == 0 and rounds == {"kafka": 3, "redis-streams": 3}
    assert "StepFailed" not in [e["type"] for e in events] and build_results(events)["status"] == "completed"


def test_a_teardown_still_not_done_at_its_deadline_is_a_failed_teardown(stack, tmp_path, monkeypatch, capsys):
    """The loop's bound ran out (TeardownTimedOut) for both targets: one timing out no longer stops the other's loop
    (each asked its second time), StepFailed(TeardownTargets) names both and the CLI exits 1."""
    code, rounds, events, _ = run_with_teardown_answers([NOT_YET, {**NOT_YET, "timed_out": True}], stack, tmp_path,
                                                        monkeypatch, capsys)
    assert code == 1 and rounds == {"kafka": 2, "redis-streams": 2}, rounds  # both timed out, none asked a third time
    [failed] = [e["data"] for e in events if e["type"] == "StepFailed"]
    assert failed["step"] == "TeardownTargets" and "TeardownTimedOut" in failed["reason"]
    assert [(t["broker"], t["error"]) for t in failed["targets_left"]] == [("kafka", "TeardownTimedOut"),
                                                                          ("redis-streams", "TeardownTimedOut")]
