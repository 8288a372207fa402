"""HdrHistogram helpers: bulk recording with numpy, exact merges, fast percentile summaries.

Histograms are hdrh's (standard V2 compressed encoding, readable by every HdrHistogram
implementation). hdrh's `record_value` costs about a microsecond per call, so values are
collected in arrays on the hot path and added here in bulk, vectorized, per interval.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from hdrh.histogram import HdrHistogram

LOWEST = 1
HIGHEST = 3_600_000_000  # one hour in µs, or 3.6 s in ns
SIGNIFICANT_FIGURES = 3
PERCENTILES = {"p50": 50.0, "p75": 75.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}


def new() -> HdrHistogram:
    return HdrHistogram(LOWEST, HIGHEST, SIGNIFICANT_FIGURES)


def _counts(hist: HdrHistogram) -> np.ndarray:
    return np.ctypeslib.as_array(hist.counts)


def counts_indexes(hist: HdrHistogram, values: np.ndarray) -> np.ndarray:
    """hdrh's counts index for each value (vectorized HdrHistogram._counts_index_for)."""
    v = values.astype(np.int64, copy=False)
    _, exponent = np.frexp((v | hist.sub_bucket_mask).astype(np.float64))
    bucket = exponent.astype(np.int64) - hist.unit_magnitude - (hist.sub_bucket_half_count_magnitude + 1)
    sub_bucket = v >> (bucket + hist.unit_magnitude)
    return ((bucket + 1) << hist.sub_bucket_half_count_magnitude) + sub_bucket - hist.sub_bucket_half_count


def record_many(hist: HdrHistogram, values) -> int:
    """Add every value (negative ones count as 0, too large ones as the highest); returns how many were clipped."""
    v = np.asarray(values, dtype=np.int64)
    if v.size == 0:
        return 0
    clipped = int(np.count_nonzero((v < 0) | (v > HIGHEST)))
    v = np.clip(v, 0, HIGHEST)
    counts = _counts(hist)
    counts += np.bincount(counts_indexes(hist, v), minlength=hist.counts_len)[: hist.counts_len].astype(counts.dtype)
    hist.total_count += int(v.size)
    hist.min_value = min(hist.min_value, int(v.min()))
    hist.max_value = max(hist.max_value, int(v.max()))
    return clipped


def from_values(values) -> HdrHistogram:
    hist = new()
    record_many(hist, values)
    return hist


def encode(hist: HdrHistogram) -> str:
    blob = hist.encode()
    return blob.decode("ascii") if isinstance(blob, bytes) else blob


def decode(blob: str) -> HdrHistogram:
    return HdrHistogram.decode(blob)


def merge(blobs_or_hists: Iterable) -> HdrHistogram:
    """Exact merge of histograms (encoded or not): counts add, nothing is averaged."""
    total = new()
    for item in blobs_or_hists:
        if item is None:
            continue
        other = decode(item) if isinstance(item, (str, bytes)) else item
        if other.get_total_count():
            total.add(other)
    return total


def _equivalent_ranges(hist: HdrHistogram, indexes: np.ndarray):
    """Lowest, highest and median equivalent value of each counts index (vectorized hdrh)."""
    half_magnitude, half = hist.sub_bucket_half_count_magnitude, hist.sub_bucket_half_count
    bucket = (indexes >> half_magnitude) - 1
    sub_bucket = (indexes & (half - 1)) + half
    first = bucket < 0
    sub_bucket = np.where(first, sub_bucket - half, sub_bucket)
    bucket = np.where(first, 0, bucket)
    lowest = sub_bucket << (bucket + hist.unit_magnitude)
    size = np.left_shift(1, hist.unit_magnitude + bucket)
    return lowest, lowest + size - 1, lowest + (size >> 1)


def summary(hist: HdrHistogram, scale: float = 1.0) -> dict[str, float | int]:
    """count, mean, p50..p999 and max, divided by `scale` (e.g. 1000 for ns→µs)."""
    count = int(hist.get_total_count())
    if count == 0:
        return {"count": 0, "mean": None, **{k: None for k in PERCENTILES}, "max": None}
    counts = _counts(hist)
    nonzero = np.flatnonzero(counts)
    cumulative = np.cumsum(counts[nonzero])
    _, highest, middle = _equivalent_ranges(hist, nonzero.astype(np.int64))
    highest, middle = highest.astype(np.float64), middle.astype(np.float64)
    out: dict[str, float | int] = {"count": count, "mean": float((middle * counts[nonzero]).sum() / count / scale)}
    for name, value in zip(PERCENTILES, _at(cumulative, highest, count, PERCENTILES.values())):
        out[name] = float(value / scale)
    out["max"] = float(highest[-1] / scale)
    return out


def _at(cumulative: np.ndarray, highest: np.ndarray, count: int, percentiles) -> list[float]:
    """hdrh's get_value_at_percentile for several percentiles at once."""
    targets = [max(int(p * count / 100 + 0.5), 1) for p in percentiles]
    return [float(highest[min(int(np.searchsorted(cumulative, t)), highest.size - 1)]) for t in targets]


def percentiles(hist: HdrHistogram, wanted) -> list[float]:
    """Values at the given percentiles (0-100], as hdrh's get_value_at_percentile, vectorized."""
    count = int(hist.get_total_count())
    if count == 0:
        return [None for _ in wanted]
    counts = _counts(hist)
    nonzero = np.flatnonzero(counts)
    _, highest, _ = _equivalent_ranges(hist, nonzero.astype(np.int64))
    return _at(np.cumsum(counts[nonzero]), highest.astype(np.float64), count, wanted)
