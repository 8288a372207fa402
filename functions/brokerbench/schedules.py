"""Scheduled regression checks: the schedules file, when a schedule is due, and the local scheduler.

The file (schedules.json beside this module; BROKERBENCH_SCHEDULES or a path given names another) lists
schedules: a built-in suite or an inline run request, a five-field cron expression read in `timezone`, a
baseline ("previous" or a pinned run id) and who is told about failures and regressions. In AWS each becomes
an EventBridge Scheduler schedule (the CDK app); locally `brokerbench serve` runs `Scheduler` on the same file.

Due times: a scheduler fires the latest due time that is at or before now, after the last one fired and not
before it started watching. No back-fill: after a pause, the missed times give one trigger (the latest), and a
time from before the scheduler started is never fired.

Triggers are events in the partition schedule#<name>, two per due time:
  tr#<due_at>#claim  outcome "claimed", with the id of the run about to start: written first, conditionally
  tr#<due_at>        the outcome: "started" (with the run id) or "not_started" (with the reason)
Only the scheduler whose claim lands calls `start`, so a due time starts at most one run however many
schedulers (or restarts) try it, and the outcome's key is as deterministic as the claim's, so exactly one
outcome is stored. One event cannot do both jobs: the claim must be stored before the run starts, the
outcome can only be written after. A scheduler that stops between the two leaves a claim alone; when it is
the schedule's newest trigger, the next scheduler to watch the schedule settles it once CLAIM_GRACE has
passed (started when the run has stored events, not_started otherwise).

The baseline (`baseline_runs`): a schedule's check can tell little from a suite's first runs (the pairwise check
needs regression.MIN_HISTORY runs to know how runs differ, the change points reports.changes.MIN_SERIES), and a
change in the nights right after a schedule begins would go untold. So while the suite has fewer completed runs
than `baseline_runs`, the schedule is due again as soon as its newest run completed (`catch_up`), at that run's
end, to the second: the due time is as deterministic as a cron time, so it is claimed once however many
schedulers (locally `brokerbench serve`, in AWS the RunEnded function) see the run end. A run that did not complete
stops it until the next cron time, and at most `baseline_runs` − 1 runs follow a cron time's run, so a suite whose
runs are not counted (another suite's name) cannot start runs without end. Simulated on the quick suite's own
noise (bench/aa_schedule.py), a +30% p99 step at a random night is told within two nights in 93% of schedules with
3 baseline runs, 88% with 1; the A/A nights raised no alert either way.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from functools import cache
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from . import spec as run_spec
from .events import EventStore, make_event, new_run_id
from .events import run_status as run_status_of
from .paths import PACKAGE_DIR, SCHEMAS_DIR
from .reports import history, regression
from .reports.results import build_results
from .spec import Problem, SpecError

DEFAULT_FILE = PACKAGE_DIR / "schedules.json"
PARTITION = "schedule#"
TRIGGERS = "tr#"
CLAIM = "#claim"
CLAIM_GRACE = timedelta(minutes=10)  # far longer than starting a run takes: a younger claim may still be starting
RECENT = 10  # due times read back first when looking for the last trigger (all of them only when these hold none)
TRIGGER_FIELDS = ("due_at", "run_id", "outcome", "reason")
REQUEST_FIELDS = ("suite", "run", "scale", "spec", "notify", "baseline")  # what the run request a schedule starts is made of
CATCH_UP_EVERY = timedelta(seconds=15)  # how often the local scheduler looks whether a baseline run is due

log = logging.getLogger(__name__)


class ScheduleError(ValueError):
    """The schedules file is invalid; `problems` lists each one with its place in the document."""

    def __init__(self, problems: list[Problem], source: str = "schedules") -> None:
        self.problems = problems
        super().__init__(f"invalid schedules file {source}:\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass(frozen=True)
class Schedule:
    name: str
    cron: str
    suite: str | None = None
    run: str | None = None  # a study's run
    scale: float | None = None
    spec: dict | None = None
    description: str | None = None
    timezone: str = "UTC"
    baseline: str = "previous"
    notify: tuple[str, ...] = ()
    baseline_runs: int = 1  # the suite's completed runs it starts runs back to back until (see the module)
    enabled: bool = True

    @property
    def zone(self) -> tzinfo:
        return _zone(self.timezone)

    def request(self) -> tuple[dict, str | None]:
        """The run request to start, and the suite it runs (None for an inline spec)."""
        request = (run_spec.suite_request(self.suite, self.run, self.scale) if self.suite
                   else copy.deepcopy(self.spec or {}))
        if self.baseline != "previous":
            request["baseline_run_id"] = self.baseline
        if self.notify:
            request["notify"] = list(self.notify)
        return request, self.suite


# -- the file --------------------------------------------------------------------------------------------


def load(path: str | Path | None = None) -> list[Schedule]:
    path = Path(path or os.environ.get("BROKERBENCH_SCHEDULES") or DEFAULT_FILE)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ScheduleError([Problem("", f"file {path} does not exist")], str(path)) from None
    except json.JSONDecodeError as exc:
        raise ScheduleError([Problem("", f"not valid JSON: {exc}")], str(path)) from None
    return parse(doc, str(path))


DEPLOYED_ENV = "BROKERBENCH_SCHEDULES_DEPLOYED"  # on | off: set by the CDK app (-c brokerbench:schedules)


def deployed(path: str | Path | None = None) -> list[Schedule]:
    """The schedules as the deploy runs them: in AWS every schedule is DISABLED unless the deploy turned them
    on (BROKERBENCH_SCHEDULES_DEPLOYED=on), whatever its entry says; unset (locally), as the file says."""
    found = load(path)
    if os.environ.get(DEPLOYED_ENV, "on").strip().lower() == "off":
        return [dataclasses.replace(schedule, enabled=False) for schedule in found]
    return found


def parse(doc, source: str = "schedules") -> list[Schedule]:
    """The schedules of a parsed file, or ScheduleError listing every problem."""
    if not isinstance(doc, dict):
        raise ScheduleError([Problem("", 'a schedules file is a JSON object: {"schedules": [...]}')], source)
    problems = [Problem(_place(e.absolute_path), _message(e)) for e in _validator().iter_errors(doc)
                if not _suite_or_spec(e)]  # said more plainly by _check
    items = doc["schedules"] if isinstance(doc.get("schedules"), list) else []
    names: dict[str, int] = {}
    schedules = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        place = f"schedules[{i}]"
        problems += _check(item, place)
        name = item.get("name")
        if isinstance(name, str) and name in names:
            problems.append(Problem(f"{place}.name", f"{name!r} is already the name of schedules[{names[name]}]"))
        elif isinstance(name, str):
            names[name] = i
        if not _flawed(problems, place, REQUEST_FIELDS):
            problems += _request_problems(_schedule(item), place)
        if not _flawed(problems, place):
            schedules.append(_schedule(item))
    if problems:
        raise ScheduleError(sorted(problems, key=_path_order), source)
    return schedules


@cache
def _validator() -> Draft202012Validator:
    schema = json.loads((SCHEMAS_DIR / "schedules.schema.json").read_text())
    request = run_spec.request_schema()  # notify is defined once, in the run request
    registry = Registry().with_resource(request["$id"], Resource.from_contents(request))
    return Draft202012Validator(schema, registry=registry)


def _flawed(problems: list[Problem], place: str, fields: Iterable[str] = ("",)) -> bool:
    """Whether a problem concerns the schedule at `place` (only its `fields`, when given)."""
    starts = tuple(f"{place}.{f}" if f else f"{place}." for f in fields)
    return any(p.path == place or p.path.startswith(starts) for p in problems)


def _suite_or_spec(error) -> bool:
    """The schema's "one of suite and spec" rule, failed by a schedule (at schedules[i])."""
    return error.validator == "oneOf" and len(error.absolute_path) == 2


def _check(item: dict, place: str) -> list[Problem]:
    """What the schema cannot say: a real cron expression and time zone, exactly one of suite and spec."""
    problems = []
    cron = item.get("cron")
    if isinstance(cron, str) and not valid_cron(cron):
        problems.append(Problem(f"{place}.cron", f"{cron!r} is not a cron expression of five fields "
                                                 "(minute hour day-of-month month day-of-week)"))
    zone = item.get("timezone", "UTC")
    if isinstance(zone, str) and not _known_zone(zone):
        problems.append(Problem(f"{place}.timezone", f"{zone!r} is not a known time zone (an IANA name such as "
                                                     "UTC or Europe/Berlin)"))
    if "suite" in item and "spec" in item:
        problems.append(Problem(f"{place}.spec", "give either suite or spec, not both"))
    elif "suite" not in item and "spec" not in item:
        problems.append(Problem(place, "give suite (a built-in suite) or spec (an inline run request)"))
    elif isinstance(item.get("suite"), str) and run_spec.SUITE_NAME.fullmatch(item["suite"]):
        if item["suite"] not in run_spec.all_suite_names():
            known = ", ".join(run_spec.all_suite_names()) or "none"
            problems.append(Problem(f"{place}.suite", f"no suite named {item['suite']!r} (known: {known})"))
    for field in ("run", "scale"):
        if field in item and "spec" in item:
            problems.append(Problem(f"{place}.{field}", f"{field} goes with suite, not with an inline spec"))
    return problems


def _request_problems(schedule: Schedule, place: str) -> list[Problem]:
    """The run request the schedule would start, validated now rather than at 2 a.m."""
    try:
        request, _ = schedule.request()
        run_spec.validate(request)
    except SpecError as exc:
        if schedule.suite:
            return [Problem(f"{place}.{p.path}" if p.path in ("run", "scale") else f"{place}.suite",
                            p.message if p.path in ("run", "scale") else f"suite {schedule.suite}: {p}")
                    for p in exc.problems]
        return [Problem(f"{place}.spec" + (f".{p.path}" if p.path else ""), p.message) for p in exc.problems]
    return []


def _schedule(item: dict) -> Schedule:
    return Schedule(name=item.get("name", ""), cron=item.get("cron", ""), suite=item.get("suite"),
                    run=item.get("run"), scale=item.get("scale"),
                    spec=copy.deepcopy(item.get("spec")), description=item.get("description"),
                    timezone=item.get("timezone", "UTC"), baseline=item.get("baseline", "previous"),
                    notify=tuple(item.get("notify", ())), enabled=item.get("enabled", True),
                    baseline_runs=item.get("baseline_runs", 1))


def valid_cron(expression: str) -> bool:
    # Five fields only: croniter also takes a seconds field and @-aliases, which EventBridge Scheduler's
    # cron() cannot take, and the same file must serve both.
    return len(expression.split()) == 5 and croniter.is_valid(expression)


def _known_zone(name: str) -> bool:
    try:
        _zone(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def _zone(name: str) -> tzinfo:
    # UTC needs no time zone database (a Lambda runtime may have none).
    return timezone.utc if name == "UTC" else ZoneInfo(name)


def _place(parts: Iterable) -> str:
    """A place in the document, written like spec.validate writes them: schedules[0].cron."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _path_order(problem: Problem) -> list:
    """schedules[2] before schedules[10]."""
    return [int(token) if token.isdigit() else token for token in re.split(r"(\d+)", problem.path)]


def _message(error) -> str:
    if error.validator in ("oneOf", "anyOf"):
        wanted = [branch.get("description") for branch in error.validator_value]
        if all(wanted):  # each branch says what it accepts: say that, not "is not valid under any of ..."
            return f"{error.instance!r} is not accepted: expected {' or '.join(wanted)}"
    return error.message


# -- due times ---------------------------------------------------------------------------------------------


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError(f"{moment} has no time zone: schedule times are timezone-aware")
    return moment.astimezone(timezone.utc)


def iso(moment: datetime) -> str:
    """Due times as stored and shown: UTC to the second, so their text sorts in time order."""
    return _utc(moment).isoformat(timespec="seconds")


def next_due(schedule: Schedule, after: datetime) -> datetime:
    """The first due time after `after` (UTC)."""
    return _utc(croniter(schedule.cron, _utc(after).astimezone(schedule.zone)).get_next(datetime))


def latest_due(schedule: Schedule, now: datetime) -> datetime:
    """The latest due time at or before `now` (UTC)."""
    # Due times fall on whole minutes: the latest one before the next minute begins is at or before now.
    next_minute = _utc(now).replace(second=0, microsecond=0) + timedelta(minutes=1)
    return _utc(croniter(schedule.cron, next_minute.astimezone(schedule.zone)).get_prev(datetime))


def due(schedule: Schedule, last_due: datetime | None, started_at: datetime, now: datetime) -> datetime | None:
    """The due time to fire now, if any: the latest at or before now, after last_due, not before started_at."""
    latest = latest_due(schedule, now)
    if latest < _utc(started_at) or (last_due is not None and latest <= _utc(last_due)):
        return None
    return latest


# -- triggers as events ------------------------------------------------------------------------------------


def partition(name: str) -> str:
    return f"{PARTITION}{name}"


def trigger_event(name: str, due_at: datetime, outcome: str, run_id: str | None = None,
                  reason: str | None = None) -> dict:
    """A ScheduleTriggered event: the claim of a due time (outcome "claimed") or its outcome."""
    key = iso(due_at) + (CLAIM if outcome == "claimed" else "")
    return make_event(partition(name), "ScheduleTriggered",
                      {"schedule": name, "due_at": iso(due_at), "outcome": outcome, "run_id": run_id,
                       "reason": reason}, key=key)


def _read_triggers(store: EventStore, schedule: Schedule, now: datetime,
                   enough: Callable[[list[dict]], bool]) -> list[dict]:
    """The schedule's trigger events, oldest first: those of its last RECENT due times when they are
    `enough`, else all of them (a schedule's history only grows; most questions are about its end)."""
    times = croniter(schedule.cron, latest_due(schedule, now).astimezone(schedule.zone))
    since = [times.get_prev(datetime) for _ in range(RECENT)][-1]
    # `after` is exclusive: start a second before `since`, so both of its keys are read.
    recent = store.read(partition(schedule.name), prefix=TRIGGERS, interval_histograms=False,
                        after=TRIGGERS + iso(since - timedelta(seconds=1)))
    return recent if enough(recent) else store.read(partition(schedule.name), prefix=TRIGGERS,
                                                    interval_histograms=False)


def _newest(events: list[dict]) -> tuple[dict | None, dict | None]:
    """The claim and the outcome of the newest due time among `events` (either may be missing)."""
    if not events:
        return None, None
    newest = max(e["data"]["due_at"] for e in events)
    of_newest = [e for e in events if e["data"]["due_at"] == newest]
    claim = next((e for e in of_newest if e["data"]["outcome"] == "claimed"), None)
    outcome = next((e for e in of_newest if e["data"]["outcome"] != "claimed"), None)
    return claim, outcome


# -- the baseline: runs back to back until the suite has enough ----------------------------------------------


@dataclass(frozen=True)
class CatchUp:
    """Whether a schedule building its baseline is due again: `due_at`, or None with `why` (`done`: the suite has
    its baseline_runs, nothing more to do for it)."""
    due_at: datetime | None
    why: str
    done: bool = False


def catch_up(schedule: Schedule, store: EventStore, now: datetime, run_id: str | None = None) -> CatchUp:
    """The baseline's next due time: the end of the schedule's newest run (`run_id`, when given, must be that run),
    when that run completed, its suite has fewer than baseline_runs completed runs and fewer than baseline_runs − 1
    runs followed the newest cron time's."""
    if schedule.baseline_runs <= 1 or not schedule.enabled:
        return CatchUp(None, "no baseline runs", done=True)
    events = _read_triggers(store, schedule, now, bool)
    _, outcome = _newest(events)
    if outcome is None or outcome["data"]["outcome"] != "started":
        return CatchUp(None, "its newest due time started no run" if outcome else "no run started yet")
    newest = outcome["data"]["run_id"]
    if run_id is not None and newest != run_id:
        return CatchUp(None, f"its newest run is {newest}")
    ended = store.read(newest, prefix="90#run#end")  # RunCompleted, or RunFailed
    if not ended:
        return CatchUp(None, f"run {newest} has not ended")
    status = run_status_of(ended[0])[0]
    if status not in history.ENDED:
        return CatchUp(None, f"run {newest} ended {status}: the baseline goes on from the next cron time")
    suite = regression.suite_of(store.read(newest, prefix="00#"))
    runs = history.suite_runs(store, suite, limit=schedule.baseline_runs)
    if len(runs) >= schedule.baseline_runs:
        return CatchUp(None, f"suite {suite} has {len(runs)} completed runs", done=True)
    started = [e for e in events if e["data"]["outcome"] == "started"]
    cron_times = [e for e in started if _on_cron(schedule, e["data"]["due_at"])]
    since = [e for e in started if not cron_times
             or e["data"]["due_at"] > max(c["data"]["due_at"] for c in cron_times)]
    if len(since) >= schedule.baseline_runs - 1:
        return CatchUp(None, f"{len(since)} baseline runs followed the last cron time's run")
    newest_due = datetime.fromisoformat(outcome["data"]["due_at"])
    due_at = max(_utc(datetime.fromisoformat(ended[0]["at"])).replace(microsecond=0), newest_due + timedelta(seconds=1))
    return CatchUp(due_at, f"suite {suite} has {len(runs)} of its {schedule.baseline_runs} baseline runs")


def _on_cron(schedule: Schedule, due_at: str) -> bool:
    moment = datetime.fromisoformat(due_at)
    return latest_due(schedule, moment) == moment


def catch_ups_after(store: EventStore, run_id: str, schedules: list[Schedule], now: datetime) -> list[tuple[str, datetime]]:
    """The baseline runs due now that run `run_id` completed: (schedule, due time) for each schedule whose newest
    run it was (in AWS, the RunEnded function hands each to the schedule trigger function)."""
    found = []
    for schedule in schedules:  # a schedule without baseline runs, or disabled, is answered before any read
        due_at = catch_up(schedule, store, now, run_id).due_at
        if due_at is not None:
            found.append((schedule.name, due_at))
    return found


# -- the local scheduler -----------------------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class _Watch:
    """What a scheduler knows of one schedule."""
    last_due: datetime | None = None
    claim: dict | None = None  # a claim whose outcome is not stored yet
    outcome: dict | None = None  # that outcome, when this scheduler knows it (its write failed)
    baseline_done: bool = False  # the suite has the schedule's baseline_runs: no more catch-up to look for
    catch_up_at: datetime | None = None  # when to look again whether a baseline run is due


def claim_and_start(schedule: Schedule, due_at: datetime, store: EventStore,
                    start: Callable[[dict, str | None, str], None]) -> tuple[dict, dict] | None:
    """Claim the due time (a conditional write: one claim per schedule and due time), then start its run.

    Returns (claim, outcome) with the outcome not yet stored, or None when the due time was claimed
    before (another scheduler, or a retried delivery of the same EventBridge Scheduler invocation)."""
    run_id = new_run_id()
    claim = trigger_event(schedule.name, due_at, "claimed", run_id)
    if not store.append([claim]).written:
        return None
    try:
        request, suite = schedule.request()
        start(request, suite, run_id)
        outcome = trigger_event(schedule.name, due_at, "started", run_id)
    except Exception as exc:  # noqa: BLE001 (whatever stops the start is the trigger's reason)
        outcome = trigger_event(schedule.name, due_at, "not_started", reason=str(exc) or type(exc).__name__)
    return claim, outcome


def trigger(name: str, due_at: datetime, store: EventStore, start: Callable[[dict, str | None, str], None],
            schedules: list[Schedule] | None = None) -> dict:
    """One due time of schedule `name`, as EventBridge Scheduler invokes it in AWS: claimed, started through
    `start` (StepFunctionsStarter: an execution named by the run id), and its outcome stored, exactly as
    `brokerbench serve` does. A second delivery of the same due time starts nothing."""
    by_name = {s.name: s for s in (schedules if schedules is not None else load())}
    if name not in by_name:
        raise ScheduleError([Problem("schedule", f"no schedule named {name!r}; known: {', '.join(by_name)}")])
    claimed = claim_and_start(by_name[name], _utc(due_at), store, start)
    if claimed is None:
        return {"schedule": name, "due_at": iso(_utc(due_at)), "outcome": "already_claimed"}
    claim, outcome = claimed
    store.append([outcome])
    return {"schedule": name, "due_at": iso(_utc(due_at)), "outcome": outcome["data"]["outcome"],
            "run_id": outcome["data"].get("run_id"), "reason": outcome["data"].get("reason")}


class Scheduler:
    """Starts the runs of due schedules (`brokerbench serve`; in AWS, EventBridge Scheduler does this).

    `start(request, suite, run_id)` starts a run and raises when it cannot (the trigger then says
    not_started, with the exception's message as the reason).
    """

    def __init__(self, schedules: list[Schedule], store: EventStore,
                 start: Callable[[dict, str | None, str], None],
                 clock: Callable[[], datetime] = _now) -> None:
        self.schedules = [s for s in schedules if s.enabled]
        self.store, self.start, self.clock = store, start, clock
        self.started_at = _utc(clock())
        self._watches: dict[str, _Watch] = {}

    def tick(self, now: datetime | None = None) -> list[dict]:
        """Trigger what is due; the outcome events this call stored."""
        now = _utc(now or self.clock())
        written = []
        for schedule in self.schedules:
            watch = self._watch(schedule, now)
            if watch.claim is not None:
                written += self._settle(watch, now)
            due_at = due(schedule, watch.last_due, self.started_at, now)
            if due_at is not None:
                written += self._trigger(schedule, watch, due_at, now)
            elif watch.claim is None and not watch.baseline_done and (watch.catch_up_at or now) <= now:
                watch.catch_up_at = now + CATCH_UP_EVERY
                found = catch_up(schedule, self.store, now)
                watch.baseline_done = found.done
                if found.due_at is not None:
                    written += self._trigger(schedule, watch, found.due_at, now)
        return written

    def run(self, stop: threading.Event, every_s: float = 1.0) -> None:
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # a store that does not answer now may answer at the next tick: keep going
                log.exception("scheduler tick failed")
            stop.wait(every_s)

    def _watch(self, schedule: Schedule, now: datetime) -> _Watch:
        watch = self._watches.get(schedule.name)
        if watch is None:  # first look: go on from what is stored (a restart, or another scheduler's triggers)
            claim, outcome = _newest(_read_triggers(self.store, schedule, now, bool))
            newest = outcome or claim
            watch = _Watch(datetime.fromisoformat(newest["data"]["due_at"]) if newest else None,
                           claim if outcome is None else None)
            self._watches[schedule.name] = watch
        return watch

    def _trigger(self, schedule: Schedule, watch: _Watch, due_at: datetime, now: datetime) -> list[dict]:
        claimed = claim_and_start(schedule, due_at, self.store, self.start)
        watch.last_due = due_at  # only once the claim is stored: a store that failed gets the due time again
        if claimed is None:
            return []  # another scheduler (or an earlier life of this one) has this due time
        watch.claim, watch.outcome = claimed
        return self._settle(watch, now)

    def _settle(self, watch: _Watch, now: datetime) -> list[dict]:
        """Store the outcome of the open claim (kept for the next tick when the store fails)."""
        outcome = watch.outcome
        if outcome is None:  # a claim left by a scheduler that stopped before storing the outcome
            if now - datetime.fromisoformat(watch.claim["at"]) < CLAIM_GRACE:
                return []  # its scheduler may still be starting the run
            outcome = self._recovered(watch.claim["data"])
        written = self.store.append([outcome]).written
        watch.claim = watch.outcome = None
        return [outcome] if written else []

    def _recovered(self, claim: dict) -> dict:
        due_at = datetime.fromisoformat(claim["due_at"])
        if self.store.read(claim["run_id"], prefix="00#"):  # the run got as far as its request
            return trigger_event(claim["schedule"], due_at, "started", claim["run_id"])
        return trigger_event(claim["schedule"], due_at, "not_started",
                             reason="the scheduler stopped between claiming this due time and starting its run")


# -- for GET /schedules ------------------------------------------------------------------------------------


def describe(schedules: list[Schedule], store: EventStore, now: datetime) -> list[dict]:
    """Each schedule with when it is next due, its last trigger and the status of its last run.

    last_trigger is the newest due time's outcome, or its claim (outcome "claimed") while the run is being
    started; last_run is the run of the newest trigger that started one.
    """
    out = []
    for schedule in schedules:
        events = _read_triggers(store, schedule, now, _started_any)
        claim, outcome = _newest(events)
        trigger = outcome or claim
        started = [e for e in events if e["data"]["outcome"] == "started"]
        last_run_id = max(started, key=lambda e: e["data"]["due_at"])["data"]["run_id"] if started else None
        out.append({
            "name": schedule.name, "description": schedule.description, "suite": schedule.suite,
            "run": schedule.run, "scale": schedule.scale,
            "cron": schedule.cron, "timezone": schedule.timezone, "baseline": schedule.baseline,
            "notify": list(schedule.notify), "enabled": schedule.enabled, "baseline_runs": schedule.baseline_runs,
            "next_due": iso(next_due(schedule, now)) if schedule.enabled else None,
            "last_trigger": {k: trigger["data"][k] for k in TRIGGER_FIELDS} if trigger else None,
            "last_run": {"run_id": last_run_id, "status": run_status(store, last_run_id)} if last_run_id else None,
        })
    return out


def _started_any(events: list[dict]) -> bool:
    return any(e["data"]["outcome"] == "started" for e in events)


def run_status(store: EventStore, run_id: str) -> str:
    """The run's status from its stored events ("starting" before its request is stored)."""
    events = store.read(run_id, interval_histograms=False)
    if not any(e["type"] == "RunRequested" for e in events):
        return "failed" if any(e["type"] == "RunFailed" for e in events) else "starting"
    return build_results(events)["status"]
