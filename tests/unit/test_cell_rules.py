"""The cell's pure rules: message accounting, the delivery window, the failure rule, the drain, interval merging."""

import json

import numpy as np
import pytest
from jsonschema import Draft202012Validator

from brokerbench import events, histogram
from brokerbench.worker import outcome
from brokerbench.worker.drain import LATE_WINDOW_S, Drain
from brokerbench.worker.intervals import IntervalAggregator

SECOND = 1_000_000_000


def producer(sent, unacked=0, acked_total=None, failed_total=0, last_ack=None, delivered=0):
    return {"sent": sent, "unacked": unacked, "acked_total": sent if acked_total is None else acked_total,
            "failed_total": failed_total, "last_ack_ns": last_ack, "delivered": delivered,
            "bytes_delivered": delivered * 100}


def consumer(received, late=0, last=None, duplicated=0, delivered=None):
    delivered = received if delivered is None else delivered
    return {"received": received, "late": late, "last_delivery_ns": last, "duplicated": duplicated,
            "out_of_order": 0, "delivered": delivered, "bytes_delivered": delivered * 100}


MEASURED = {"acked": 0, "send_errors": 0, "bytes_sent": 0, "bytes_received": 0}


def test_every_measured_message_is_in_exactly_one_class():
    counts = outcome.totals([producer(600, unacked=20), producer(400)],
                            [consumer(900, late=30)], {**MEASURED, "acked": 970, "send_errors": 10}, consumed=True,
                            queued=0)
    classes = counts["received"] + counts["late"] + counts["lost"] + counts["send_errors"] + counts["unacked"]
    assert counts["sent"] == 1000 == classes
    assert counts["lost"] == 40  # 1000 - 10 errors - 20 unacknowledged - 900 in time - 30 late
    assert outcome.has_loss(counts)


def test_a_delivery_without_its_acknowledgement_is_not_negative_loss():
    counts = outcome.totals([producer(10, unacked=3)], [consumer(10)], {**MEASURED, "acked": 7}, consumed=True,
                            queued=0)
    assert counts["lost"] == 0


def test_a_message_delivered_without_its_acknowledgement_is_counted_once_as_delivered():
    # 1,000 sent; 700 acknowledged, 280 never answered, 20 reported failed; the consumers got 960, 275 of them
    # among the 300 never acknowledged (a broker that stored them and died before answering).
    got = {**consumer(960), "delivered_not_acked": 275}
    counts = outcome.totals([producer(1000, unacked=280)], [got], {**MEASURED, "acked": 700, "send_errors": 20},
                            consumed=True, queued=0)
    assert (counts["unacked"], counts["send_errors"]) == (5, 20)  # they leave the unacknowledged class first
    classes = counts["received"] + counts["late"] + counts["undelivered"] + counts["lost"] + counts["send_errors"] \
        + counts["unacked"]
    assert counts["sent"] == 1000 == classes and counts["lost"] == 15  # 1000 - 20 - 5 - 960
    # more of them delivered than were unanswered: the rest came from the failed sends
    # (10 sent: 2 acknowledged, 3 unanswered, 5 failed; 8 delivered: the 2 and 6 of the other 8)
    got = {**consumer(8), "delivered_not_acked": 6}
    counts = outcome.totals([producer(10, unacked=3)], [got], {**MEASURED, "acked": 2, "send_errors": 5}, consumed=True,
                            queued=0)
    assert (counts["unacked"], counts["send_errors"], counts["lost"]) == (0, 2, 0)
    assert counts["received"] + counts["send_errors"] + counts["unacked"] + counts["lost"] == 10


def test_publish_only_cells_have_no_delivery_classes():
    counts = outcome.totals([producer(10)], [], {**MEASURED, "acked": 10}, consumed=False)
    assert counts["received"] is counts["lost"] is counts["late"] is None
    assert not outcome.has_loss(counts)


def test_throughput_is_the_measured_messages_at_the_rate_they_came():
    # 150 measured messages received (the interval counters): one with each consumer's first poll, the first of
    # them at 5 s, the last delivered at 12 s: 148 after their first polls in 7 s, and the two first ones counted
    # over the same share of time (the window reaches back 2 x 7 / 148 s before 5 s).
    consumers = [{**consumer(100, last=10 * SECOND, delivered=150), "first_intended_ns": 4.5 * SECOND,
                  "first_delivery_ns": 5 * SECOND, "first_poll_measured": 1},
                 {**consumer(50, last=12 * SECOND), "first_intended_ns": 5 * SECOND,
                  "first_delivery_ns": 5.5 * SECOND, "first_poll_measured": 1}, consumer(0)]
    measured = {**MEASURED, "received": 150, "bytes_received": 15_000}
    figures = outcome.delivery([producer(150)], consumers, True, 4 * SECOND, measured)
    assert (figures["delivered"], figures["bytes_delivered"]) == (150, 15_000)
    assert 150 / figures["window_s"] == pytest.approx(148 / 7)
    assert figures["window_start_ns"] == pytest.approx(5 * SECOND - 2 * 7 * SECOND / 148, abs=1)
    # Never before the earliest intended send: 500 msgs/s delivered 0.1 ms after they were due reach back 2 ms from
    # the first delivery at 4.0001 s, which would start before the first message was due at 4 s.
    steady = [{**consumer(500, last=int(4.9981 * SECOND)), "first_intended_ns": 4 * SECOND,
               "first_delivery_ns": int(4.0001 * SECOND), "first_poll_measured": 1}]
    figures = outcome.delivery([producer(500)], steady, True, 4 * SECOND, {**MEASURED, "received": 500})
    assert figures["window_start_ns"] == 4 * SECOND  # 500 in 0.9981 s: within one gap of 500 msgs/s
    assert 500 / figures["window_s"] == pytest.approx(500, rel=2e-3)
    assert outcome.delivery([producer(1)], [consumer(0)], True, 0, {**MEASURED, "received": 0})["window_s"] is None


def test_a_consumer_that_stalls_with_messages_waiting_is_counted_until_the_drain_gave_up():
    # The Pulsar cell that read 21.5k msgs/s: 491,329 sent from 4 s on, 7,296 delivered between 5 s and 5.34 s, then
    # nothing; the drain gave up at 40 s with 471,572 still queued at the broker for the consumer (its backlog).
    stalled = [{**consumer(7296, last=int(5.34 * SECOND)), "first_intended_ns": 4 * SECOND,
                "first_delivery_ns": 5 * SECOND, "first_poll_measured": 1}]
    counts = outcome.totals([producer(491_329)], stalled, {**MEASURED, "acked": 491_329}, consumed=True,
                            queued=471_572)
    assert counts["undelivered"] == 471_572 and outcome.waiting(counts)
    measured = {**MEASURED, "received": 7296}
    by_last = outcome.delivery([producer(491_329)], stalled, True, 4 * SECOND, measured)
    assert by_last["window_end"] == "last_delivery" and 7296 / by_last["window_s"] > 20_000  # the rate it never kept
    figures = outcome.delivery([producer(491_329)], stalled, True, 4 * SECOND, measured, 40 * SECOND)
    assert figures["window_end"] == "drain_end"
    # from the first delivery (reaching back one gap of the 0.34 s burst for the first poll's message) to the drain's
    # end at 40 s: 35 s, about 208 msgs/s
    assert figures["window_s"] == pytest.approx(35 + 0.34 / 7295, rel=1e-9)
    assert 7296 / figures["window_s"] == pytest.approx(208.46, abs=0.01)
    # A drain end before the last delivery (a late command's stamp racing the last poll) never shortens the window.
    assert outcome.delivery([producer(491_329)], stalled, True, 4 * SECOND, measured,
                            int(5.2 * SECOND))["window_s"] == pytest.approx(by_last["window_s"])


def test_only_messages_the_broker_still_held_extend_the_window():
    # Lost messages (acknowledged, no longer queued: a fault) were never there to read, nor is a backlog the broker
    # could not tell; a cell that delivered everything had nothing left; a publish-only cell has no consumers.
    lost = outcome.totals([producer(1000)], [consumer(900)], {**MEASURED, "acked": 1000}, consumed=True, queued=0)
    unknown = outcome.totals([producer(1000)], [consumer(900)], {**MEASURED, "acked": 1000}, consumed=True,
                             queued=None)
    whole = outcome.totals([producer(1000)], [consumer(1000)], {**MEASURED, "acked": 1000}, consumed=True, queued=0)
    alone = outcome.totals([producer(1000)], [], {**MEASURED, "acked": 1000}, consumed=False)
    assert (lost["lost"], unknown["undelivered_or_lost"]) == (100, 100)
    assert not any(outcome.waiting(c) for c in (lost, unknown, whole, alone))
    acks = [acked(1000, 4 * SECOND, 4 * SECOND + 1000, 1, 5 * SECOND)]
    publish_only = outcome.delivery(acks, [], False, 4 * SECOND, {**MEASURED, "sent": 1000, "acked": 1000},
                                    40 * SECOND)
    assert publish_only["window_end"] == "last_delivery" and publish_only["window_s"] == pytest.approx(1.0)


def test_a_small_delivered_share_is_said_beside_the_rate():
    from brokerbench.figures import DELIVERED_SHARE_FLOOR, delivered_share, share_short, share_text
    from brokerbench.reports.table import limit_note, verdict_cell

    share = delivered_share(7296, 491_329, consumed=True)
    assert share == pytest.approx(7296 / 491_329, abs=1e-6) and share_short(share)
    assert share_text(share) == "delivered 1.5% of sent"
    assert delivered_share(500, 1000, consumed=True) == DELIVERED_SHARE_FLOOR and not share_short(0.5)
    assert delivered_share(10, 10, consumed=False) is None and delivered_share(0, 0, consumed=True) is None
    cell = {"rate_target": "max", "verdict": "max-rate", "limit": None, "delivered_share": share}
    assert "delivered 1.5% of sent" in verdict_cell(cell)
    assert "of sent" not in verdict_cell({**cell, "delivered_share": 0.97})
    assert "less than 50%" in limit_note({"cells": [cell]})
    assert limit_note({"cells": [{**cell, "delivered_share": None}]}) is None


def test_a_warm_up_backlog_counts_neither_its_time_nor_the_burst_that_ends_it():
    # Behind a capped broker the warm-up backlog is still being delivered when the measured messages are due: a
    # consumer held by a quota gets bursts of 200 a second; the burst at 10 s ends the warm-up and brings the
    # first 200 measured messages, nine more bursts follow, the last at 19 s. 2,000 measured at 200 msgs/s.
    consumers = [{**consumer(2000, last=19 * SECOND), "first_intended_ns": 4 * SECOND, "last_warmup_ns": 10 * SECOND,
                  "first_delivery_ns": 10 * SECOND, "first_poll_measured": 200}]
    figures = outcome.delivery([producer(2000)], consumers, True, 4 * SECOND,
                               {**MEASURED, "received": 2000, "bytes_received": 200_000})
    assert 2000 / figures["window_s"] == pytest.approx(200)  # not 2,000 / 9 s (counting the first burst at 10 s)
    assert figures["window_start_ns"] == pytest.approx(9 * SECOND, abs=1)  # nor 2,000 / 15 s (from 4 s)
    # Every measured message came with first polls: the rate is unknown, and the window from the earliest intended
    # send time stands, which can only understate it (never a count over no time: that read 10^12 msgs/s).
    together = [{**consumer(500, last=10 * SECOND), "first_intended_ns": 4 * SECOND, "last_warmup_ns": 10 * SECOND,
                 "first_delivery_ns": 10 * SECOND, "first_poll_measured": 500}]
    figures = outcome.delivery([producer(2000)], together, True, 4 * SECOND, {**MEASURED, "received": 500})
    assert figures["delivered"] == 500 and figures["window_s"] == pytest.approx(6.0)


def acked(count, first_intended, first_ack, together, last):
    return {**producer(count, last_ack=last), "first_intended_ns": first_intended, "first_ack_ns": first_ack,
            "first_acks": together}


def test_publish_only_throughput_is_the_measured_acknowledgements_at_the_rate_they_came():
    # The consumed cells' rule on acknowledgements. Two producers at 500 msgs/s each from 4 s, each answered
    # 0.4 ms after sending, one message per acknowledgement: 2 x 1,500 measured acknowledgements, the last at
    # 6.9984 s. The window starts at the earliest intended send time (reaching back one gap from the first
    # acknowledgement would start before it): 3,000 over 2.9984 s, their bytes at the measured mean size.
    producers = [acked(1500, 4 * SECOND, 4 * SECOND + 400_000, 1, int(6.9984 * SECOND)),
                 acked(1500, 4 * SECOND + 1_000_000, 4 * SECOND + 1_400_000, 1, int(6.9974 * SECOND))]
    figures = outcome.delivery(producers, [], False, 4 * SECOND, {**MEASURED, "sent": 3000, "bytes_sent": 300_000,
                                                                  "acked": 3000})
    assert (figures["delivered"], figures["bytes_delivered"]) == (3000, 300_000)
    assert figures["window_start_ns"] == 4 * SECOND and figures["window_s"] == pytest.approx(2.9984)
    assert 3000 / figures["window_s"] == pytest.approx(1000, rel=1e-3)
    # Bytes at the measured messages' mean size: 18 of 20 acknowledged, 2,000 bytes sent.
    figures = outcome.delivery([acked(18, 4 * SECOND, 5 * SECOND, 1, 7 * SECOND)], [], False, 4 * SECOND,
                               {**MEASURED, "sent": 20, "bytes_sent": 2000, "acked": 18})
    assert (figures["delivered"], figures["bytes_delivered"]) == (18, 1800)
    assert outcome.delivery([producer(5)], [], False, 0, {**MEASURED, "sent": 5, "acked": 0})["window_s"] is None


def test_publish_only_a_warm_up_backlog_counts_neither_its_time_nor_the_response_that_ends_it():
    # Behind a producer quota the broker is still answering for the warm-up when the measured messages are due
    # at 4 s: it answers 200 a second, one response a second; the response at 10 s ends the warm-up and brings
    # the first 200 measured acknowledgements, nine more follow, the last at 19 s. 2,000 at 200 msgs/s: not
    # 2,000 / 9 s (counting the first response over no time), nor 2,000 / 15 s (from 4 s, the warm-up's time).
    producers = [acked(2000, 4 * SECOND, 10 * SECOND, 200, 19 * SECOND)]
    figures = outcome.delivery(producers, [], False, 4 * SECOND, {**MEASURED, "sent": 2000, "bytes_sent": 200_000,
                                                                 "acked": 2000})
    assert 2000 / figures["window_s"] == pytest.approx(200)
    assert figures["window_start_ns"] == pytest.approx(9 * SECOND, abs=1)
    # Every measured acknowledgement came with the first: the rate is unknown, the window runs from the earliest
    # intended send time, which can only understate it.
    figures = outcome.delivery([acked(500, 4 * SECOND, 10 * SECOND, 500, 10 * SECOND)], [], False, 4 * SECOND,
                               {**MEASURED, "sent": 500, "acked": 500})
    assert figures["delivered"] == 500 and figures["window_s"] == pytest.approx(6.0)


def test_a_cell_that_delivered_nothing_fails_with_its_counts():
    counts = outcome.totals([producer(500)], [consumer(0)], {**MEASURED, "acked": 500}, consumed=True, queued=0)
    reason = outcome.failure_reason(counts, consumed=True)
    assert reason.startswith("no message was delivered") and "lost 500" in reason
    assert outcome.failure_reason(outcome.totals([producer(5)], [consumer(5)], {**MEASURED, "acked": 5}, True),
                                  True) is None
    assert "acknowledged" in outcome.failure_reason(outcome.totals([producer(5, unacked=5)], [], MEASURED, False),
                                                    False)
    assert "sent" in outcome.failure_reason(outcome.totals([producer(0)], [], MEASURED, False), False)


def test_a_producer_that_sent_only_messages_due_in_the_warm_up_is_told_apart_from_one_that_sent_nothing():
    # A single-mode producer 60 times behind a 200 msgs/s schedule (acks=all on a cold 3-node cluster): the 8
    # messages it sent in 2.5 s were due in the warm-up's first 40 ms, so none is measured.
    counts = outcome.totals([producer(0)], [consumer(0)], MEASURED, consumed=True, queued=0)
    behind = outcome.failure_reason(counts, True, sent_total=8)
    assert behind.startswith("no message due in the measured window was sent") and "the 8 the producers" in behind
    assert outcome.failure_reason(counts, True, sent_total=0) == "no message was sent in the measured window"
    measured = outcome.totals([producer(5)], [consumer(5)], {**MEASURED, "acked": 5}, True)
    assert outcome.failure_reason(measured, True, sent_total=13) is None


def test_the_broker_count_is_reconciled_with_every_acknowledgement():
    assert outcome.broker_count(1200, [producer(500, acked_total=700), producer(500)]) == {
        "observed": 1200, "expected": 1200, "difference": 0}
    assert outcome.broker_count(1100, [producer(500, acked_total=1200)])["difference"] == -100
    assert outcome.broker_count(None, [producer(1)]) is None
    # Never acknowledged, received all the same (the producer gave up waiting while the broker was down, and its
    # client sent them as it closed): the broker holds them too.
    assert outcome.broker_count(3501, [producer(3000, acked_total=1232)], probes=1,
                                consumers=[{"delivered_not_acked": 2268}]) == {
        "observed": 3501, "expected": 3501, "difference": 0, "delivered_not_acknowledged": 2268}


def test_the_drain_stops_when_all_consumers_together_have_everything():
    drain = Drain(["a", "b"], expected=100, timeout_s=10, sending_s=5, now=0.0)
    drain.update("a", 60, 1.0)
    assert drain.decide(1.0) == []
    drain.update("b", 40, 1.1)  # neither consumer alone has 100
    assert drain.decide(1.1) == [("stop", None)]
    assert drain.decide(1.2) == []  # once


def test_the_drain_waits_while_deliveries_arrive_and_gives_up_when_they_stop():
    drain = Drain(["a"], expected=1000, timeout_s=2, sending_s=20, now=0.0)
    for t in range(1, 12):  # slow but steady: waited for past the idle timeout
        drain.update("a", 80 * t, float(t))
        assert drain.decide(float(t)) == []
    assert drain.decide(12.0) == []
    assert drain.decide(13.0) == [("late", min(LATE_WINDOW_S, 2))]  # 2 s with nothing new
    assert drain.decide(14.0) == []
    drain.update("a", 1000, 14.5)  # everything arrived in the late window: stop early
    assert drain.decide(14.5) == [("stop", None)]


def test_the_drain_is_bounded_even_while_deliveries_continue():
    drain = Drain(["a"], expected=10**9, timeout_s=1, sending_s=3, now=0.0)
    assert Drain.cap_s(1, 3) == 11  # the idle timeout plus at least 10 s
    t = 0.0
    while not drain.decide(t):
        t += 0.5
        drain.update("a", int(t * 100), t)
    assert t == pytest.approx(11.0)


def _snapshot(counters, **values):
    return {"counters": counters, "values": {k: np.asarray(v, dtype=np.int64).tobytes() for k, v in values.items()}}


def test_an_interval_is_written_once_every_process_has_reported_it():
    agg = IntervalAggregator(["p", "c"])
    agg.add("p", "producer", 0, _snapshot({"sent": 3, "bytes": 30, "acked": 3, "send_errors": 0},
                                          publish_latency_us=[1000, 2000, 3000]))
    assert agg.take_complete() == []  # the consumer has not reported interval 0
    agg.add("c", "consumer", 0, _snapshot({"received": 2, "bytes": 20}, end_to_end_latency_us=[5000, 7000]))
    [merged] = agg.take_complete()
    assert merged["interval"] == 0
    assert merged["counters"] == {"sent": 3, "bytes_sent": 30, "acked": 3, "send_errors": 0, "received": 2,
                                  "bytes_received": 20}
    assert merged["summary"]["end_to_end_latency_us"]["count"] == 2
    assert histogram.summary(histogram.decode(merged["histograms"]["publish_latency_us"]))["max"] == pytest.approx(
        3, rel=0.001)  # ns -> µs
    agg.add("p", "producer", 1, _snapshot({"sent": 1, "bytes": 10, "acked": 0, "send_errors": 1}))
    agg.finished("c")  # a finished process holds nothing back
    assert [m["interval"] for m in agg.take_complete()] == [1]
    assert agg.totals["sent"] == 4 and agg.totals["send_errors"] == 1 and agg.written == 2
    cumulative = histogram.decode(agg.cumulative_histograms()["end_to_end_latency_us"])
    assert cumulative.get_total_count() == 2


def test_what_the_broker_still_queues_after_the_drain_is_undelivered_not_lost():
    counts = outcome.totals([producer(1000)], [consumer(600, late=50)], {**MEASURED, "acked": 1000}, consumed=True,
                            queued=5000)  # warm-up messages are queued ahead of the measured ones
    assert counts["undelivered"] == 350 and counts["lost"] == 0
    counts = outcome.totals([producer(1000)], [consumer(600)], {**MEASURED, "acked": 1000}, consumed=True, queued=100)
    assert counts["undelivered"] == 100 and counts["lost"] == 300
    assert counts["received"] + counts["late"] + counts["undelivered"] + counts["lost"] == counts["sent"]
    assert counts["residual"] == 0 and counts["undelivered_or_lost"] == 400 and counts["missing"] == 400


def test_a_backlog_the_broker_cannot_tell_leaves_undelivered_and_lost_unknown_not_loss():
    counts = outcome.totals([producer(1000)], [consumer(600, late=50)], {**MEASURED, "acked": 1000}, consumed=True,
                            queued=None)  # backlog() answered None: a Kafka error, Redis without a lag
    assert counts["undelivered"] is None and counts["lost"] is None
    assert counts["undelivered_or_lost"] == 350 and counts["missing"] == 400 and counts["residual"] == 0
    assert outcome.has_loss(counts)  # not received in time all the same: no latency claim
    reason = outcome.failure_reason(outcome.totals([producer(500)], [consumer(0)], {**MEASURED, "acked": 500},
                                                   consumed=True), consumed=True)
    assert "undelivered or lost 500 (broker backlog unknown)" in reason and "lost 500," not in reason
    # Nothing missing: nothing can be undelivered or lost, whatever the broker can tell (a non-persistent topic).
    whole = outcome.totals([producer(1000)], [consumer(1000)], {**MEASURED, "acked": 1000}, consumed=True, queued=None)
    assert whole["undelivered"] == whole["lost"] == whole["undelivered_or_lost"] == 0 and not outcome.has_loss(whole)


def test_an_accounting_error_shows_as_a_residual_instead_of_vanishing():
    # A consumer that counts 30 more measured messages than were sent (e.g. warm-up taken for measured): the
    # classes cannot be negative, so the excess stays in the residual.
    counts = outcome.totals([producer(1000, unacked=20)], [consumer(990, late=20)], {**MEASURED, "acked": 980},
                            consumed=True, queued=0)
    assert counts["lost"] == counts["undelivered"] == 0
    assert counts["residual"] == -30
    assert counts["sent"] == sum(counts[k] for k in ("received", "late", "undelivered", "lost", "send_errors",
                                                      "unacked")) + counts["residual"]
    # One more received than sent (a message the producer counted as warm-up and the consumer as measured, seen
    # once at the boundary of a max-rate cell): nothing is missing, the residual says -1, and the CellCompleted
    # event that carries it is valid (a negative count made the event store refuse it and the cell fail).
    counts = outcome.totals([producer(1000)], [consumer(1001)], {**MEASURED, "acked": 1000}, consumed=True, queued=0)
    assert counts["missing"] == 0 and counts["residual"] == -1
    schema = json.loads((events.SCHEMAS_DIR / "events.schema.json").read_text())
    Draft202012Validator(schema["$defs"]["CellCompleted"]["properties"]["totals"]).validate(counts)
    # publish-only: sent = acknowledged + send errors + unacknowledged, or the residual says by how much not
    counts = outcome.totals([producer(100, unacked=5)], [], {**MEASURED, "acked": 90, "send_errors": 2}, False)
    assert counts["residual"] == 3


def test_the_drain_ends_when_only_unanswered_publishes_are_missing_and_the_broker_holds_none():
    drain = Drain(["a"], expected=100, timeout_s=30, sending_s=6, now=0.0, unanswered=2)
    drain.update("a", 97, 0.5)
    assert not drain.wants_backlog(0.5)  # an acknowledged one is missing too: it is waited for, count or not
    drain.update("a", 98, 1.0)
    assert drain.wants_backlog(1.0)
    drain.backlog(0, 1.0)
    assert drain.decide(1.0) == [] and not drain.wants_backlog(1.5)  # asked at most once a second
    drain.update("a", 99, 1.8)  # one came after the broker read empty (it was on its way): read again
    drain.backlog(0, 2.0)
    assert drain.decide(2.0) == []
    drain.backlog(0, 3.0)  # empty twice, a second apart, nothing new between
    assert drain.decide(3.0) == [("stop", None)]


def test_a_broker_that_cannot_count_or_still_holds_some_is_waited_for():
    drain = Drain(["a"], expected=100, timeout_s=30, sending_s=6, now=0.0, unanswered=1)
    drain.update("a", 99, 0.0)
    for t, count in ((0.0, None), (1.0, 0), (2.0, 3), (3.0, 0)):  # None and 3 both start the count again
        assert drain.wants_backlog(t)
        drain.backlog(count, t)
    assert drain.decide(3.0) == []
    # no unanswered publishes: the broker is never asked, and the idle timeout decides
    quiet = Drain(["a"], expected=100, timeout_s=2, sending_s=6, now=0.0)
    quiet.update("a", 99, 0.0)
    assert not quiet.wants_backlog(5.0) and quiet.decide(5.0) == [("late", 2)]
