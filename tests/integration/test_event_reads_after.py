"""Reading only what is new: `read(run_id, after=sk)` on DynamoDB Local, across the run and inside a cell."""

from brokerbench.events import cell_prefix, make_event, new_run_id

COUNTERS = dict.fromkeys(["sent", "bytes_sent", "acked", "send_errors", "received", "bytes_received"], 1)


def cell(index):
    return {"cell_id": f"kafka.json.{index}", "index": index, "broker": "kafka", "format": "json", "mode": "batch",
            "size_basis": "record", "size_bytes": 1024, "rate": 10, "producers": 1, "consumers": 1, "partitions": 1,
            "repeat": 0, "client": {}}


def cell_events(run_id, index, intervals):
    c = cell(index)
    return ([make_event(run_id, "CellStarted", {"cell_id": c["cell_id"], "cell": c, "topic": "t", "attempt": 0},
                        cell_index=index)]
            + [make_event(run_id, "IntervalMeasured", {"cell_id": c["cell_id"], "attempt": 0, "interval": i,
                                                       "counters": COUNTERS, "histograms": {}},
                          cell_index=index, interval=i) for i in range(intervals)])


def test_after_returns_only_later_events_of_the_run_or_of_one_cell(store):
    run_id = new_run_id()
    header = make_event(run_id, "RunRequested", {"spec": {"name": "after"}, "cells": [cell(0), cell(1)],
                                                 "environment": {"host": {}, "code_version": "t", "python": "3"}})
    first, second = cell_events(run_id, 0, 30), cell_events(run_id, 1, 30)
    store.append([header, *second[:10], *first[:10]])

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
