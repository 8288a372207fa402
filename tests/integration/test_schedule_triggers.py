"""The scheduler and the notifications against the real event store (DynamoDB Local)."""

import json
import secrets
import threading
from datetime import datetime, timedelta, timezone

import pytest

from brokerbench import schedules
from brokerbench.events import dynamodb, make_event, new_run_id
from brokerbench.events.run import run_completed_event
from brokerbench.workflow import steps, wiring
from fault_tools import LambdaContext

UTC = timezone.utc
ENVIRONMENT = {"host": {}, "code_version": "test", "python": "3"}


def at(hour, minute=0, second=0, day=21):
    return datetime(2026, 11, day, hour, minute, second, tzinfo=UTC)


def hourly(**fields):
    """A schedule of its own per test: the store is shared by the session."""
    return schedules.Schedule(**{"name": f"hourly-{secrets.token_hex(4)}", "cron": "0 * * * *", "suite": "smoke",
                                 "notify": ("perf@example.com",), **fields})


class Starts:
    """The `start` callable: records each call; fails while `error` is set."""

    def __init__(self, store=None):
        self.calls, self.error, self.store = [], None, store
        self.lock = threading.Lock()

    def __call__(self, request, suite, run_id):
        if self.error:
            raise self.error
        with self.lock:
            self.calls.append((request, suite, run_id))
        if self.store is not None:  # what a started workflow writes first
            self.store.append([requested(run_id, request)])


def requested(run_id, spec):
    return make_event(run_id, "RunRequested", {"spec": spec, "cells": [], "environment": ENVIRONMENT})


def outcomes(store, schedule):
    return [e for e in store.read(schedules.partition(schedule.name)) if e["data"]["outcome"] != "claimed"]


def test_a_due_time_starts_one_run_however_many_schedulers_try_it(store):
    schedule = hourly()
    starts = Starts()
    first = schedules.Scheduler([schedule], store, starts, clock=lambda: at(10, 30))
    late = schedules.Scheduler([schedule], store, starts, clock=lambda: at(10, 30))
    assert first.tick(at(10, 59, 59)) == [] and late.tick(at(10, 59, 59)) == []  # both watching, nothing due

    [event] = first.tick(at(11, 0, 1))
    [(request, suite, run_id)] = starts.calls
    assert suite == "smoke" and request["notify"] == ["perf@example.com"] and "baseline_run_id" not in request
    assert event["data"] == {"schedule": schedule.name, "due_at": "2026-11-21T11:00:00+00:00", "outcome": "started",
                             "run_id": run_id, "reason": None}
    assert first.tick(at(11, 0, 2)) == [] and first.tick(at(11, 59)) == []
    assert late.tick(at(11, 0, 3)) == []  # it had not seen the trigger: its claim is the one that is skipped
    assert len(starts.calls) == 1

    racers = [schedules.Scheduler([schedule], store, starts, clock=lambda: at(11, 30)) for _ in range(4)]
    gate = threading.Barrier(len(racers))
    results = []

    def race(scheduler):
        gate.wait()
        results.append(scheduler.tick(at(12, 0, 1)))

    threads = [threading.Thread(target=race, args=(s,)) for s in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(starts.calls) == 2 and sorted(len(r) for r in results) == [0, 0, 0, 1]
    stored = outcomes(store, schedule)
    assert [e["data"]["due_at"] for e in stored] == ["2026-11-21T11:00:00+00:00", "2026-11-21T12:00:00+00:00"]
    assert [e["data"]["run_id"] for e in stored] == [c[2] for c in starts.calls]  # one outcome per due time


def test_a_start_that_fails_is_recorded_with_its_reason_and_not_retried(store):
    schedule = hourly(baseline="20261120T020000Z-abcdef")
    starts = Starts()
    starts.error = RuntimeError("another run holds the local stack")
    scheduler = schedules.Scheduler([schedule], store, starts, clock=lambda: at(10, 30))
    [event] = scheduler.tick(at(11, 0, 5))
    assert event["data"]["outcome"] == "not_started" and event["data"]["run_id"] is None
    assert event["data"]["reason"] == "another run holds the local stack"
    starts.error = None
    assert scheduler.tick(at(11, 30)) == [] and starts.calls == []  # the due time had its one try
    [event] = scheduler.tick(at(12, 0, 5))
    assert event["data"]["outcome"] == "started" and starts.calls[0][0]["baseline_run_id"] == "20261120T020000Z-abcdef"


def test_a_restarted_scheduler_goes_on_from_the_stored_triggers_and_settles_a_left_claim(store):
    schedule, disabled = hourly(), hourly(enabled=False)
    starts = Starts(store)
    schedules.Scheduler([schedule, disabled], store, starts, clock=lambda: at(10, 30)).tick(at(11, 0, 1))
    assert len(starts.calls) == 1  # the disabled one never fires

    restarted = schedules.Scheduler([schedule], store, starts, clock=lambda: at(10, 45))
    assert restarted.tick(at(11, 0, 30)) == []  # 11:00 is stored as fired
    # A scheduler that stopped after claiming 12:00 and starting its run, before storing the outcome:
    claim = schedules.trigger_event(schedule.name, at(12), "claimed", "20261121T120000Z-c1a1c1")
    store.append([{**claim, "at": at(12, 0, 1).isoformat()}, requested("20261121T120000Z-c1a1c1", {"name": "x"})])
    other = schedules.Scheduler([schedule], store, starts, clock=lambda: at(11, 50))
    assert other.tick(at(12, 5)) == []  # the claim is young: its scheduler may still be at it
    [settled] = other.tick(at(12, 30))
    assert settled["data"]["outcome"] == "started" and settled["data"]["run_id"] == "20261121T120000Z-c1a1c1"
    assert len(starts.calls) == 1  # 12:00 was claimed: nobody else started it
    [event] = other.tick(at(13, 0, 2))
    assert event["data"]["due_at"] == "2026-11-21T13:00:00+00:00" and len(starts.calls) == 2


def test_describe_shows_when_each_schedule_is_next_due_and_how_its_last_run_went(store):
    fired, never, off = hourly(description="every hour"), hourly(), hourly(enabled=False)
    starts = Starts(store)
    schedules.Scheduler([fired], store, starts, clock=lambda: at(10, 30)).tick(at(11, 0, 1))
    old = at(11, day=1)  # far before the recent due times describe reads first
    store.append([schedules.trigger_event(off.name, old, "not_started", reason="busy")])

    shown = {s["name"]: s for s in schedules.describe([fired, never, off], store, at(11, 20))}
    run_id = starts.calls[0][2]
    assert shown[fired.name] == {
        "name": fired.name, "description": "every hour", "suite": "smoke", "run": None, "scale": None,
        "cron": "0 * * * *", "timezone": "UTC", "baseline": "previous", "notify": ["perf@example.com"], "enabled": True,
        "baseline_runs": 1,
        "next_due": "2026-11-21T12:00:00+00:00",
        "last_trigger": {"due_at": "2026-11-21T11:00:00+00:00", "run_id": run_id, "outcome": "started",
                         "reason": None},
        "last_run": {"run_id": run_id, "status": "running"}}
    assert (shown[never.name]["last_trigger"], shown[never.name]["last_run"]) == (None, None)
    assert shown[off.name]["next_due"] is None and shown[off.name]["last_run"] is None
    assert shown[off.name]["last_trigger"]["due_at"] == "2026-11-01T11:00:00+00:00"
    assert schedules.run_status(store, "20261121T000000Z-000000") == "starting"


@pytest.fixture
def step_environment(store, tmp_path, monkeypatch):
    """The workflow steps' adapters: this store, and notifications in tmp_path."""
    monkeypatch.setenv("BROKERBENCH_MODE", "local")
    monkeypatch.setenv("BROKERBENCH_EVENTS_TABLE", store.table)
    monkeypatch.setenv("BROKERBENCH_DYNAMODB_ENDPOINT", store.client.meta.endpoint_url)
    monkeypatch.setenv("BROKERBENCH_NOTIFY", str(tmp_path))
    return tmp_path


def notes(folder, run_id):
    path = folder / run_id / "notifications.jsonl"
    return [json.loads(line) for line in path.open()] if path.exists() else []


def test_the_run_requests_recipients_are_told_of_its_check_and_of_its_failure(store, step_environment):
    run_id = new_run_id()
    store.append([requested(run_id, {"name": "notified", "notify": ["perf@example.com"]})])
    check = {"failed_cells": [{"cell_id": "c", "reason": "x"}], "regressions": [], "baseline_run_id": None,
             "check_file": "f", "notify": True}
    steps.notify({"run_id": run_id, "check": check, "summary": {"status": "completed_with_failures"}})
    result = steps.record_run_failed({"run_id": run_id, "failure": {"Error": "States.Timeout", "Cause": "too slow"}})
    assert result["recorded"] and "notify_error" not in result
    checked, failed = notes(step_environment, run_id)
    assert checked["to"] == failed["to"] == ["perf@example.com"]
    assert checked["subject"] == f"brokerbench run {run_id}: 1 failed cells"
    assert failed["subject"] == f"brokerbench run {run_id} failed: States.Timeout: too slow"
    assert failed["message"] == {"run_id": run_id, "status": "failed", "reason": "States.Timeout: too slow"}

    again = steps.record_run_failed({"run_id": run_id, "failure": {"Error": "States.Timeout", "Cause": "too slow"}})
    # A retry of a step that had told people tells nobody again, and answers with the same message.
    assert not again["recorded"] and len(notes(step_environment, run_id)) == 2
    assert again["message_id"] == result["message_id"]
    steps.notify({"run_id": run_id, "check": check, "summary": {"status": "completed_with_failures"}})
    assert len(notes(step_environment, run_id)) == 2
    assert sorted(e["data"]["step"] for e in store.read(run_id) if e["type"] == "Notified") == ["Notify", "RunFailed"]

    ended = new_run_id()
    store.append([requested(ended, {"name": "notified", "notify": ["perf@example.com"]}),
                  make_event(ended, "RunCompleted", {"status": "completed", "cells_completed": 0, "cells_failed": 0})])
    assert steps.record_run_failed({"run_id": ended, "failure": {}}) == {"recorded": False}
    assert notes(step_environment, ended) == []  # it did not fail: nobody is told it did


def test_a_notification_that_cannot_be_sent_keeps_the_run_failed_event(store, step_environment, monkeypatch):
    class Unreachable:
        def publish(self, run_id, subject, message, to=()):
            raise ConnectionError("SNS did not answer")

    monkeypatch.setattr(wiring, "notifier", Unreachable)
    run_id = new_run_id()
    result = steps.record_run_failed({"run_id": run_id, "failure": {"Error": "ProvisioningError", "Cause": "no"}})
    assert result == {"recorded": True, "notify_error": "ConnectionError: SNS did not answer"}
    assert [e["type"] for e in store.read(run_id)] == ["RunFailed"]


def test_in_aws_each_invocation_claims_its_due_time_once_and_stores_the_outcome(store):
    """The ScheduleTrigger function's core, as EventBridge Scheduler invokes it (a retried delivery included);
    the start is recorded here, StartExecution itself is covered with a Stubber in test_api_routes.py."""
    schedule, starts = hourly(), Starts()
    first = schedules.trigger(schedule.name, at(9), store, starts, [schedule])
    again = schedules.trigger(schedule.name, at(9), store, starts, [schedule])  # the same delivery, retried
    later = schedules.trigger(schedule.name, at(10), store, starts, [schedule])
    assert first["outcome"] == later["outcome"] == "started" and again["outcome"] == "already_claimed"
    assert [run_id for _, _, run_id in starts.calls] == [first["run_id"], later["run_id"]]
    stored = store.read(schedules.partition(schedule.name))
    assert [(e["data"]["due_at"], e["data"]["outcome"]) for e in stored] == [
        ("2026-11-21T09:00:00+00:00", "started"), ("2026-11-21T09:00:00+00:00", "claimed"),
        ("2026-11-21T10:00:00+00:00", "started"), ("2026-11-21T10:00:00+00:00", "claimed")]
    starts.error = RuntimeError("the state machine is being updated")
    failed = schedules.trigger(schedule.name, at(11), store, starts, [schedule])
    assert failed["outcome"] == "not_started" and "being updated" in failed["reason"]
    with pytest.raises(schedules.ScheduleError, match="no schedule named 'nope'"):
        schedules.trigger("nope", at(9), store, starts, [schedule])


def test_the_schedule_trigger_function_starts_an_execution_named_by_the_run_id(store, step_environment, monkeypatch):
    """The Lambda handler as EventBridge Scheduler invokes it; the Lambda concurrency check (GetAccountSettings: the
    quick suite's cells run on Lambda) and StartExecution are checked with botocore's Stubber (no AWS here), the
    claim and outcome go to the real event store, and so does the run's slot among the runs in flight."""
    import boto3
    from botocore.stub import ANY, Stubber

    from brokerbench.workflow.admission import Slots
    from handlers import schedule_trigger

    machine = "arn:aws:states:us-east-1:123456789012:stateMachine:bb"
    stubbed = {service: boto3.client(service, region_name="us-east-1", aws_access_key_id="x",
                                     aws_secret_access_key="x")
               for service in ("stepfunctions", "lambda", "service-quotas", "ec2")}
    sfn, lambda_client = stubbed["stepfunctions"], stubbed["lambda"]
    monkeypatch.setenv("BROKERBENCH_STATE_MACHINE_ARN", machine)
    real_client = boto3.client
    monkeypatch.setattr(boto3, "client", lambda service, **kw: stubbed.get(service) or real_client(service, **kw))
    dynamodb._store.cache_clear()
    with Stubber(sfn) as stub, Stubber(lambda_client) as lambda_stub, Stubber(stubbed["service-quotas"]), \
            Stubber(stubbed["ec2"]):
        lambda_stub.add_response("get_account_settings", {"AccountLimit": {"ConcurrentExecutions": 1000,
                                                                           "UnreservedConcurrentExecutions": 1000}})
        stub.add_response("start_execution", {"executionArn": f"{machine}:x", "startDate": at(2)},
                          {"stateMachineArn": machine, "name": ANY, "input": ANY})
        result = schedule_trigger.lambda_handler({"schedule": "nightly-quick", "due_at": "2026-11-21T02:00:00Z"},
                                                 LambdaContext("brokerbench-schedule-trigger"))
        stub.assert_no_pending_responses()
        lambda_stub.assert_no_pending_responses()
    assert result["outcome"] == "started" and result["due_at"] == "2026-11-21T02:00:00+00:00"
    assert result["run_id"] in [h["run_id"] for h in Slots.of(store).held().values()]
    Slots.of(store).release(result["run_id"])  # the session's table is shared: no slot stays held
    again = schedule_trigger.lambda_handler({"schedule": "nightly-quick", "due_at": "2026-11-21T02:00:00Z"},
                                            LambdaContext("brokerbench-schedule-trigger"))
    assert again["outcome"] == "already_claimed"  # a retried delivery starts nothing (no second StartExecution)
    stored = [e["data"] for e in store.read(schedules.partition("nightly-quick"))
              if e["data"]["due_at"] == "2026-11-21T02:00:00+00:00"]
    assert {d["outcome"] for d in stored} == {"claimed", "started"} and {d["run_id"] for d in stored} == {
        result["run_id"]}


# -- the baseline: runs back to back until the suite has baseline_runs ---------------------------------------------
BASELINE_SPEC = {"brokers": ["kafka"], "sizes": [1024], "rates": [100], "formats": ["json"]}


def baseline_schedule(**fields):
    """A schedule of an inline spec named for this test alone: its suite's completed runs are only this test's."""
    name = f"baseline-{secrets.token_hex(4)}"
    return hourly(name=name, suite=None, spec={**BASELINE_SPEC, "name": name}, baseline_runs=3, **fields)


def next_hour():
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)


def complete(store, run_id, status="completed"):
    store.append([run_completed_event(run_id, status, 1, 0)])


def test_a_schedule_builds_its_baseline_back_to_back_then_waits_for_its_cron(store):
    schedule, base = baseline_schedule(), next_hour()
    starts = Starts(store)
    scheduler = schedules.Scheduler([schedule], store, starts, clock=lambda: base - timedelta(minutes=30))
    [first] = scheduler.tick(base + timedelta(seconds=1))  # the cron time
    assert scheduler.tick(base + timedelta(seconds=30)) == []  # its run has not ended
    complete(store, first["data"]["run_id"])
    assert scheduler.tick(base + timedelta(seconds=40)) == []  # looked at most every CATCH_UP_EVERY
    [second] = scheduler.tick(base + timedelta(seconds=50))
    assert second["data"]["outcome"] == "started" and second["data"]["run_id"] != first["data"]["run_id"]
    assert second["data"]["due_at"] == schedules.iso(base + timedelta(seconds=1))  # after the first, not a cron time
    complete(store, second["data"]["run_id"])
    [third] = scheduler.tick(base + timedelta(seconds=70))
    complete(store, third["data"]["run_id"])
    assert scheduler.tick(base + timedelta(seconds=90)) == []  # the suite has its 3 runs
    found = schedules.catch_up(schedule, store, base + timedelta(seconds=90))
    assert found.done and found.due_at is None and "3 completed runs" in found.why
    [nightly] = scheduler.tick(base + timedelta(hours=1, seconds=1))  # then the cron again, one run a due time
    assert nightly["data"]["due_at"] == schedules.iso(base + timedelta(hours=1))
    complete(store, nightly["data"]["run_id"])
    assert scheduler.tick(base + timedelta(hours=1, minutes=1)) == []
    assert len(starts.calls) == 4
    # each started run's claim and outcome, one due time each: a second scheduler would claim none of them again
    stored = [e["data"] for e in store.read(schedules.partition(schedule.name))]
    assert sorted({d["due_at"] for d in stored}) == sorted({e["data"]["due_at"] for e in (first, second, third, nightly)})
    assert [d["outcome"] for d in stored].count("started") == 4


def test_a_baseline_run_that_did_not_complete_waits_for_the_next_cron_time(store):
    schedule, base = baseline_schedule(), next_hour()
    starts = Starts(store)
    scheduler = schedules.Scheduler([schedule], store, starts, clock=lambda: base - timedelta(minutes=30))
    [first] = scheduler.tick(base + timedelta(seconds=1))
    complete(store, first["data"]["run_id"], "interrupted")
    assert scheduler.tick(base + timedelta(minutes=5)) == []
    assert "ended interrupted" in schedules.catch_up(schedule, store, base + timedelta(minutes=5)).why
    [nightly] = scheduler.tick(base + timedelta(hours=1, seconds=1))
    store.append([make_event(nightly["data"]["run_id"], "RunFailed", {"reason": "a step failed"})])
    assert "ended failed" in schedules.catch_up(schedule, store, base + timedelta(hours=1, minutes=1)).why
    [nightly] = scheduler.tick(base + timedelta(hours=2, seconds=1))
    complete(store, nightly["data"]["run_id"])
    [catch_up] = scheduler.tick(base + timedelta(hours=2, minutes=1))  # the baseline goes on: 1 of 3 completed
    assert catch_up["data"]["due_at"] == schedules.iso(base + timedelta(hours=2, seconds=1))


def test_runs_the_suite_does_not_count_stop_after_baseline_runs_less_one(store):
    """A schedule whose runs never reach its suite's count (here each run is listed under a name of its own) starts
    at most baseline_runs − 1 runs after each cron time's, not runs without end."""
    schedule, base = baseline_schedule(), next_hour()
    starts = Starts()

    def start(request, suite, run_id):
        starts(request, suite, run_id)
        store.append([requested(run_id, {**request, "name": f"other-{secrets.token_hex(4)}"})])

    scheduler = schedules.Scheduler([schedule], store, start, clock=lambda: base - timedelta(minutes=30))
    started = scheduler.tick(base + timedelta(seconds=1))
    for second in range(20, 200, 20):
        complete(store, started[-1]["data"]["run_id"])
        started += scheduler.tick(base + timedelta(seconds=second))
    assert len(started) == 3 and "2 baseline runs followed" in schedules.catch_up(schedule, store, base).why


def test_in_aws_a_completed_baseline_run_hands_the_next_to_the_schedule_trigger_function(store, step_environment,
                                                                                         monkeypatch, tmp_path):
    """handlers/run_ended.py with a SUCCEEDED execution of a schedule's baseline run: the next due time goes to the
    schedule trigger function as EventBridge Scheduler would send it (Lambda's Invoke checked with botocore's Stubber:
    no AWS here; the triggers and the runs' events are in the real event store). A run no schedule started, or a
    schedule whose baseline is complete, hands nothing on."""
    import boto3
    from botocore.stub import Stubber

    from handlers import run_ended as run_ended_handler

    schedule, base = baseline_schedule(), next_hour()
    item = {"name": schedule.name, "cron": schedule.cron, "spec": schedule.spec, "baseline_runs": 3}
    (tmp_path / "schedules.json").write_text(json.dumps({"schedules": [item]}))
    monkeypatch.setenv("BROKERBENCH_SCHEDULES", str(tmp_path / "schedules.json"))
    monkeypatch.setenv(run_ended_handler.TRIGGER_FUNCTION_ENV, "brokerbench-schedule-trigger")
    lambda_client = boto3.client("lambda", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    monkeypatch.setattr(run_ended_handler.boto3, "client", lambda service, **kw: lambda_client)
    starts = Starts(store)
    first = schedules.trigger(schedule.name, base, store, starts, [schedule])
    complete(store, first["run_id"])

    def succeeded(run_id):
        return {"detail": {"executionArn": f"arn:aws:states:us-east-1:123456789012:execution:bb-run:{run_id}",
                           "name": run_id, "status": "SUCCEEDED", "input": json.dumps({"run_id": run_id})}}

    payload = {"schedule": schedule.name, "due_at": schedules.iso(base + timedelta(seconds=1))}
    with Stubber(lambda_client) as stub:
        stub.add_response("invoke", {"StatusCode": 202}, {"FunctionName": "brokerbench-schedule-trigger",
                                                          "InvocationType": "Event",
                                                          "Payload": json.dumps(payload).encode()})
        ended = run_ended_handler.lambda_handler(succeeded(first["run_id"]), LambdaContext("brokerbench-run-ended"))
        stub.assert_no_pending_responses()
        assert ended["baseline_runs"] == [payload]
        other = new_run_id()  # a run no schedule started
        store.append([requested(other, {**BASELINE_SPEC, "name": "adhoc"})])
        complete(store, other)
        assert run_ended_handler.lambda_handler(succeeded(other), LambdaContext("x"))["baseline_runs"] == []
    # what the trigger function then does with it: the next baseline run, claimed once
    second = schedules.trigger(schedule.name, datetime.fromisoformat(payload["due_at"]), store, starts, [schedule])
    assert second["outcome"] == "started"
    assert schedules.trigger(schedule.name, datetime.fromisoformat(payload["due_at"]), store, starts,
                             [schedule])["outcome"] == "already_claimed"
