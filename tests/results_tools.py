"""What the results-format tests share: the checks of a run's exports (cells.csv, hlog/) against its results.json,
made with readers independent of the code that wrote them (the csv module, hdrh's HistogramLogReader)."""

import csv
from pathlib import Path

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from brokerbench import histogram
from brokerbench.reports.export import hlog_path

HDR_PERCENTILES = {"p50": 50.0, "p75": 75.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}


def read_hlog(path: Path) -> tuple[HdrHistogram, list[tuple[float, float]]]:
    """A log's intervals added up by hdrh's own reader, and each interval's (start, end) in seconds."""
    reader = HistogramLogReader(str(path), histogram.new())
    total, spans = histogram.new(), []
    while (interval := reader.get_next_interval_histogram()) is not None:
        total.add(interval)
        spans.append((interval.get_start_time_stamp() / 1000, interval.get_end_time_stamp() / 1000))
    reader.input_file.close()
    return total, spans


LOG_METRICS = ("publish_latency_us", "publish_delay_us", "end_to_end_latency_us", "delivery_latency_us", "encode_ns",
               "decode_ns")


def lower_bound_logs(results: dict) -> int:
    """The completed cells' logs whose report figures count messages missing or due and never sent (at +∞, so the
    logs, which hold what was measured, cannot give them): on a loaded host a producer can fall behind at a short
    cell's end. Each is one the cell's own accounting explains (its `missing` or `not_sent`)."""
    found = 0
    for cell in results["cells"]:
        if cell["status"] == "completed":
            for metric in LOG_METRICS:
                figures = cell[metric]
                measured = figures["p50"] is not None or figures.get("lower_bounds")  # else it has no log
                if measured and (figures.get("missing") or figures.get("not_sent")):
                    assert cell.get("missing") or cell.get("not_sent"), (cell["cell_id"], metric)
                    found += 1
    return found


def assert_logs_match(folder: Path, results: dict, intervals: dict[str, int] | None = None) -> int:
    """Every completed cell's logs give its results.json figures: percentiles and max, with hdrh's
    get_value_at_percentile over the intervals added up. Cells with messages missing or never sent are checked on
    what was measured only (the logs hold no +∞). `intervals`: each cell's expected interval count, when known.
    Returns how many logs were checked against the figures (lower_bound_logs: those that cannot be)."""
    checked = 0
    for cell in results["cells"]:
        if cell["status"] != "completed":
            assert not list((folder / "hlog").glob(f"{cell['cell_id']}.*")), cell["cell_id"]
            continue
        for metric in LOG_METRICS:
            figures = cell[metric]
            path = folder / hlog_path(cell["cell_id"], metric)
            if figures["p50"] is None and not figures.get("lower_bounds"):  # nothing measured: no log
                assert not path.exists(), path
                continue
            total, spans = read_hlog(path)
            starts = [start for start, _ in spans]  # one second each, at the interval's place, in order
            assert all(end - start == 1.0 and start == int(start) for start, end in spans), (path, spans[:3])
            assert starts == sorted(set(starts)), (path, starts)
            if intervals is not None:
                assert len(spans) == intervals[cell["cell_id"]], path
            if figures.get("missing") or figures.get("not_sent"):
                continue  # the report's percentiles count those at +∞; the logs have what was measured
            for name, p in HDR_PERCENTILES.items():
                assert figures[name] == total.get_value_at_percentile(p), (path, name)
            assert figures["max"] == total.get_max_value(), path
            checked += 1
    return checked


def read_cells_csv(path: Path) -> dict[str, dict]:
    with path.open(newline="") as f:
        return {row["cell_id"]: row for row in csv.DictReader(f)}


def number(text: str):
    """A CSV field as the number it holds (None when empty)."""
    return None if text == "" else float(text)
