"""The event store in memory: the same contract as the DynamoDB adapter, for tests and one-process tools.

What both stores promise (tests/integration/test_event_store_contract.py runs the same tests on each):
- An append validates every event first (InvalidEvent names the field) and writes nothing when one is invalid.
- The first event stored at a key (run id, sort key) stays: a later one at that key, the same event retried or a
  conflicting one (a cell's CellFailed after its CellCompleted), in the same append or a later one, is skipped
  and counted in AppendResult.skipped. No error is raised for it.
- Events come back as they went in through JSON (tuples as lists), as new objects each read.
- A run is read in sort-key order; `prefix` keeps the keys that start with it; `after` (exclusive) the keys after
  it; interval_histograms=False leaves IntervalMeasured's `histograms` out; intervals=False (a whole run) reads a
  cell whose only attempt completed with a digest of its intervals as its start and end. A whole run with a
  RunRequested is its header, its planned cells and its end: events of cells beyond the plan are not read.
- Runs are listed by their RunRequested events, newest (`at`) first, by suite (the request's `suite`, else its
  spec's name, else "adhoc"), in pages that resume after `run_key` of a page's last run.
"""

from __future__ import annotations

import json
import threading

import msgspec

from ..eventdata import build_types
from . import AppendResult, cell_count, decode_data, has_digest, run_listing_key, sort_key, validate

HEADER_END, TAIL_START = "10#", "11#"  # sort keys below the first are the run's header, from the second its end
ENVELOPE_FIELDS = ("run_id", "sk", "event_id", "type", "at", "schema_version")


class _Stored(msgspec.Struct):
    """A stored event: its envelope, and its data left as JSON for its own type to decode."""
    run_id: str
    sk: str
    event_id: str
    type: str
    at: str
    schema_version: int
    data: msgspec.Raw


_ENVELOPE = msgspec.json.Decoder(_Stored)


class MemoryEventStore:
    def __init__(self, events: list[dict] = ()) -> None:
        self._items: dict[tuple[str, str], str] = {}  # (run_id, sk) -> the event as JSON
        self._lock = threading.Lock()
        if events:
            self.append(list(events))

    def append(self, events: list[dict]) -> AppendResult:
        for event in events:
            validate(event)
        result = AppendResult()
        with self._lock:
            for event in events:
                key = (event["run_id"], event["sk"])
                if key in self._items:
                    result.skipped += 1
                else:
                    self._items[key] = json.dumps(event, separators=(",", ":"))
                    result.written += 1
        return result

    def _run(self, run_id: str) -> list[tuple[str, str]]:
        """The run's (sort key, JSON) pairs in sort-key order."""
        with self._lock:
            return sorted((sk, text) for (rid, sk), text in self._items.items() if rid == run_id)

    @staticmethod
    def _event(text: str, interval_histograms: bool = True) -> dict:
        """The stored JSON as an event, its data decoded through its type (events.decode_data)."""
        stored = _ENVELOPE.decode(text)
        event = {name: getattr(stored, name) for name in ENVELOPE_FIELDS}
        event["data"] = decode_data(stored.data, event_type=stored.type, event_id=stored.event_id,
                                    run_id=stored.run_id, version=stored.schema_version)
        if not interval_histograms and event["type"] == "IntervalMeasured":
            event["data"].pop("histograms", None)
        return event

    def read(self, run_id: str, prefix: str | None = None, interval_histograms: bool = True,
             after: str | None = None, intervals: bool = True) -> list[dict]:
        """The run's events in order (see the module's contract, and DynamoEventStore.read)."""
        stored = self._run(run_id)
        if prefix is not None or after is not None:
            return [self._event(text, interval_histograms) for sk, text in stored
                    if sk.startswith(prefix or "") and (after is None or sk > after)]
        events = [self._event(text, interval_histograms) for _, text in stored]
        requested = next((e for e in events if e["type"] == "RunRequested" and e["sk"] < HEADER_END), None)
        if requested is None:
            return events
        by_cell: dict[int, list[dict]] = {index: [] for index in range(cell_count(requested["data"]))}
        for event in events:
            sk = event["sk"]
            if HEADER_END <= sk < TAIL_START and sk.startswith("10#c"):
                index = int(sk[4:sk.index("#", 4)])
                if index in by_cell:
                    by_cell[index].append(event)
        if not intervals:
            by_cell = {index: _digested(cell, index) for index, cell in by_cell.items()}
        return ([e for e in events if e["sk"] < HEADER_END] + [e for index in sorted(by_cell) for e in by_cell[index]]
                + [e for e in events if e["sk"] >= TAIL_START])

    def list_runs(self, limit: int = 50, suite: str | None = None) -> list[dict]:
        """RunRequested events, newest first."""
        return self.runs_page(limit=limit, suite=suite)[0]

    def runs_page(self, *, limit: int = 50, suite: str | None = None, since: str | None = None,
                  start: dict | None = None) -> tuple[list[dict], dict | None]:
        """One page of RunRequested events, newest first, requested at or after `since` when given; and the key to
        pass as `start` for the next page when more follow."""
        with self._lock:
            texts = [text for (_, sk), text in self._items.items() if sk == sort_key("RunRequested")]
        runs = [e for e in map(self._event, texts) if e["type"] == "RunRequested"
                and (suite is None or _suite(e) == suite) and (since is None or e["at"] >= since)]
        runs.sort(key=lambda e: (e["at"], e["run_id"]), reverse=True)
        if start is not None:
            runs = [e for e in runs if (e["at"], e["run_id"]) < (start["at"], start["run_id"])]
        page = runs[:limit]
        return page, (self.run_key(page[-1], suite) if len(runs) > limit else None)

    run_key = staticmethod(run_listing_key)

    def events_page(self, run_id: str, *, limit: int, after: str | None = None,
                    interval_histograms: bool = False) -> tuple[list[dict], str | None]:
        """Up to `limit` of the run's events in order, after the sort key `after`; and the sort key to resume after
        when more follow."""
        events = self.read(run_id, after=after, interval_histograms=interval_histograms)
        page = events[:limit]
        return page, (page[-1]["sk"] if len(events) > limit else None)


def _suite(requested: dict) -> str:
    """The suite a run is listed under (as DynamoEventStore's suite index keys it)."""
    return requested["data"].get("suite") or requested["data"]["spec"].get("name", "adhoc")


def _digested(events: list[dict], index: int) -> list[dict]:
    """A cell's events without its intervals when its only attempt completed with a digest of them."""
    by_sk = {e["sk"]: e for e in events}
    start, retried, end = (by_sk.get(sort_key(kind, index, attempt=attempt)) for kind, attempt in
                           (("CellStarted", 0), ("CellStarted", 1), ("CellCompleted", 0)))
    if (start is not None and retried is None and end is not None and end["type"] == "CellCompleted"
            and end["data"].get("attempt", 0) == 0 and has_digest(end["data"])):
        return [start, end]
    return events


build_types(globals())  # msgspec's information on its Structs, built now (eventdata.build_types)
