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

from brokerbench.brokers.socket_buffer import socket_stamps
from brokerbench.figures import STAMP_LAG_PAGE, joined_stamps, late_stamps, stamp_note, stamped_late
from brokerbench.reports import html, markdown
from brokerbench.reports.model import build_report
from brokerbench.reports.results import build_results
from brokerbench.reports.table import comparison_tables, stamps_note

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
