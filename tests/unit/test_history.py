"""A suite's runs as series (reports.history): the change points of stored runs, the alert told once on the run that
made it one, with the run it began with, the versions on either side and the settings that differ."""

import pytest
from synthetic import synthetic_run

from brokerbench.events.memory import MemoryEventStore
from brokerbench.reports import changes, history

SPEC = {"name": "nightly", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [2000],
        "formats": ["raw", "json"], "repeats": 2}
STEADY = 8  # runs before the change
THROUGHPUT = "throughput_msgs_per_s"


def run_id(i):
    return f"20250101T{i:06d}Z-abcdef"


@pytest.fixture(scope="module")
def stored():
    """8 steady runs, then 2 whose producers were set acks=0 and delivered 25% less."""
    store = MemoryEventStore()
    for i in range(STEADY):
        store.append(synthetic_run(SPEC, intervals=3, seed=i, run_id=run_id(i)))
    for i in range(STEADY, STEADY + 2):
        store.append(synthetic_run({**SPEC, "client": {"acks": "0"}}, intervals=3, seed=i, run_id=run_id(i),
                                   rate_scale=0.75))
    return store


def test_the_series_hold_every_run_with_its_repeats(stored):
    runs = history.suite_runs(stored, "nightly")
    assert runs == [run_id(i) for i in range(STEADY + 2)]
    shown = history.history(stored, runs, metrics=[THROUGHPUT])
    assert len(shown["series"]) == 4 and {s["metric"] for s in shown["series"]} == {THROUGHPUT}
    for s in shown["series"]:
        assert [p["run_id"] for p in s["points"]] == runs and all(len(p["repeats"]) == 2 for p in s["points"])
        assert all(p["value"] == pytest.approx(changes.run_value(p["repeats"])) for p in s["points"])
        assert [c["began_run_id"] for c in s["change_points"]] == [run_id(STEADY)]


def test_a_series_is_tested_from_newest_min_runs_and_searched_from_min_series(stored):
    """What the history (the API's /suites/{name}/history) says of each series: too short to test, tested on its
    newest runs only, or searched; the configurations of one broker share a noise group per metric."""
    runs = history.suite_runs(stored, "nightly")
    for count, checked, searched in ((changes.NEWEST_MIN - 1, False, False), (changes.NEWEST_MIN, True, False),
                                     (changes.MIN_SERIES - 1, True, False), (changes.MIN_SERIES, True, True)):
        shown = history.history(stored, runs[:count], metrics=[THROUGHPUT])["series"]
        assert [(s["checked"], s["searched"]) for s in shown] == [(checked, searched)] * 4, count
    groups = {s["key"].split("|")[0]: history.noise_group(s["key"], THROUGHPUT)
              for s in history.analyse({r: _figures(stored, r) for r in runs}, runs, metrics=[THROUGHPUT])}
    assert groups["kafka"] != groups["redis-streams"] and all(THROUGHPUT in g for g in groups.values())


def _figures(store, run):
    from brokerbench.events import read_report_events
    from brokerbench.reports import regression

    return regression.run_figures(read_report_events(store, run))


def test_the_first_run_after_a_change_tells_nothing_the_second_tells_where_it_began(stored):
    first = history.watch(stored, run_id(STEADY), record=False)
    assert first["regressions"] == []  # one run is no change yet; its series are judged by change points, not pairs
    second = history.watch(stored, run_id(STEADY + 1))
    alerts = second["regressions"]
    assert {(a["metric"], a["source"]) for a in alerts} == {(THROUGHPUT, "change_point")} and len(alerts) == 4
    for a in alerts:
        assert a["began_run_id"] == run_id(STEADY) and a["before_run_id"] == run_id(STEADY - 1)
        assert a["change"] == pytest.approx(-0.25, abs=0.03) and a["p_value"] < changes.ALPHA
        assert a["differences"] == [{"setting": "spec.client.acks", "before": "all", "after": "0"}]
        assert a["versions"]["before"]["brokers"] == {"kafka": "synthetic", "redis-streams": "synthetic"}
        assert a["history"] == "/suites/nightly/history?metric=throughput_msgs_per_s"
    stored_events = [e for e in stored.read(run_id(STEADY + 1)) if e["type"] == "RegressionDetected"]
    assert len(stored_events) == 4
    assert all(e["data"]["baseline_run_id"] == run_id(STEADY - 1) and e["data"]["source"] == "change_point"
               for e in stored_events)


def test_differences_name_each_setting_that_changed():
    before = {"client": {"acks": "1", "linger_ms": 5}, "targets": {"kafka": {"broker_version": "4.1.1"}}}
    after = {"client": {"acks": "all", "linger_ms": 5}, "targets": {"kafka": {"broker_version": "4.2.0"}}}
    assert history.differences(before, after) == [
        {"setting": "client.acks", "before": "1", "after": "all"},
        {"setting": "targets.kafka.broker_version", "before": "4.1.1", "after": "4.2.0"}]


def test_the_notification_says_each_alert_and_where_its_series_is_drawn(stored):
    """Notify's text: the change point in words, the API's history of its metric (a full URL when the API's is
    known) and the console's history page."""
    from brokerbench.workflow import steps

    checked = history.watch(stored, run_id(STEADY + 1), record=False)
    regressions = [{k: r.get(k) for k in steps.ALERT_FIELDS if k in r} for r in checked["regressions"]]
    text = steps.notify_text(run_id(STEADY + 1), {"failed_cells": [], "regressions": regressions},
                             "https://api.example/v1/")
    assert text[0] == f"Run {run_id(STEADY + 1)}: report at https://api.example/v1/runs/{run_id(STEADY + 1)}/report?format=html"
    assert len(text) == 5
    for line in text[1:]:
        assert f"from run {run_id(STEADY)} on" in line and f"the run before it: {run_id(STEADY - 1)}" in line
        assert "The series: https://api.example/v1/suites/nightly/history?metric=throughput_msgs_per_s" in line
        assert line.endswith("#/history?suite=nightly&metric=throughput_msgs_per_s")
    local = steps.notify_text(run_id(STEADY + 1), {"failed_cells": [], "regressions": regressions}, None)
    assert "The series: /suites/nightly/history?metric=throughput_msgs_per_s" in local[1]


def stamped_run(i: int, stamps: str, latency_scale: float) -> list[dict]:
    """A synthetic run whose cells say their deliveries were stamped `stamps` (CellCompleted's delivery_stamps)."""
    events = synthetic_run({**SPEC, "brokers": ["redis-streams"]}, intervals=10, seed=i, run_id=run_id(i),
                           latency_scale=latency_scale)
    for event in events:
        if event["type"] == "CellCompleted":
            event["data"]["delivery_stamps"] = stamps
    return events


def test_a_change_point_where_the_runs_stamped_their_latency_differently_says_so():
    """8 runs whose deliveries were stamped at arrival, then 2 stamped in a client library's thread with every latency
    doubled: the end-to-end change points name the stamps as a setting that differs, and the alert says the change may
    be the method's; publish latency (stamped alike) and throughput (no stamp ends it) name none."""
    store = MemoryEventStore()
    for i in range(STEADY):
        store.append(stamped_run(i, "arrival", 1.0))
    for i in range(STEADY, STEADY + 2):
        store.append(stamped_run(i, "client:redis-py", 2.0))
    runs = history.suite_runs(store, "nightly")
    shown = history.history(store, runs)
    end_to_end = [s for s in shown["series"] if s["metric"] == "end_to_end_p99_us"]
    assert end_to_end and all(s["change_points"] for s in end_to_end)
    for s in shown["series"]:
        for point in s["change_points"]:
            stamped = [d for d in point["differences"] if d["setting"].startswith("stamps.")]
            if s["metric"].startswith(("end_to_end", "delivery")):
                assert stamped == [{"setting": "stamps.delivery_stamps", "before": "arrival",
                                    "after": "client:redis-py"}]
            else:
                assert stamped == []
    alerts = [a for a in history.watch(store, run_id(STEADY + 1), record=False)["regressions"]
              if a["metric"] == "end_to_end_p99_us"]
    assert alerts
    for alert in alerts:
        assert {"setting": "stamps.delivery_stamps", "before": "arrival", "after": "client:redis-py"} \
            in alert["differences"]
        assert "stamped differently: arrival vs client:redis-py (the run before vs the run it began with), a change of " \
               "method, not of the broker" in alert["why"]
