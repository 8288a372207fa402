"""Response shapes of the HTTP API, validated at the edge and published in the OpenAPI document."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RUN_ID = r"^\d{8}T\d{6}Z-[0-9a-f]{6}$"
CELL_ID = r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$"
SUITE = r"^[a-z0-9][a-z0-9_-]{0,63}$"
RunStatus = Literal["starting", "running", "completed", "completed_with_failures", "failed", "cancelled",
                    "interrupted", "incomplete"]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Problem(Model):
    field: str
    message: str


class Error(Model):
    message: str
    field: str | None
    problems: list[Problem] | None = None
    run_id: str | None = None  # with 409: the run in the way
    run_ids: list[str] | None = None  # with 429: the runs in flight


class Links(Model):
    self: str
    events: str
    report: str
    cancel: str


class RunStarted(Model):
    run_id: str
    status: Literal["starting"]
    links: Links
    replayed: bool = False  # true when an Idempotency-Key returned an earlier request's run


class CostItem(Model):
    what: str
    quantity: float
    unit: str
    unit_price: float
    cost: float


class HourlyCost(Model):
    total: float = Field(description="What the run creates, per hour while it exists: its provisioned targets and "
                                     "its workers at once")
    targets: float = Field(description="The provisioned targets' part of `total`")
    items: list[CostItem]
    kept_hours: float | None = Field(description="keep_targets: how long the targets stay after the run (null: "
                                                 "deleted at its end)")


class PlanCost(Model):
    """brokerbench/cost.py's estimate_plan, as `brokerbench cost --json` prints it for one run."""

    currency: str
    where: Literal["plan"]
    total: float
    items: list[CostItem]
    prices: dict[str, str]
    assumptions: list[str]
    hourly: HourlyCost
    on_aws: None


class AdmissionNow(Model):
    """Whether a start of the same request would be admitted at this moment (workflow/admission.py preview)."""

    admitted: bool
    reasons: list[str] = Field(description="Why not: the runs in flight at the cap (naming them), a quota too low "
                                           "(the numbers and the quota to raise); empty when admitted")
    runs_in_flight: list[str] = Field(description="The runs in flight now (locally: the run holding the stack)")
    max_runs_in_flight: int | None = Field(None, description="The cap: the deployment's (-c brokerbench:maxRunsInFlight); "
                                                             "locally 1 (the stack runs one run at a time)")


class RunPlan(Model):
    dry_run: Literal[True]
    name: str
    suite: str | None
    cells: int
    workers: dict[str, int] = Field(description="Cells per worker kind (lambda, ec2) as placement decides")
    max_concurrency: int
    estimated_s: int = Field(description="The run's estimated time: its cells' estimates, max_concurrency at a time")
    cost: PlanCost = Field(description="The estimated AWS cost, every broker on its default provisioned target, and "
                                       "`hourly`: what the run creates, priced per hour")
    admission: AdmissionNow = Field(description="Whether the run would start now (the cap on runs in flight, the "
                                                "account's quotas); nothing is reserved: a start may still be refused")


class CellCounts(Model):
    total: int
    completed: int
    failed: int


class RunSummary(Model):
    run_id: str
    name: str
    suite: str | None
    status: RunStatus
    requested_at: str
    finished_at: str | None
    cells: CellCounts
    links: Links


class RunList(Model):
    runs: list[RunSummary]
    next: str | None


class Progress(Model):
    total: int
    completed: int
    failed: int
    fraction: float


class Timings(Model):
    requested_at: str | None
    finished_at: str | None
    duration_s: float | None


class CellLine(Model):
    cell_id: str
    broker: str
    format: str
    size_bytes: int
    rate_target: int | float | str
    status: str
    throughput_msgs_per_s: float | None
    verdict: str | None
    reason: str | None
    limit: dict[str, Any] | None = Field(None, description="What limited the cell's rate (brokerbench.limit): `by` "
                                         "schedule, broker or client (client-bound: the load generator's rate, a "
                                         "lower bound of the broker's), with the rule's inputs, and for a cell with "
                                         "consumers `consumers.by` (consumer: consumer-bound, they fell behind); null "
                                         "for cells stored before it was recorded")
    not_sent: int | None = Field(None, description="Measured messages due before the cell's end that its producers "
                                 "never sent (they fell behind their schedule); null where it was not counted (cells stored "
                                 "before it was, or that ended before measuring)")
    host: dict[str, Any] | None = Field(None, description="The host over the cell's measured seconds (brokerbench.host): "
                                        "CPU and memory pressure, steal, CPU used outside the cell, and `busy` with its "
                                        "reasons (a busy cell enters no claim and no regression verdict); null for "
                                        "cells stored before it was recorded")
    ack_stamps: str | None = Field(None, description="How the cell's producers stamped each acknowledgement, where "
                                   "publish latency ends (brokerbench.figures): `arrival` (the kernel's receive time), "
                                   "`read` (the read's return: a TLS socket) or `client:LIBRARY` (in the client "
                                   "library's thread or callback), comma-separated where they differed; null for cells "
                                   "stored before it was recorded")
    delivery_stamps: str | None = Field(None, description="How the cell's consumers stamped each delivery, where "
                                        "end-to-end latency ends, in the same words as `ack_stamps`; null for "
                                        "publish-only cells and cells stored before it was recorded")


class RunDetail(Model):
    run_id: str
    name: str | None
    suite: str | None
    status: RunStatus
    reason: str | None
    requested_at: str | None
    finished_at: str | None
    cells: CellCounts
    links: Links
    progress: Progress
    timings: Timings
    spec: dict[str, Any] | None
    cells_detail: list[CellLine]
    stamps_note: str | None = Field(None, description="The footnote of the cells whose `ack_stamps` or "
                                    "`delivery_stamps` are not all `arrival` (the tables mark them †): each one "
                                    "and how it was stamped (deliveries stamped at a Fetch response: how often that "
                                    "was the one that carried them, and how much later it came at most otherwise), "
                                    "and where how late such a stamp is was measured; null "
                                    "when every completed cell was stamped at arrival or none recorded it")


class Cancelling(Model):
    run_id: str
    status: Literal["cancelling"]


class EventPage(Model):
    events: list[dict[str, Any]]
    next: str | None


class CellDetail(Model):
    cell: dict[str, Any]
    series: list[dict[str, Any]]


class Verdict(Model):
    model_config = ConfigDict(extra="allow")
    cell: str
    metric: str
    verdict: str
    baseline_median: float | None
    candidate_median: float | None
    baseline_mean: float | None = Field(None, description="The geometric mean of the baseline run's samples (its "
                                        "repeats, or blocks of a single repeat's intervals): the figure the change "
                                        "is of, change = candidate_mean / baseline_mean - 1")
    candidate_mean: float | None = Field(None, description="The geometric mean of the candidate run's samples")
    change: float | None
    p_value: float | None
    why: str
    stamps: dict[str, str] | None = Field(None, description="Where the verdict's latency ends was stamped otherwise "
                                          "in the earlier runs than in the candidate: `of` (ack_stamps: publish "
                                          "latency; delivery_stamps: end-to-end and delivery latency), `history` and "
                                          "`candidate` (arrival, read, client:LIBRARY). A change of method, not of "
                                          "the broker; the verdict is kept as the test found it. Absent otherwise")


class Comparison(Model):
    baseline: str
    candidate: str
    verdicts: list[Verdict]
    summary: dict[str, int]


class Suite(Model):
    name: str
    description: str
    cells: int
    estimated_s: float
    runs: list[str] = Field(default_factory=list, description="A study's runs, each started on its own with "
                            "POST /runs {suite, run, scale?}; empty for a suite of one run request.")


class SuiteList(Model):
    suites: list[Suite]


class SuiteDetail(Suite):
    request: dict[str, Any] | None = Field(description="The suite's run request; null for a study (see requests).")
    requests: dict[str, dict[str, Any]] = Field(description="Each run's request by run name (a suite's one run "
                                                            "under its suite name).")


class HistoryRun(Model):
    run_id: str
    requested_at: str
    code_version: str | None
    brokers: dict[str, str | None] = Field(description="Each broker's version as the run's TargetsReady found it.")


class HistoryPoint(HistoryRun):
    value: float = Field(description="The run's figure: the geometric mean of its repeats (their median from 10 "
                                     "repeats on).")
    repeats: list[float] = Field(description="Each repeat's figure.")
    tested: float | None = Field(None, description="Where the series is taken net of the host (the series' "
                                                   "`adjustment`): the run's figure so, which its change points are "
                                                   "found and measured on.")


class ChangePoint(Model):
    model_config = ConfigDict(extra="allow")
    index: int = Field(description="The point (in `points`) the change began with.")
    began_run_id: str
    before_run_id: str = Field(description="The run before the change.")
    change: float = Field(description="The geometric mean of the runs from the change to the next one, over that of "
                                      "the runs since the previous one, minus 1.")
    direction: Literal["regression", "improvement"]
    alert: bool = Field(description="A regression of at least the metric's minimum effect.")
    p_value: float
    versions: dict[str, Any] = Field(description="{before, after}: code and broker versions of the runs on either "
                                                 "side.")
    differences: list[dict[str, Any]] = Field(description="Every setting that differs between those runs.")


class HostAdjustment(Model):
    covariate: str = Field(description="The host figure taken out: each repeat's publish delay p99 (how late the "
                                       "producer took up its messages, before any broker was involved).")
    slope: float = Field(description="The log figure's slope on the log delay within runs, over the series' noise "
                                     "group, held to [0, 1].")
    reference: float = Field(description="The group's median delay (µs) a repeat is brought to.")
    df: int = Field(description="Degrees of freedom within runs the slope rests on.")


class HistorySeries(Model):
    key: str
    cell: str
    metric: str
    higher_is_better: bool
    checked: bool = Field(description="Whether the series had enough runs for its newest runs to be tested "
                                      "(reports.changes.NEWEST_MIN).")
    searched: bool = Field(False, description="Whether the series had enough runs to be searched for change points "
                                              "at every split (reports.changes.MIN_SERIES).")
    adjustment: HostAdjustment | None = Field(None, description="How the series is taken net of the host (latency "
                                                               "p99s, reports.changes.host_adjustment); none: as "
                                                               "measured.")
    points: list[HistoryPoint]
    change_points: list[ChangePoint]


class History(Model):
    suite: str
    metric: str
    runs: list[HistoryRun]
    series: list[HistorySeries]
    method: dict[str, str]


class Trigger(Model):
    due_at: str
    run_id: str | None
    outcome: str
    reason: str | None


class LastRun(Model):
    run_id: str
    status: str


class Schedule(Model):
    model_config = ConfigDict(extra="allow")
    name: str
    description: str | None = None
    suite: str | None
    run: str | None = Field(default=None, description="A study's run, with suite.")
    scale: float | None = Field(default=None, description="The run's --scale, with suite.")
    cron: str
    timezone: str | None = None
    baseline: str
    notify: list[str]
    enabled: bool
    baseline_runs: int = Field(description="Until its suite has this many completed runs, the schedule runs again as "
                                           "soon as its last run completed (its baseline)")
    next_due: str | None
    last_trigger: Trigger | None
    last_run: LastRun | None


class ScheduleList(Model):
    schedules: list[Schedule]


class Health(Model):
    status: Literal["ok"]
    version: str
    mode: Literal["local", "aws"]


class MetricInfo(Model):
    """One metric of brokerbench.metrics, as declared there."""
    key: str = Field(description="Its name in report.json `metrics`, regression verdicts and GET /suites/{name}/history")
    label: str = Field(description="In words")
    column: str = Field(description="A table's header")
    unit: str = Field(description="Of the figure as shown (the stored value ÷ scale)")
    digits: int = Field(description="Decimals shown")
    higher_is_better: bool
    field: str = Field(description="The cell result's field it is read from")
    stat: str | None = Field(description="The key inside that field's latency object; null: the field is the figure")
    scale: float
    sample_of: str | None = Field(description="The count a percentile of it is a sample of (the minimum-sample rule)")
    claims: list[Literal["highlight", "best"]] = Field(description="The comparisons a report makes on it")
    claim_floor: float | None = Field(description="The least relative effect a claim on it must show")
    regression: bool = Field(description="Checked run against run, and kept as a series over a suite's runs")
    change_floor: float | None = Field(description="With regression: the least change of its series that is an alert")
    series: str | None = Field(description="Its per-second interval series")
    shown: list[Literal["report", "grid", "terminal", "study"]] = Field(description="Where it appears")


class Metrics(Model):
    metrics: list[MetricInfo]


def answers(model, *codes: int, status: int = 200, description: str = "success") -> dict:
    """The `responses` entry of a route: its success (with `model`) and the error statuses it may answer."""
    what = {400: "bad request", 404: "not found", 409: "conflict", 413: "body too large",
            415: "the body is not JSON", 422: "invalid input",
            429: "too many runs in flight (the deployment's cap): run_ids names them"}
    out = {code: {"description": what[code], "content": {"application/json": {"model": Error}}} for code in codes}
    out[status] = {"description": description, "content": {"application/json": {"model": model}}}
    return out
