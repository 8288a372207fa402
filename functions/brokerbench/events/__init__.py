"""Run events: immutable, validated, with deterministic ids and an order given by their sort key.

Sort keys put a run's events in order and give each event one place: a cell has exactly one
end slot, so it cannot both complete and fail, and a retried write lands on the same key.

Each event's data has a type (eventdata.py). A write checks the event against its types, which hold every rule of
the schema, and refuses a field they do not declare (validate); a read decodes the stored data through them
(decode_data), so a stored event that lacks a required field or holds one of the wrong type fails there, naming the
event and the field, instead of as a missing key in a report. What the rest of the code reads stays the data as a dict.
"""

from __future__ import annotations

import inspect
import json
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from typing import TYPE_CHECKING, Protocol

import msgspec

from ..eventdata import (DATA_TYPES, EVENT_TYPES, SCHEMA_VERSION, Envelope, Histograms, IntervalSummary,
                         open_value_problems, unknown_fields)
from ..paths import SCHEMAS_DIR
from ..series import DIGEST_VERSION

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

RUN_EVENTS = ("RunCompleted", "RunFailed")
INLINE_CELLS = 200  # a plan up to this many cells travels in RunRequested; a larger one in CellsPlanned chunks
CELLS_PER_CHUNK = 250  # at most this many cells per stored item
# ...and at most this much of their JSON: far below DynamoDB's 400 KB item limit however many client settings the
# plug-ins give each cell (250 cells took 170 KB with two brokers' settings, 210 KB with six)
CHUNK_BYTES = 150_000


class StoreUnavailable(RuntimeError):
    """The event store did not answer (after the client's own retries): nothing was read or written by the call."""


class InvalidEvent(ValueError):
    pass


def new_run_id() -> str:
    """Sorts by time; unique enough for one team's runs."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def cell_prefix(cell_index: int) -> str:
    return f"10#c{cell_index:05d}#"


def intervals_prefix(cell_index: int, attempt: int) -> str:
    """The sort keys of one attempt's IntervalMeasured events."""
    return f"{cell_prefix(cell_index)}1#a{attempt:02d}#"


def run_listing_key(event: dict, suite: str | None = None) -> dict:
    """The listing key of a RunRequested event (every store's `run_key`): where a page that ends with it
    resumes."""
    key = {"run_id": event["run_id"], "sk": event["sk"], "at": event["at"]}
    if suite:
        key["suite"] = suite
    else:
        key["entity"] = "run"
    return key


def sort_key(event_type: str, cell_index: int | None = None, interval: int | None = None, attempt: int = 0,
             key: str | None = None) -> str:
    if event_type == "RunRequested":
        return "00#run"
    if event_type == "CellsPlanned":  # after the run's header, before TargetsReady: read with it
        return f"00#run#cells#{key}"
    if event_type == "TargetsReady":
        return "01#targets"
    if event_type in ("CellStarted", "IntervalMeasured", "CellCompleted", "CellFailed"):
        # Each attempt of a cell (a retried worker) has its own start and intervals; the end is shared,
        # so a cell ends once, and the projection reads the intervals of the attempt that ended it.
        cell = cell_prefix(cell_index)
        if event_type == "CellStarted":
            return f"{cell}0#a{attempt:02d}"
        if event_type == "IntervalMeasured":
            return f"{intervals_prefix(cell_index, attempt)}i{interval:06d}"
        return f"{cell}2#end"
    if event_type in RUN_EVENTS:
        return "90#run#end"
    if event_type == "StepFailed":  # a step after the run's end (Notify, TeardownTargets); `key`: the step
        return f"90#run#step#{key}"
    if event_type == "Notified":  # a notification sent; `key`: the step that sent it (Notify, RunFailed)
        return f"90#run#notified#{key}"
    if event_type == "ReportBuilt":
        return "95#report"
    if event_type == "RegressionDetected":
        return f"96#regression#c{cell_index:05d}#{key}"
    if event_type == "ScheduleTriggered":
        # In a schedule's own partition (schedule#<name>); `key` is the due time (and "#claim" for the claim),
        # so every scheduler trying the same due time writes the same key, and only the first one lands.
        return f"tr#{key}"
    raise InvalidEvent(f"unknown event type {event_type!r}")


def run_status(end: dict | None, step_failures: list[dict] = ()) -> tuple[str | None, str | None]:
    """The run's status and reason from its end event (RunCompleted or RunFailed; None: no end yet) and its
    StepFailed events: a step that failed after the run ended (its notification, its teardown) leaves a
    completed run `completed_with_failures`, and every such step is named in the reason."""
    if end is None:
        return None, None
    status = "failed" if end["type"] == "RunFailed" else end["data"]["status"]
    reason = end["data"].get("reason")
    if step_failures:
        said = "; ".join(f"{e['data']['step']} failed: {e['data']['reason']}" for e in step_failures)
        status = "completed_with_failures" if status == "completed" else status
        reason = f"{reason}; {said}" if reason else said
    return status, reason


def planned_cells(events: list[dict]) -> list[dict]:
    """The run's planned cells, from RunRequested or, for a large plan, its CellsPlanned chunks in order."""
    requested = next(e for e in events if e["type"] == "RunRequested")["data"]
    if "cells" in requested:
        return requested["cells"]
    chunks = sorted((e["data"] for e in events if e["type"] == "CellsPlanned"), key=lambda d: d["chunk"])
    if [d["chunk"] for d in chunks] != list(range(requested["cell_chunks"])):
        raise InvalidEvent(f"run {events[0]['run_id']}: {requested['cell_chunks']} CellsPlanned chunks expected, "
                           f"{len(chunks)} stored")
    return [cell for chunk in chunks for cell in chunk["cells"]]


def has_digest(end: dict) -> bool:
    """Does this cell end (CellCompleted data) carry a digest of its intervals that reports can use instead?"""
    digest = end.get("digest")
    return (isinstance(digest, dict) and digest.get("version") == DIGEST_VERSION
            and len(digest.get("interval") or ()) == end.get("intervals"))


def read_report_events(store: EventStore, run_id: str) -> list[dict]:
    """A run's events as reports need them: without per-interval histograms and, where the store can leave
    them out, without the intervals of cells whose end carries their digest (reports use the digest)."""
    if "intervals" in inspect.signature(store.read).parameters:
        return store.read(run_id, interval_histograms=False, intervals=False)
    return store.read(run_id, interval_histograms=False)


def cell_count(requested: dict) -> int:
    """How many cells a RunRequested event's run planned."""
    return requested["cell_count"] if "cell_count" in requested else len(requested["cells"])


def make_event(run_id: str, event_type: str, data: dict, *, cell_index: int | None = None,
               interval: int | None = None, attempt: int = 0, key: str | None = None) -> dict:
    sk = sort_key(event_type, cell_index, interval, attempt, key)
    event = {
        "run_id": run_id,
        "sk": sk,
        "event_id": f"{run_id}/{sk}",
        "type": event_type,
        "at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "schema_version": SCHEMA_VERSION,
        "data": data,
    }
    validate(event)
    return event


@cache
def _validators() -> dict[str, Draft202012Validator]:
    """The schema's validators (the envelope's and each type's data's): what tests/unit/test_eventdata.py holds the
    Structs to and bench/event_validate.py compares with; no write or read runs them."""
    from jsonschema import Draft202012Validator

    schema = json.loads((SCHEMAS_DIR / "events.schema.json").read_text())
    defs = schema["$defs"]
    envelope = Draft202012Validator(schema)
    out = {"envelope": envelope}
    for name in schema["properties"]["type"]["enum"]:
        out[name] = Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": defs})
    return out


def validate(event: dict) -> None:
    """Refuses an event its types refuse (the envelope, then the data), naming the event, its id and each field:
    the Structs hold every rule of schemas/events.schema.json, so the schema's validator is not run again."""
    try:
        msgspec.convert(event, Envelope)
        problems = typed_problems(event["type"], event["data"])
    except msgspec.ValidationError as exc:
        problem = _place(exc, "")  # '.run_id: ...' for a field, ': ...' for the event as a whole
        problems = [problem[1:] if problem.startswith(".") else f"(event){problem}"]
    if problems:
        raise InvalidEvent(f"{event.get('type')} event {event.get('event_id')} is invalid: " + "; ".join(problems))


def typed_problems(event_type: str, data: dict) -> list[str]:
    """What in an event's data, as a producer wrote it, its type (eventdata) refuses: a field it does not declare,
    a missing or mistyped one."""
    data_type = EVENT_TYPES[event_type]
    problems = [f"{place}: not a field of {event_type}'s data (eventdata.{data_type.__name__})"
                for place in unknown_fields(data, data_type)] + open_value_problems(data, data_type)
    try:
        msgspec.convert(data, data_type)
    except msgspec.ValidationError as exc:
        problems.append(_place(exc))
    return problems


def _place(exc: msgspec.ValidationError, where: str = "data") -> str:
    """msgspec's 'Expected `int`, got `str` - at `$.counters.sent`' as 'data.counters.sent: expected `int`, got `str`'."""
    message, _, place = str(exc).partition(" - at `$")
    return f"{where}{place.rstrip('`')}: {message[:1].lower()}{message[1:]}"


@cache
def _decoder(version: int, event_type: str, summary: bool) -> msgspec.json.Decoder:
    data_type = DATA_TYPES[version][event_type]
    return msgspec.json.Decoder(IntervalSummary if summary and data_type is EVENT_TYPES["IntervalMeasured"]
                                else data_type)


_PLAIN = msgspec.json.Decoder()


def decode_data(text: str | bytes, *, event_type: str, event_id: str, run_id: str, version: int = SCHEMA_VERSION,
                histograms: bool = True, histograms_text: str | None = None) -> dict:
    """A stored event's data (JSON) as a dict, once its type has read it: a missing, misspelled or mistyped field
    raises InvalidEvent naming the event (id, type, run) and the field.

    An IntervalMeasured's histograms: histograms=False, the read left them out; `histograms_text`, they were stored
    apart (DynamoDB keeps them in their own attribute) and are decoded and put back here. `version` is the event's
    schema_version: each one this release reads has its types (eventdata.DATA_TYPES)."""
    def refuse(problem: str) -> InvalidEvent:
        return InvalidEvent(f"stored event {event_id} ({event_type}, run {run_id}) does not decode: {problem}")

    if version not in DATA_TYPES:
        raise refuse(f"schema_version {version} is not one this release reads ({', '.join(map(str, DATA_TYPES))})")
    if event_type not in DATA_TYPES[version]:
        raise refuse(f"no event type {event_type!r} in schema_version {version}")
    data = _checked(text, _decoder(version, event_type, not histograms or histograms_text is not None), refuse)
    if histograms and histograms_text is not None and event_type == "IntervalMeasured":
        data["histograms"] = _checked(histograms_text, _HISTOGRAMS, refuse, "data.histograms")
    return data


_HISTOGRAMS = msgspec.json.Decoder(Histograms)


def _checked(text: str | bytes, decoder: msgspec.json.Decoder, refuse, where: str = "data") -> dict:
    """The JSON object `text` as a dict, once `decoder` has read it (an error is `refuse`d naming the field)."""
    try:
        decoder.decode(text)
        return _PLAIN.decode(text)
    except msgspec.ValidationError as exc:
        raise refuse(_place(exc, where)) from None
    except msgspec.DecodeError:  # not strict JSON: Python's json wrote NaN or Infinity for a float
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise refuse(f"{where} is not JSON: {exc}") from None
    try:
        msgspec.convert(data, decoder.type)
    except msgspec.ValidationError as exc:
        raise refuse(_place(exc, where)) from None
    return data


@dataclass
class AppendResult:
    written: int = 0
    skipped: int = 0  # already stored (a retry or a replay): nothing new was written

    def __iadd__(self, other: AppendResult) -> AppendResult:
        self.written += other.written
        self.skipped += other.skipped
        return self


class EventStore(Protocol):
    """The port the core writes to and reads from; adapters: DynamoDB (AWS or DynamoDB Local) and memory. What every
    adapter promises is written in events/memory.py and tested on both by tests/integration/test_event_store_contract.py."""

    def append(self, events: list[dict]) -> AppendResult: ...

    def read(self, run_id: str, prefix: str | None = None, interval_histograms: bool = True,
             after: str | None = None) -> list[dict]: ...
    # An adapter may also take `intervals=False` (a whole run without the intervals that digests stand for):
    # see read_report_events.

    def list_runs(self, limit: int = 50) -> list[dict]: ...
