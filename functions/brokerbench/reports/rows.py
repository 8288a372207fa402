"""The comparison report as typed rows: what the Markdown and HTML renderers read.

reports.model builds the report as plain data (report.json, which the API, the regression check and the studies also
read); a renderer converts it here once, with `report()`, and then reads attributes. Every absent value is resolved
in this module, by one rule: a figure or a count a report does not have is None, a list it does not have is empty, a
section it does not have (a regression check, a cost estimate) is None. So a misspelled field fails here, at
conversion, naming the field, not as a missing key or a silent dash in the middle of a table; and a renderer never
guesses what an absent value means.

Fields beyond those the renderers read are left out (report.json keeps them all). Numbers keep their type: an
integer figure is not turned into a float, so it prints as it was stored.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ..eventdata import build_types
from ..figures import missing_of

Number = int | float | None


class Row(msgspec.Struct, frozen=True, kw_only=True):
    """A typed row; fields the renderers do not read are ignored at conversion."""


class Estimate(Row, kw_only=True):
    """A configuration's figure (model._median_ci): the median over repeats and its interval; None where the
    figure is absent, with `withheld` (the sample the percentile needed) or `lower_bound` (missing messages at +∞)
    saying why."""
    median: Number = None
    ci_low: Number = None
    ci_high: Number = None
    n: int = 0
    coverage: Number = None
    withheld: int | None = None
    lower_bound: Number = None


class Loss(Row, kw_only=True):
    """Loss classes summed over the repeats (model._loss); None where no repeat could count the class."""
    lost: int | None = None
    undelivered: int | None = None
    late: int | None = None
    send_errors: int | None = None
    unacknowledged: int | None = None
    undelivered_or_lost: int | None = None
    residual: int | None = None
    broker_count_difference: int | None = None
    backlog_unknown: bool = False


class Resources(Row, kw_only=True):
    """One process group's figures over the repeats that sampled it (model._resources)."""
    cpu_pct_mean: Number
    cpu_pct_max: Number
    rss_mb_max: Number


class ResourceGroups(Row, kw_only=True):
    """Per process group, its figures; None for a group no repeat sampled."""
    broker: Resources | None = None
    workers: Resources | None = None


class Host(Row, kw_only=True):
    """The host under the repeats (model._host): those measured on a busy host, and why."""
    busy_repeats: list[int] = []
    reasons: list[str] = []
    cpu_pressure_pct_max: Number = None


class Limits(Row, kw_only=True):
    """What limited the repeats (model._limits): how many the load generator did, and the consumers."""
    by: list[Any] = []
    client_bound: int = 0
    consumer_bound: int = 0


class RepeatVerdict(Row, kw_only=True):
    """One repeat's sustainability verdict (what reports.regression tests a flip on)."""
    repeat: int | None = None
    verdict: str


class Sustainability(Row, kw_only=True):
    verdict: str
    reasons: list[str] = []
    repeats: list[RepeatVerdict] = []


class CodecFloor(Row, kw_only=True):
    encode_ns: float
    decode_ns: float


class Step(Row, kw_only=True):
    """A rate search's step: the rate tried, its verdict, and what limited it (brokerbench.limit)."""
    rate: Number
    verdict: str
    limit: dict | None = None
    host: dict | None = None  # the host over the step's measured sending (brokerbench.host.judged)


class LatencyAt(Row, kw_only=True):
    """A search's latency at a fraction of the rate found."""
    fraction: float
    rate: Number
    verdict: str
    end_to_end_p99_us: Number = None


class SearchLimit(Row, kw_only=True):
    """What held a search's step (brokerbench.limit), where the load generator did."""
    rate: Number
    window_wait_share: Number = None
    producer_cpu_pct: Number = None


class Search(Row, kw_only=True):
    """One repeat's rate search (CellCompleted `search`)."""
    max_sustainable_rate: Number = None
    sustainable_for_s: Number = None
    limit: dict | None = None
    steps: list[Step] = []
    ended: str = ""
    latency_at: list[LatencyAt] = []


class AtAttach(Row, kw_only=True):
    """The broker's counts when the consumers attached to a startup backlog."""
    counted_s: Number = None
    broker_messages: Number = None
    broker_backlog: Number = None


class Startup(Row, kw_only=True):
    """A repeat's startup backlog (worker.outcome.startup)."""
    messages: int
    rate: Number
    attach_s: Number
    first_delivery_s: Number = None
    backlog_read_s: Number = None
    read_rate_msgs_per_s: Number = None
    received: int = 0
    at_attach: AtAttach = AtAttach()


class BurstTimes(Row, kw_only=True):
    p50: Number = None
    max: Number = None


class Bursts(Row, kw_only=True):
    """A repeat's bursts (worker.outcome.bursts)."""
    messages: int
    every_s: Number
    over_s: Number
    delivered: int
    measured: int
    delivered_in_ms: BurstTimes


class Series(Row, kw_only=True):
    """A repeat's per-second series (series.interval_series): an interval without a count has None; `in_schedule`
    marks the intervals of the schedule (not the drain after it)."""
    interval: list[Number]
    throughput: list[Number]
    end_to_end_p99_us: list[Number]
    end_to_end_count: list[Number] = []
    end_to_end_max_us: list[Number] = []
    publish_latency_p99_us: list[Number] = []
    in_schedule: list[bool] = []
    sent: list[Number] = []

    def of(self, name: str) -> list[Number]:
        """The series a metric names (brokerbench.metrics Metric.series)."""
        return getattr(self, name)


class Latency(Row, kw_only=True):
    """A merged latency object (model._merged_latency): its spectrum where the report draws one."""
    spectrum: list[tuple[float, Number]] = []


class Config(Row, kw_only=True):
    """One configuration of the comparison: its repeats' figures, verdict, loss and what limited it. Its status and
    verdict are required; what names it defaults to empty, for a row built by hand to render one part."""
    key: str = ""
    broker: str = ""
    format: str = ""
    mode: str = ""
    size_bytes: int = 0
    rate_target: Any = None
    status: str
    reasons: list[str] = []
    repeats: int = 0
    completed_repeats: int = 0
    repeat_numbers: list[int] = []
    cell_ids: list[str] = []
    send_loop: str | None = None
    sender: str | None = None
    ack_stamps: str | None = None  # how acknowledgements and deliveries were stamped (brokerbench.figures)
    delivery_stamps: str | None = None
    delivery_stamp_bound: dict | None = None  # over its repeats (figures.merge_stamp_bounds)
    priority: str | None = None  # its repeats' scheduling priority (figures.joined_priorities)
    metrics: dict[str, Estimate] = {}
    values_by_repeat: dict[str, list[Number]] = {}  # each repeat's own figure of a metric (None: too few messages)
    codec_floor_ns: CodecFloor | None = None
    latency: dict[str, Latency] = {}
    not_sent: int | None = None
    lost: int | None = None
    loss: Loss = Loss()
    resources: ResourceGroups | None = None
    host: Host = Host()
    limit: Limits = Limits()
    sustainability: Sustainability
    max_sustainable_rate: Estimate = Estimate()
    searches: list[Search] = []
    startups: list[Startup | None] = []
    bursts: list[Bursts | None] = []
    intervals: list[Series] = []
    ratios: dict[str, dict[str, Number]] = {}
    best: list[str] = []

    @property
    def busy_repeats(self) -> list[int]:
        """The repeats measured on a busy host (reports.model.busy_repeats)."""
        return list(self.host.busy_repeats)

    def ratio(self, axis: str, name: str) -> Number:
        """The ratio of a metric's median to the reference's on an axis; None where there is no reference."""
        return self.ratios.get(axis, {}).get(name)


class Group(Row, kw_only=True):
    """The configurations of one size, rate and mode: one table."""
    size_bytes: int = 0
    rate_target: Any = None
    mode: str = ""
    title: str = ""
    cells: list[Config]
    note: str | None = None


class Projection(Row, kw_only=True):
    """What a verdict's SE is made of, to project it to more runs of history (reports.regression.projected_se)."""
    runs: int
    run_variance: float
    within_candidate: float
    within_history: float


class StampsDiffer(Row, kw_only=True):
    """How a verdict's latency was stamped before and in the run checked, where they differ (regression.flag_stamps):
    `of` names the stamps (ack_stamps: publish latency; delivery_stamps: end-to-end latency), `history` the earlier
    runs' (the baseline's among them), `candidate` the run's (brokerbench.figures: arrival, read, client:LIBRARY)."""
    of: str
    history: str
    candidate: str


class Verdict(Row, kw_only=True):
    """A regression verdict (reports.regression), as checked or as recorded (RegressionDetected), or the figures of
    a comparison before its label: None where a comparison has not the figure (no SE for too few samples, no
    p-value before the test)."""
    cell: str | None = None
    key: str | None = None
    metric: str | None = None
    verdict: str | None = None
    baseline_mean: Number = None
    candidate_mean: Number = None
    change: Number = None
    p_value: Number = None
    baseline_run_id: str | None = None
    before_run_id: str | None = None  # a change point's: the run before it began
    higher_is_better: bool = True
    history_runs: int | None = None
    se: Number = None
    df: Number = None
    threshold: Number = None
    noise: Number = None
    repeat_noise: Number = None
    projection: Projection | None = None
    detectable: Number = None
    detectable_factor: Number = None
    runs_to_detect: int | None = None
    cannot_tell: bool = False
    p_raw: Number = None
    p_tests: dict[str, float] = {}  # a flip's one-sided p-values, each its own hypothesis
    stamps: StampsDiffer | None = None  # the latency it is on ends at a stamp earlier runs took otherwise
    priorities: dict | None = None  # the baseline's and the candidate's scheduling priority, where they differ

    @property
    def name(self) -> str:
        """The configuration it is about: the cell, else the configuration's key, else a dash."""
        return self.cell if self.cell is not None else self.key if self.key is not None else "–"


class RunVersions(Row, kw_only=True):
    """A run's code version and its brokers' versions (reports.history.run_facts)."""
    code_version: str
    brokers: dict[str, Any] = {}


class Versions(Row, kw_only=True):
    """The versions of the run before a change point and of the run it began with."""
    before: RunVersions
    after: RunVersions


class Difference(Row, kw_only=True):
    """A setting that differs between two runs, by dotted name (reports.history.differences)."""
    setting: str
    before: Any = None
    after: Any = None


class ChangePoint(Row, kw_only=True):
    """A change point of a series (reports.changes, described by reports.history): the run it began with, the run
    before, the means on either side and whether it is an alert."""
    index: int
    began_run_id: str
    before_run_id: str
    before_mean: Number
    after_mean: Number
    before_runs: int = 0
    after_runs: int = 0
    change: Number
    p_value: Number
    min_effect: Number = 0
    direction: str | None = None
    alert: bool = False
    versions: Versions
    differences: list[Difference] = []


class SeriesPoint(Row, kw_only=True):
    """A run's point of a series: its figure (reports.changes.run_value)."""
    run_id: str
    value: Number
    tested: Number | None = None  # the figure net of the host, where the series is (reports.changes.host_adjustment)


class HostAdjustment(Row, kw_only=True):
    """How a latency series was taken net of the host (reports.changes.host_adjustment)."""
    covariate: str
    slope: Number
    reference: Number
    df: int


class ChangeSeries(Row, kw_only=True):
    """A configuration's metric over the suite's runs (reports.history.described)."""
    key: str
    cell: str
    metric: str
    checked: bool = False  # long enough for its newest runs to be tested (reports.changes.NEWEST_MIN)
    searched: bool = False  # long enough to search every split (reports.changes.MIN_SERIES)
    adjustment: HostAdjustment | None = None  # its change points found on its figures net of the host
    points: list[SeriesPoint] = []
    change_points: list[ChangePoint] = []


class RunListed(Row, kw_only=True):
    run_id: str


class AlertRaised(Row, kw_only=True):
    """A change point this run alerted on."""
    key: str
    metric: str
    began_run_id: str


class Changes(Row, kw_only=True):
    """The change points of the suite's series (reports.history.watch `changes`): the runs, every series, the
    alerts this run raised."""
    runs: list[RunListed] = []
    series: list[ChangeSeries] = []
    alerts: list[AlertRaised] = []


def change_series(data: dict | ChangeSeries) -> ChangeSeries:
    return data if isinstance(data, ChangeSeries) else msgspec.convert(data, ChangeSeries)


def change_point(data: dict | ChangePoint) -> ChangePoint:
    return data if isinstance(data, ChangePoint) else msgspec.convert(data, ChangePoint)


class Check(Row, kw_only=True):
    """The regression check of a run (CheckRegression's result); no baseline when none was found."""
    baseline_run_id: str | None = None
    history_run_ids: list[str] = []
    verdicts: list[Verdict] = []
    corrected_alpha: Number = None
    alpha: Number = None
    comparisons: int | None = None
    rule: Any = None
    method: Any = None
    changes: Changes | None = None  # the scheduled check's change points (reports.history.watch)


class Highlight(Row, kw_only=True):
    text: str
    metric: str
    cell: str | None = None
    reference: str | None = None


class Failover(Row, kw_only=True):
    """What a broker's documentation promises an acknowledged message when the node that acknowledged it fails
    (registry.durability's `failover`): promised True, False (nothing promised) or None (not stated)."""
    promised: bool | None
    text: str


class Durability(Row, kw_only=True):
    """What a broker's acknowledgement waited for (results.json `durability`), and what is promised when a node
    fails (None in results stored before statements said)."""
    fsync: bool | str | None  # a policy where it is neither (Redis's appendfsync everysec)
    replicas: int | None
    memory_only: bool | str | None
    text: str
    failover: Failover | None = None


class Prices(Row, kw_only=True):
    region: str
    as_of: str


class CostItem(Row, kw_only=True):
    what: str
    quantity: Number
    unit: str
    unit_price: Number
    cost: Number


class Cost(Row, kw_only=True):
    """The run's estimated AWS cost (brokerbench.cost), or the error that kept it from being made; a local run's
    own has no items, `on_aws` what it would cost there."""
    error: str | None = None
    total: Number = None
    currency: str = "USD"
    where: str | None = None
    prices: Prices | None = None
    items: list[CostItem] = []
    assumptions: list[str] = []
    on_aws: Cost | None = None

    @property
    def listed(self) -> Cost:
        """The estimate whose items a report lists: a local run's own has none, so what it would cost on AWS."""
        return self.on_aws if self.where == "local" and self.on_aws else self


class HostInfo(Row, kw_only=True):
    cores: int
    cpu_model: str


class BrokerInfo(Row, kw_only=True):
    """A broker as the run found it; "?" for what the environment did not record."""
    broker_version: Any = "?"
    client_library: Any = "?"
    client_version: Any = "?"


class Environment(Row, kw_only=True):
    host: HostInfo
    code_version: str
    brokers: dict[str, BrokerInfo] = {}


class References(Row, kw_only=True):
    format: str
    broker: str


class Rules(Row, kw_only=True):
    """The rules a report applied (report.json `rules`), each in words; None where a report stored before the rule
    has none."""
    sustainability: str | None = None
    claims: str | None = None
    percentiles: str | None = None
    max_rate: str | None = None
    limit: str | None = None
    missing: str | None = None
    not_sent: str | None = None
    accounting: str | None = None
    codec: str | None = None
    send_loop: str | None = None
    durability: str | None = None
    host: str | None = None
    stamps: str | None = None


class Report(Row, kw_only=True):
    """The comparison report (reports.model.build_report), with the regression check publishing added. What
    identifies the run and its references are required to render it whole (`render` reads them); a report built by
    hand to render one section may leave them out."""
    run_id: str = ""
    name: str = ""
    status: str = ""
    reason: str | None = None
    environment: Environment | None = None
    references: References | None = None
    regressions: list[Verdict] = []
    regression_check: Check | None = None
    claims_note: str | None = None
    send_loops: dict[str, int] = {}
    send_loop_note: str | None = None
    senders: dict[str, int] = {}
    host_note: str | None = None
    highlights: list[Highlight] = []
    rules: Rules = Rules()
    configurations_with_loss: list[str] = []
    configurations_client_bound: list[str] = []
    configurations_consumer_bound: list[str] = []
    groups: list[Group] = []
    durability: dict[str, Durability] = {}
    guarantees: list[dict] = []  # reports.faults.rows's rows, which reports.faults renders
    guarantees_by_setting: list[dict] = []  # reports.faults.by_setting's rows, which reports.faults renders
    cost: Cost | None = None


# What a whole report must carry to be rendered (a section alone needs none of them).
WHOLE = ("run_id", "environment", "references")


def report(data: dict) -> Report:
    """The report's typed rows, to render whole; a field of the wrong type or missing fails here, naming it."""
    found = msgspec.convert(data, Report)
    for name in WHOLE:
        if not getattr(found, name):
            raise msgspec.ValidationError(f"Object missing required field `{name}`")
    return found


def section(data: dict) -> Report:
    """Part of a report's typed rows, to render one section of it."""
    return msgspec.convert(data, Report)


def verdict(data: dict | Verdict) -> Verdict:
    """A regression verdict's typed row, or the figures of a comparison (a row passes as it is)."""
    return data if isinstance(data, Verdict) else msgspec.convert(data, Verdict)


class BusyMark(Row, kw_only=True):
    """A configuration's repeats measured on a busy host in one run (regression.run_figures `host_busy`)."""
    repeats: list[int]
    of: int
    reasons: list[str] = []


class ConfigFigures(Row, kw_only=True):
    """What the regression check reads of one configuration's entry in a run's figures (regression.run_figures;
    benchmarks and tests build entries by hand, without the optional parts): its status, sustainability, its
    repeats' verdicts, its busy repeats, its send loop and stamps, and by metric its per-repeat figures (`repeats`) and each
    repeat's per-second series (`series`)."""
    status: str | None = None  # the configuration's (run_figures always gives it)
    sustainability: str | None = None
    repeat_verdicts: list[str] = []
    host_busy: BusyMark | None = None
    send_loop: str | None = None
    priority: str | None = None  # the scheduling priority its repeats ran at (figures.joined_priorities)
    ack_stamps: str | None = None  # how acknowledgements and deliveries were stamped (brokerbench.figures)
    delivery_stamps: str | None = None
    repeats: dict[str, list] = {}  # numbers as computed (numpy's included), compared as they are
    series: dict[str, list[list]] = {}
    # by latency metric, each of its repeats' host figure (changes.COVARIATE: the publish delay p99), aligned with
    # `repeats` (None where a repeat had none); figures stored before it, or built by hand, have none
    covariates: dict[str, list] = {}

    def repeats_of(self, metric: str) -> list:
        """A metric's per-repeat figures; empty where it has none (end-to-end latency of a publish-only cell, a
        metric figures built by hand leave out)."""
        return self.repeats.get(metric, [])

    def covariate_of(self, metric: str) -> list:
        """Each repeat's host figure beside the metric's (`covariates`), None for each where there is none."""
        given = self.covariates.get(metric, [])
        return given if len(given) == len(self.repeats_of(metric)) else [None] * len(self.repeats_of(metric))

    def series_of(self, metric: str) -> list[list]:
        """A metric's per-second series, one per repeat; empty where it has none (a metric with no per-second
        figure, as the maximum sustainable rate)."""
        return self.series.get(metric, [])


def config_figures(entry: dict) -> ConfigFigures:
    return msgspec.convert(entry, ConfigFigures)


def config(data: dict) -> Config:
    """One configuration's typed row (report["groups"][i]["cells"][j])."""
    return msgspec.convert(data, Config)


def group(data: dict) -> Group:
    return msgspec.convert(data, Group)


def cost(data: dict) -> Cost:
    """An estimate (brokerbench.cost) as the tables list it."""
    return msgspec.convert(data, Cost)


def startup(data: dict) -> Startup:
    return msgspec.convert(data, Startup)


class RunSpec(Row, kw_only=True):
    """The run's spec (the validated run request, results.json `spec`) as the reports read it; the maps a user gives
    (client settings, targets, references) stay maps, read by key."""
    brokers: list[str] = []
    client: dict | None = None
    targets: dict | None = None
    references: dict = {}
    repeats: int = 1
    size_basis: str = "record"


def run_spec(data: dict) -> RunSpec:
    return msgspec.convert(data, RunSpec)


# -- results.json cells, as the terminal's table reads them -----------------------------------------------------
class Statistics(Row, kw_only=True):
    """The statistics of a latency object (results.SUMMARY_FIELDS); None where it has not one."""
    p50: Number = None
    p75: Number = None
    p95: Number = None
    p99: Number = None
    p999: Number = None
    max: Number = None
    mean: Number = None


class LowerBounds(Statistics, kw_only=True):
    """A statistic's lower bound where missing messages (at +∞) put its value out of reach."""


class LatencyObject(Statistics, kw_only=True):
    """A cell's summary of one latency histogram (results.latency_object); a statistic it has not is None, and
    `count` None for an object stored before it carried its own."""
    count: int | None = None
    lower_bounds: LowerBounds = LowerBounds()


class BrokerCount(Row, kw_only=True, omit_defaults=True):
    """The broker's own count at the cell's end beside what it should hold (CellCompleted `broker_count`); a count
    not stored is None and left out when the object is written back (reports.faults copies it into its rows)."""
    observed: int | None = None
    expected: int | None = None
    difference: int | None = None
    delivered_not_acknowledged: int | None = None


class HostSeen(Row, kw_only=True):
    """The host under a cell (brokerbench.host): whether it was busy, and why."""
    busy: bool = False
    cpu_pressure_pct: Number = None
    steal_pct: Number = None
    memory_pressure_pct: Number = None
    reasons: list[str] | None = None


class SearchRecord(Row, kw_only=True):
    """A rate search's record in a cell result (its steps and how long the rate found held)."""
    steps: list[dict] = []
    sustainable_for_s: Number = None


class ResourceFigures(Row, kw_only=True):
    """One process group's CPU and memory over a cell (worker/resources.py)."""
    cpu_pct_mean: float
    cpu_pct_max: float
    rss_mb_max: float


class StartupRecord(Row, kw_only=True):
    """A cell's startup backlog as its result carries it (worker.outcome.startup): None where the backlog was not
    wholly delivered."""
    first_delivery_s: Number = None
    backlog_read_s: Number = None
    read_rate_msgs_per_s: Number = None


class BurstCycle(Row, kw_only=True):
    """One measured burst: from its first message's due time to its last delivery (None: not wholly delivered)."""
    delivered_in_ms: Number = None


class BurstRecord(Row, kw_only=True):
    """A cell's bursts as its result carries them (worker.outcome.bursts)."""
    cycles: list[BurstCycle] = []


class ResultCell(Row, kw_only=True):
    """One cell of results.json as the terminal's table (reports.table) reads it: None where the cell has no figure
    (a failed cell, a publish-only cell's receipts, a result stored before the field existed)."""
    cell_id: str = ""
    broker: str = ""
    format: str = ""
    repeat: int = 0
    mode: str = ""
    size_basis: str | None = None
    size_bytes: int = 0
    rate_target: Any = None
    producers: int | None = None
    consumers: int | None = None
    partitions: int | None = None
    status: str = "completed"
    reason: str | None = None
    verdict: Literal["sustainable", "unsustainable", "inconclusive", "max-rate"] | None = None  # results.schema.json
    verdict_reasons: list[str] = []
    order: Any = None
    send_loop: str | None = None
    sender: str | None = None
    ack_stamps: str | None = None  # how acknowledgements and deliveries were stamped (brokerbench.figures)
    delivery_stamps: str | None = None
    delivery_stamp_bound: dict | None = None  # figures.merge_stamp_bounds reads it
    priority: dict | None = None  # CellCompleted's (worker/priority.py); None: stored before it was recorded
    latency_basis: str | None = "intended"
    rate_achieved: Number = None
    measured_s: Number = None
    publish_only: bool = False
    shaped: bool = False
    max_sustainable_rate: Number = None
    search: SearchRecord | None = None
    limit: dict | None = None  # brokerbench.limit reads it
    host: HostSeen | None = None
    client: dict | None = None  # the client settings (user-given keys)
    codec_floor_ns: CodecFloor | None = None
    encoded_bytes: Number = None
    throughput_msgs_per_s: Number = None
    throughput_mb_per_s: Number = None
    publish_latency_us: LatencyObject | None = None
    publish_delay_us: LatencyObject | None = None
    end_to_end_latency_us: LatencyObject | None = None
    delivery_latency_us: LatencyObject | None = None
    encode_ns: LatencyObject | None = None
    decode_ns: LatencyObject | None = None
    encode_net_ns: LatencyObject | None = None
    decode_net_ns: LatencyObject | None = None
    sent: int | None = None
    acked: int | None = None
    received: int | None = None
    lost: int | None = None
    late: int | None = None
    undelivered: int | None = None
    send_errors: int | None = None
    unacknowledged: int | None = None
    unacked: int | None = None  # the name results stored before `unacknowledged` gave it
    undelivered_or_lost: int | None = None
    residual: int | None = None
    broker_count: BrokerCount | None = None
    duplicated: int | None = None
    out_of_order: int | None = None
    faults: dict | None = None  # the faults' record as stored (reports.faults reads it as eventdata.Faults)
    startup: StartupRecord | None = None
    bursts: BurstRecord | None = None
    resources: dict[str, ResourceFigures | None] | None = None  # per process group (worker/resources.py)
    not_sent: int | None = None
    due: int | None = None
    missing: int | None = None
    has_loss: bool = False
    delivered_share: Number = None  # delivered / sent (figures.delivered_share)

    def latency(self, field: str) -> LatencyObject:
        """A latency field's object, empty where the cell has none."""
        return getattr(self, field) or NO_LATENCY

    @property
    def unacknowledged_count(self) -> int | None:
        """Sent and never acknowledged, under either name a result stored it."""
        return self.unacknowledged if self.unacknowledged is not None else self.unacked

    @property
    def busy(self) -> bool:
        """Measured on a busy host (brokerbench.host)."""
        return self.host is not None and self.host.busy


NO_LATENCY = LatencyObject()


def result_cell(data: dict) -> ResultCell:
    return msgspec.convert(data, ResultCell)


def missing_in(cells: list[ResultCell]) -> int:
    """The cells' measured messages not received in time (sent - received; results.MISSING_RULE), publish-only ones
    aside."""
    return sum(missing_of({"sent": c.sent, "received": c.received, **({"missing": c.missing}
                          if c.missing is not None else {})}) for c in cells)


build_types(globals())  # msgspec's information on its Structs, built now (eventdata.build_types)
