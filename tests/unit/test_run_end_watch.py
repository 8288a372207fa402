"""A cell watches its run's end (brokerbench/worker/run_end.py), on the in-memory event store: writes pass while the
run goes on, and once the run's end is stored the cell is told to stop and nothing more is written."""

import threading

from brokerbench.events import make_event
from brokerbench.events.memory import MemoryEventStore
from brokerbench.events.run import run_completed_event
from brokerbench.worker.run_end import RunEndWatch

RUN = "20261126T230000Z-abc123"


def interval(number: int) -> dict:
    """An event a cell writes (a cell's end stands in for its intervals: any write goes the same way)."""
    return make_event(RUN, "CellFailed", {"cell_id": f"c{number}", "reason": "boom"}, cell_index=number)


def test_writes_pass_until_the_run_has_ended_then_none_is_written():
    store = MemoryEventStore()
    watch = RunEndWatch(store, RUN)
    assert watch.append([interval(0)]).written == 1 and not watch.ended.is_set()
    store.append([run_completed_event(RUN, "cancelled", 0, 0, "cancelled by request")])
    assert watch.append([interval(1), interval(2)]).written == 0
    assert watch.ended.is_set() and watch.dropped == 2
    assert [e["type"] for e in store.read(RUN)] == ["CellFailed", "RunCompleted"]
    assert watch.read(RUN, prefix="90#") == store.read(RUN, prefix="90#")  # reads pass through


def test_a_failed_run_ends_the_watch_too():
    store = MemoryEventStore([make_event(RUN, "RunFailed", {"reason": "States.TaskFailed: the Map failed"})])
    assert RunEndWatch(store, RUN).check()


def test_the_watching_thread_sees_the_end_without_any_write():
    store = MemoryEventStore()
    with RunEndWatch(store, RUN, interval_s=0.05) as watch:
        assert not watch.ended.wait(0.2)  # no end stored: the cell goes on
        store.append([run_completed_event(RUN, "cancelled", 0, 0, "cancelled by request")])
        assert watch.ended.wait(10)  # seen by the watching thread itself (bound for a busy machine, not a timing)


def test_a_store_that_does_not_answer_is_not_an_end():
    class Down(MemoryEventStore):
        def read(self, *args, **kwargs):
            raise ConnectionError("the event store did not answer")

    watch = RunEndWatch(Down(), RUN)
    assert not watch.check() and not watch.ended.is_set()


def test_another_runs_end_does_not_stop_this_cell():
    other = "20261126T230000Z-def456"
    store = MemoryEventStore([run_completed_event(other, "cancelled", 0, 0, "cancelled by request")])
    watch = RunEndWatch(store, RUN)
    assert watch.append([interval(0)]).written == 1 and not watch.check()
    assert isinstance(watch.ended, threading.Event)
