"""Reports built from the digests cells carry (no intervals read) equal reports built from the intervals;
histogram figures decoded the fast way equal hdrh's; large pages leave per-second charts out and say so."""

import copy
import json

from hdrh.histogram import HdrHistogram
import numpy as np
import pytest
from synthetic import synthetic_run

from brokerbench import histogram, verdict
from brokerbench.events import AppendResult, has_digest, read_report_events
from brokerbench.reports import html
from brokerbench.reports.model import (DIGEST_MAX_INTERVALS, _median_ci, build_report, interval_digest,
                                       interval_series, series_from_columns, verdict_basis)
from brokerbench.reports.results import SPECTRUM, decode_buckets, figures, merge_blobs
from brokerbench.reports.stats import median_ci

SPEC = {"name": "digest", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000, "max"],
        "formats": ["json", "msgpack"], "repeats": 3}


def without_histograms(events):
    """The events as a report reads them (events.read_report_events): no per-interval histograms."""
    out = []
    for e in events:
        if e["type"] == "IntervalMeasured":
            e = {**e, "data": {k: v for k, v in e["data"].items() if k != "histograms"}}
        out.append(e)
    return out


def digested(events):
    """What read_report_events returns where every cell's digest stands for its intervals."""
    return [e for e in events if e["type"] != "IntervalMeasured"]


def redigest(events, end_data, publish_only=False):
    """The verdict and digest a worker would store for these (changed) intervals of a cell."""
    cid = end_data["cell_id"]
    intervals = [e["data"] for e in events if e["type"] == "IntervalMeasured" and e["data"]["cell_id"] == cid]
    basis = verdict_basis(end_data["digest"]["judged"]["target"], end_data["measured_s"], publish_only)
    judged = verdict.sustainability(basis["target"], verdict.interval_inputs(intervals, end_data["measured_s"]),
                                    publish_only=publish_only)
    end_data["verdict"] = {"verdict": judged["verdict"], "reasons": judged["reasons"]}
    end_data["digest"] = interval_digest(intervals, basis)


@pytest.fixture(scope="module")
def run():
    return without_histograms(synthetic_run(SPEC, intervals=12, seed=7))


def test_a_report_from_digests_equals_the_report_from_intervals(run):
    assert all(has_digest(e["data"]) for e in run if e["type"] == "CellCompleted")
    full, short = build_report(run), build_report(digested(run))
    assert short == full
    assert full["cost"].get("total") is not None  # the estimate counted the intervals it did not read
    assert json.dumps(short, sort_keys=True) == json.dumps(full, sort_keys=True)


def test_publish_only_cells_broker_samples_and_odd_intervals_are_digested_exactly(run):
    events = copy.deepcopy(run)
    ends = {e["data"]["cell_id"]: e["data"] for e in events if e["type"] == "CellCompleted"}
    publish_only = sorted(ends)[0]
    sampled = sorted(ends)[1]
    for e in events:
        data = e["data"]
        if e["type"] == "IntervalMeasured" and data["cell_id"] == publish_only:
            data["counters"]["received"] = None  # publish-only: nothing is received
            if data["interval"] % 3 == 0:
                del data["counters"]["acked"]
            data["summary"] = {k: v for k, v in data["summary"].items() if k != "end_to_end_latency_us"}
        if e["type"] == "IntervalMeasured" and data["cell_id"] == sampled:
            data["backlog"] = None if data["interval"] == 4 else 7 * data["interval"]
            data["resources"] = {"broker": {"cpu_pct": 50.0, "rss_mb": 300.0}}
        if e["type"] == "CellCompleted" and data["cell_id"] == publish_only:
            data["totals"]["received"] = None
    redigest(events, ends[publish_only], publish_only=True)
    redigest(events, ends[sampled])
    full, short = build_report(events), build_report(digested(events))
    assert short == full
    assert full["cost"]["where"] == "local"  # a local broker was sampled, in intervals the short read left out


def test_a_verdict_judged_otherwise_is_judged_again_from_the_digest(run):
    events = copy.deepcopy(run)
    for e in events:
        if e["type"] == "CellCompleted":
            e["data"]["verdict"] = {"verdict": "unsustainable", "reasons": ["judged by other rules"]}
            e["data"]["digest"]["judged"]["rules"] = "older-rules"
    assert build_report(digested(events)) == build_report(events)


def test_a_stored_verdict_judged_on_the_same_basis_stands():
    events = without_histograms(synthetic_run({**SPEC, "rates": [1000], "repeats": 1}, intervals=8, seed=3))
    for e in events:
        if e["type"] == "CellCompleted":
            e["data"]["verdict"] = {"verdict": "inconclusive", "reasons": ["as stored"]}
    report = build_report(digested(events))
    assert {c["sustainability"]["verdict"] for g in report["groups"] for c in g["cells"]} == {"inconclusive"}


def test_intervals_that_were_read_win_over_the_digest(run):
    events = copy.deepcopy(run)
    for e in events:
        if e["type"] == "CellCompleted":
            e["data"]["digest"]["sent"] = [0] * len(e["data"]["digest"]["sent"])  # a digest that disagrees
    read, expected = build_report(events), build_report(run)
    read.pop("cost"), expected.pop("cost")  # the stored events differ in size
    assert read == expected


def test_digest_columns_are_what_interval_series_reads():
    events = synthetic_run({**SPEC, "repeats": 1}, intervals=6, seed=2)
    intervals = [e["data"] for e in events if e["type"] == "IntervalMeasured"
                 and e["data"]["cell_id"] == events[2]["data"]["cell_id"]]
    shuffled = intervals[::-1]  # stored order does not matter
    digest = interval_digest(shuffled)
    for publish_only in (False, True):
        for measured_s in (None, 4.0, 5.5):
            assert series_from_columns(digest, publish_only, measured_s) == interval_series(
                intervals, publish_only, measured_s)
            assert verdict.inputs_from_columns(digest, measured_s) == verdict.interval_inputs(intervals, measured_s)
    assert digest["bytes"] == [len(json.dumps({k: v for k, v in d.items() if k != "histograms"})) for d in intervals]
    assert interval_digest(intervals * (DIGEST_MAX_INTERVALS // len(intervals) + 1)) is None  # too long: none


def test_a_digest_stands_only_for_all_of_its_intervals():
    events = synthetic_run({**SPEC, "repeats": 1, "rates": [1000]}, intervals=5, seed=1)
    end = next(e["data"] for e in events if e["type"] == "CellCompleted")
    assert has_digest(end)
    assert not has_digest({**end, "intervals": 6})
    assert not has_digest({**end, "digest": {**end["digest"], "version": 99}})
    assert not has_digest({k: v for k, v in end.items() if k != "digest"})


def test_report_reads_fall_back_to_a_whole_read_on_stores_without_digest_reads():
    class Store:
        def __init__(self):
            self.calls = []

        def append(self, events):
            return AppendResult()

        def read(self, run_id, prefix=None, interval_histograms=True, after=None):
            self.calls.append((run_id, prefix, interval_histograms))
            return []

    class DigestStore(Store):
        def read(self, run_id, prefix=None, interval_histograms=True, after=None, intervals=True):
            self.calls.append((run_id, prefix, interval_histograms, intervals))
            return []

    plain, digests = Store(), DigestStore()
    read_report_events(plain, "r")
    read_report_events(digests, "r")
    assert plain.calls == [("r", None, False)] and digests.calls == [("r", None, False, False)]


# -- histograms --------------------------------------------------------------------------------
def blobs():
    rng = np.random.default_rng(11)
    out = [histogram.encode(histogram.new())]  # empty
    single = histogram.new()
    single.record_value(1)
    out.append(histogram.encode(single))
    top = histogram.new()
    top.record_value(histogram.HIGHEST, 3)
    top.record_value(2)
    out.append(histogram.encode(top))
    big = histogram.new()
    big.record_value(1000, 2**31 + 5)  # counts beyond 32 bits
    big.record_value(5000, 3)
    out.append(histogram.encode(big))
    for scale, sigma, n in ((800, 0.5, 12_000), (3_000, 0.2, 500), (50_000, 1.5, 40_000), (20, 0.1, 7)):
        out.append(histogram.encode(histogram.from_values(rng.lognormal(np.log(scale), sigma, n).astype(np.int64))))
    return out


def test_fast_histogram_figures_are_hdrhs():
    for blob in blobs():
        hist = histogram.decode(blob)
        found = figures(blob)
        assert found.total == hist.get_total_count()
        assert found.summary == histogram.summary(hist)
        if found.total:
            assert found.spectrum == histogram.percentiles(hist, SPECTRUM)
        buckets = decode_buckets(blob)
        counts = np.ctypeslib.as_array(hist.counts)
        assert buckets.indexes.tolist() == np.flatnonzero(counts).tolist()
        assert buckets.counts.tolist() == counts[np.flatnonzero(counts)].tolist()


def test_fast_merges_are_hdrhs():
    some = blobs()
    for group in (some[4:7], some[:3], some[3:5], [some[5]], [], some):
        assert figures_equal(merge_blobs(group), histogram.merge(group))


def figures_equal(buckets, hist) -> bool:
    from brokerbench.reports.results import figures_of

    found = figures_of(buckets)
    return found.summary == histogram.summary(hist) and (
        not found.total or found.spectrum == histogram.percentiles(hist, SPECTRUM))


def test_histograms_of_another_layout_or_broken_ones_are_left_to_hdrh():
    other = HdrHistogram(1, 1_000_000, 2)
    other.record_value(1234, 10)
    blob = other.encode().decode()
    assert figures(blob).summary == histogram.summary(histogram.decode(blob))
    assert figures_equal(merge_blobs([blob, blobs()[4]]), histogram.merge([blob, blobs()[4]]))
    assert figures_equal(merge_blobs([blob]), histogram.merge([blob]))  # merged into brokerbench's layout
    from brokerbench.reports.model import _merged_latency

    latency = _merged_latency([{"end_to_end_latency_us": blob}], {})["end_to_end_latency_us"]
    assert latency["max"] == histogram.summary(histogram.merge([blob]))["max"] != figures(blob).summary["max"]
    with pytest.raises(Exception) as expected:
        histogram.decode("HISTFAAAAB")
    with pytest.raises(type(expected.value)):
        figures("HISTFAAAAB")


def test_a_single_repeat_estimate_is_median_cis():
    for values in ([], [None], [3], [None, 2.5], [7, None], [1, 2], [1.0, 2.0, 5.0], [4, None, 4, 9]):
        assert _median_ci(values) == median_ci(values).as_dict()


# -- the page ----------------------------------------------------------------------------------
def test_a_large_run_draws_the_first_configurations_per_second_charts_and_says_what_it_left_out(monkeypatch):
    report = build_report(digested(without_histograms(
        synthetic_run({**SPEC, "rates": [1000, 2000], "repeats": 1}, intervals=5, seed=4))))
    configurations = sum(len(g["cells"]) for g in report["groups"])
    page = html.render(report)
    assert page.count('· rate per second"') == configurations and "are left out of this page" not in page
    monkeypatch.setattr(html, "MAX_SERIES_CONFIGURATIONS", 5)
    page = html.render(report)
    assert page.count('· rate per second"') == page.count('· p99 per second"') == 5
    left = configurations - 5
    assert f"those of {left:,} more configurations" in page and "are left out of this page" in page
    assert f"/runs/{report['run_id']}/cells/" in page
