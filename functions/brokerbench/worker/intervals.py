"""Merging the processes' per-second snapshots into a cell's intervals: pure, no broker and no store.

Each producer and consumer sends one snapshot per 1-second interval (counters and raw values in
ns). An interval is complete once every process has reported it (or has finished); then its
counters are summed, its values become one histogram per metric, and the cumulative histograms
and totals grow by it.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from .. import histogram

PRODUCER_COUNTERS = {"sent": "sent", "bytes": "bytes_sent", "acked": "acked", "send_errors": "send_errors"}
CONSUMER_COUNTERS = {"received": "received", "bytes": "bytes_received"}
COUNTERS = ("sent", "bytes_sent", "acked", "send_errors", "received", "bytes_received")
# Metric -> divisor from the recorded nanoseconds to the histogram's unit.
METRIC_UNITS = {"publish_latency_us": 1000, "publish_delay_us": 1000, "end_to_end_latency_us": 1000,
                "delivery_latency_us": 1000, "encode_ns": 1, "decode_ns": 1}


class IntervalAggregator:
    def __init__(self, sources) -> None:
        self.parts: dict[int, list] = defaultdict(list)  # interval -> [(role, snapshot)]
        self.reported = dict.fromkeys(sources, -1)  # source -> highest interval reported (inf when done)
        self.cumulative: dict[str, list] = defaultdict(list)
        self.totals = dict.fromkeys(COUNTERS, 0)
        self.written = 0

    def add(self, source, role: str, interval: int, snapshot: dict) -> None:
        self.parts[interval].append((role, snapshot))
        self.reported[source] = interval

    def finished(self, source) -> None:
        self.reported[source] = math.inf

    def take_complete(self, final: bool = False) -> list[dict]:
        """The intervals every source has reported (all of them when `final`), merged, in order."""
        complete = math.inf if final else min(self.reported.values(), default=math.inf)
        return [self._merge(i, self.parts.pop(i)) for i in sorted(i for i in self.parts if i <= complete)]

    def _merge(self, interval: int, parts: list) -> dict:
        counters = dict.fromkeys(COUNTERS, 0)
        values: dict[str, list] = defaultdict(list)
        for role, snapshot in parts:
            names = PRODUCER_COUNTERS if role == "producer" else CONSUMER_COUNTERS
            for name, value in snapshot["counters"].items():
                counters[names[name]] += value
            for metric, raw in snapshot["values"].items():
                values[metric].append(np.frombuffer(raw, dtype=np.int64))
        hists, summaries = {}, {}
        for metric, arrays in values.items():  # histograms are built here, off the workers' hot loops
            merged = histogram.from_values(np.concatenate(arrays) // METRIC_UNITS[metric])
            if not merged.get_total_count():
                continue
            hists[metric] = histogram.encode(merged)
            figures = histogram.summary(merged)
            summaries[metric] = {k: figures[k] for k in ("count", "p50", "p99", "max")}
            self.cumulative[metric].append(merged)
        for name, value in counters.items():
            self.totals[name] += value
        self.written += 1
        return {"interval": interval, "counters": counters, "histograms": hists, "summary": summaries}

    def cumulative_histograms(self) -> dict[str, str]:
        return {metric: histogram.encode(histogram.merge(parts)) for metric, parts in self.cumulative.items()}
