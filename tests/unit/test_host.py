"""The host's figures (brokerbench.host): /proc text parsed, shares worked out by hand, the busy rule, and what a
busy cell does to a report: marked in every table, no claim and no regression verdict rests on it."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from synthetic import claim_configuration, synthetic_run

from brokerbench import host
from brokerbench.events.memory import MemoryEventStore
from brokerbench.reports import html, markdown
from brokerbench.reports import regression as R
from brokerbench.reports.model import build_report, claims, run_noise
from brokerbench.reports.results import build_results
from brokerbench.reports.table import comparison_tables, host_note

CPU = """some avg10=12.50 avg60=3.10 avg300=0.90 total=4107665483
full avg10=0.00 avg60=0.00 avg300=0.00 total=0
"""
MEMORY = """some avg10=0.00 avg60=0.00 avg300=0.00 total=698459
full avg10=0.00 avg60=0.00 avg300=0.00 total=408892
"""
STAT = """cpu  1158218 13895 219986 785189 10188 0 20072 1410 0 0
cpu0 582676 6784 111355 388403 5383 0 9198 703 0 0
cpu1 575542 7111 108630 396786 4805 0 10873 707 0 0
intr 123 0
ctxt 456
"""


def test_pressure_totals_are_read_from_the_named_line():
    assert host.pressure_total_us(CPU) == 4107665483
    assert host.pressure_total_us(CPU, "full") == 0
    assert host.pressure_total_us(MEMORY) == 698459
    # A kernel whose file has no "some" line, or a line without its total, gives nothing (not 0).
    assert host.pressure_total_us("full avg10=0.00 total=5\n") is None
    assert host.pressure_total_us("some avg10=1.00 avg60=0.00\n") is None
    assert host.pressure_total_us("") is None


def test_proc_stat_ticks_count_idle_with_iowait_and_guest_only_once():
    ticks = host.stat_ticks(STAT)
    # user nice system idle iowait irq softirq steal: guest and guest_nice (already in user, nice) left out
    assert ticks.total == 1158218 + 13895 + 219986 + 785189 + 10188 + 0 + 20072 + 1410
    assert ticks.idle == 785189 + 10188 and ticks.steal == 1410 and ticks.cpus == 2
    # A kernel older than steal (7 fields) has none; a text without the cpu line gives nothing.
    assert host.stat_ticks("cpu  10 0 10 80 0 0 0\ncpu0 10 0 10 80 0 0 0\n").steal == 0
    assert host.stat_ticks("intr 1\n") is None


def reading(at, cpu_us, memory_us, user, idle, steal, cpus=2):
    return host.Reading(at, cpu_us, memory_us, host.CpuTicks(total=user + idle + steal, idle=idle, steal=steal,
                                                                cpus=cpus))


def test_shares_over_a_span_by_hand():
    first = reading(100.0, 1_000_000, 50_000, user=1000, idle=1000, steal=0)
    # 2 s later: 1.5 s of CPU stall (75%), 0.1 s of memory stall (5%); of 400 more ticks 240 used, 60 stolen
    # (15%) and 100 idle: CPU use (400 - 100) / 400 = 75% (stolen ticks are not idle ones).
    last = reading(102.0, 2_500_000, 150_000, user=1240, idle=1100, steal=60)
    figures = host.between(first, last)
    assert figures == {"cpu_pressure_pct": 75.0, "memory_pressure_pct": 5.0, "steal_pct": 15.0, "cpu_pct": 75.0,
                       "cpus": 2}
    # Where the kernel has no pressure files the pressures are unknown, not 0; steal is still read.
    none = host.between(host.Reading(0.0, None, None, first.ticks), host.Reading(2.0, None, None, last.ticks))
    assert none["cpu_pressure_pct"] is None and none["memory_pressure_pct"] is None and none["steal_pct"] == 15.0


def test_a_sampler_gives_each_span_since_the_previous_sample():
    readings = iter([reading(0.0, 0, 0, 0, 100, 0), reading(1.0, 200_000, 0, 50, 150, 0),
                     reading(2.0, 1_100_000, 0, 150, 150, 0)])
    sampler = host.HostSampler(reader=lambda: next(readings))
    assert sampler.sample()["cpu_pressure_pct"] == 20.0
    second = sampler.sample()
    assert second["cpu_pressure_pct"] == 90.0 and second["cpu_pct"] == 100.0


@pytest.mark.parametrize("figures, own, busy", [
    # beside a busy loop: the tests' cells read 78-96% (tests/machine_load.py)
    ({"cpu_pressure_pct": 78.0, "cpu_pct": 100.0, "cpus": 2}, 60.0, True),
    # the cell's own processes outnumber the cores (a max-rate cell): 170% of one core of its own on 2 cores
    ({"cpu_pressure_pct": 88.6, "cpu_pct": 100.0, "cpus": 2}, 170.0, False),
    # the cell's own CPU unknown: the pressure alone decides
    ({"cpu_pressure_pct": 52.0, "cpu_pct": 100.0, "cpus": 2}, None, True),
    # at most 43% in any cell of an idle run
    ({"cpu_pressure_pct": 43.0, "cpu_pct": 100.0, "cpus": 2}, 0.0, False),
    ({"cpu_pressure_pct": None, "steal_pct": 12.0}, None, True),
    ({"cpu_pressure_pct": 10.0, "memory_pressure_pct": 11.0}, None, True),
    ({"cpu_pressure_pct": None, "memory_pressure_pct": None, "steal_pct": None}, None, False),
])
def test_the_busy_rule(figures, own, busy):
    found = host.judged(figures, own)
    assert found["busy"] is busy and bool(found["reasons"]) is busy
    assert host.text(found).startswith("host busy: ") is busy


def test_others_are_the_hosts_cpu_less_the_cells_own():
    judged = host.judged({"cpu_pressure_pct": 80.0, "cpu_pct": 90.0, "cpus": 2}, 100.0)  # one core of 2 is 50%
    assert judged["others_cpu_pct"] == 40.0
    assert judged["reasons"] == ["CPU pressure 80% > 50% with 40% of the host's CPU used outside the cell"]


# -- what a report does with a busy cell --------------------------------------------------------------
BUSY = {"cpu_pressure_pct": 78.4, "memory_pressure_pct": 0.0, "steal_pct": 0.1, "cpu_pct": 100.0, "cpus": 2,
        "others_cpu_pct": 60.0, "busy": True, "reasons": ["CPU pressure 78% > 50% with 60% of the host's CPU used "
                                                          "outside the cell"]}
QUIET = {**BUSY, "cpu_pressure_pct": 12.0, "others_cpu_pct": 1.0, "busy": False, "reasons": []}


def with_host(events, busy):
    """Each CellCompleted given the host's figures: BUSY where busy(cell) says so, QUIET elsewhere."""
    cells = {c["cell_id"]: c for c in events[0]["data"]["cells"]}
    out = []
    for e in events:
        if e["type"] == "CellCompleted":
            e = copy.deepcopy(e)
            e["data"]["host"] = BUSY if busy(cells[e["data"]["cell_id"]]) else QUIET
        out.append(e)
    return out


def marked(cell):
    return (cell["broker"], cell["format"], cell["repeat"]) == ("kafka", "raw", 2)


def test_every_table_marks_a_busy_cell_and_says_why():
    spec = {"name": "h", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000],
            "formats": ["raw"], "repeats": 3}
    events = with_host(synthetic_run(spec, intervals=5, seed=3), marked)
    results = build_results(events)
    from rich.console import Console

    console = Console(width=250, record=True, force_terminal=False)
    for table in comparison_tables(results):
        console.print(table)
    text = console.export_text()
    assert text.count("host busy (CPU pressure 78%)") == 1
    assert host_note(results).startswith("host busy (1 cell: kafka raw #2: host busy: CPU pressure 78% > 50%")
    report = build_report(events)
    config = next(c for c in report["groups"][0]["cells"] if c["broker"] == "kafka")
    assert config["host"]["busy_repeats"] == [2] and config["host"]["cpu_pressure_pct_max"] == 78.4
    assert report["configurations_host_busy"] == [config["key"]]
    assert report["host_note"].startswith("the host was busy during 1 repeat of 1 configuration, CPU pressure up "
                                          "to 78%")
    rendered = markdown.render(report)
    assert "⚠ host busy (repeat 2: CPU pressure 78% > 50%" in rendered and "**Host busy:**" in rendered
    assert "- **Host busy.** A cell is marked" in rendered
    page = html.render(report)
    assert "<p class='bad'><b>Host busy:</b>" in page and "⚠ host busy (repeat 2" in page
    # A report of cells stored before the host was read marks nothing.
    plain = build_report(synthetic_run(spec, intervals=5, seed=3))
    assert plain["host_note"] is None and plain["configurations_host_busy"] == []


def test_claims_leave_out_busy_repeats():
    rng = np.random.default_rng(5)

    def configs(repeats, busy):
        out = []
        for fmt, factor in (("json", 1.0), ("avro", 3.0)):
            values = {"throughput_msgs_per_s": list(2000 * np.exp(rng.normal(0, 0.01, repeats))),
                      "end_to_end_p99_us": list(3000 * factor * np.exp(rng.normal(0, 0.05, repeats)))}
            config = claim_configuration("kafka", fmt, values)
            config["host"] = {"busy_repeats": busy if fmt == "avro" else [], "reasons": BUSY["reasons"]}
            out.append(config)
        return out

    def p99_claims(found):
        groups = [{"title": "1,024 B · 1,000 msgs/s · batch", "cells": found}]
        highlights, _ = claims(groups, {"format": "json", "broker": "kafka"}, run_noise(found))
        return [h for h in highlights if h["metric"] == "end_to_end_p99_us"]

    assert len(p99_claims(configs(3, []))) == 1  # tripled p99 over 3 quiet repeats: claimed
    assert p99_claims(configs(3, [2])) == []  # one of them busy: 2 quiet pairs are too few to claim anything
    (claim,) = p99_claims(configs(5, [1]))  # one of 5 busy: the claim rests on the 4 quiet ones
    assert claim["repeats"] == 4 and "over 4 paired repeats" in claim["text"]


def test_the_regression_watch_takes_no_evidence_from_a_busy_host():
    spec = {"name": "aa", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [2000],
            "formats": ["raw", "json"], "repeats": 3}
    runs = [synthetic_run(spec, intervals=5, seed=i, run_id=f"20250101T{i:06d}Z-abcdef") for i in range(4)]
    dropped = synthetic_run(spec, intervals=5, seed=9, run_id="20250101T000009Z-abcdef", rate_scale=0.75)
    history = runs[:3][::-1]
    plain = R.compare(runs[3], dropped, history)
    caught = {v["key"] for v in plain if v["verdict"] == "regression"}
    assert len(caught) == 4  # every configuration's throughput dropped 25%
    kafka_raw = next(k for k in caught if k.startswith("kafka|raw|"))
    # Every repeat of kafka raw measured on a busy host: no verdict on it calls a change; the others still do.
    whole = R.compare(runs[3], with_host(dropped, lambda c: (c["broker"], c["format"]) == ("kafka", "raw")), history)
    on_it = [v for v in whole if v["key"] == kafka_raw]
    assert on_it and all(v["verdict"] not in ("regression", "improvement") for v in on_it)
    assert all(v["why"].startswith("host busy in candidate repeats 0, 1, 2 of 3") for v in on_it)
    assert {v["key"] for v in whole if v["verdict"] == "regression"} == caught - {kafka_raw}
    # One busy repeat of three: left out, the two quiet ones still show the drop, and the verdict says so.
    one = R.compare(runs[3], with_host(dropped, marked), history)
    throughput = next(v for v in one if v["key"] == kafka_raw and v["metric"] == "throughput_msgs_per_s")
    assert throughput["verdict"] == "regression" and throughput["n_candidate"] == 2
    assert throughput["why"].startswith("host busy in candidate repeat 2 of 3") and "left out" in throughput["why"]
    assert throughput["host_busy"]["candidate"]["repeats"] == [2]
    # A check stores no RegressionDetected for a busy configuration.
    store = MemoryEventStore()
    for events in [*runs, with_host(dropped, lambda c: (c["broker"], c["format"]) == ("kafka", "raw"))]:
        store.append(events)
    checked = R.check(store, "20250101T000009Z-abcdef")
    assert kafka_raw not in {r["key"] for r in checked["regressions"]}
