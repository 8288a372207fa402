"""The producer's own accounting, from the send loop's raw reports: measured messages only, warm-up apart."""

import queue

import numpy as np

from brokerbench.worker.producer import AckedSeqs, AckTotals, _report_intervals, never_acknowledged

WARM, END = 10, 20  # messages 0-9 are the warm-up's, 10-19 are measured


class Pipe:
    def __init__(self) -> None:
        self.sent = []

    def send(self, message) -> None:
        self.sent.append(message)


def ints(*values) -> bytes:
    return np.array(values, dtype=np.int64).tobytes()


def report(acked_in_warmup, failed_in_warmup, acked_later, failed_later):
    """Two intervals as the native loop hands them over: the warm-up (-1) and the first measured one (0)."""
    reports, pipe, totals = queue.Queue(), Pipe(), AckTotals()
    acked, failed = AckedSeqs(), AckedSeqs()
    sent_at = list(range(1_000, 1_000 + END))
    reports.put((-1, 0, ints(*sent_at[:WARM]), ints(*sent_at[:WARM]), ints(*acked_in_warmup),
                 ints(*(5_000 for _ in acked_in_warmup)), ints(*failed_in_warmup), WARM))
    reports.put((0, WARM, ints(*sent_at[WARM:]), ints(*sent_at[WARM:]), ints(*acked_later),
                 ints(*(6_000 for _ in acked_later)), ints(*failed_later), WARM))
    reports.put(None)
    _report_intervals(reports, pipe, np.full(8, 100, dtype=np.int64), 8, None, totals, acked, failed)
    [(_, interval, figures)] = pipe.sent
    return interval, figures["counters"], totals, acked, failed


def test_warm_up_failures_reported_in_a_measured_interval_are_not_send_errors():
    # Warm-up message 9 fails, and warm-up 6-8 are acknowledged, only once measurement has started.
    interval, counters, totals, acked, failed = report(range(6), [], [6, 7, 8, *range(10, 18)], [9, 18])
    assert interval == 0
    assert counters["sent"] == 10 and counters["acked"] == 8  # measured messages only
    assert counters["send_errors"] == 1  # message 18; not warm-up message 9
    assert totals.failed_total == 2 and totals.acked_total == 6 + 3 + 8  # the whole cell's, for the broker's count
    missing, unacked = never_acknowledged(acked, failed, WARM, END)
    assert missing.tolist() == [18, 19] and unacked == 1  # 19 had no report at all; 18 failed
    assert counters["sent"] == counters["acked"] + counters["send_errors"] + unacked


def test_warm_up_messages_never_answered_are_not_unacknowledged():
    _, counters, _, acked, failed = report(range(3), [], range(10, 20), [])
    missing, unacked = never_acknowledged(acked, failed, WARM, END)
    assert missing.size == 0 and unacked == 0  # warm-up 3-9 never answered: not measured
    assert counters["send_errors"] == 0 and counters["acked"] == 10
