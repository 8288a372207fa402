"""Every metric brokerbench shows, declared once: what it is read from, how it is printed, how it is compared, and
where it appears. The report model, the claims, the regression checks and the suite's history, the studies, the
Markdown, HTML and terminal tables, the API and the console read this list and nothing else; a table's columns
(and the dashes of a failed row) are counted from it. A new metric is one entry here plus the code that measures it.

A metric is a figure of one cell result (results.json): a plain number (`stat` None) or one statistic of a latency
object (`stat` the key inside it: p50, p99, p999, max, mean). A latency object is a summary of one of HISTOGRAMS,
and its percentiles obey the minimum-sample rule (reports.model.min_samples): its sample is the count it was taken
over, `sample_of`, when the object does not carry its own count.

Where a metric appears (`shown`):
- "report": a configuration's figure in the comparison report (report.json `metrics`: the median over repeats with
  its interval), with its ratios against the references;
- "grid": a column of the report's comparison tables (Markdown and HTML), in the order of this list;
- "terminal": a column of the terminal's table of a run's cells (`brokerbench show`);
- "study": a figure a published study is compared on (reports.study).
A metric with `regression` is checked run against run and kept as a series over a suite's runs (reports.regression,
reports.history, GET /suites/{name}/history, the console's history page); its per-second `series` (series.py
SERIES_FIELDS) gives a single repeat's samples. `claims` names the comparisons a report makes on it ("highlight":
each configuration against its references; "best": the leader of a group), each beyond `claim_floor`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Histogram:
    """A latency histogram a cell records (CellCompleted `histograms`), summarised in the cell result under the same
    name."""
    field: str
    unit: str  # of the recorded values
    sample_of: str  # the cell's count of the messages it holds (the minimum-sample rule's sample)


HISTOGRAMS = {h.field: h for h in (
    Histogram("publish_latency_us", "µs", "acked"),
    Histogram("publish_delay_us", "µs", "sent"),
    Histogram("end_to_end_latency_us", "µs", "received"),
    Histogram("delivery_latency_us", "µs", "received"),
    Histogram("encode_ns", "ns", "sent"),
    Histogram("decode_ns", "ns", "received"),
)}

SHOWN = ("report", "grid", "terminal", "study")  # the places a metric appears (the module's docstring)
CLAIMS = ("highlight", "best")


@dataclass(frozen=True)
class Metric:
    key: str  # its name in report.json `metrics`, regression verdicts, the API and the console
    label: str  # in words: a highlight's, a series' title
    column: str  # a table's header
    unit: str  # of the figure as shown (the stored value / scale)
    digits: int  # decimals shown
    higher_is_better: bool
    field: str  # the cell result's field
    stat: str | None = None  # the key inside the field's latency object; None: the field is the figure
    scale: float = 1.0  # stored value ÷ scale = the figure shown (µs to ms: 1000)
    latency: bool = False  # compared only between cells that kept up without loss (model._eligible)
    claims: tuple[str, ...] = ()  # of CLAIMS
    claim_floor: float | None = None  # the least relative effect a claim on it must show
    claim_axes: tuple[str, ...] = ("format", "broker")  # what a highlight compares it across
    regression: bool = False  # checked run against run, kept as a series over a suite's runs
    change_floor: float | None = None  # with regression: the least change of its series that is an alert
    series: str | None = None  # its per-second interval series (series.SERIES_FIELDS)
    net_of: str | None = None  # a codec figure net of its cell's call floor: the measured metric it is net of
    shown: frozenset[str] = field(default_factory=frozenset)

    @property
    def sample_of(self) -> str | None:
        """The count a percentile of this metric is a sample of; None for a plain number."""
        histogram = HISTOGRAMS.get(self.field if self.net_of is None else self.field.replace("_net_ns", "_ns"))
        return histogram.sample_of if histogram is not None and self.stat is not None else None

    def read(self, cell: dict):
        """Its value in a cell result (results.json), None where the cell has none."""
        value = cell.get(self.field)
        if self.stat is None:
            return value
        return (value or {}).get(self.stat)


_REPORT, _GRID, _TERMINAL, _STUDY = "report", "grid", "terminal", "study"
_TIME_FLOOR, _RATE_FLOOR = 0.20, 0.05  # throughput and sizes 5%, times 20% (model.CLAIMS_RULE)
# A change point is an alert from 10% for a rate (what the pairwise check's MIN_EFFECT asks of any change), from 20%
# for a tail latency (the claim floor of times: a p99 is the second-largest of every hundred messages and moves more
# than a mean): reports.changes.
_CHANGE_FLOOR = 0.10


def _latency(key: str, label: str, column: str, field_name: str, stat: str, **more) -> Metric:
    """A latency percentile in µs, shown in ms to 2 decimals, lower is better, compared only between cells that
    kept up without loss."""
    return Metric(key, label, column, "ms", 2, False, field_name, stat, scale=1000.0, latency=True, **more)


def _codec(key: str, label: str, column: str, field_name: str, **more) -> Metric:
    """A codec's p50 in ns."""
    return Metric(key, label, column, "ns", 0, False, field_name, "p50", **more)


def _study(key: str, label: str, unit: str, higher_is_better: bool) -> Metric:
    """A figure only a published study is compared on (reports.study.our_figure computes it)."""
    return Metric(key, label, label, unit, 2, higher_is_better, key, shown=frozenset({_STUDY}))


ALL: tuple[Metric, ...] = (
    Metric("encoded_bytes", "encoded size", "bytes", "B", 0, False, "encoded_bytes", claims=("best",),
           claim_floor=_RATE_FLOOR, shown=frozenset({_REPORT, _GRID, _TERMINAL})),
    Metric("throughput_msgs_per_s", "throughput", "delivered msgs/s", "msgs/s", 0, True, "throughput_msgs_per_s",
           claims=CLAIMS, claim_floor=_RATE_FLOOR, regression=True, change_floor=_CHANGE_FLOOR, series="throughput",
           shown=frozenset({_REPORT, _GRID, _TERMINAL, _STUDY})),
    Metric("throughput_mb_per_s", "throughput MB/s", "MB/s", "MB/s", 2, True, "throughput_mb_per_s",
           claims=("best",), claim_floor=_RATE_FLOOR, shown=frozenset({_REPORT, _GRID, _TERMINAL, _STUDY})),
    # a rate search's result: what its cells regress on instead of a throughput that equals each step's target
    Metric("max_sustainable_rate", "max sustainable rate", "max sustainable msgs/s", "msgs/s", 0, True,
           "max_sustainable_rate", regression=True, change_floor=_CHANGE_FLOOR, shown=frozenset({_STUDY})),
    _latency("end_to_end_p50_us", "end-to-end p50", "e2e p50 ms", "end_to_end_latency_us", "p50", claims=("best",),
             claim_floor=_TIME_FLOOR, shown=frozenset({_REPORT, _GRID, _TERMINAL})),
    _latency("end_to_end_p99_us", "end-to-end p99", "e2e p99 ms", "end_to_end_latency_us", "p99", claims=CLAIMS,
             claim_floor=_TIME_FLOOR, regression=True, change_floor=_TIME_FLOOR, series="end_to_end_p99_us",
             shown=frozenset({_REPORT, _GRID, _TERMINAL})),
    _latency("end_to_end_p999_us", "end-to-end p99.9", "e2e p99.9 ms", "end_to_end_latency_us", "p999",
             claims=("best",), claim_floor=_TIME_FLOOR, shown=frozenset({_REPORT, _GRID, _TERMINAL})),
    _latency("end_to_end_max_us", "end-to-end max", "e2e max ms", "end_to_end_latency_us", "max",
             series="end_to_end_max_us", shown=frozenset({_REPORT, _GRID, _TERMINAL})),
    _latency("delivery_p50_us", "delivery p50", "deliv p50 ms", "delivery_latency_us", "p50", claims=("best",),
             claim_floor=_TIME_FLOOR, shown=frozenset({_REPORT})),
    # Delivery latency (no codec) compares brokers; formats are compared on end-to-end, which holds their decoding.
    _latency("delivery_p99_us", "delivery p99", "deliv p99 ms", "delivery_latency_us", "p99", claims=CLAIMS,
             claim_floor=_TIME_FLOOR, claim_axes=("broker",), shown=frozenset({_REPORT, _GRID, _TERMINAL})),
    _latency("publish_latency_p99_us", "publish p99", "pub p99 ms", "publish_latency_us", "p99", claims=("best",),
             claim_floor=_TIME_FLOOR, regression=True, change_floor=_TIME_FLOOR, series="publish_latency_p99_us",
             shown=frozenset({_REPORT, _GRID})),
    _latency("publish_delay_p99_us", "publish delay p99", "delay p99 ms", "publish_delay_us", "p99",
             claims=("best",), claim_floor=_TIME_FLOOR, shown=frozenset({_REPORT, _GRID, _TERMINAL})),
    _codec("encode_p50_ns", "encode p50", "enc ns", "encode_ns", claims=("best",), claim_floor=_TIME_FLOOR,
           shown=frozenset({_REPORT, _GRID, _TERMINAL})),
    # Net of the timed call's own cost around a no-op (codecs.floor): the median over repeats of a repeat's p50
    # less that repeat's floor. Shown beside the measured figure, never claimed on (the claims compare measured ones).
    _codec("encode_net_p50_ns", "encode p50 net", "enc net ns", "encode_net_ns", net_of="encode_p50_ns",
           shown=frozenset({_GRID})),
    _codec("decode_p50_ns", "decode p50", "dec ns", "decode_ns", claims=("best",), claim_floor=_TIME_FLOOR,
           shown=frozenset({_REPORT, _GRID, _TERMINAL})),
    _codec("decode_net_p50_ns", "decode p50 net", "dec net ns", "decode_net_ns", net_of="decode_p50_ns",
           shown=frozenset({_GRID})),
    # loss is flagged on its own (the loss column), never a contest
    Metric("lost", "lost", "lost", "msgs", 0, False, "lost", shown=frozenset({_REPORT})),
    # what a published study printed that no report shows (reports.study.our_figure)
    _study("throughput_mib_per_s", "throughput MiB/s", "MiB/s", True),
    *(_study(f"e2e_{stat}_ms", f"end-to-end {stat}", "ms", False)
      for stat in ("mean", "min", "max", "p25", "p50", "p75", "p99")),
    _study("lag_mean", "mean consumer lag", "msgs", False),
    _study("lag_min", "least consumer lag", "msgs", False),
    _study("lag_max", "largest consumer lag", "msgs", False),
    _study("encode_mean_us", "encode mean", "µs", False),
    _study("decode_mean_us", "decode mean", "µs", False),
    _study("first_delivery_s", "first delivery", "s", False),
    _study("backlog_read_s", "backlog read", "s", False),
    _study("backlog_read_rate", "backlog read rate", "msgs/s", True),
    _study("burst_delivered_p50_ms", "burst delivered p50", "ms", False),
    _study("burst_delivered_max_ms", "burst delivered max", "ms", False),
)
METRICS = {m.key: m for m in ALL}


def shown_in(place: str) -> dict[str, Metric]:
    """The metrics shown in one place (SHOWN), in the list's order."""
    if place not in SHOWN:
        raise ValueError(f"place: {place!r} is not one of {', '.join(SHOWN)}")
    return {m.key: m for m in ALL if place in m.shown}


def regression_metrics() -> dict[str, Metric]:
    """The metrics regression checks and a suite's history read, in the list's order."""
    return {m.key: m for m in ALL if m.regression}


def claimed(kind: str) -> dict[str, Metric]:
    """The metrics a report makes this kind of claim (CLAIMS) on."""
    return {m.key: m for m in ALL if kind in m.claims}


def net_figures() -> dict[str, Metric]:
    """Per measured codec metric, the metric of the same figure net of its cell's call floor."""
    return {m.net_of: m for m in ALL if m.net_of is not None}


def latency_fields() -> tuple[str, ...]:
    """The cell result's latency objects (HISTOGRAMS), in their order."""
    return tuple(HISTOGRAMS)


def sample_of() -> dict[str, str]:
    """Per latency object, the count it is a sample of (the minimum-sample rule)."""
    return {name: h.sample_of for name, h in HISTOGRAMS.items()}


def describe(metric: Metric) -> dict:
    """A metric as the API answers it (GET /metrics)."""
    return {"key": metric.key, "label": metric.label, "column": metric.column, "unit": metric.unit,
            "digits": metric.digits, "higher_is_better": metric.higher_is_better, "field": metric.field,
            "stat": metric.stat, "scale": metric.scale, "sample_of": metric.sample_of, "claims": list(metric.claims),
            "claim_floor": metric.claim_floor, "regression": metric.regression,
            "change_floor": metric.change_floor, "series": metric.series,
            "shown": [place for place in SHOWN if place in metric.shown]}
