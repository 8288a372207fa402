"""Startup backlogs and periodic bursts against real Kafka and Redis, on both send loops.

Each figure is checked against something the code that computed it does not decide: the schedule by hand,
the messages' own headers read back from the broker, and the broker's own count of the topic and of the
group's backlog.
"""

import time

import numpy as np
import pytest

from brokerbench.events import new_run_id
from brokerbench.registry import get_driver
from brokerbench.reports.results import build_results
from brokerbench.worker.framing import unpack_many
from brokerbench.worker.schedule import ATTACH_LEAD_NS, COUNT_BEFORE_ATTACH_NS, producer_schedule
from inline_run import execute_run

from steady import assert_never_ahead
from test_send_loop import CLIENT, drain, kafka_messages

S = 1_000_000_000


def test_the_native_loop_sends_on_the_shaped_schedule(endpoints):
    """Every message's intended time in its header is the Python schedule's, to the nanosecond."""
    driver = get_driver("kafka", endpoints["kafka"], CLIENT)
    topic = f"shaped-{new_run_id()}"
    driver.create_topic(topic, 2)
    try:
        shaped = {"rate": 2000, "producers": 2, "backlog": {"messages": 301, "rate": 20000},
                  "burst": {"every_s": 0.1, "messages": 41, "over_s": 0.02}}
        schedule = producer_schedule(shaped, 1, time.monotonic_ns() + 2_000_000)
        sender = driver.native_sender(topic, 2, "batch")
        sender.configure([b"x" * 50], None, 1, **schedule.native_args())
        started, handed, acked_seq, _, failed = drain(sender, 0, 700)
        sender.close()
        assert failed == 0 and sorted(acked_seq.tolist()) == list(range(700))
        due = schedule.intended(np.arange(700))
        assert (started >= due).all()  # never early
        headers = unpack_many([m.key() for m in kafka_messages(endpoints["kafka"]["bootstrap_servers"], topic, 2, 700)])
        assert sorted(headers["seq"].tolist()) == list(range(700))
        order = np.argsort(headers["seq"])
        assert headers["intended_ns"][order].astype(np.int64).tolist() == due.tolist()
        # by hand: producer 1's 150 of the 301 backlog messages at 10,000 msgs/s, then cycles of 0.1 s from 15 ms on,
        # each with 100 baseline messages (1,000 msgs/s) and 20 of the 41 burst messages (producer 0 takes 21)
        assert schedule.backlog == 150 and due[149] - due[0] == 149 * 100_000 and due[150] - due[0] == 15_000_000
        assert schedule.per_cycle == 100 + 20 and due[150 + 120] - due[150] == 100_000_000
    finally:
        driver.delete_topic(topic, 2)


@pytest.mark.parametrize("loop", ["native", "python"])
def test_a_startup_backlog_is_read_from_the_broker(loop, endpoints, store, monkeypatch):
    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", loop)
    rate, backlog, backlog_rate, duration = 400, 12000, 6000, 3
    spec = {"name": f"backlog-{loop}", "brokers": ["kafka", "redis-streams"], "sizes": [190], "size_basis": "record",
            "rates": [rate], "formats": ["json"], "duration_s": duration, "warmup_s": 0, "partitions": 4,
            "backlog": {"messages": backlog, "rate": backlog_rate}}
    outcome = execute_run(spec, endpoints, store)
    cells = build_results(store.read(outcome.run_id))["cells"]
    lead_s = ATTACH_LEAD_NS / S
    for cell in cells:
        assert cell["status"] == "completed", cell.get("reason")
        assert cell["verdict"] == "inconclusive"  # no constant rate to judge
        # by hand: the backlog, the 0.2 s before attaching and duration_s at 400 msgs/s
        sent = backlog + round(rate * (lead_s + duration))
        # (a loop late at the end stops on time: the baseline's last messages due may not be sent, how many is a
        # timing of the host, tests/steady.py; the backlog comes first and is sent whole, see below)
        startup = cell["startup"]
        accounting = {k: cell.get(k) for k in ("broker", "sent", "received", "lost", "late", "undelivered",
                                               "broker_count", "startup")}
        assert backlog < cell["sent"] <= sent + 1, accounting
        assert cell["received"] == cell["sent"] and cell["lost"] == 0, accounting
        assert cell["broker_count"]["difference"] == 0, accounting
        assert startup["messages"] == startup["received"] == backlog, accounting
        assert startup["attach_s"] == pytest.approx(backlog / backlog_rate + lead_s, abs=1e-6), accounting
        at = startup["at_attach"]
        # The broker's own count before the consumers attach: they wait for it, so nothing is read yet whenever it
        # is taken: the group's unread backlog (asked after the topic's count) is every message in the topic, and
        # the first delivery comes after the count.
        assert at["counted_s"] >= startup["attach_s"] - COUNT_BEFORE_ATTACH_NS / S, accounting
        assert at["broker_messages"] <= at["broker_backlog"] <= cell["sent"], accounting  # nothing read
        assert startup["first_delivery_s"] >= at["counted_s"] - startup["attach_s"], accounting
        # What had reached the broker then: the whole backlog on an idle host, less when a loaded one sent it late
        # (a timing of the host, tests/steady.py's at least half; the backlog is still sent and read whole, above).
        assert backlog / 2 <= at["broker_messages"] <= cell["sent"], accounting
        # (how long the backlog takes to read is a timing of the host: the read rate is checked by hand)
        assert 0 <= startup["first_delivery_s"] <= startup["backlog_read_s"], accounting
        assert startup["read_rate_msgs_per_s"] == pytest.approx(backlog / startup["backlog_read_s"]), accounting
        # the first backlog message waited at the broker for the whole backlog phase and the lead (the max is a lower
        # bound where a producer behind at the end left messages unsent)
        e2e = cell["end_to_end_latency_us"]
        longest = e2e["max"] if e2e["max"] is not None else e2e["lower_bounds"]["max"]
        assert longest >= (backlog / backlog_rate + lead_s) * 1e6 * 0.95, e2e


@pytest.mark.parametrize("loop", ["native", "python"])
def test_periodic_bursts_are_sent_and_delivered_by_the_schedule(loop, endpoints, store, monkeypatch):
    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", loop)
    rate, every, burst, over = 300, 1, 2001, 0.1
    spec = {"name": f"burst-{loop}", "brokers": ["kafka", "redis-streams"], "sizes": [190], "size_basis": "record",
            "rates": [rate], "formats": ["json"], "duration_s": 3, "warmup_s": 0.5, "producers": 2, "partitions": 2,
            "burst": {"every_s": every, "messages": burst, "over_s": over}}
    outcome = execute_run(spec, endpoints, store)
    events = store.read(outcome.run_id)
    cells = build_results(events)["cells"]
    for cell in cells:
        assert cell["status"] == "completed", cell.get("reason")
        # by hand: measured from 0.5 s to 3.5 s: 3 s of baseline and the bursts due at 1, 2 and 3 s
        # A loop that is late when the measured time ends stops on time: the baseline messages due in its
        # last few ms are not sent (a shortfall it reports as a lower rate; how many is a timing of the host,
        # tests/steady.py). The bursts are sent whole (each cycle's count below); nothing is sent beyond the schedule.
        shortfall = 3 * rate + 3 * burst - cell["sent"]
        assert 0 <= shortfall < 3 * rate, cell["sent"]
        assert cell["received"] == cell["sent"] and cell["lost"] == 0
        assert cell["broker_count"]["difference"] == 0  # 4 bursts (0 s too) and 3.5 s of baseline in the topic
        assert cell["broker_count"]["observed"] == round(3.5 * rate) + 4 * burst + 2 - shortfall
        bursts = cell["bursts"]
        assert [row["cycle"] for row in bursts["cycles"]] == [1, 2, 3] and bursts["delivered"] == 3
        for row in bursts["cycles"]:
            assert row["received"] == burst
            assert row["delivered_in_ms"] >= row["due_s"] * 1000  # its last message cannot arrive before it is due
        # each second's sent count: the baseline, plus a whole burst in the seconds that hold one
        sent = sorted((e["data"]["interval"], e["data"]["counters"]["sent"]) for e in events
                      if e["type"] == "IntervalMeasured" and e["data"]["cell_id"] == cell["cell_id"])
        # intervals 0-2 span 0.5-3.5 s: one burst each, never sent ahead of it (a late loop moves some messages
        # to the next second)
        assert sum(n for _, n in sent) == cell["sent"]
        assert_never_ahead([{"counters": {"sent": n}} for _, n in sent], rate + burst, spec["producers"])
