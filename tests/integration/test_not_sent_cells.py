"""A producer stopped for its cell's last second leaves what was due unsent: counted, judged and bounded.

One real Redis cell, one producer at RATE msgs/s for DURATION_S measured seconds. When the cell reports that about
STOP_S of its schedule is left, the producer process (bb-producer-0, found under this process in /proc) is stopped
with SIGSTOP, and let go (SIGCONT) only after the cell's end. It wakes past the end and stops on time, as a producer
behind schedule does, so the messages due from the stop to the end are never sent. By hand:

- not sent = RATE × the schedule left at the stop (the progress fraction says how much: (1 − f) × DURATION_S);
- due = sent + not sent, and the accounting leaves no residual;
- the verdict is unsustainable, for that reason (a third of the cell is far beyond the 1% tolerance);
- each unsent message's least latency is the cell's end less its intended time: the stored bounds span 0 to the
  stopped time; end-to-end p99 (and publish-delay p99) is then only a lower bound, and at least the stopped time
  less the top 1% of the due messages' span: (1 − f) × DURATION_S − 1% × DURATION_S.

Both send loops stop the same way; each is measured (the native loop where it is built).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from brokerbench import histogram
from brokerbench.figures import NOT_SENT_BOUNDS
from brokerbench.reports.results import build_results
from fault_tools import workers_below
from inline_run import RunHooks, execute_run

RATE = 400
DURATION_S = 3
STOP_S = 1.0
RESUME_AFTER_END_S = 0.5  # the producer is let go this long after the cell's end: it wakes past it


class StopProducer(RunHooks):
    """Stops the cell's producer when STOP_S of the measured schedule is left, and lets it go after the end."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.fraction: float | None = None  # of the measured schedule gone when the producer was stopped
        self.resumed = threading.Event()

    def cell_progress(self, progress) -> None:
        if progress.phase != "measuring" or self.fraction is not None:
            return
        if self.pid is None:
            found = [pid for pid, name in workers_below(os.getpid()).items() if name == "bb-producer-0"]
            assert len(found) == 1, found
            self.pid = found[0]
        if progress.fraction >= 1 - STOP_S / DURATION_S:
            os.kill(self.pid, signal.SIGSTOP)
            self.fraction = progress.fraction
            left_s = (1 - progress.fraction) * DURATION_S
            threading.Timer(left_s + RESUME_AFTER_END_S, self.resume).start()

    def resume(self) -> None:
        if self.pid is not None and not self.resumed.is_set():
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.resumed.set()


@pytest.mark.parametrize("loop", ["native", "python"])
def test_a_producer_stopped_for_the_last_second_leaves_due_messages_counted_and_bounded(endpoints, store, monkeypatch,
                                                                                       loop):
    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", loop)  # the producers take the worker's environment as they start
    spec = {"name": f"it-not-sent-{loop}", "brokers": ["redis-streams"], "sizes": [256], "formats": ["raw"],
            "rates": [RATE], "modes": ["batch"], "duration_s": DURATION_S, "warmup_s": 1,
            "warmup_until_steady": False, "drain_timeout_s": 5}
    hooks = StopProducer()
    try:
        outcome = execute_run(spec, endpoints, store, hooks=hooks)
    finally:
        hooks.resume()
    assert hooks.fraction is not None, "the producer was never stopped"
    events = store.read(outcome.run_id, interval_histograms=False)
    (cell,) = build_results(events)["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    assert cell["send_loop"] == loop
    stopped_s = (1 - hooks.fraction) * DURATION_S  # of the schedule left when the producer stopped
    seen = {k: cell.get(k) for k in ("due", "sent", "not_sent", "received", "residual", "verdict", "verdict_reasons")}
    seen["stopped_s"] = stopped_s

    expected = RATE * stopped_s
    assert cell["not_sent"] > 0 and abs(cell["not_sent"] - expected) <= 0.05 * expected + 5, seen
    assert cell["due"] == cell["sent"] + cell["not_sent"] and cell["residual"] == 0, seen
    assert abs(cell["due"] - RATE * DURATION_S) <= 2, seen  # the schedule's own count: one per 1/RATE s
    assert cell["verdict"] == "unsustainable", seen
    assert any("never sent" in reason for reason in cell["verdict_reasons"]), seen

    # The stored bounds: the end less each unsent message's intended time, from 0 up to the stopped time.
    (completed,) = [e["data"] for e in events if e["type"] == "CellCompleted"]
    bounds = histogram.summary(histogram.decode(completed["histograms"][NOT_SENT_BOUNDS]))
    assert bounds["count"] == cell["not_sent"], (bounds, seen)
    assert 0.95 * stopped_s * 1e6 - 5_000 <= bounds["max"] <= 1.01 * stopped_s * 1e6 + 5_000, (bounds, seen)
    assert bounds["p50"] == pytest.approx(stopped_s / 2 * 1e6, rel=0.1), (bounds, seen)  # spread evenly

    least_p99_us = (stopped_s - 0.01 * DURATION_S) * 1e6 * 0.95  # HDR's 3 digits and a late stop aside
    for field in ("end_to_end_latency_us", "publish_delay_us"):
        figures = cell[field]
        assert figures["p99"] is None and figures["not_sent"] == cell["not_sent"], (field, figures, seen)
        assert figures["lower_bounds"]["p99"] >= least_p99_us, (field, figures, seen)
    assert cell["end_to_end_latency_us"]["p50"] is not None, cell["end_to_end_latency_us"]  # below the unsent
