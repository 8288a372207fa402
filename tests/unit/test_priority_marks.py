"""Each cell stores the scheduling priority it ran at (CellCompleted `priority`, worker/priority.py); a configuration
keeps its repeats', and a regression verdict or a change point between runs at different priorities says so beside
it: on a shared host the priority alone moves tail latencies."""

import copy

from synthetic import synthetic_run

from brokerbench.events import make_event, validate
from brokerbench.figures import joined_priorities, priority_text
from brokerbench.reports import history, regression
from brokerbench.reports.model import build_report
from brokerbench.reports.results import build_results

SPEC = {"name": "priorities", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000],
        "formats": ["raw"], "repeats": 2}
REALTIME = {"workers": "realtime", "broker": "realtime"}
NORMAL = {"workers": "normal", "broker": "normal", "why_normal": ["BROKERBENCH_REALTIME=0"]}


def with_priority(events, priority_of):
    cells = {c["cell_id"]: c for c in events[0]["data"]["cells"]}
    out = copy.deepcopy(events)
    for e in out:
        if e["type"] == "CellCompleted":
            e["data"]["priority"] = priority_of(cells[e["data"]["cell_id"]])
    return out


def test_the_words_of_a_priority():
    assert priority_text(None) is None
    assert priority_text(REALTIME) == "realtime" and priority_text(NORMAL) == "normal"
    assert priority_text({"workers": "realtime", "broker": "normal", "why_normal": ["broker: no local broker"]}) \
        == "workers realtime, broker normal"
    dropped = {**REALTIME, "dropped": [{"process": "producer-0", "at_s": 0.4, "why": "ran 50 ms without blocking"}]}
    assert priority_text(dropped) == "realtime, dropped"
    assert joined_priorities([REALTIME, None, dropped, REALTIME]) == "realtime; realtime, dropped"
    assert joined_priorities([None]) is None


def test_cells_and_configurations_carry_their_priority_and_the_event_validates():
    events = with_priority(synthetic_run(SPEC, intervals=4, seed=3),
                           lambda c: REALTIME if c["repeat"] == 0 else NORMAL)
    for e in events:
        if e["type"] == "CellCompleted":
            validate(e)
    results = build_results(events)
    assert {(c["broker"], c["repeat"], c["priority"]["workers"]) for c in results["cells"]} == {
        ("kafka", 0, "realtime"), ("kafka", 1, "normal"), ("redis-streams", 0, "realtime"),
        ("redis-streams", 1, "normal")}
    configs = build_report(events)["groups"][0]["cells"]
    assert {c["priority"] for c in configs} == {"normal; realtime"}
    plain = build_report(synthetic_run(SPEC, intervals=4, seed=3))  # stored before it was recorded
    assert {c["priority"] for c in plain["groups"][0]["cells"]} == {None}


def test_a_compare_between_runs_at_different_priorities_says_so_and_keeps_its_verdicts():
    earlier = [build_report(with_priority(synthetic_run(SPEC, intervals=12, seed=s), lambda c: NORMAL))
               for s in (3, 4, 5)]
    later = synthetic_run(SPEC, intervals=12, seed=6)
    verdicts = regression.compare(earlier[0], build_report(with_priority(later, lambda c: REALTIME)), earlier[1:])
    assert verdicts and all(v["priorities"] == {"baseline": "normal", "candidate": "realtime"} for v in verdicts)
    assert all("scheduling priority differs (normal → realtime): the change may be the host's scheduling"
               in v["why"] for v in verdicts)
    same = regression.compare(earlier[0], build_report(with_priority(later, lambda c: NORMAL)), earlier[1:])
    assert [v["verdict"] for v in same] == [v["verdict"] for v in verdicts]  # the note changes no verdict
    assert not any("priorities" in v for v in same)
    old = regression.compare(build_report(synthetic_run(SPEC, intervals=12, seed=3)),
                             build_report(with_priority(later, lambda c: REALTIME)))
    assert not any("priorities" in v for v in old)  # the baseline stored none: nothing to say
    # a recorded regression keeps it as a field, and the event validates
    mark = {"cell": "kafka raw", "cell_id": "c1", "key": "kafka|raw", "metric": "end_to_end_p99_us",
            "verdict": "regression", "source": "pairwise", "baseline_median": 300.0, "candidate_median": 900.0,
            "change": 2.0, "p_value": 0.001, "why": "scheduling priority differs (realtime → normal): ...",
            "priorities": {"baseline": "realtime", "candidate": "normal"}}
    assert regression.event_marks(mark) == {"priorities": mark["priorities"]}
    data = history._event_data(mark, "b")
    assert data["priorities"] == mark["priorities"]
    validate(make_event("20250101T000000Z-abcdef", "RegressionDetected", data, cell_index=0, key=mark["metric"]))


def test_a_change_point_names_a_change_of_priority_between_the_runs_on_either_side():
    series = {"priorities": ["normal", "normal", "realtime", "realtime"]}
    assert history.priority_differences(series, 2) == [{"setting": "priority", "before": "normal",
                                                        "after": "realtime"}]
    assert history.priority_differences(series, 1) == [] and history.priority_differences(series, 3) == []
    assert history.priority_differences({"priorities": [None, "realtime"]}, 1) == []  # stored before: unknown
    assert history.priority_differences({}, 1) == []
