"""Each cell says how its acknowledgements and deliveries were stamped (CellCompleted ack_stamps, delivery_stamps),
and every table marks a row whose publish or end-to-end latency was not stamped at arrival, with a footnote saying how
it was and where how late that is was measured (figures.stamp_note): the report prints no figure it did not store."""

import copy
import re
import socket
import ssl
from pathlib import Path

from rich.console import Console
from synthetic import synthetic_run

from brokerbench.api import views
from brokerbench.api.models import RunDetail
from brokerbench.brokers.socket_buffer import socket_stamps
from brokerbench.events.memory import MemoryEventStore
from brokerbench.figures import (STAMP_LAG_PAGE, joined_stamps, late_stamps, merge_stamp_bounds, stamp_bound_text,
                                 stamp_note, stamped_late)
from brokerbench.reports import html, markdown, regression, rows
from brokerbench.reports.model import build_report
from brokerbench.reports.results import build_results, stamps_note
from brokerbench.reports.rows import section
from brokerbench.reports.table import comparison_tables

SPEC = {"name": "stamps", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000],
        "formats": ["raw"], "repeats": 2}
# as the drivers say: Kafka's in librdkafka on both sides, Redis's acknowledgements at arrival, its deliveries in
# redis-py (one repeat of Redis's delivered at arrival, to show a configuration keeps each repeat's)
STAMPS = {"kafka": ("client:librdkafka", "client:librdkafka"), "redis-streams": ("arrival", "arrival")}


def with_stamps(events, stamps_of):
    cells = {c["cell_id"]: c for c in events[0]["data"]["cells"]}
    out = copy.deepcopy(events)
    for e in out:
        if e["type"] == "CellCompleted":
            ack, delivery = stamps_of(cells[e["data"]["cell_id"]])
            e["data"].update(ack_stamps=ack, delivery_stamps=delivery)
    return out


def grid_rows(text: str) -> dict[str, str]:
    return {line.split("|")[1].strip(): line.split("|")[2].strip() for line in text.splitlines()
            if line.startswith(("| kafka |", "| redis-streams |")) and line.count("|") > 10}


def test_the_words_of_the_stamps():
    assert late_stamps("arrival") == [] and late_stamps(None) == []
    assert late_stamps("arrival, read") == ["read"]
    assert joined_stamps(["arrival", None, "client:rstream, arrival"]) == "arrival, client:rstream"
    assert joined_stamps([None]) is None
    assert not stamped_late("arrival", None) and stamped_late("arrival", "client:redis-py")
    assert stamp_note([("redis-streams raw", "arrival", "arrival")]) is None
    note = stamp_note([("nats-jetstream raw", "read", "arrival"), ("kafka raw", "arrival", "client:librdkafka")])
    assert note.startswith("† not stamped at arrival (the kernel's receive time): nats-jetstream raw: "
                           "acknowledgements (publish latency) as the read returned (TLS); kafka raw: deliveries "
                           "(end-to-end latency) in librdkafka's thread or callback.")
    assert note.endswith(STAMP_LAG_PAGE) and "µs" not in note  # cites the page, prints no figure it did not store
    # Kafka acknowledgements stamped as their delivery reports were served (a producer without librdkafka's plugin)
    served = stamp_note([("kafka raw", "client:librdkafka-report, client:librdkafka", "client:librdkafka")])
    assert ("kafka raw: acknowledgements (publish latency) in librdkafka's delivery report, as served and in "
            "librdkafka's thread or callback") in served
    assert "librdkafka's delivery reports, stamped as served" in served and "µs" not in served


def test_the_words_of_a_fetch_response_stamp_and_its_bound():
    """Kafka deliveries stamped at the latest Fetch response before the poll returned: the footnote says so, and per
    row how often that was the response that carried them and how much later it came at most in the other polls, over
    the row's cells (figures.merge_stamp_bounds: polls summed, the spreads' highest)."""
    one = {"polls": 1200, "single_response_polls": 1197, "spread_p99_us": 35.2, "spread_max_us": 412.6}
    other = {"polls": 800, "single_response_polls": 800, "spread_p99_us": None, "spread_max_us": None}
    assert merge_stamp_bounds([one, None, other]) == {"polls": 2000, "single_response_polls": 1997,
                                                      "spread_p99_us": 35.2, "spread_max_us": 412.6}
    assert merge_stamp_bounds([None]) is None
    note = stamp_note([("kafka raw", "client:librdkafka", "client:librdkafka-fetch", one),
                       ("kafka raw", "client:librdkafka", "client:librdkafka-fetch", other),
                       ("redis-streams raw", "arrival", "arrival", None)])
    assert ("kafka raw: acknowledgements (publish latency) in librdkafka's thread or callback, deliveries (end-to-end "
            "latency) at the read of the latest Fetch response before the poll returned, on librdkafka's broker "
            "thread (at the response that carried them in 99.8% of 2,000 polls; in the rest up to 413 µs later "
            "(p99 35 µs)).") in note
    assert "redis-streams" not in note
    # every poll after one response: no rest; a share never rounded up to all; a spread in milliseconds
    assert stamp_bound_text(other) == " (at the response that carried them in all 800 polls)"
    assert stamp_bound_text({"polls": 10_000, "single_response_polls": 9_999, "spread_p99_us": 1500.0,
                             "spread_max_us": 1500.0}) == (" (at the response that carried them in 99.9% of 10,000 "
                                                           "polls; in the rest up to 1.5 ms later (p99 1.5 ms))")
    assert stamp_bound_text(None) == stamp_bound_text({"polls": 0, "single_response_polls": 0, "spread_p99_us": None,
                                                        "spread_max_us": None}) == ""
    # without a bound (cells stored before it, or the plugin not loaded): the stamp's words alone
    assert "deliveries (end-to-end latency) at the read of the latest Fetch response before the poll returned, on " \
           "librdkafka's broker thread." in stamp_note([("kafka raw", "arrival", "client:librdkafka-fetch")])


def test_a_socket_of_its_own_stamps_at_arrival_unless_it_speaks_tls():
    with socket.socket() as plain:
        assert socket_stamps(plain) == "arrival"
        with ssl.create_default_context().wrap_socket(plain, server_hostname="broker", do_handshake_on_connect=False) \
                as tls:
            assert socket_stamps(tls) == "read"  # ssl.SSLSocket has no recvmsg: the read's return


def test_the_cited_page_has_the_cited_section():
    """The footnote cites a section by its heading: it is there, with the bench that measures it."""
    page, heading = re.fullmatch(r'(\S+), "(.+)" \((\S+)\)', STAMP_LAG_PAGE).group(1, 2)
    text = (Path(__file__).resolve().parents[2] / page).read_text()
    assert f"## {heading} (`bench/stamp_lag.py`)" in text


def test_every_table_marks_the_rows_not_stamped_at_arrival_and_says_how_they_were():
    events = with_stamps(synthetic_run(SPEC, intervals=4, seed=3), lambda c: STAMPS[c["broker"]])
    results = build_results(events)
    kafka = [c for c in results["cells"] if c["broker"] == "kafka"]
    assert {(c["ack_stamps"], c["delivery_stamps"]) for c in kafka} == {("client:librdkafka", "client:librdkafka")}

    console = Console(width=250, record=True, force_terminal=False)
    for table in comparison_tables(results):
        console.print(table)
    text = console.export_text()
    assert text.count("raw #0 †") == 1 and text.count("raw #1 †") == 1  # the two Kafka repeats, not Redis's
    assert stamps_note(results) == stamp_note([("kafka raw", "client:librdkafka", "client:librdkafka")])

    report = build_report(events)
    configs = {c["broker"]: c for c in report["groups"][0]["cells"]}
    assert (configs["kafka"]["ack_stamps"], configs["redis-streams"]["delivery_stamps"]) == ("client:librdkafka",
                                                                                             "arrival")
    rendered = markdown.render(report)
    assert grid_rows(rendered) == {"kafka": "raw †", "redis-streams": "raw"}
    footnote = ("† not stamped at arrival (the kernel's receive time): kafka raw: acknowledgements (publish latency) "
                "in librdkafka's thread or callback, deliveries (end-to-end latency) in librdkafka's thread or "
                "callback.")
    assert footnote in rendered and "- **Stamps.** Publish latency ends at" in rendered
    page = html.render(report)
    assert "<td>raw †</td>" in page and "<p class='muted stamps'>† not stamped at arrival" in page


def test_a_configuration_keeps_each_repeats_stamps_and_old_runs_mark_nothing():
    def mixed(cell):  # one Redis repeat's consumer read through redis-py
        return ("arrival", "client:redis-py" if cell["repeat"] == 1 else "arrival")

    report = build_report(with_stamps(synthetic_run(SPEC, intervals=4, seed=3), mixed))
    redis = next(c for c in report["groups"][0]["cells"] if c["broker"] == "redis-streams")
    assert redis["delivery_stamps"] == "arrival, client:redis-py"
    rendered = markdown.render(report)
    assert grid_rows(rendered)["redis-streams"] == "raw †"
    assert "redis-streams raw: deliveries (end-to-end latency) at arrival and in redis-py's thread or callback" \
        in rendered
    # cells stored before the stamps were recorded: nothing is marked, nothing is said
    plain = synthetic_run(SPEC, intervals=4, seed=3)
    old = markdown.render(build_report(plain))
    assert "†" not in old and stamps_note(build_results(plain)) is None


def test_a_compare_says_beside_each_latency_verdict_where_the_runs_stamped_it_differently():
    """Publish latency ending at librdkafka's callback in the candidate and at arrival in the earlier runs: a change of
    method, said beside the publish-latency verdicts only; the verdicts themselves stay as the test found them, as
    between send loops (regression.flag_send_loops)."""
    def kafka_acks(ack):
        return lambda c: (ack, "arrival") if c["broker"] == "kafka" else ("arrival", "arrival")

    earlier = [build_report(with_stamps(synthetic_run(SPEC, intervals=12, seed=seed), kafka_acks("arrival")))
               for seed in (3, 4, 5)]
    later = synthetic_run(SPEC, intervals=12, seed=6)
    # 12 intervals: enough messages per repeat for each p99 (reports.model.min_samples)
    verdicts = regression.compare(earlier[0], build_report(with_stamps(later, kafka_acks("client:librdkafka"))),
                                  earlier[1:])
    flagged = [v for v in verdicts if v.get("stamps")]
    assert {(v["key"].split("|")[0], v["metric"]) for v in flagged} == {
        ("kafka", "publish_latency_p99_us")}  # not Kafka's end-to-end (delivered at arrival), throughput, or Redis
    for v in flagged:
        assert v["stamps"] == {"of": "ack_stamps", "history": "arrival", "candidate": "client:librdkafka"}
        assert v["why"].startswith("stamped differently: arrival vs client:librdkafka (acknowledgements, where "
                                   "publish latency ends: earlier runs vs this run), a change of method, not of the "
                                   "broker; ")
    same = regression.compare(earlier[0], build_report(with_stamps(later, kafka_acks("arrival"))), earlier[1:])
    assert [v["verdict"] for v in same] == [v["verdict"] for v in verdicts]  # the note changes no verdict
    assert not any("stamps" in v or "stamped differently" in v["why"] for v in same)

    # the earlier runs' stamps are pooled: one of them stamped in librdkafka too, still not all as the candidate did
    mixed = [earlier[0], build_report(with_stamps(synthetic_run(SPEC, intervals=12, seed=4),
                                                  kafka_acks("client:librdkafka")))]
    found = regression.compare(mixed[0], build_report(with_stamps(later, kafka_acks("client:librdkafka"))), mixed[1:])
    assert {v["stamps"]["history"] for v in found if v.get("stamps")} == {"arrival, client:librdkafka"}
    # runs stored before stamps were recorded: nothing to say
    old = regression.compare(build_report(synthetic_run(SPEC, intervals=12, seed=3)),
                             build_report(with_stamps(later, kafka_acks("client:librdkafka"))))
    assert not any("stamps" in v for v in old)

    # the report's verdict lines (Markdown, HTML) say it beside the verdict
    check = {"baseline_run_id": "b", "verdicts": verdicts}
    lines = markdown.regression_section(section({"regression_check": check}))
    marked = [line for line in lines if "publish_latency_p99_us" in line and line.startswith("| kafka")]
    assert marked and all("(stamped differently: arrival vs client:librdkafka) |" in line for line in marked)
    assert not any("stamped differently" in line for line in lines if "publish_latency" not in line)
    assert "stamped differently: arrival vs client:librdkafka" in html._verdict_table(
        [rows.verdict(v) for v in flagged], "")


def test_the_run_the_console_reads_carries_each_cells_stamps_and_the_footnote():
    """GET /runs/{id} (api.views.run_detail, as the RunDetail model answers it): each cell line has its stamps, as
    results.json has them, and the run the footnote its table shows under the rows it marks †."""
    events = with_stamps(synthetic_run(SPEC, intervals=4, seed=3), lambda c: STAMPS[c["broker"]])
    run_id = events[0]["run_id"]
    detail = RunDetail(**views.run_detail(MemoryEventStore(events), None, run_id)).model_dump()
    lines = {(c["broker"], c["ack_stamps"], c["delivery_stamps"]) for c in detail["cells_detail"]}
    assert lines == {("kafka", "client:librdkafka", "client:librdkafka"), ("redis-streams", "arrival", "arrival")}
    assert detail["stamps_note"] == stamp_note([("kafka raw", "client:librdkafka", "client:librdkafka")])
    plain = synthetic_run(SPEC, intervals=4, seed=3)  # stored before the stamps were recorded: nothing to say
    old = views.run_detail(MemoryEventStore(plain), None, plain[0]["run_id"])
    assert old["stamps_note"] is None and {c["ack_stamps"] for c in old["cells_detail"]} == {None}


def test_a_recorded_regression_keeps_how_its_runs_stamped_and_sent():
    """RegressionDetected keeps the stamps note and the send loops as fields, not only in its words: the scheduled
    watch (history._event_data) and the pairwise check store the same marks, and the event validates; a stamp kind
    the figures do not know is refused, naming the field."""
    from brokerbench.events import InvalidEvent, make_event, validate
    from brokerbench.reports import history

    verdict = {"cell": "kafka raw", "cell_id": "c1", "key": "kafka|raw", "metric": "publish_latency_p99_us",
               "verdict": "regression", "source": "pairwise", "baseline_median": 900.0, "candidate_median": 1400.0,
               "change": 0.55, "p_value": 0.001, "why": "stamped differently: arrival vs client:librdkafka; ...",
               "stamps": {"of": "ack_stamps", "history": "arrival", "candidate": "client:librdkafka"},
               "send_loops": {"baseline": "native", "candidate": "python"}}
    data = history._event_data(verdict, "b")
    assert data["stamps"] == verdict["stamps"] and data["send_loops"] == verdict["send_loops"]
    assert regression.event_marks(verdict) == {k: verdict[k] for k in ("stamps", "send_loops")}
    assert regression.event_marks({**verdict, "stamps": None, "send_loops": None}) == {}
    validate(make_event("20250101T000000Z-abcdef", "RegressionDetected", data, cell_index=0, key=verdict["metric"]))
    bad = {**data, "stamps": {**data["stamps"], "of": "queue_stamps"}}
    try:
        validate(make_event("20250101T000000Z-abcdef", "RegressionDetected", bad, cell_index=0, key=verdict["metric"]))
    except InvalidEvent as exc:
        assert "data.stamps.of" in str(exc)
    else:
        raise AssertionError("an unknown stamp kind was accepted")
