"""The send schedule: a constant rate, a startup backlog and periodic bursts, checked against hand arithmetic."""

import numpy as np
import pytest

from brokerbench.reports import rows
from brokerbench.reports.markdown import startup_text
from brokerbench.spec import SpecError, scaled, validate
from brokerbench.worker import outcome
from brokerbench.worker.schedule import (ATTACH_LEAD_NS, attach_ns, burst_windows, cell_schedules, producer_schedule,
                                         share)

S = 1_000_000_000


def cell(**extra):
    return {"rate": 400, "producers": 1, **extra}


def test_a_constant_rate_is_base_plus_seq_times_period_as_before():
    for rate, producers in ((400, 1), (3, 1), (1000, 3), (7919, 2)):
        for p in range(producers):
            schedule = producer_schedule(cell(rate=rate, producers=producers), p, 10 * S)
            period = S / (rate / producers)
            base = 10 * S + int(S / rate * p)
            seqs = np.arange(0, 5000, 7)
            expected = [base + int(seq * period) for seq in seqs.tolist()]
            assert schedule.intended(seqs).tolist() == expected
            assert [schedule.at(seq) for seq in seqs.tolist()] == expected
            due = schedule.due_function()
            assert [due(seq) for seq in seqs.tolist()] == expected


def test_periodic_bursts_by_hand():
    # 400 msgs/s, and 100 more every second, due over the first 0.1 s: 500 messages per 1 s cycle.
    schedule = producer_schedule(cell(burst={"every_s": 1, "messages": 100, "over_s": 0.1}), 0, 0)
    assert schedule.per_cycle == 500 and schedule.cycle_ns == S
    due = schedule.intended(np.arange(1500))
    assert (np.diff(due) >= 0).all()  # never out of order
    for k in range(3):
        in_cycle = due[(due >= k * S) & (due < (k + 1) * S)]
        assert in_cycle.size == 500
        # 100 burst messages every 1 ms from the cycle's start, 400 baseline ones every 2.5 ms
        assert set((in_cycle - k * S).tolist()) == {j * 1_000_000 for j in range(100)} | {i * 2_500_000 for i in range(400)}
    backlog, burst, cycles = schedule.kinds(np.arange(1500))
    assert not backlog.any() and burst.sum() == 300 and np.bincount(cycles).tolist() == [500, 500, 500]
    assert (due[burst] % S < 100_000_000).all()  # every burst message is due within over_s of its cycle's start
    due_fn = schedule.due_function()
    assert [due_fn(seq) for seq in range(1500)] == due.tolist()


def test_a_startup_backlog_then_the_cells_rate():
    # 1,000 messages at 5,000 msgs/s (0.2 s), then 400 msgs/s.
    schedule = producer_schedule(cell(backlog={"messages": 1000, "rate": 5000}), 0, 3 * S)
    assert schedule.at(0) == 3 * S and schedule.at(999) == 3 * S + 999 * 200_000
    assert schedule.cycles_start == 3 * S + 200_000_000
    assert schedule.at(1000) == 3 * S + 200_000_000 and schedule.at(1001) == 3 * S + 200_000_000 + 2_500_000
    backlog, burst, cycles = schedule.kinds(np.array([0, 999, 1000, 1400]))
    assert backlog.tolist() == [True, True, False, False] and not burst.any() and cycles.tolist() == [-1, -1, 0, 400]
    assert attach_ns(cell(backlog={"messages": 1000, "rate": 5000}), 3 * S) == 3 * S + 200_000_000 + ATTACH_LEAD_NS


@pytest.mark.parametrize("extra", [{}, {"backlog": {"messages": 777, "rate": 3000}},
                                   {"burst": {"every_s": 2, "messages": 1001, "over_s": 0.3}}])
def test_first_due_at_is_the_first_message_due_then(extra):
    schedule = producer_schedule(cell(producers=2, **extra), 1, 5 * S)
    for t in np.linspace(4 * S, 12 * S, 301).astype(np.int64).tolist():
        first = schedule.first_due_at(t)
        assert schedule.at(first) >= t and (first == 0 or schedule.at(first - 1) < t)


def test_producers_split_the_backlog_and_the_bursts_between_them():
    shaped = cell(rate=600, producers=4, backlog={"messages": 1003, "rate": 4000},
                  burst={"every_s": 1, "messages": 10, "over_s": 0})
    schedules = cell_schedules(shaped, 0)
    assert sum(s.backlog for s in schedules) == 1003 and [share(10, 4, p) for p in range(4)] == [3, 3, 2, 2]
    assert [int(s.burst.sum()) for s in schedules] == [3, 3, 2, 2]
    assert all(s.per_cycle - int(s.burst.sum()) == 150 for s in schedules)  # 600 / 4 producers x 1 s


def test_burst_windows_are_the_bursts_wholly_measured():
    shaped = cell(burst={"every_s": 2, "messages": 100, "over_s": 0.5})
    # cycles start at 0, 2, 4, 6 s; measured from 1 s to 6.4 s: the bursts at 2 and 4 s (6 s runs past the end)
    windows = burst_windows(shaped, 0, 1 * S, int(6.4 * S))
    assert [w[0] for w in windows] == [1, 2]
    assert windows[0][1] == 2 * S and windows[0][2] == 2 * S + int(99 * 0.5 * S / 100)


def test_startup_and_burst_figures_by_hand():
    shaped = cell(backlog={"messages": 10, "rate": 100}, burst={"every_s": 1, "messages": 4, "over_s": 0})
    records = [{"first_delivery_ns": 5_030_000_000, "backlog_received": 6, "backlog_last_ns": 5_400_000_000,
                "bursts": {1: [4, 6_250_000_000], 2: [3, 7_100_000_000]}},
               {"first_delivery_ns": 5_010_000_000, "backlog_received": 4, "backlog_last_ns": 5_500_000_000,
                "bursts": {}}]
    startup = outcome.startup(shaped, 5 * S, 4 * S, records, {"broker_backlog": 10, "broker_messages": 10})
    assert startup["received"] == 10 and startup["attach_s"] == 1.0
    assert startup["first_delivery_s"] == pytest.approx(0.01) and startup["backlog_read_s"] == pytest.approx(0.5)
    assert startup["read_rate_msgs_per_s"] == pytest.approx(20.0)
    records[1]["backlog_received"] = 3  # one backlog message never came: no time to read the backlog
    assert outcome.startup(shaped, 5 * S, 4 * S, records, None)["backlog_read_s"] is None
    bursts = outcome.bursts(shaped, [(1, 6 * S, 6 * S), (2, 7 * S, 7 * S)], records)
    assert [row["delivered_in_ms"] for row in bursts["cycles"]] == [pytest.approx(250.0), None]  # the 2nd lost one
    assert [row["received"] for row in bursts["cycles"]] == [4, 3]


BASE = {"brokers": ["kafka"], "sizes": [256], "formats": ["json"], "rates": [400], "duration_s": 20}


def problems(doc):
    with pytest.raises(SpecError) as caught:
        validate(doc)
    return {p.path: p.message for p in caught.value.problems}


def test_shapes_validate_and_name_what_is_wrong():
    spec = validate({**BASE, "burst": {"every_s": 10, "messages": 38000, "over_s": 0.175},
                     "backlog": {"messages": 1000, "rate": 6000}})
    assert spec["burst"]["over_s"] == 0.175
    cells = __import__("brokerbench.spec", fromlist=["expand"]).expand(spec)
    assert cells[0]["burst"] == spec["burst"] and cells[0]["backlog"] == {"messages": 1000, "rate": 6000}
    assert validate({**BASE, "burst": {"every_s": 1, "messages": 5}})["burst"]["over_s"] == 0
    found = problems({**BASE, "rates": ["max"], "burst": {"every_s": 1, "messages": 5}})
    assert "rates[0]" in found and "burst" in found["rates[0]"]
    found = problems({**BASE, "messages": 100, "backlog": {"messages": 10, "rate": 100}})
    assert "messages" in found
    found = problems({**BASE, "rates": [401], "producers": 2, "burst": {"every_s": 1, "messages": 5}})
    assert "whole number" in found["burst.every_s"]
    found = problems({**BASE, "consumers": 0, "backlog": {"messages": 10, "rate": 100}})
    assert "consumers" in found["backlog"]
    found = problems({**BASE, "burst": {"every_s": 1, "messages": 5, "over_s": 2}})
    assert "longer than the period" in found["burst.over_s"]
    found = problems({**BASE, "backlog": {"messages": 0, "rate": 100, "extra": 1}})
    assert any(path.startswith("backlog") for path in found)


def test_scaling_keeps_two_bursts_and_shortens_the_backlog():
    request = {**BASE, "duration_s": 600, "burst": {"every_s": 10, "messages": 38000, "over_s": 0.175},
               "backlog": {"messages": 1_800_000, "rate": 6000}}
    small = scaled(request, 0.01)
    assert small["duration_s"] == 20.175 and small["backlog"] == {"messages": 18000, "rate": 6000}
    assert small["burst"] == request["burst"] and request["backlog"]["messages"] == 1_800_000
    assert "backlog.messages 1800000 -> 18000" in small["notes"][-1]


def test_a_startup_report_says_when_the_consumers_attached_after_a_late_count():
    shaped = cell(backlog={"messages": 10, "rate": 100})
    records = [{"first_delivery_ns": 5_300_000_000, "backlog_received": 10, "backlog_last_ns": 5_500_000_000,
                "bursts": {}}]
    on_time = {"broker_backlog": 10, "broker_messages": 10, "counted_s": 0.9}
    text = startup_text(rows.startup(outcome.startup(shaped, 5 * S, 4 * S, records, on_time)))
    assert "attached 1.000 s after the first send, when the broker held 10 msgs (10 unread" in text
    late = {**on_time, "counted_s": 1.25}  # counted 0.25 s after the consumers were due: they attached after it
    text = startup_text(rows.startup(outcome.startup(shaped, 5 * S, 4 * S, records, late)))
    assert "attached 1.250 s after the first send (due at 1.000 s; they wait for the broker's count" in text
    assert "first message 0.300 s after they were due" in text
