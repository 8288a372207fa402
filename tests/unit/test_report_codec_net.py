"""Codec figures net of the call floor, and the rate a search found with how long it held, where reports are read:
the Markdown and HTML grids and the CLI's table, from a run's events with figures known by hand."""

import copy
import io
import re

import numpy as np
import pytest
from rich.console import Console
from synthetic import synthetic_run

from brokerbench import histogram
from brokerbench.reports import html, markdown, rows
from brokerbench.reports.model import build_report
from brokerbench.reports.results import build_results
from brokerbench.reports.table import comparison_tables, floor_note, verdict_cell

SPEC = {"name": "codec", "brokers": ["kafka"], "sizes": [1024], "rates": [1000], "formats": ["json", "msgpack"]}
VALUES = 200  # per codec histogram: enough for a p50 (20)


def _codec_histograms(encode_ns: int, decode_ns: int) -> dict:
    """Every message encoded in exactly `encode_ns` and decoded in `decode_ns` (exact in HdrHistogram below 2,048)."""
    return {field: histogram.encode(histogram.from_values(np.full(VALUES, value, np.int64)))
            for field, value in (("encode_ns", encode_ns), ("decode_ns", decode_ns))}


def codec_run(figures: dict[str, list[tuple]], repeats: int = 1) -> list[dict]:
    """A run whose cells of each format have, per repeat, (encode p50, decode p50, floor or None) in ns; a floor is
    (encode, decode)."""
    events = copy.deepcopy(synthetic_run({**SPEC, "repeats": repeats}, intervals=3, seed=3))
    cells = {c["cell_id"]: c for c in events[0]["data"]["cells"]}
    for event in events:
        if event["type"] != "CellCompleted":
            continue
        cell = cells[event["data"]["cell_id"]]
        encode_ns, decode_ns, floor = figures[cell["format"]][cell["repeat"] - 1]
        event["data"]["histograms"].update(_codec_histograms(encode_ns, decode_ns))
        if floor is not None:
            event["data"]["codec_floor_ns"] = {"encode_ns": float(floor[0]), "decode_ns": float(floor[1]),
                                               "encode_loop": "native", "decode_loop": "native",
                                               "noop": "builtins.callable", "calls": 20_000}
    return events


def _row(md: str, fmt: str) -> list[str]:
    [line] = [line for line in md.splitlines() if line.startswith(f"| kafka | {fmt} |")]
    return [part.strip() for part in line.strip("|").split("|")]


def _cli_text(results: dict) -> str:
    console = Console(width=240, record=True, file=io.StringIO())
    for table in comparison_tables(results):
        console.print(table)
    return console.export_text()


@pytest.fixture(scope="module")
def one_repeat():
    # json: a floor of 100 / 150 ns under p50s of 700 / 900 ns; msgpack: stored before the floor was measured.
    return codec_run({"json": [(700, 900, (100, 150))], "msgpack": [(700, 900, None)]})


def test_results_give_the_p50s_less_the_floor_and_nothing_without_one(one_repeat):
    cells = {c["format"]: c for c in build_results(one_repeat)["cells"]}
    assert cells["json"]["encode_ns"]["p50"] == 700 and cells["json"]["encode_net_ns"]["p50"] == 600
    assert cells["json"]["decode_net_ns"]["p50"] == 750
    assert "encode_net_ns" not in cells["msgpack"] and "codec_floor_ns" not in cells["msgpack"]


def test_markdown_and_html_grids_show_measured_net_and_floor_or_a_dash(one_repeat):
    report = build_report(one_repeat)
    md, page = markdown.render(report), html.render(report)
    header = _row(md.replace("| broker | format |", "| kafka | header |"), "header")
    codec = header.index("enc ns")
    assert header[codec:codec + 5] == ["enc ns", "enc net ns", "dec ns", "dec net ns", "floor ns (enc / dec)"]
    assert _row(md, "json")[codec:codec + 5] == ["700", "600", "900", "750", "100.0 / 150.0"]
    assert _row(md, "msgpack")[codec:codec + 5] == ["700", "–", "900", "–", "–"]
    assert "<td>700</td><td>600</td><td>900</td><td>750</td><td class='nowrap'>100.0 / 150.0</td>" in page
    assert "<td>700</td><td>–</td><td>900</td><td>–</td><td class='nowrap'>–</td>" in page
    assert report["rules"]["codec"] in md and "Codec figures" in page
    # the serialization chart: bars of the measured p50s and, where a floor was measured, of the net ones (µs)
    assert "json encode µs (p50): 0.70" in page and "json encode net µs: 0.60" in page
    assert "json decode net µs: 0.75" in page and "msgpack encode net µs" not in page


def test_the_cli_table_shows_measured_and_net_and_names_the_floor_once(one_repeat):
    results = build_results(one_repeat)
    text = _cli_text(results)
    assert "enc ns / net" in text and "dec ns / net" in text
    json_row = next(line for line in text.splitlines() if " json " in line)
    msgpack_row = next(line for line in text.splitlines() if " msgpack " in line)
    assert "700 / 600" in json_row and "900 / 750" in json_row
    assert "700 / -" in msgpack_row and "900 / -" in msgpack_row
    note = floor_note(results)
    assert "encode 100.0 ns, decode 150.0 ns" in note and "net '-': stored before the floor was measured" in note


def test_over_repeats_the_net_figure_is_the_median_of_each_repeats_own_and_a_repeat_without_floor_makes_a_dash():
    events = codec_run({"json": [(700, 900, (100, 150)), (800, 1000, (120, 130)), (750, 950, (110, 140))],
                        "msgpack": [(700, 900, (100, 150)), (800, 1000, None), (750, 950, (110, 140))]}, repeats=3)
    report = build_report(events)
    configs = {c["format"]: c for c in report["groups"][0]["cells"]}
    # json: nets 600, 680, 640 and 750, 870, 810; medians 640 and 810; floors' medians 110 and 140.
    assert configs["json"]["metrics"]["encode_net_p50_ns"]["median"] == 640
    assert configs["json"]["metrics"]["decode_net_p50_ns"]["median"] == 810
    assert configs["json"]["codec_floor_ns"] == {"encode_ns": 110.0, "decode_ns": 140.0, "n": 3}
    assert configs["msgpack"]["metrics"]["encode_net_p50_ns"]["median"] is None
    assert configs["msgpack"]["codec_floor_ns"] is None
    md = markdown.render(report)
    codec = _row(md.replace("| broker | format |", "| kafka | header |"), "header").index("enc ns")
    assert _row(md, "json")[codec:codec + 5] == ["750 (700–800)", "640 (600–680)", "950 (900–1,000)",
                                                 "810 (750–870)", "110.0 / 140.0"]
    assert _row(md, "msgpack")[codec:codec + 5] == ["750 (700–800)", "–", "950 (900–1,000)", "–", "–"]


# -- a searched rate and how long it held ------------------------------------------------------------------
def _search(rate: float, held: float | None) -> dict:
    return {"max_sustainable_rate": rate, "sustainable_for_s": held, "ended": "bracketed within 5%", "disputes": [],
            "steps": [{"rate": 2000.0, "verdict": "sustainable"}, {"rate": 3000.0, "verdict": "unsustainable"},
                      {"rate": rate, "verdict": "sustainable"}, {"rate": rate, "verdict": "sustainable"}]}


def search_run(searches: list[dict]) -> list[dict]:
    """A run of one kafka json configuration whose repeats were rate searches that found `searches`."""
    events = copy.deepcopy(synthetic_run({**SPEC, "formats": ["json"], "repeats": len(searches)}, intervals=3))
    for cell in events[0]["data"]["cells"]:
        cell["rate"] = "sustainable"
    repeat_of = {c["cell_id"]: c["repeat"] for c in events[0]["data"]["cells"]}
    for event in events:
        if event["type"] == "CellStarted":
            event["data"]["cell"]["rate"] = "sustainable"
        if event["type"] == "CellCompleted":
            event["data"]["search"] = searches[repeat_of[event["data"]["cell_id"]] - 1]
    return events


def test_a_search_reads_max_sustainable_rate_held_for_in_the_cli_markdown_and_html():
    events = search_run([_search(2480.0, 12.0)])
    [cell] = build_results(events)["cells"]
    assert verdict_cell(cell) == "max sustainable 2,480 msgs/s (held 12 s, 4 steps)"
    report = build_report(events)
    md, page = markdown.render(report), html.render(report)
    assert _row(md, "json")[-1] == "max sustainable 2,480 msgs/s (held 12 s)"
    assert "<td>max sustainable 2,480 msgs/s (held 12 s)</td>" in page
    # The steps behind it, as the Markdown report lists them, in the HTML report too.
    assert "maximum sustainable rate 2,480 msgs/s, sustainable for 12 s (bracketed within 5%)" in page


def test_over_repeats_the_median_rate_and_each_repeats_held_seconds():
    events = search_run([_search(2480.0, 12.0), _search(2600.0, 18.0), _search(2300.0, 12.0)])
    report = build_report(events)
    text = markdown.verdict_text(rows.config(report["groups"][0]["cells"][0]))
    assert text == "max sustainable 2,480 msgs/s (median of 3 repeats, held 12–18 s)"
    assert f"<td>{text}</td>" in html.render(report)


def test_a_search_stored_without_its_held_seconds_or_without_a_rate_says_only_what_is_known():
    [cell] = build_results(search_run([_search(2480.0, None)]))["cells"]
    assert verdict_cell(cell) == "max sustainable 2,480 msgs/s (4 steps)"
    report = build_report(search_run([_search(2480.0, None)]))
    assert markdown.verdict_text(rows.config(report["groups"][0]["cells"][0])) == "max sustainable 2,480 msgs/s"
    nothing = {**_search(2480.0, None), "max_sustainable_rate": None}
    report = build_report(search_run([nothing]))
    assert markdown.verdict_text(rows.config(report["groups"][0]["cells"][0])) == "no sustainable rate found"
    assert re.search(r"held \d", markdown.render(report)) is None
