"""Reading a run as reports do, on DynamoDB Local: cells whose digest stands for their intervals are read by key,
without them; every other cell whole; and the report is the one the whole run's events give."""

import pytest
from synthetic import synthetic_run

from brokerbench.events import has_digest, make_event, read_report_events
from brokerbench.reports.model import build_report, interval_digest
from inline_run import execute_run

SPEC = {"name": "report-read", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000, "max"],
        "formats": ["json", "msgpack"], "repeats": 2}


def without_intervals(events):
    return [e for e in events if e["type"] != "IntervalMeasured"]


def cells_with_intervals(events):
    return {e["data"]["cell_id"] for e in events if e["type"] == "IntervalMeasured"}


def test_digested_cells_are_read_without_their_intervals_and_report_the_same(store):
    events = synthetic_run(SPEC, intervals=8, seed=21)
    run_id = events[0]["run_id"]
    store.append(events)
    whole = store.read(run_id, interval_histograms=False)
    assert [e["sk"] for e in whole] == sorted(e["sk"] for e in events)  # every event, in order
    short = read_report_events(store, run_id)
    assert short == without_intervals(whole)
    assert build_report(short) == build_report(whole)


def test_retried_failed_running_and_undigested_cells_are_read_whole(store):
    events = synthetic_run(SPEC, intervals=6, seed=22)
    run_id = events[0]["run_id"]
    cells = sorted(events[0]["data"]["cells"], key=lambda c: c["index"])
    retried, failed, running, old = cells[1], cells[3], cells[4], cells[6]
    kept = []
    for e in events:
        cid = e["data"].get("cell_id")
        unended = e["type"] == "CellCompleted" and cid in (failed["cell_id"], running["cell_id"])
        if e["type"] == "RunCompleted" or unended:
            continue  # the run is still going: one cell failed, one has not ended
        if e["type"] == "CellCompleted" and cid == old["cell_id"]:  # a worker from before digests
            e = make_event(run_id, "CellCompleted", {k: v for k, v in e["data"].items() if k not in ("digest",)},
                           cell_index=old["index"])
        kept.append(e)
    # A second attempt of `retried` started (a worker retried while the first one still ran); the first one ended it.
    kept.append(make_event(run_id, "CellStarted", {"cell_id": retried["cell_id"], "cell": retried, "topic": "t-a1",
                                                   "attempt": 1}, cell_index=retried["index"], attempt=1))
    kept += [make_event(run_id, "IntervalMeasured", {**e["data"], "attempt": 1}, cell_index=retried["index"],
                        interval=e["data"]["interval"], attempt=1)
             for e in events if e["type"] == "IntervalMeasured" and e["data"]["cell_id"] == retried["cell_id"]][:3]
    kept.append(make_event(run_id, "CellFailed", {"cell_id": failed["cell_id"], "reason": "broker went away",
                                                  "attempt": 0, "intervals": 6}, cell_index=failed["index"]))
    store.append(kept)
    whole = store.read(run_id, interval_histograms=False)
    short = read_report_events(store, run_id)
    assert cells_with_intervals(short) == {retried["cell_id"], failed["cell_id"], running["cell_id"], old["cell_id"]}
    assert short == [e for e in whole if e["type"] != "IntervalMeasured"
                     or e["data"]["cell_id"] in cells_with_intervals(short)]
    assert build_report(short) == build_report(whole)


def test_a_cell_read_by_prefix_or_after_a_cursor_still_has_its_intervals(store):
    events = synthetic_run({**SPEC, "repeats": 1, "rates": [1000]}, intervals=4, seed=23)
    run_id = events[0]["run_id"]
    store.append(events)
    first = next(e for e in events if e["type"] == "CellStarted")
    prefix = first["sk"][:len("10#c00000#")]
    cell = store.read(run_id, prefix=prefix, interval_histograms=False)
    assert [e["type"] for e in cell] == ["CellStarted"] + ["IntervalMeasured"] * 4 + ["CellCompleted"]
    assert [e["sk"] for e in store.read(run_id, prefix=prefix, after=cell[1]["sk"])] == [e["sk"] for e in cell[2:]]


@pytest.mark.parametrize("consumers", [1, 0])
def test_a_real_cells_digest_is_its_stored_intervals(endpoints, store, consumers):
    spec = {"name": f"digest-real-{consumers}", "brokers": ["kafka"], "sizes": [1024],
            "rates": [300, "max"] if consumers else [300], "formats": ["json"], "consumers": consumers,
            "duration_s": 3, "warmup_s": 0.5, "warmup_until_steady": False}
    outcome = execute_run(spec, endpoints, store)
    whole = store.read(outcome.run_id, interval_histograms=False)
    ends = [e["data"] for e in whole if e["type"] == "CellCompleted"]
    assert ends and len(ends) == len([e for e in whole if e["type"] == "CellStarted"])
    for end in ends:
        assert has_digest(end), end.get("digest")
        intervals = [e["data"] for e in whole
                     if e["type"] == "IntervalMeasured" and e["data"]["cell_id"] == end["cell_id"]]
        assert end["digest"] == interval_digest(intervals, end["digest"]["judged"])  # sizes as stored included
        assert end["digest"]["judged"]["publish_only"] is (consumers == 0)
    short = read_report_events(store, outcome.run_id)
    assert not cells_with_intervals(short)
    report = build_report(short)
    assert report == build_report(whole)
    verdicts = {c["sustainability"]["verdict"] for g in report["groups"] for c in g["cells"]}
    assert verdicts <= {"max-rate", "inconclusive", "sustainable", "unsustainable"}
