"""Scheduled regression checks: one EventBridge Scheduler schedule per entry of
functions/brokerbench/schedules.json, invoking the ScheduleTrigger function with the schedule's name and
its due time. The function does what `brokerbench serve` does locally: it claims the due time (one run per
due time, even when the invocation is retried), starts the run as the API would (an execution named by
the run id) and stores the outcome (ScheduleTriggered), so GET /schedules shows it.

The file is read with brokerbench.schedules.load (so an invalid file fails the synthesis, as it fails
`brokerbench serve`). The run a schedule starts is what StepFunctionsStarter.start sends:
{"request": <the schedule's run request>, "suite": <suite or null>}; ValidateRequest gives the run its id.
"""

from __future__ import annotations

import json
import re

from aws_cdk import Aws, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from brokerbench import schedules as project_schedules

from .. import paths
from ..nag import allow

DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]  # croniter: 0 (and 7) is Sunday; EventBridge: 1 is
MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
# What each field may hold for EventBridge to say the same (croniter's L in day-of-month is EventBridge's L;
# its L and # in day-of-week are refused: the numbering differs and ranges of them get ambiguous).
FIELDS = {
    "minute": re.compile(r"^[0-9*/,\-]+$"),
    "hour": re.compile(r"^[0-9*/,\-]+$"),
    "day of month": re.compile(r"^([0-9*/,\-]+|L)$"),
    "month": re.compile(r"^[0-9A-Za-z*/,\-]+$"),
    "day of week": re.compile(r"^[0-9A-Za-z*/,\-]+$"),
}


class CronError(ValueError):
    pass


def _day_of_week(field: str) -> str:
    """croniter's day-of-week (0-7 or SUN-SAT, 0 and 7 Sunday) in EventBridge's (1-7 or SUN-SAT, 1 Sunday)."""
    def one(value: str) -> str:
        if value.isdigit():
            number = int(value)
            if number > 7:
                raise CronError(f"day of week {value} is out of range")
            return str(number % 7 + 1)
        if value.upper() not in DAYS:
            raise CronError(f"day of week {value!r} is not a number or SUN-SAT")
        return value.upper()

    out = []
    for part in field.split(","):
        base, _, step = part.partition("/")
        if base == "*":
            converted = "*"
        elif "-" in base:
            low, high = base.split("-", 1)
            if high == "7" or (high.upper() == "SUN" and low.upper() not in ("0", "SUN")):
                if step:
                    raise CronError(f"day of week {part!r}: a stepped range through Sunday has no EventBridge form")
                high = "SAT" if not low.isdigit() else "6"  # x-7 (through Sunday) is x-6 plus Sunday (1)
                out.append("1")
            converted = f"{one(low)}-{one(high)}"
        else:
            converted = one(base)
        out.append(converted + (f"/{step}" if step else ""))
    return ",".join(dict.fromkeys(out))


def eventbridge_cron(expression: str) -> str:
    """A five-field croniter expression (minute hour day-of-month month day-of-week) as EventBridge's
    cron(minutes hours day-of-month month day-of-week year). EventBridge needs one of the two day fields to be
    '?'; croniter runs a schedule whose day-of-month and day-of-week are both restricted on either day,
    which EventBridge cannot say, so that is refused rather than silently changed."""
    fields = expression.split()
    if len(fields) != 5:
        raise CronError(f"{expression!r}: expected five fields (minute hour day-of-month month day-of-week)")
    for (name, pattern), field in zip(FIELDS.items(), fields):
        if not pattern.match(field):
            raise CronError(f"{expression!r}: {name} {field!r} uses syntax this app does not carry over to EventBridge")
    minute, hour, dom, month, dow = fields
    month = ",".join(m.upper() if m.upper() in MONTHS else m for m in month.split(","))
    if dow == "*":
        dow = "?"
    elif dom == "*":
        dom, dow = "?", _day_of_week(dow)
    else:
        raise CronError(f"{expression!r}: day of month and day of week are both set (croniter runs on either); "
                        "EventBridge allows only one: split it into two schedules")
    return f"cron({minute} {hour} {dom} {month} {dow} *)"


def trigger_input(schedule: project_schedules.Schedule) -> dict:
    """What the ScheduleTrigger function gets: the schedule's name and the time it was due (a context attribute
    EventBridge Scheduler fills in at each invocation)."""
    return {"schedule": schedule.name, "due_at": "<aws.scheduler.scheduled-time>"}


def schedule_input(schedule: project_schedules.Schedule) -> dict:
    request, suite = schedule.request()
    return {"request": request, "suite": suite}


def state(entry: project_schedules.Schedule, enabled: bool) -> str:
    """A schedule's deployed state: DISABLED unless the deploy opted in (-c brokerbench:schedules=on), and
    then as the entry's own `enabled` says. A schedule creates MSK clusters and ElastiCache groups each time
    it fires, so nobody pays for one they did not ask for."""
    return "ENABLED" if enabled and entry.enabled else "DISABLED"


class Schedules(Construct):
    def __init__(self, scope: Construct, id: str, *, trigger: lambda_.IFunction, enabled: bool = False) -> None:
        super().__init__(scope, id)
        self.role = iam.Role(
            self, "Role", description="brokerbench schedules: invoke the schedule trigger function",
            assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com", conditions={
                "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}}))
        allow(self.role, ["lambda:InvokeFunction"], [trigger.function_arn])  # the function itself, no versions
        stack_name = Stack.of(self).stack_name
        self.schedules: dict[str, scheduler.CfnSchedule] = {}
        for entry in project_schedules.load(paths.SCHEDULES):
            self.schedules[entry.name] = scheduler.CfnSchedule(
                self, f"Schedule-{entry.name}",
                name=f"{stack_name}-{entry.name}"[:64],
                description=(entry.description or f"brokerbench schedule {entry.name}")[:512],
                schedule_expression=eventbridge_cron(entry.cron),
                schedule_expression_timezone=entry.timezone,
                state=state(entry, enabled),
                flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
                target=scheduler.CfnSchedule.TargetProperty(
                    arn=trigger.function_arn,
                    role_arn=self.role.role_arn,
                    input=json.dumps(trigger_input(entry), separators=(",", ":")),
                    retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                        maximum_event_age_in_seconds=3600, maximum_retry_attempts=3),
                ),
            )
