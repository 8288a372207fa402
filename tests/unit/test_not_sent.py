"""Messages due and never sent: counted from the schedule, in the accounting, against the verdict, and in latency
at +infinity with their least latency (cell end − intended) as the bound. Checked against hand arithmetic."""

import copy

import numpy as np
import pytest
from rich.console import Console
from synthetic import synthetic_run

from brokerbench import histogram
from brokerbench.figures import NOT_SENT_BOUNDS
from brokerbench.reports import html, markdown, rows, table
from brokerbench.reports.model import build_report
from brokerbench.reports.results import build_results, decode_buckets, latency_object, with_missing
from brokerbench.verdict import NOT_SENT_TOLERANCE, sustainability
from brokerbench.worker import outcome
from brokerbench.worker.producer_figures import ProducerFigures
from brokerbench.worker.schedule import not_sent_bounds_us, producer_schedule, unsent
from test_verdict import TARGET, series

S = 1_000_000_000


def test_what_was_due_and_not_sent_by_hand():
    # 1,000 msgs/s from t = 0: message k is due at k ms. Measured from 1 s (message 1,000) to the end at 4 s.
    schedule = producer_schedule({"rate": 1000, "producers": 1}, 0, 0)
    # It sent 3,500 (the last due at 3.499 s), then stalled: 3,500 .. 3,999 were due before 4 s and never sent.
    assert unsent(schedule, 3500, 1000, 1 * S, 4 * S) == {"due_end_seq": 4000, "due": 3000, "not_sent": 500}
    assert unsent(schedule, 4000, 1000, 1 * S, 4 * S)["not_sent"] == 0  # on schedule to the end
    # a cell run by count: 2,000 measured messages were all it owed (1,000 .. 2,999)
    assert unsent(schedule, 2500, 1000, 1 * S, 4 * S, limit=2000) == {"due_end_seq": 3000, "due": 2000,
                                                                       "not_sent": 500}
    # stalled inside the warm-up: every measured message owed, none of the warm-up's
    assert unsent(schedule, 600, 600, 1 * S, 4 * S) == {"due_end_seq": 4000, "due": 3000, "not_sent": 3000}
    # unthrottled: nothing was due
    assert unsent(None, 123, 0, 1 * S, 4 * S) == {"due_end_seq": 123, "due": None, "not_sent": 0}
    # their least latencies: the end less each one's intended time, 500 ms (message 3,500) down to 1 ms (3,999)
    bounds = np.concatenate(list(not_sent_bounds_us(schedule, 3500, 4000, 4 * S, chunk=7)))
    assert bounds.tolist() == list(range(500_000, 0, -1000))


def test_a_shaped_schedule_owes_what_its_own_times_say():
    # 400 msgs/s with 100 more over the first 0.1 s of every second: count the due times below the end directly.
    schedule = producer_schedule({"rate": 400, "producers": 1, "burst": {"every_s": 1, "messages": 100,
                                                                         "over_s": 0.1}}, 0, 0)
    due = schedule.intended(np.arange(5000))
    end = 2 * S + S // 20  # inside the third burst
    owed = unsent(schedule, 700, 0, 0, end)
    assert owed["due_end_seq"] == int(np.count_nonzero(due < end)) and owed["not_sent"] == owed["due_end_seq"] - 700
    bounds = np.concatenate(list(not_sent_bounds_us(schedule, 700, owed["due_end_seq"], end)))
    assert bounds.tolist() == ((end - due[700:owed["due_end_seq"]]) // 1000).tolist()


def test_the_producer_figures_keep_the_least_latencies_of_what_was_not_sent():
    schedule = producer_schedule({"rate": 1000, "producers": 1}, 0, 0)
    figures = ProducerFigures(np.array([100]), 1, schedule)
    done = figures.finish({"first_measured_seq": 0, "sent_total": 0, "due_end_seq": 10, "not_sent": 3,
                           "t_end": 10_000_000})  # messages 7, 8, 9 due at 7, 8, 9 ms; the end at 10 ms
    bounds = done["not_sent_bounds"]
    assert bounds.get_total_count() == 3 and [bounds.get_count_at_value(v) for v in (1000, 2000, 3000)] == [1, 1, 1]
    assert figures.finish({"first_measured_seq": 0, "sent_total": 0, "due_end_seq": 0, "not_sent": 0,
                           "t_end": 0})["not_sent_bounds"] is None


def test_due_is_sent_plus_not_sent_in_the_accounting():
    producers = [{"sent": 800, "unacked": 0, "due": 1200, "not_sent": 400},
                 {"sent": 1000, "unacked": 0, "due": 1000, "not_sent": 0}]
    consumers = [{"received": 1800, "late": 0, "duplicated": 0, "out_of_order": 0}]
    measured = {"acked": 1800, "send_errors": 0, "bytes_sent": 0, "bytes_received": 0}
    counts = outcome.totals(producers, consumers, measured, True, queued=0)
    assert (counts["due"], counts["not_sent"], counts["sent"], counts["residual"]) == (2200, 400, 1800, 0)
    assert counts["missing"] == 0  # not sent is not missing: it was never sent
    # a loop that counted a message sent which its schedule never owed shows as a residual
    producers[1]["sent"] = 1001
    consumers[0]["received"] = 1801
    assert outcome.totals(producers, consumers, {**measured, "acked": 1801}, True, queued=0)["residual"] == -1
    # publish-only, and unthrottled (nothing due): sent alone, as before
    publish_only = outcome.totals([{"sent": 50, "unacked": 0, "due": None, "not_sent": 0}], [],
                                  {"acked": 50, "send_errors": 0, "bytes_sent": 0, "bytes_received": 0}, False)
    assert (publish_only["due"], publish_only["residual"]) == (None, 0)


def test_more_unsent_than_the_tolerance_is_unsustainable_whatever_else_held():
    due = 10 * TARGET
    over = int(due * NOT_SENT_TOLERANCE) + 1
    result = sustainability(TARGET, series(), not_sent=over, due=due)
    assert result["verdict"] == "unsustainable" and result["checks"]["not_sent"]["passed"] is False
    assert result["reasons"] == [f"{over:,} of {due:,} messages due were never sent (1.0%, more than 1%): the producer "
                                 "fell behind its schedule and the cell ended"]
    # within the tolerance: sustainable, and said
    within = sustainability(TARGET, series(), not_sent=int(due * NOT_SENT_TOLERANCE), due=due)
    assert within["verdict"] == "sustainable" and any("not sent" in r for r in within["reasons"])
    # a count over the whole cell: it fails a cell too short for the other rules, and a shaped one
    assert sustainability(TARGET, series(n=3), not_sent=over, due=due)["verdict"] == "unsustainable"
    assert sustainability(TARGET, series(), shaped=True, not_sent=over, due=due)["verdict"] == "unsustainable"
    # not counted (stored before it was), or nothing due: the other rules alone
    assert sustainability(TARGET, series(), not_sent=None, due=None)["verdict"] == "sustainable"
    assert sustainability(TARGET, series(), not_sent=0, due=due)["reasons"] == sustainability(TARGET, series())["reasons"]


def test_unsent_messages_sit_at_infinity_with_their_least_latency_as_the_bound():
    # 1,000 measured, one of each 1..1000 µs; 100 never sent, their least latencies 10,000 .. 10,990 µs (10 µs apart).
    measured = decode_buckets(histogram.encode(histogram.from_values(np.arange(1, 1001))))
    least = decode_buckets(histogram.encode(histogram.from_values(np.arange(10_000, 11_000, 10))))
    wanted = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}
    values, bounds = with_missing(measured, 0, wanted, least)
    # ranks among 1,100: p50 → 550, p90 → 990 (measured: read there); p95 → 1045, p99 → 1089: the 45th and 89th
    # unsent (10,440 and 10,880 µs at least; HDR's 3 digits give the bucket's top: 10,447 and 10,887).
    assert values == {"p50": 550.0, "p90": 990.0, "p95": None, "p99": None, "mean": None, "max": None}
    assert (bounds["p95"], bounds["p99"]) == (10_447.0, 10_887.0)
    assert bounds["max"] == 10_991.0  # 10,990's bucket top
    assert bounds["mean"] == pytest.approx((500.5 * 1000 + 10_495 * 100) / 1100, rel=1e-3)
    # unsent messages whose least latency is below what was measured: the largest measured value bounds them
    tiny = decode_buckets(histogram.encode(histogram.from_values(np.arange(1, 101))))
    values, bounds = with_missing(measured, 0, wanted, tiny)
    assert values["p90"] == 990.0 and bounds["p99"] == 1000.0
    # with missing messages too: past every finite value, at least the largest of them
    values, bounds = with_missing(measured, 50, {"p99": 99.0}, least)
    assert values["p99"] is None and bounds["p99"] == 10_991.0  # rank 1,139 of 1,150: among the missing
    # a cell's latency object says how many were not sent
    blob, owed = histogram.encode(histogram.from_values(np.arange(1, 1001))), \
        histogram.encode(histogram.from_values(np.arange(10_000, 11_000, 10)))
    obj = latency_object(blob, not_sent=owed)
    assert (obj["p50"], obj["p99"], obj["not_sent"], obj["lower_bounds"]["p99"]) == (550.0, None, 100, 10_887.0)
    # nothing measured (a publish-only cell's end-to-end latency): no figure at all
    assert latency_object(None, not_sent=owed) == dict.fromkeys(("mean", "p50", "p75", "p95", "p99", "p999", "max"))
    # no measured value, only the unsent ones' least latencies: every percentile is a lower bound
    values, bounds = with_missing(decode_buckets(histogram.encode(histogram.new())), 0, {"p50": 50.0}, least)
    assert values["p50"] is None and bounds["p50"] == 10_495.0


@pytest.fixture(scope="module")
def run():
    return synthetic_run({"name": "not-sent", "brokers": ["kafka", "redis-streams"], "sizes": [1024],
                          "rates": [1000], "formats": ["json"], "repeats": 3}, intervals=5, seed=5)


def test_a_cell_that_left_messages_unsent_is_judged_bounded_and_shown(run):
    events = copy.deepcopy(run)
    kafka = [c["cell_id"] for c in events[0]["data"]["cells"] if c["broker"] == "kafka"]
    owed = histogram.encode(histogram.from_values(np.arange(1000, 300_001, 1000)))  # 300 unsent: a 0.3 s stall
    for e in events:
        if e["type"] == "CellCompleted" and e["data"]["cell_id"] in kafka:
            e["data"].pop("digest", None)  # the verdict is judged again, with what was not sent
            totals = e["data"]["totals"]
            totals.update(due=totals["sent"] + 300, not_sent=300)
            e["data"]["histograms"][NOT_SENT_BOUNDS] = owed
    results = {c["cell_id"]: c for c in build_results(events)["cells"]}
    cell = results[kafka[0]]
    assert (cell["not_sent"], cell["due"]) == (300, cell["sent"] + 300)
    for field in ("end_to_end_latency_us", "publish_delay_us"):
        assert cell[field]["not_sent"] == 300 and cell[field]["p99"] is None and cell[field]["lower_bounds"]["p99"] > 0
    assert "not_sent" not in cell["delivery_latency_us"]  # never sent: no delivery to time
    assert "[yellow]not sent 300 (producer behind)[/]" in table.loss_cell(cell)
    console = Console(record=True, width=250)
    for t in table.comparison_tables(build_results(events)):
        console.print(t)
    assert "not sent 300" in console.export_text()

    report = build_report(events)
    config = next(c for g in report["groups"] for c in g["cells"] if c["broker"] == "kafka")
    assert config["sustainability"]["verdict"] == "unsustainable"
    assert all("never sent" in reason for reason in config["sustainability"]["reasons"])
    assert config["not_sent"] == 900 and config["latency"]["end_to_end_latency_us"]["not_sent"] == 900
    p99 = config["metrics"]["end_to_end_p99_us"]
    assert p99["median"] is None and p99["lower_bound"] > 0
    assert markdown.loss_text(rows.config(config)).endswith("not sent 900 (producer behind)")
    md = markdown.render(report)
    assert "Messages not sent" in md and "not sent 900" in md and "not sent 900" in html.render(report)
    other = next(c for g in report["groups"] for c in g["cells"] if c["broker"] == "redis-streams")
    assert other["not_sent"] is None  # stored without the count: nothing is assumed
