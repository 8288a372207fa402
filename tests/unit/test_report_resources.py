"""CPU and memory of the broker and the workers in the comparison report, aggregated over repeats."""

import copy
from html import escape

import pytest
from synthetic import synthetic_run

from brokerbench.reports import html, markdown
from brokerbench.reports.model import RESOURCES_NOTE, build_report

SPEC = {"name": "syn", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000], "formats": ["json"],
        "repeats": 3}


def used(cpu_mean, cpu_max, rss):
    return {"cpu_pct_mean": cpu_mean, "cpu_pct_max": cpu_max, "rss_mb_max": rss, "samples": 6}


# Per broker, per repeat: what the cell's CellCompleted event carries (None: a run stored before sampling).
RESOURCES = {
    "kafka": [{"broker": used(40.0, 90.0, 300.2), "workers": used(20.0, 35.0, 80.0)},
              {"broker": used(60.0, 120.5, 310.7), "workers": None},
              {"broker": used(50.5, 80.0, 305.0), "workers": used(31.0, 44.4, 82.5)}],
    # A managed broker: only the workers are sampled; one repeat has no figures at all.
    "redis-streams": [{"workers": used(12.0, 30.0, 1200.0)}, None, {"workers": used(14.0, 70.0, 1250.0)}],
}


def with_resources(events, resources):
    cells = {c["cell_id"]: c for c in events[0]["data"]["cells"]}
    out = copy.deepcopy(events)
    for e in out:
        if e["type"] == "CellCompleted":
            cell = cells[e["data"]["cell_id"]]
            e["data"]["resources"] = resources[cell["broker"]][cell["repeat"]]
    return out


@pytest.fixture(scope="module")
def report():
    return build_report(with_resources(synthetic_run(SPEC, intervals=6, seed=1), RESOURCES))


def by_broker(report):
    return {c["broker"]: c for g in report["groups"] for c in g["cells"]}


def test_resources_are_aggregated_over_repeats(report):
    kafka = by_broker(report)["kafka"]["resources"]
    # broker: median of 40.0, 60.0, 50.5; max of 90.0, 120.5, 80.0; max of 300.2, 310.7, 305.0.
    assert kafka["broker"] == {"cpu_pct_mean": 50.5, "cpu_pct_max": 120.5, "rss_mb_max": 310.7, "repeats": 3}
    # workers: sampled in two repeats only; the median of 20.0 and 31.0 is their midpoint.
    assert kafka["workers"] == {"cpu_pct_mean": 25.5, "cpu_pct_max": 44.4, "rss_mb_max": 82.5, "repeats": 2}


def test_a_managed_broker_has_only_the_workers_group(report):
    redis = by_broker(report)["redis-streams"]["resources"]
    assert set(redis) == {"workers"}
    assert redis["workers"] == {"cpu_pct_mean": 13.0, "cpu_pct_max": 70.0, "rss_mb_max": 1250.0, "repeats": 2}


def test_markdown_shows_the_figures_a_dash_for_an_unsampled_group_and_the_note(report):
    md = markdown.render(report)
    assert "## Resources" in md
    assert ("| broker | format | mode | size | rate | broker CPU % (mean / max) | broker RSS MB "
            "| workers CPU % (mean / max) | workers RSS MB |") in md
    assert "| kafka | json | batch | 1,024 B | 1,000 msgs/s | 50.5 / 120.5 | 310.7 | 25.5 / 44.4 | 82.5 |" in md
    assert "| redis-streams | json | batch | 1,024 B | 1,000 msgs/s | — | — | 13.0 / 70.0 | 1,250.0 |" in md
    assert RESOURCES_NOTE in md and RESOURCES_NOTE.startswith("CPU: share of one core (100 = one core busy)")


def test_html_shows_the_figures_a_dash_for_an_unsampled_group_and_the_note(report):
    page = html.render(report)
    assert "<h2>Resources</h2>" in page
    assert ("<tr><td>kafka</td><td>json</td><td>batch</td><td>1,024 B</td><td>1,000 msgs/s</td>"
            "<td>50.5 / 120.5</td><td>310.7</td><td>25.5 / 44.4</td><td>82.5</td></tr>") in page
    assert ("<tr><td>redis-streams</td><td>json</td><td>batch</td><td>1,024 B</td><td>1,000 msgs/s</td>"
            "<td>—</td><td>—</td><td>13.0 / 70.0</td><td>1,250.0</td></tr>") in page
    assert escape(RESOURCES_NOTE) in page


def test_a_run_without_resources_has_no_section():
    report = build_report(synthetic_run(SPEC, intervals=6, seed=1))
    assert all(c["resources"] is None for g in report["groups"] for c in g["cells"])
    assert "Resources" not in markdown.render(report)
    page = html.render(report)
    assert "<h2>Resources</h2>" not in page and escape(RESOURCES_NOTE) not in page
    # Empty summaries (a cell that took no sample) count as no resources either.
    empty = build_report(with_resources(synthetic_run(SPEC, intervals=6, seed=1),
                                        {"kafka": [{}] * 3, "redis-streams": [{"workers": None}] * 3}))
    assert all(c["resources"] is None for g in empty["groups"] for c in g["cells"])
    assert "## Resources" not in markdown.render(empty)
