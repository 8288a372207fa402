"""The DynamoDB event store (DynamoDB Local): ordered reads, idempotent appends, run listing."""

from brokerbench.events import make_event, new_run_id

COUNTERS = dict.fromkeys(["sent", "bytes_sent", "acked", "send_errors", "received", "bytes_received"], 1)


def run_events(run_id, intervals=40, suite="quick"):
    cell = {"cell_id": "kafka.json", "index": 0, "broker": "kafka", "format": "json", "mode": "batch",
            "size_basis": "record", "size_bytes": 1024, "rate": 10, "producers": 1, "consumers": 1,
            "partitions": 1, "repeat": 0, "client": {}}
    events = [make_event(run_id, "RunRequested", {"spec": {"name": suite}, "suite": suite, "cells": [cell],
                                                  "environment": {"host": {}, "code_version": "t", "python": "3"}})]
    events.append(make_event(run_id, "CellStarted", {"cell_id": "kafka.json", "cell": cell, "topic": "t", "attempt": 0},
                             cell_index=0))
    events += [make_event(run_id, "IntervalMeasured", {"cell_id": "kafka.json", "attempt": 0, "interval": i, "counters": COUNTERS,
                                                       "histograms": {}}, cell_index=0, interval=i)
               for i in range(intervals)]
    events.append(make_event(run_id, "RunCompleted", {"status": "completed", "cells_completed": 1, "cells_failed": 0}))
    return events


def test_append_then_read_in_order(store):
    run_id = new_run_id()
    events = run_events(run_id)
    result = store.append(list(reversed(events)))  # written out of order, more than one transaction
    assert (result.written, result.skipped) == (len(events), 0)
    stored = store.read(run_id)
    assert [e["event_id"] for e in stored] == [e["event_id"] for e in events]
    assert stored[5]["data"] == events[5]["data"]


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
    assert len(store.read(run_id)) == len(events)


def test_a_cell_cannot_both_complete_and_fail(store):
    run_id = new_run_id()
    store.append([make_event(run_id, "CellFailed", {"cell_id": "c", "reason": "broker down"}, cell_index=0)])
    result = store.append([make_event(run_id, "CellCompleted", {
        "cell_id": "c", "attempt": 0, "measured_s": 1, "encoded_bytes": 1, "intervals": 0, "histograms": {},
        "totals": dict.fromkeys(["sent", "received", "lost", "duplicated", "out_of_order", "send_errors", "unacked",
                                 "bytes_sent", "bytes_received"], 0)}, cell_index=0)])
    assert result.skipped == 1
    assert [e["type"] for e in store.read(run_id)] == ["CellFailed"]


def test_runs_are_listed_newest_first_and_by_suite(store):
    first, second = new_run_id(), new_run_id()
    store.append(run_events(first, 1, suite="alpha"))
    store.append(run_events(second, 1, suite="beta"))
    listed = [e["run_id"] for e in store.list_runs()]
    assert listed.index(second) < listed.index(first) or second < first
    assert [e["run_id"] for e in store.list_runs(suite="alpha")] == [first]
