"""Files other tools read, beside results.json: the per-cell table as CSV and each cell's interval histograms as
HdrHistogram logs.

cells.csv has one row per cell, in results.json's order, with the figures of the terminal's comparison table as
numbers in results.json's units (µs, ns, msgs/s, MB/s), never formatted: a spreadsheet or pandas reads it as it is.
A percentile that results.json knows only from below (missing or unsent messages at +∞) is empty, with its bound in
the `_at_least` column beside. Each shown latency's sample count (`_count`, as the table counts it) is given: the
tables withhold a percentile finer than its sample supports (reports.model.min_samples), the CSV gives it, and a
reader can apply the same rule.

hlog/<cell_id>.<metric>.hlog is the HdrHistogram log format (version 1.2, written by hdrh's HistogramLogWriter):
one line per one-second interval of the cell's measured time, its start in seconds from the measured start, its
length, its maximum in the metric's unit, and the interval's histogram in the standard compressed encoding. Added
up, a cell's intervals are its cumulative histogram, the one results.json's percentiles come from; HdrHistogram's
own tools (HistogramLogProcessor, HdrHistogramVisualizer, hdrh's HistogramLogReader) read them. They hold the
measured values only: messages missing or never sent are not in them (results.json counts those at +∞).
"""

from __future__ import annotations

import csv
import io
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from hdrh.log import HistogramLogWriter
from msgspec import Struct, convert

from ..eventdata import build_types
from .. import histogram
from ..events import intervals_prefix, planned_cells
from ..figures import LATENCY_METRICS, LOSS_CLASSES, MISSING_COUNTS_IN, NOT_SENT_COUNTS_IN
from ..limit import client_bound
from .rows import ResultCell, result_cell
from .table import sample_count

CELLS_CSV = "cells.csv"
HLOG_DIR = "hlog"
INTERVAL_S = 1.0  # every IntervalMeasured covers one second of the cell's measured time (worker.intervals)
# Interval_Max is written in the histogram's own unit (µs or ns), as results.json gives it: hdrh's default ratio
# (1,000,000) assumes nanosecond values shown in milliseconds.
MAX_VALUE_UNIT_RATIO = 1.0
UNITS = {"us": "microseconds", "ns": "nanoseconds"}
WRITE_THREADS = 8  # cells whose logs are read and written at once: the time is the store's and the sink's round trips
# The most cell-seconds whose logs the workflow's Aggregate step writes. Every interval is read again with its
# histograms: bench/report_build.py measured 14.6 s for 12,000 (200 cells × 60 s) on DynamoDB Local, so this many
# take about 150 s, half of the step's 5 minutes beside the report itself. A larger run's logs come from
# `brokerbench report RUN_ID`, which has no such limit.
AGGREGATE_MAX_INTERVALS = 120_000

# The comparison table's percentiles (reports.table.comparison_tables), by latency metric.
SHOWN_PERCENTILES = {"end_to_end_latency_us": ("p50", "p99", "p999"), "delivery_latency_us": ("p99",),
                     "publish_delay_us": ("p99",), "encode_ns": ("p50",), "decode_ns": ("p50",)}
# Latencies that count messages missing or never sent at +∞: their percentiles may be known only from below.
BOUNDED = tuple(dict.fromkeys((*MISSING_COUNTS_IN, *NOT_SENT_COUNTS_IN)))
# The codec times' p50 net of the call floor (results.json encode_net_ns, decode_net_ns), beside the measured one.
NET = {"encode_ns": "encode_net_ns", "decode_ns": "decode_net_ns"}
CONFIGURATION = ("cell_id", "broker", "format", "mode", "size_basis", "size_bytes", "rate_target", "producers",
                 "consumers", "partitions", "repeat", "order", "status", "reason")
FIGURES = ("encoded_bytes", "throughput_msgs_per_s", "throughput_mb_per_s", "max_sustainable_rate")
COUNTS = ("due", "sent", "acked", "received", *LOSS_CLASSES, "undelivered_or_lost", "not_sent", "duplicated",
          "out_of_order", "residual")
# How the cell's acknowledgements and deliveries were stamped (figures.ARRIVAL, READ, client_stamps), as results.json
# has them: where publish and end-to-end latency end, so a reader can set apart the cells not stamped at arrival.
STAMPS = ("ack_stamps", "delivery_stamps")


def csv_columns() -> list[str]:
    """cells.csv's header, in order."""
    latency = []
    for metric, names in SHOWN_PERCENTILES.items():
        for name in names:
            latency.append(f"{metric}_{name}")
            if metric in BOUNDED:
                latency.append(f"{metric}_{name}_at_least")
        if metric in NET:
            latency.append(f"{NET[metric]}_p50")
        latency.append(f"{metric}_count")
    return [*CONFIGURATION, *FIGURES, *latency, *COUNTS, "verdict", "client_bound", "host_busy", *STAMPS]


def csv_row(cell: dict | ResultCell) -> dict:
    """One cell's row (csv_columns), its values as results.json has them; None where it has none. Every column is
    a field of the typed cell (rows.ResultCell): a column it does not declare fails here, by name."""
    c = cell if isinstance(cell, ResultCell) else result_cell(cell)
    row = {name: getattr(c, name) for name in (*CONFIGURATION, *FIGURES, *COUNTS)}
    for metric, names in SHOWN_PERCENTILES.items():
        figures = c.latency(metric)
        for name in names:
            row[f"{metric}_{name}"] = getattr(figures, name)
            if metric in BOUNDED:
                row[f"{metric}_{name}_at_least"] = getattr(figures.lower_bounds, name)
        if metric in NET:
            row[f"{NET[metric]}_p50"] = c.latency(NET[metric]).p50
        row[f"{metric}_count"] = sample_count(c, metric)
    row.update(verdict=c.verdict, client_bound=client_bound(c.limit) if c.limit else None,
               host_busy=c.host.busy if c.host else None, **{name: getattr(c, name) for name in STAMPS})
    return row


def cells_csv(results: dict) -> str:
    """cells.csv: a header and one row per cell (empty fields for None, true and false as in JSON)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=csv_columns(), lineterminator="\n")
    writer.writeheader()
    for cell in results["cells"]:
        writer.writerow({k: _field(v) for k, v in csv_row(cell).items()})
    return out.getvalue()


def _field(value):
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else value


class _Stored(NamedTuple):
    """An interval's histogram as stored (hdrh's V2 compressed encoding), as HistogramLogWriter reads a histogram:
    its encoding and its maximum. hdrh's encode of the decoded histogram gives the same bytes; decoding and encoding
    each of a long run's intervals again would cost about 1 ms apiece (minutes for a run of hours)."""
    blob: str
    max_value: float

    def encode(self) -> bytes:
        return self.blob.encode("ascii")

    def get_max_value(self) -> float:
        return self.max_value

    def get_start_time_stamp(self) -> float:
        return 0.0


class _Largest(Struct, kw_only=True):
    """A metric's figures in an interval's summary, as a log reads them: the largest value (None: not given)."""
    max: float | None = None


class _LoggedInterval(Struct, kw_only=True):
    """What a metric's log reads of an interval (IntervalMeasured data): its histograms and its summary, by metric
    (a metric with nothing recorded in the interval has neither)."""
    histograms: dict[str, str]
    summary: dict[str, _Largest] = {}


def _interval_histogram(data: dict, metric: str) -> _Stored:
    interval = convert(data, _LoggedInterval)
    blob = interval.histograms.get(metric)
    if not blob:  # nothing recorded in this second: an empty histogram keeps the interval in the log
        return _Stored(histogram.encode(histogram.new()), 0.0)
    figures = interval.summary.get(metric)
    most = None if figures is None else figures.max
    return _Stored(blob, float(most if most is not None else histogram.decode(blob).get_max_value()))


def hlog_text(run_id: str, cell_id: str, metric: str, intervals: list[dict]) -> str:
    """One cell's log of one metric: every interval (IntervalMeasured data with histograms), in interval order."""
    out = io.StringIO()
    writer = HistogramLogWriter(out)
    writer.output_log_format_version()
    writer.output_comment(f"brokerbench run {run_id}, cell {cell_id}: {metric} in {UNITS[metric.rsplit('_', 1)[1]]}"
                          f"; StartTimestamp: seconds from the cell's measured start (after its warm-up); "
                          f"Interval_Max in {UNITS[metric.rsplit('_', 1)[1]]}")
    writer.output_legend()
    for data in sorted(intervals, key=lambda d: d["interval"]):
        start = data["interval"] * INTERVAL_S
        # hdrh reads a start of 0 as "take the histogram's own": _Stored says 0 too.
        writer.output_interval_histogram(_interval_histogram(data, metric), start, start + INTERVAL_S,
                                         max_value_unit_ratio=MAX_VALUE_UNIT_RATIO)
    return out.getvalue()


def hlog_path(cell_id: str, metric: str) -> str:
    return f"{HLOG_DIR}/{cell_id}.{metric}.hlog"


def cell_intervals(store, run_id: str, cell_index: int, attempt: int) -> list[dict]:
    """The IntervalMeasured data, histograms included, of the attempt that ended the cell."""
    return [e["data"] for e in store.read(run_id, prefix=intervals_prefix(cell_index, attempt))
            if e["type"] == "IntervalMeasured"]


def _completed(events: list[dict]) -> list[tuple[dict, int]]:
    """Each completed cell, in matrix order, with the attempt that ended it."""
    ends = {e["data"]["cell_id"]: e["data"] for e in events if e["type"] == "CellCompleted"}
    return [(cell, ends[cell["cell_id"]]["attempt"])
            for cell in sorted(planned_cells(events), key=lambda c: c["index"]) if cell["cell_id"] in ends]


def run_intervals(events: list[dict]) -> int:
    """How many intervals the run's completed cells wrote: what their logs cost to read."""
    return sum(e["data"]["intervals"] for e in events if e["type"] == "CellCompleted")


def cell_logs(store, run_id: str, cell: dict, attempt: int) -> list[tuple[str, str]]:
    """(file name, text) of one cell's logs: a metric the cell never recorded (a publish-only cell's end-to-end
    latency) has no file."""
    intervals = cell_intervals(store, run_id, cell["index"], attempt)
    return [(hlog_path(cell["cell_id"], metric), hlog_text(run_id, cell["cell_id"], metric, intervals))
            for metric in LATENCY_METRICS if any(metric in data["histograms"] for data in intervals)]


def hlog_files(store, run_id: str, events: list[dict]):
    """(file name, text) of every completed cell's logs, one cell read at a time."""
    for cell, attempt in _completed(events):
        yield from cell_logs(store, run_id, cell, attempt)


def write_hlogs(write, store, run_id: str, events: list[dict]) -> str | None:
    """Every completed cell's logs, written with `write(name, text) -> where`, WRITE_THREADS cells at once (a run of
    thousands of cells is thousands of reads and several files each, within the Aggregate step's time); where the
    folder is (None: no completed cell)."""
    def one(item) -> list[str]:
        return [write(name, text) for name, text in cell_logs(store, run_id, *item)]

    with ThreadPoolExecutor(WRITE_THREADS) as pool:
        written = [where for paths in pool.map(one, _completed(events)) for where in paths]
    return written[0].rsplit("/", 1)[0] if written else None


build_types(globals())  # msgspec's information on its Structs, built now (eventdata.build_types)
