import numpy as np
import pytest

from brokerbench import histogram


@pytest.fixture
def values():
    return np.random.default_rng(42).lognormal(7, 1.2, 20_000).astype(np.int64)


def test_bulk_recording_equals_hdrh_record_value(values):
    bulk = histogram.from_values(values)
    reference = histogram.new()
    for v in values:
        reference.record_value(int(v))
    assert np.array_equal(np.ctypeslib.as_array(bulk.counts), np.ctypeslib.as_array(reference.counts))
    assert (bulk.get_total_count(), bulk.min_value, bulk.max_value) == \
           (reference.get_total_count(), reference.min_value, reference.max_value)


def test_summary_matches_hdrh_percentiles(values):
    hist = histogram.from_values(values)
    summary = histogram.summary(hist)
    for name, pct in histogram.PERCENTILES.items():
        assert summary[name] == hist.get_value_at_percentile(pct)
    assert summary["max"] == hist.get_max_value()
    assert summary["mean"] == pytest.approx(hist.get_mean_value())
    assert summary["count"] == len(values)


def test_merge_is_exact(values):
    parts = np.array_split(values, 7)
    merged = histogram.merge(histogram.encode(histogram.from_values(p)) for p in parts)
    whole = histogram.from_values(values)
    assert np.array_equal(np.ctypeslib.as_array(merged.counts), np.ctypeslib.as_array(whole.counts))
    assert histogram.summary(merged) == histogram.summary(whole)


def test_encoding_round_trips(values):
    hist = histogram.from_values(values)
    assert histogram.summary(histogram.decode(histogram.encode(hist))) == histogram.summary(hist)


def test_out_of_range_values_are_clipped_and_counted():
    hist = histogram.new()
    assert histogram.record_many(hist, [-5, 10, histogram.HIGHEST * 2]) == 2
    assert hist.get_total_count() == 3
    assert histogram.summary(hist)["max"] >= histogram.HIGHEST


def test_empty_summary_has_no_numbers():
    summary = histogram.summary(histogram.new())
    assert summary["count"] == 0 and summary["p99"] is None
