"""Schedules as data: the file's validation, due times, trigger events and the notifiers' recipients."""

import json
from datetime import datetime, timezone

import boto3
import pytest
from botocore.stub import ANY, Stubber

from brokerbench import schedules, spec
from brokerbench.events import InvalidEvent, make_event
from brokerbench.workflow.outputs import FileNotifier, SnsNotifier

UTC = timezone.utc
RUN = "20261121T101500Z-abc123"
INLINE = {"name": "inline", "brokers": ["kafka"], "sizes": [1024], "rates": [100], "formats": ["json"]}


def at(hour, minute=0, second=0, day=21, month=11):
    return datetime(2026, month, day, hour, minute, second, tzinfo=UTC)


def problems_of(*items, **top):
    with pytest.raises(schedules.ScheduleError) as info:
        schedules.parse({"schedules": list(items), **top})
    return {p.path: p.message for p in info.value.problems}


# -- the file -------------------------------------------------------------------------------------------------


def test_the_default_file_is_valid_and_each_schedule_starts_a_valid_request():
    found = schedules.load()
    assert [s.name for s in found] == ["nightly-quick", "weekly-sizes"] and all(s.enabled for s in found)
    for schedule in found:
        request, suite = schedule.request()
        assert spec.validate(request)["notify"] == list(schedule.notify)
        assert suite == schedule.suite
    assert found[1].request()[0]["name"] == "weekly-sizes"  # an inline spec compares with its own earlier runs


def test_a_schedule_starts_one_run_of_a_study_scaled():
    found = schedules.parse({"schedules": [{"name": "burst", "suite": "vandongen", "run": "vandongen-startup-burst",
                                            "scale": 0.05, "cron": "0 4 * * *"}]})
    request, suite = found[0].request()
    assert suite == "vandongen" and request["name"] == "vandongen-startup-burst"
    assert request["backlog"]["messages"] == 90000 and spec.validate(request)["duration_s"] == 30.0
    found = problems_of({"name": "a", "suite": "vandongen", "cron": "0 4 * * *"},
                        {"name": "b", "suite": "vandongen", "run": "nope", "cron": "0 4 * * *"},
                        {"name": "c", "spec": INLINE, "run": "x", "cron": "0 4 * * *"},
                        {"name": "d", "suite": "smoke", "scale": 1.5, "cron": "0 4 * * *"})
    assert "a study of 4 runs" in found["schedules[0].run"]
    assert "no run 'nope'" in found["schedules[1].run"]
    assert found["schedules[2].run"] == "run goes with suite, not with an inline spec"
    assert "schedules[3].scale" in found


def test_every_problem_names_its_field():
    found = problems_of(
        {"name": "a", "suite": "quick", "cron": "61 2 * * *", "baseline": "latest", "timezone": "Mars/Base",
         "notify": ["nobody"]},
        {"name": "a", "suite": "quick", "spec": INLINE, "cron": "0 2 * * *"},
        {"name": "c", "suite": "nope", "cron": "0 2 * * * 1"},
        {"name": "d", "spec": {**INLINE, "sizes": [10]}, "cron": "@daily"},
        {"name": "e", "cron": "0 2 * * *"},
        {"name": "f", "suite": "../x", "cron": "0 2 * * *", "surprise": True},
        {"name": "g", "suite": "quick", "cron": "0 2 * * *", "baseline_runs": 0},
        {"name": "h", "suite": "quick", "cron": "0 2 * * *", "baseline_runs": 2.5})
    assert "'61 2 * * *' is not a cron expression of five fields" in found["schedules[0].cron"]
    assert '"previous"' in found["schedules[0].baseline"] and "run id" in found["schedules[0].baseline"]
    assert "not a known time zone" in found["schedules[0].timezone"]
    assert "email address or an SNS topic ARN" in found["schedules[0].notify[0]"]
    assert found["schedules[1].name"] == "'a' is already the name of schedules[0]"
    assert found["schedules[1].spec"] == "give either suite or spec, not both"
    assert found["schedules[2].suite"].startswith("no suite named 'nope' (known: downard, durable-1k, guarantees, helenius, myastovskiy, quick")
    assert "five fields" in found["schedules[2].cron"] and "five fields" in found["schedules[3].cron"]
    assert "less than the minimum of 64" in found["schedules[3].spec.sizes[0]"]  # spec.validate, at its place
    assert found["schedules[4]"] == "give suite (a built-in suite) or spec (an inline run request)"
    assert "does not match" in found["schedules[5].suite"]  # no path outside the suites folder
    assert "'surprise' was unexpected" in found["schedules[5]"]
    assert "less than the minimum of 1" in found["schedules[6].baseline_runs"]
    assert "not of type 'integer'" in found["schedules[7].baseline_runs"]


def test_a_valid_schedule_gets_the_defaults_and_its_request_carries_the_baseline_and_recipients():
    [schedule] = schedules.parse({"schedules": [
        {"name": "pinned", "suite": "smoke", "cron": "0 2 * * *", "baseline": RUN,
         "notify": ["perf@example.com", "arn:aws:sns:eu-west-1:123456789012:perf"]}]})
    assert (schedule.timezone, schedule.enabled, schedule.baseline_runs) == ("UTC", True, 1)
    request, suite = schedule.request()
    assert suite == "smoke" and request["baseline_run_id"] == RUN
    assert request["notify"] == ["perf@example.com", "arn:aws:sns:eu-west-1:123456789012:perf"]
    [inline] = schedules.parse({"schedules": [{"name": "inline", "spec": INLINE, "cron": "0 2 * * *"}]})
    request, suite = inline.request()
    assert suite is None and "baseline_run_id" not in request and "notify" not in request  # "previous", nobody
    request["sizes"].append(2048)
    assert inline.request()[0]["sizes"] == [1024]  # each request is a copy


def test_the_file_comes_from_the_argument_or_the_environment(tmp_path, monkeypatch):
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"schedules": [{"name": "mine", "suite": "smoke", "cron": "*/5 * * * *"}]}))
    monkeypatch.setenv("BROKERBENCH_SCHEDULES", str(mine))
    assert [s.name for s in schedules.load()] == ["mine"]
    with pytest.raises(schedules.ScheduleError, match="does not exist"):
        schedules.load(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(schedules.ScheduleError, match="not valid JSON"):
        schedules.load(tmp_path / "broken.json")


# -- due times ------------------------------------------------------------------------------------------------

HOURLY = schedules.Schedule(name="hourly", cron="0 * * * *", suite="smoke")


def test_a_due_time_fires_once_at_or_after_it_and_never_before():
    started = at(10, 30)
    assert schedules.due(HOURLY, None, started, at(10, 59, 59)) is None
    assert schedules.due(HOURLY, None, started, at(11)) == at(11)  # due exactly now
    assert schedules.due(HOURLY, None, started, at(11, 0, 7)) == at(11)
    assert schedules.due(HOURLY, at(11), started, at(11, 40)) is None  # fired already
    assert schedules.next_due(HOURLY, at(11)) == at(12)


def test_after_downtime_only_the_latest_missed_time_fires():
    assert schedules.due(HOURLY, at(11), at(10, 30), at(15, 20)) == at(15)  # 12, 13 and 14 are not back-filled
    assert schedules.due(HOURLY, at(15), at(10, 30), at(15, 59)) is None


def test_a_time_before_the_scheduler_started_watching_never_fires():
    started = at(11, 0, 30)
    assert schedules.due(HOURLY, None, started, at(11, 5)) is None
    assert schedules.due(HOURLY, None, started, at(12, 0, 1)) == at(12)
    assert schedules.due(HOURLY, None, at(11), at(11)) == at(11)  # started at the due time: it counts


def test_cron_is_read_in_the_schedules_time_zone():
    berlin = schedules.Schedule(name="berlin", cron="0 2 * * *", suite="smoke", timezone="Europe/Berlin")
    assert schedules.next_due(berlin, at(12, month=1)) == datetime(2026, 1, 22, 1, tzinfo=UTC)  # CET: UTC+1
    assert schedules.next_due(berlin, at(12, month=7)) == datetime(2026, 7, 22, 0, tzinfo=UTC)  # CEST: UTC+2
    assert schedules.due(berlin, None, at(0, month=7), at(0, 0, 30, month=7)) == at(0, month=7)
    sundays = schedules.Schedule(name="sundays", cron="0 3 * * SUN", suite="smoke")
    assert schedules.next_due(sundays, at(12)) == at(3, day=22)  # 2026-11-22 is a Sunday


def test_times_without_a_zone_are_refused():
    with pytest.raises(ValueError, match="timezone-aware"):
        schedules.due(HOURLY, None, datetime(2026, 11, 21), at(11))


# -- trigger events -------------------------------------------------------------------------------------------


def test_a_trigger_has_one_key_per_due_time_in_the_schedules_own_partition():
    claim = schedules.trigger_event("nightly-quick", at(2), "claimed", RUN)
    outcome = schedules.trigger_event("nightly-quick", at(2), "not_started", reason="busy")
    assert claim["run_id"] == outcome["run_id"] == "schedule#nightly-quick"
    assert claim["sk"] == "tr#2026-11-21T02:00:00+00:00#claim" and outcome["sk"] == "tr#2026-11-21T02:00:00+00:00"
    assert outcome["data"] == {"schedule": "nightly-quick", "due_at": "2026-11-21T02:00:00+00:00",
                               "outcome": "not_started", "run_id": None, "reason": "busy"}
    assert schedules.trigger_event("nightly-quick", at(2), "started", RUN)["sk"] == outcome["sk"]
    later = schedules.trigger_event("nightly-quick", at(2, day=22), "started", RUN)
    assert sorted([later["sk"], claim["sk"], outcome["sk"]]) == [outcome["sk"], claim["sk"], later["sk"]]


def test_only_schedule_triggers_live_outside_a_run_partition():
    data = {"schedule": "x", "due_at": "2026-11-21T02:00:00+00:00", "outcome": "started", "run_id": RUN,
            "reason": None}
    with pytest.raises(InvalidEvent, match="run_id"):
        make_event("schedule#x", "RunFailed", {"reason": "x"})
    with pytest.raises(InvalidEvent, match="run_id"):
        make_event(RUN, "ScheduleTriggered", data, key="2026-11-21T02:00:00+00:00")
    with pytest.raises(InvalidEvent, match="outcome"):
        make_event("schedule#x", "ScheduleTriggered", {**data, "outcome": "maybe"}, key="k")


# -- the run request's recipients -----------------------------------------------------------------------------


def test_a_run_request_carries_its_recipients_and_refuses_others():
    assert spec.validate(INLINE)["notify"] == []
    to = ["perf@example.com", "arn:aws:sns:us-east-1:123456789012:perf-alerts"]
    assert spec.validate({**INLINE, "notify": to})["notify"] == to
    with pytest.raises(spec.SpecError) as info:
        spec.validate({**INLINE, "notify": ["perf", "arn:aws:sqs:us-east-1:123456789012:q",
                                            *(f"{i}@example.com" for i in range(20))]})
    paths = {p.path for p in info.value.problems}
    assert {"notify", "notify[0]", "notify[1]"} <= paths


@pytest.mark.parametrize("name", ["../quick", "quick/../smoke", "Quick", "", ".hidden", "a" * 65])
def test_a_suite_name_cannot_reach_outside_the_suites_folder(name):
    with pytest.raises(spec.SpecError) as info:
        spec.load_suite(name)
    assert [p.path for p in info.value.problems] == ["suite"]


# -- notifiers ------------------------------------------------------------------------------------------------


def test_the_file_notifier_records_the_recipients(tmp_path):
    FileNotifier(tmp_path).publish(RUN, "subject", {"run_id": RUN}, to=["perf@example.com"])
    FileNotifier(tmp_path).publish(RUN, "again", {"run_id": RUN})
    lines = [json.loads(line) for line in (tmp_path / RUN / "notifications.jsonl").open()]
    assert [(n["subject"], n["to"]) for n in lines] == [("subject", ["perf@example.com"]), ("again", [])]


def test_the_sns_notifier_tells_the_topic_and_each_recipient_topic():
    # AWS cannot be reached from here: botocore's Stubber answers for SNS and checks each request it gets.
    client = boto3.client("sns", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    service, team = "arn:aws:sns:us-east-1:123456789012:brokerbench", "arn:aws:sns:us-east-1:123456789012:team"
    to = ["perf@example.com", team]
    subject = "brokerbench run 20261121T101500Z-abc123 failed: States.TaskFailed:\nTraceback (most recent call last) é"
    expected = {"Subject": " ".join(subject.split()).replace("é", " ")[:100],
                "Message": json.dumps({"run_id": RUN, "recipients": to}, indent=2),
                "MessageAttributes": {"recipients": {"DataType": "String.Array", "StringValue": json.dumps(to)}}}
    with Stubber(client) as stub:
        stub.add_response("publish", {"MessageId": "m-1"}, {"TopicArn": service, **expected})
        stub.add_response("publish", {"MessageId": "m-2"}, {"TopicArn": team, **expected})
        assert SnsNotifier(client, service).publish(RUN, subject, {"run_id": RUN}, to=to) == "m-1"
        stub.assert_no_pending_responses()
        stub.add_response("publish", {"MessageId": "m-3"},
                          {"TopicArn": service, "Subject": "s", "Message": json.dumps({"recipients": []}, indent=2)})
        assert SnsNotifier(client, service).publish(RUN, "s", {}) == "m-3"  # nobody else: no attribute


def test_one_unreachable_recipient_topic_does_not_silence_the_others():
    client = boto3.client("sns", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    service = "arn:aws:sns:us-east-1:123456789012:brokerbench"
    gone, team = "arn:aws:sns:us-east-1:123456789012:gone", "arn:aws:sns:us-east-1:123456789012:team"
    with Stubber(client) as stub:
        stub.add_response("publish", {"MessageId": "m-1"})
        stub.add_client_error("publish", "NotFound", "Topic does not exist")
        stub.add_response("publish", {"MessageId": "m-2"}, {"TopicArn": team, "Subject": "s", "Message": ANY,
                                                            "MessageAttributes": ANY})
        with pytest.raises(RuntimeError, match="could not publish to arn:aws:sns:us-east-1:123456789012:gone"):
            SnsNotifier(client, service).publish(RUN, "s", {}, to=[gone, team])
        stub.assert_no_pending_responses()
