"""Per-interval recording: plain arrays on the hot path, histograms built in bulk at each interval end."""

from __future__ import annotations

from array import array

import numpy as np

from .. import histogram

# Metric name -> divisor from the recorded nanoseconds to the histogram's unit.
METRIC_UNITS = {
    "publish_latency_us": 1000,
    "publish_delay_us": 1000,
    "end_to_end_latency_us": 1000,
    "encode_ns": 1,
    "decode_ns": 1,
}


class IntervalRecorder:
    """Collects nanosecond values per metric and counters until `snapshot` turns them into histograms."""

    def __init__(self, metrics: tuple[str, ...], counters: tuple[str, ...]) -> None:
        self.metrics = metrics
        self.counter_names = counters
        self.values = {name: array("q") for name in metrics}
        self.counters = dict.fromkeys(counters, 0)

    def reset(self) -> None:
        """Empty in place: the hot loops hold references to these arrays and this dict."""
        for values in self.values.values():
            del values[:]
        for name in self.counters:
            self.counters[name] = 0

    def snapshot(self, extra_values: dict[str, np.ndarray] | None = None) -> dict:
        """Encoded histograms and counters of what was recorded since the last snapshot; then reset."""
        hists = {}
        for name in self.metrics:
            values = np.frombuffer(self.values[name], dtype=np.int64).copy() if len(self.values[name]) else np.empty(0, np.int64)
            if extra_values and name in extra_values:
                values = np.concatenate([values, extra_values[name]])
            if values.size:
                hists[name] = histogram.encode(histogram.from_values(values // METRIC_UNITS[name]))
        out = {"counters": dict(self.counters), "histograms": hists}
        self.reset()
        return out
