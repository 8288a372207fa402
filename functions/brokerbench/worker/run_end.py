"""A cell stops when its run has ended, and writes nothing after the run's end event.

In AWS a cancel (the API's POST /runs/{id}/cancel) stops the Step Functions execution and writes the run's end
(RunCompleted, cancelled) at once; a Lambda invocation in flight is not stopped by StopExecution, and a cell on
Lambda would go on measuring, for up to 15 minutes, against brokers the cancel is deleting. A RunFailed written
while cells still run (a failed Map) is the same. So each cell watches its run's end in the store: `RunEndWatch`
reads the run's end key (one query on the run's partition) before each of the cell's writes, and from a daemon
thread whenever a measured interval (1 s) has passed without a check. Once the run has ended it sets `ended`
(one of run_cell's `stop` events: the cell stops as on Ctrl-C, its processes stopped, its topic deleted) and drops
every later write, its end event included: what it measured before the run's end stays stored, and the report shows
the cell `incomplete` (no end event, the run was stopped). A write that passed its check a few milliseconds before
the end was written can still land after it; the check runs just before each write to keep that window that short.
bench/run_end_check.py times a check beside the interval write it guards.
"""

from __future__ import annotations

import logging
import threading
import time

from ..events import RUN_EVENTS, AppendResult, EventStore, sort_key

CHECK_INTERVAL_S = 1.0  # a cell's measured interval: the end is seen within about one
RUN_END_KEY = sort_key(RUN_EVENTS[0])  # RunCompleted and RunFailed share the run's one end slot
log = logging.getLogger(__name__)


class RunEndWatch:
    """The event store as a cell sees it while it watches its run's end (a context manager: the watching thread)."""

    def __init__(self, store: EventStore, run_id: str, interval_s: float = CHECK_INTERVAL_S) -> None:
        self.store, self.run_id, self.interval_s = store, run_id, interval_s
        self.ended = threading.Event()
        self.dropped = 0  # events not written because the run had ended
        self._done = threading.Event()
        self._checked = time.monotonic()
        self._thread = threading.Thread(target=self._watch, name=f"run-end-{run_id}", daemon=True)

    def check(self) -> bool:
        """Has the run ended? (once True, always True; a store that does not answer counts as not ended)"""
        if self.ended.is_set():
            return True
        self._checked = time.monotonic()
        try:
            end = [e for e in self.store.read(self.run_id, prefix=RUN_END_KEY, interval_histograms=False)
                   if e["type"] in RUN_EVENTS]
        except Exception as exc:  # noqa: BLE001 — the next check tries again; the cell's own writes will say
            log.warning("run end not checked: %s: %s", type(exc).__name__, exc)
            return False
        if end:
            status = "failed" if end[0]["type"] == "RunFailed" else end[0]["data"].get("status")
            log.warning("run %s ended (%s) while a cell ran: the cell stops", self.run_id, status)
            self.ended.set()
        return self.ended.is_set()

    def _watch(self) -> None:
        """A check whenever none was made for an interval (a cell writing once a second is checked by its writes)."""
        while not self._done.wait(max(0.0, self._checked + self.interval_s - time.monotonic())):
            if time.monotonic() - self._checked >= self.interval_s and self.check():
                return

    def __enter__(self) -> RunEndWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join(timeout=self.interval_s + 30)

    # The store's interface: reads pass through; a write is made only while the run has not ended.
    def append(self, events: list[dict]) -> AppendResult:
        if self.check():
            self.dropped += len(events)
            return AppendResult()
        return self.store.append(events)

    def read(self, run_id: str, prefix: str | None = None, interval_histograms: bool = True,
             after: str | None = None) -> list[dict]:
        return self.store.read(run_id, prefix=prefix, interval_histograms=interval_histograms, after=after)

    def list_runs(self, limit: int = 50) -> list[dict]:
        return self.store.list_runs(limit)
