"""The event store's contract (brokerbench/events/memory.py states it), each test run on both stores: the in-memory
one and DynamoDB Local. A difference between the two is a defect of one of them."""

import json
import secrets

import pytest
from event_examples import failed, one_of_each, trigger
from synthetic import synthetic_run

from brokerbench.events import InvalidEvent, cell_prefix, has_digest, make_event, new_run_id, read_report_events
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.events.memory import MemoryEventStore

COUNTERS = dict.fromkeys(["sent", "bytes_sent", "acked", "send_errors", "received", "bytes_received"], 1)
TOTALS = dict.fromkeys(["sent", "received", "lost", "duplicated", "out_of_order", "send_errors", "unacked",
                        "bytes_sent", "bytes_received"], 0)
ENVIRONMENT = {"host": {}, "code_version": "t", "python": "3"}
SPEC = {"name": "contract", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000],
        "formats": ["json", "msgpack"], "repeats": 1}


@pytest.fixture(scope="module")
def dynamodb_table(event_store_endpoint):
    """A table of this module's own on DynamoDB Local, so listings hold only what these tests stored."""
    events = DynamoEventStore(f"bb-contract-{secrets.token_hex(4)}", endpoint_url=event_store_endpoint["endpoint_url"])
    events.ensure_table()
    yield events
    events.client.delete_table(TableName=events.table)


@pytest.fixture(params=["memory", "dynamodb"])
def store(request):
    if request.param == "memory":
        return MemoryEventStore()
    return request.getfixturevalue("dynamodb_table")


def cell(index):
    return {"cell_id": f"kafka.json.{index}", "index": index, "broker": "kafka", "format": "json", "mode": "batch",
            "size_basis": "record", "size_bytes": 1024, "rate": 10, "producers": 1, "consumers": 1, "partitions": 1,
            "repeat": 0, "client": {}}


def requested(run_id, cells=1, suite="quick", at=None):
    event = make_event(run_id, "RunRequested", {"spec": {"name": suite}, "suite": suite,
                                                "cells": [cell(i) for i in range(cells)], "environment": ENVIRONMENT})
    if at is not None:
        event["at"] = at
    return event


def cell_events(run_id, index, intervals, attempt=0):
    c = cell(index)
    return ([make_event(run_id, "CellStarted", {"cell_id": c["cell_id"], "cell": c, "topic": "t", "attempt": attempt},
                        cell_index=index, attempt=attempt)]
            + [make_event(run_id, "IntervalMeasured", {"cell_id": c["cell_id"], "attempt": attempt, "interval": i,
                                                       "counters": COUNTERS, "histograms": {"end_to_end_latency_us": f"h{i}"}},
                          cell_index=index, interval=i, attempt=attempt) for i in range(intervals)])


def run_events(run_id, intervals=40, suite="quick"):
    return ([requested(run_id, suite=suite)] + cell_events(run_id, 0, intervals)
            + [make_event(run_id, "RunCompleted", {"status": "completed", "cells_completed": 1, "cells_failed": 0})])


def completed(run_id, index, intervals=0, attempt=0, digest=None):
    data = {"cell_id": cell(index)["cell_id"], "attempt": attempt, "measured_s": 1, "encoded_bytes": 1,
            "intervals": intervals, "histograms": {}, "totals": TOTALS}
    if digest is not None:
        data["digest"] = digest
    return make_event(run_id, "CellCompleted", data, cell_index=index)


# -- appends ---------------------------------------------------------------------------------------------------
def test_append_then_read_in_order(store):
    run_id = new_run_id()
    events = run_events(run_id)
    result = store.append(list(reversed(events)))  # written out of order, more than one DynamoDB transaction
    assert (result.written, result.skipped) == (len(events), 0)
    stored = store.read(run_id)
    assert [e["event_id"] for e in stored] == [e["event_id"] for e in events]
    assert stored == events  # every field as it went in


def test_replay_writes_nothing_new(store):
    run_id = new_run_id()
    events = run_events(run_id)
    store.append(events)
    again = store.append(events)
    assert (again.written, again.skipped) == (0, len(events))
    assert len(store.read(run_id)) == len(events)


def test_partly_stored_batch_writes_only_the_new_events(store):
    run_id = new_run_id()
    events = run_events(run_id, intervals=10)
    store.append(events[::2])
    result = store.append(events)
    assert (result.written, result.skipped) == (len(events) - len(events[::2]), len(events[::2]))
    assert store.read(run_id) == events


def test_a_cell_cannot_both_complete_and_fail(store):
    run_id = new_run_id()
    store.append([make_event(run_id, "CellFailed", {"cell_id": "c", "reason": "broker down"}, cell_index=0)])
    result = store.append([completed(run_id, 0)])
    assert (result.written, result.skipped) == (0, 1)  # skipped, no error
    assert [e["type"] for e in store.read(run_id)] == ["CellFailed"]


def test_the_first_of_two_events_at_one_key_in_one_append_stays(store):
    run_id = new_run_id()
    failed = make_event(run_id, "CellFailed", {"cell_id": "c", "reason": "first"}, cell_index=0)
    result = store.append([requested(run_id), failed, completed(run_id, 0), failed])
    assert (result.written, result.skipped) == (2, 2)
    assert [e["data"].get("reason") for e in store.read(run_id)] == [None, "first"]


def test_an_invalid_event_is_refused_by_its_field_and_nothing_of_the_append_is_written(store):
    run_id = new_run_id()
    events = run_events(run_id, intervals=30)  # the bad one after a whole DynamoDB transaction's worth
    events[-2] = {**events[-2], "data": {**events[-2]["data"], "interval": -1}}
    with pytest.raises(InvalidEvent, match="interval"):
        store.append(events)
    assert store.read(run_id) == []


def test_events_come_back_as_json_gives_them_and_as_new_objects(store):
    run_id = new_run_id()
    event = requested(run_id)
    event["data"]["spec"]["extra"] = (1, 2.5)  # what JSON makes of a tuple (in the spec, which is open to more)
    store.append([event])
    first = store.read(run_id)
    assert first[0]["data"]["spec"]["extra"] == [1, 2.5]
    first[0]["data"]["suite"] = "changed by a reader"
    assert store.read(run_id)[0]["data"]["suite"] == "quick"


# -- reads -----------------------------------------------------------------------------------------------------
def test_after_returns_only_later_events_of_the_run_or_of_one_cell(store):
    run_id = new_run_id()
    first, second = cell_events(run_id, 0, 30), cell_events(run_id, 1, 30)
    store.append([requested(run_id, cells=2), *second[:10], *first[:10]])

    seen = store.read(run_id, prefix=cell_prefix(1), interval_histograms=False)
    assert [e["sk"] for e in seen] == [e["sk"] for e in second[:10]]
    assert store.read(run_id, prefix=cell_prefix(1), after=seen[-1]["sk"]) == []
    store.append(second[10:] + first[10:])
    new = store.read(run_id, prefix=cell_prefix(1), interval_histograms=False, after=seen[-1]["sk"])
    assert [e["sk"] for e in new] == [e["sk"] for e in second[10:]]  # nothing of cell 0, nothing read before
    assert new[0]["data"]["interval"] == 9  # CellStarted + 10 events were read: intervals 0-8

    whole = store.read(run_id, after=first[-1]["sk"])
    assert [e["sk"] for e in whole] == [e["sk"] for e in second]
    assert store.read(run_id, after="00#run")[0]["sk"] == first[0]["sk"]


def test_interval_histograms_are_left_out_only_when_asked(store):
    run_id = new_run_id()
    store.append(run_events(run_id, intervals=3))
    for read in (lambda **kw: store.read(run_id, **kw), lambda **kw: store.read(run_id, prefix=cell_prefix(0), **kw)):
        full = [e for e in read() if e["type"] == "IntervalMeasured"]
        bare = [e for e in read(interval_histograms=False) if e["type"] == "IntervalMeasured"]
        assert [e["data"]["histograms"] for e in full] == [{"end_to_end_latency_us": f"h{i}"} for i in range(3)]
        assert [e["data"] for e in bare] == [{k: v for k, v in e["data"].items() if k != "histograms"} for e in full]


def test_a_whole_run_is_its_header_its_planned_cells_and_its_end(store):
    run_id = new_run_id()
    events = run_events(run_id, intervals=2)
    beyond = cell_events(run_id, 3, 1)  # a cell the run did not plan
    store.append(events + beyond)
    assert store.read(run_id) == events
    assert store.read(run_id, prefix=cell_prefix(3)) == beyond
    headless = cell_events(new_run_id(), 2, 3)  # no header to say how many cells: everything, in order
    store.append(headless[::-1])
    assert store.read(headless[0]["run_id"]) == headless


def test_digested_cells_are_read_without_their_intervals_and_every_other_cell_whole(store):
    events = synthetic_run(SPEC, intervals=3)
    run_id = events[0]["run_id"]
    ends = {e["data"]["cell_id"]: e for e in events if e["type"] == "CellCompleted"}
    assert len(ends) == 4 and all(has_digest(e["data"]) for e in ends.values())
    undigested, retried, *_ = sorted(ends)
    end = ends[undigested]
    events[events.index(end)] = {**end, "data": {k: v for k, v in end["data"].items() if k != "digest"}}
    start = next(e for e in events if e["type"] == "CellStarted" and e["data"]["cell_id"] == retried)
    again = make_event(run_id, "CellStarted", {**start["data"], "attempt": 1}, cell_index=start["data"]["cell"]["index"],
                       attempt=1)  # a second attempt that never ended: the end is the first's
    store.append(events + [again])

    whole = store.read(run_id, interval_histograms=False)
    read = read_report_events(store, run_id)
    assert {e["data"]["cell_id"] for e in read if e["type"] == "IntervalMeasured"} == {undigested, retried}
    assert read == [e for e in whole if e["type"] != "IntervalMeasured" or e["data"]["cell_id"] in (undigested, retried)]
    assert store.read(run_id, intervals=False) == store.read(run_id, intervals=False, interval_histograms=True)
    assert len(store.read(run_id, intervals=False)) < len(whole)


# -- listings and pages ----------------------------------------------------------------------------------------
def test_runs_are_listed_newest_first_by_suite_in_pages(store):
    suite, other = f"alpha-{secrets.token_hex(3)}", f"beta-{secrets.token_hex(3)}"
    ids = [new_run_id()[:-6] + f"{i:06x}" for i in range(5)]
    for i, run_id in enumerate(ids):  # requested a second apart, stored out of order
        store.append([requested(run_id, suite=suite if i != 2 else other, at=f"2031-01-0{i + 1}T00:00:00.000+00:00")])
    newest_first = [ids[4], ids[3], ids[1], ids[0]]
    assert [e["run_id"] for e in store.list_runs(suite=suite)] == newest_first
    assert [e["run_id"] for e in store.list_runs(suite=other)] == [ids[2]]
    listed = [e["run_id"] for e in store.list_runs(limit=1000)]
    assert [r for r in listed if r in ids] == [ids[4], ids[3], ids[2], ids[1], ids[0]]

    pages, start = [], None
    while True:
        page, start = store.runs_page(limit=3, suite=suite, start=start)
        pages.append([e["run_id"] for e in page])
        if start is None:
            break
        assert start == store.run_key(page[-1], suite)
    assert [r for p in pages for r in p] == newest_first and len(pages[0]) == 3
    since, _ = store.runs_page(limit=10, suite=suite, since="2031-01-02T00:00:00.000+00:00")
    assert [e["run_id"] for e in since] == [ids[4], ids[3], ids[1]]


def test_a_runs_events_are_read_in_pages_that_resume_after_the_last_key(store):
    run_id = new_run_id()
    events = run_events(run_id, intervals=8)
    store.append(events)
    got, after = [], None
    while True:
        page, after = store.events_page(run_id, limit=4, after=after)
        got += page
        assert len(page) <= 4
        if after is None:
            break
    assert [e["sk"] for e in got] == [e["sk"] for e in events]
    assert all("histograms" not in e["data"] for e in got if e["type"] == "IntervalMeasured")
    with_histograms, _ = store.events_page(run_id, limit=3, interval_histograms=True)
    assert with_histograms[2]["data"]["histograms"] == {"end_to_end_latency_us": "h0"}


# -- types -----------------------------------------------------------------------------------------------------
def test_every_event_type_reads_back_as_it_was_written(store):
    """Each of the 14 types goes through its type on the way in and out (eventdata) and comes back equal."""
    events = [*one_of_each(), failed(new_run_id()), trigger()]
    store.append(events)
    for event in events:
        (back,) = [e for e in store.read(event["run_id"], prefix=event["sk"]) if e["sk"] == event["sk"]]
        assert back == event


def _plant(store, event: dict) -> None:
    """Stores `event` as it is, past the checks of append: what a stored event of an earlier release, or one
    damaged in the table, is to a reader."""
    if isinstance(store, MemoryEventStore):
        store._items[(event["run_id"], event["sk"])] = json.dumps(event)
    else:
        store.client.put_item(TableName=store.table, Item=DynamoEventStore._item(event))


def test_a_stored_event_missing_a_field_fails_at_read_naming_the_event_and_the_field(store):
    run_id = new_run_id()
    store.append([requested(run_id)])
    end = completed(run_id, 0)
    end["data"]["totals"] = {k: v for k, v in TOTALS.items() if k != "lost"}
    _plant(store, end)
    with pytest.raises(InvalidEvent) as err:
        store.read(run_id)
    assert str(err.value) == (f"stored event {run_id}/10#c00000#2#end (CellCompleted, run {run_id}) does not "
                              "decode: data.totals: object missing required field `lost`")
