"""The data of every event type as msgspec Structs: the shape the event store checks on each write and each read.

schemas/events.schema.json stays the document people read and other tools validate with; these Structs are its
types, field by field (tests/unit/test_eventdata.py fails when the two disagree: a property the schema
declares and its Struct lacks, a required field the Struct lets go missing, a type or an enum that differs).
The Structs also carry every range, length and pattern of their schema (msgspec Meta), an Open object's other
fields their type (OPEN_VALUES), a oneOf its ONE_OF and the envelope's if/then/else its PARTITIONS: each Struct holds
every rule of its schema entry (the test compares them rule by rule), so a write checks an event by its Structs
alone (Envelope, then its data's), not by the schema's validator.

Rules that follow the schema:
- A required property is a field without a default; an optional one defaults to UNSET, so it is never confused with
  a stored null and `to_builtins` leaves it out as the producer did.
- Where the schema says `additionalProperties: false` the Struct forbids unknown fields, on read as on write. Where
  it allows more (a cell's plan, a broker's target description) the Struct reads what it knows and lets the rest
  through: events written by an earlier release keep their extra keys.
- A producer writes no field its event type does not declare (events.encode refuses it by name), so a misspelling
  is caught where it is written; a reader that meets one in a stored event is not stopped by it.
- An object the schema leaves open (a run's spec, its environment) is an Open Struct with the fields the schema types;
  what the verdict is judged from and on (the cell's verdict, its warm-up, a rate search's record) is closed: a
  misspelled or missing field there fails where it is written and where it is read, naming the event and the field.

Events carry `schema_version`; DATA_TYPES maps each version this release reads to its Structs (version 1 is every
event stored so far).
"""

from __future__ import annotations

import re
import types
import typing
from functools import cache
from typing import Annotated, ClassVar, Literal

from msgspec import UNSET, Meta, Struct, UnsetType, ValidationError, convert, json, structs

SCHEMA_VERSION = 1
# How a cell's producers stamped acknowledgements and its consumers deliveries (CellCompleted.ack_stamps,
# delivery_stamps; figures.STAMPS): the distinct values, comma-separated.
STAMPS_PATTERN = r"^(arrival|read|client:[a-z0-9-]+)(, (arrival|read|client:[a-z0-9-]+))*$"
# The schema's ranges, which the Structs hold
NonNegativeInt = Annotated[int, Meta(ge=0)]
AtLeastOne = Annotated[int, Meta(ge=1)]
NonNegative = Annotated[float, Meta(ge=0)]
Percent = Annotated[float, Meta(ge=0, le=100)]
NonEmpty = Annotated[str, Meta(min_length=1)]
RUN_ID = r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{6}$"  # a run's id (events.new_run_id)


class Data(Struct, kw_only=True):
    """An object of an event's data: fields by keyword, optional ones UNSET until given."""


class Strict(Data, kw_only=True, forbid_unknown_fields=True):
    """An object whose schema says `additionalProperties: false`."""


class Open(Data, kw_only=True):
    """An object that carries more than its Struct names, by design (a cell's settings, a host's description): its
    other fields are not checked, on write either."""


# --- shared shapes -------------------------------------------------------------------------------------------------

class Histograms(Strict, kw_only=True):
    """HdrHistogram V2 compressed, base64: latencies and publish delay in µs, encode/decode in ns."""
    publish_latency_us: str | UnsetType = UNSET
    publish_delay_us: str | UnsetType = UNSET
    end_to_end_latency_us: str | UnsetType = UNSET
    not_sent_bound_us: str | UnsetType = UNSET
    encode_ns: str | UnsetType = UNSET
    decode_ns: str | UnsetType = UNSET
    delivery_latency_us: str | UnsetType = UNSET


class Counters(Open, kw_only=True):
    """An interval's counts (more counters may follow, every one an integer >= 0: OPEN_VALUES)."""
    sent: NonNegativeInt
    bytes_sent: NonNegativeInt
    acked: NonNegativeInt
    send_errors: NonNegativeInt
    received: NonNegativeInt
    bytes_received: NonNegativeInt


class Cell(Open, kw_only=True):
    """One planned cell: the required part of the plan (a cell carries its settings beside it)."""
    cell_id: str
    index: NonNegativeInt
    order: NonNegativeInt | UnsetType = UNSET
    broker: str
    format: str
    mode: str
    size_basis: str
    size_bytes: int
    rate: object  # messages per second, or a rate search's name
    producers: int
    consumers: int
    partitions: int
    repeat: int
    client: dict


class HostUsage(Strict, kw_only=True):
    """The host's pressure and steal over one interval."""
    cpu_pressure_pct: Percent | None
    memory_pressure_pct: Percent | None
    steal_pct: Percent | None
    cpu_pct: Percent | None
    cpus: Annotated[int, Meta(ge=1)] | None | UnsetType = UNSET


class ResourceUsage(Strict, kw_only=True):
    cpu_pct: NonNegative
    rss_mb: NonNegative


class Gap(Data, kw_only=True):
    from_s: float | UnsetType = UNSET
    to_s: float | UnsetType = UNSET
    s: NonNegative | UnsetType = UNSET
    until_end: bool | UnsetType = UNSET


class AppliedFault(Data, kw_only=True):
    fault: NonNegativeInt
    kind: Literal["kill", "stop", "pause", "resume", "restart", "reboot", "network", "heal"]
    target: str | UnsetType = UNSET
    effect: Literal["latency", "bandwidth", "reset", "blackhole"] | UnsetType = UNSET
    proxy: str | UnsetType = UNSET
    proxies: list[str] | UnsetType = UNSET
    toxics: list[str] | UnsetType = UNSET
    nodes: list[str]
    planned_s: float
    at_s: float
    at: str
    leader_before: str | None
    call: str | UnsetType = UNSET
    request: dict | UnsetType = UNSET
    response: dict | UnsetType = UNSET
    answered_s: float | UnsetType = UNSET
    call_s: NonNegative | UnsetType = UNSET


class FailedFault(Open, kw_only=True):
    """A managed call the service refused or that could not be made: the action as it would have been applied,
    with `error` in place of the response."""
    fault: NonNegativeInt
    kind: str
    nodes: list[str] | UnsetType = UNSET
    at_s: float
    error: dict


class PhaseFigures(Data, kw_only=True):
    """A fault phase's latency figures (µs), from its intervals' histograms merged."""
    p50: float
    p99: float
    max: float
    count: NonNegativeInt


class Phase(Data, kw_only=True):
    """The intervals of one phase of a fault window: how many, the delivered rate, and the latencies (None: none
    measured, as end-to-end latency in a publish-only cell)."""
    seconds: NonNegativeInt
    throughput_msgs_per_s: float
    end_to_end_latency_us: PhaseFigures | None
    publish_latency_us: PhaseFigures | None


class Phases(Data, kw_only=True):
    """brokerbench.faults.phases: the fault window (None: no fault applied), the phases before, during and after it
    (None: no interval in it), and when the rate came back (None: not within the measured window)."""
    window_s: list[float] | None
    before: Phase | None
    during: Phase | None
    after: Phase | None
    back_to_rate_s: float | None


class Faults(Data, kw_only=True):
    """The faults a cell applied and what the brokers said of them."""
    applied: list[AppliedFault]
    restored_at_end: list | UnsetType = UNSET
    leader_at_end: str | None
    cluster_whole_at_end: bool | None | UnsetType = UNSET
    producer_ack_gap: Gap | None | UnsetType = UNSET
    consumer_receipt_gap: Gap | None | UnsetType = UNSET
    phases: Phases | UnsetType = UNSET
    failed: list[FailedFault] | UnsetType = UNSET


# --- the run's events ----------------------------------------------------------------------------------------------

class Spec(Open, kw_only=True):
    """The validated run request (schemas/run-request.schema.json, which checks the rest): its name, the order its
    cells ran in, and what the reports read of it."""
    name: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    notes: list[str] | UnsetType = UNSET
    brokers: list[str] | UnsetType = UNSET
    order: Literal["random", "fixed"] | UnsetType = UNSET
    order_seed: int | None | UnsetType = UNSET


class Host(Open, kw_only=True):
    """The machine a run was planned on (None where it could not be told)."""
    hostname: str | UnsetType = UNSET
    cpu_model: str | UnsetType = UNSET
    cores: int | None | UnsetType = UNSET
    memory_bytes: int | None | UnsetType = UNSET
    os: str | UnsetType = UNSET


class Environment(Open, kw_only=True):
    """Where a run was planned: the host, Python, brokerbench's version and the client libraries' versions."""
    host: Host
    code_version: str
    python: str
    libraries: dict[str, str] | UnsetType = UNSET


class RunRequested(Data, kw_only=True):
    """A run's request: its plan's cells inline (`cells`) or in CellsPlanned events (`cell_chunks`), never both."""
    spec: Spec
    suite: str | UnsetType = UNSET
    cells: list[Cell] | UnsetType = UNSET
    environment: Environment
    cell_count: NonNegativeInt | UnsetType = UNSET
    cell_chunks: AtLeastOne | UnsetType = UNSET
    # The schema's oneOf: exactly one of these fields is given (test_eventdata compares the two)
    ONE_OF: ClassVar[tuple] = (("cells",), ("cell_chunks",))

    def __post_init__(self):
        given_ = [names for names in self.ONE_OF if all(getattr(self, n) is not UNSET for n in names)]
        if len(given_) != 1:
            raise ValueError(f"exactly one of {' and '.join(' + '.join(n) for n in self.ONE_OF)} is given, "
                             f"not {len(given_)}")


class CellsPlanned(Data, kw_only=True):
    chunk: NonNegativeInt
    cells: Annotated[list[Cell], Meta(min_length=1)]


class TargetSettings(Open, kw_only=True):
    acks: str | UnsetType = UNSET
    modes: dict | UnsetType = UNSET
    persistence: dict | None | UnsetType = UNSET


class Target(Open, kw_only=True):
    """A broker as the run found it."""
    broker: object
    broker_version: object
    client_library: object
    client_version: object
    settings: TargetSettings | UnsetType = UNSET


class TargetsReady(Data, kw_only=True):
    targets: dict[str, Target]


class CellStarted(Data, kw_only=True):
    cell_id: str
    cell: Cell
    topic: str
    attempt: NonNegativeInt
    worker: dict | UnsetType = UNSET


class IntervalSummary(Strict, kw_only=True):
    """An interval without its histograms: what a read for reports returns (the histograms are stored apart)."""
    cell_id: str
    interval: NonNegativeInt
    counters: Counters
    attempt: NonNegativeInt
    backlog: NonNegativeInt | None | UnsetType = UNSET
    summary: dict[str, dict] | UnsetType = UNSET
    resources: dict[str, ResourceUsage] | UnsetType = UNSET
    host: HostUsage | UnsetType = UNSET


class IntervalMeasured(IntervalSummary, kw_only=True, forbid_unknown_fields=True):
    """One interval of a cell: its counts and histograms."""
    histograms: Histograms


class BrokerCount(Data, kw_only=True):
    """The broker's own count at the cell's end beside what it should hold."""
    observed: int
    expected: int
    difference: int
    delivered_not_acknowledged: AtLeastOne | UnsetType = UNSET


class ConsumerLimit(Strict, kw_only=True):
    by: Literal["broker", "consumer"] | None
    backlog_grew: bool | None | UnsetType = UNSET
    idle_share: NonNegative | None | UnsetType = UNSET
    consumer_cpu_pct: NonNegative | None | UnsetType = UNSET


class Limit(Data, kw_only=True):
    """What held the cell's rate: the schedule, the broker or the client."""
    by: Literal["schedule", "broker", "client"] | None
    window: AtLeastOne | None | UnsetType = UNSET
    window_full_share: NonNegative | None | UnsetType = UNSET
    in_flight_mean_share: NonNegative | None | UnsetType = UNSET
    window_wait_share: NonNegative | None | UnsetType = UNSET
    producer_cpu_pct: NonNegative | None | UnsetType = UNSET
    broker_cpu_pct: NonNegative | None | UnsetType = UNSET
    rate: float | UnsetType = UNSET
    consumers: ConsumerLimit | UnsetType = UNSET


class Startup(Open, kw_only=True):
    messages: object
    rate: object
    attach_s: object
    received: object
    first_delivery_s: object
    backlog_read_s: object
    at_attach: object


class Bursts(Data, kw_only=True):
    every_s: object
    messages: object
    over_s: object
    cycles: object


class StampBound(Strict, kw_only=True):
    """How far a cell's delivery stamps can come after their own response's read (worker/consumer.py ArrivalBound)."""
    polls: NonNegativeInt
    single_response_polls: NonNegativeInt
    spread_p99_us: NonNegative | None
    spread_max_us: NonNegative | None


class CodecFloor(Data, kw_only=True):
    """What the timing of a no-op codec reads: the floor under the encode and decode figures."""
    encode_ns: NonNegative
    decode_ns: NonNegative
    encode_loop: Literal["native", "python"] | UnsetType = UNSET
    decode_loop: Literal["native", "python"] | UnsetType = UNSET
    noop: str | UnsetType = UNSET
    calls: AtLeastOne | UnsetType = UNSET


class Totals(Open, kw_only=True):
    """A cell's accounting (more counts may follow, each an integer >= 0 or null: OPEN_VALUES)."""
    sent: NonNegativeInt | None
    received: NonNegativeInt | None
    lost: NonNegativeInt | None
    duplicated: NonNegativeInt | None
    out_of_order: NonNegativeInt | None
    send_errors: NonNegativeInt | None
    unacked: NonNegativeInt | None
    bytes_sent: NonNegativeInt | None
    bytes_received: NonNegativeInt | None
    residual: int | UnsetType = UNSET
    undelivered_or_lost: NonNegativeInt | None | UnsetType = UNSET
    missing: NonNegativeInt | None | UnsetType = UNSET
    due: NonNegativeInt | None | UnsetType = UNSET
    not_sent: NonNegativeInt | UnsetType = UNSET


class Digest(Data, kw_only=True):
    """The cell's intervals in columns, which reports read instead of the intervals."""
    version: AtLeastOne
    interval: list
    sent: list
    acked: list
    received: list
    backlog: list
    end_to_end_p99_us: list
    publish_delay_p99_us: list
    publish_latency_p99_us: list
    end_to_end_max_us: list
    end_to_end_count: list
    bytes: list
    broker_sampled: bool | UnsetType = UNSET
    judged: dict | UnsetType = UNSET


class ResourceSummary(Strict, kw_only=True):
    cpu_pct_mean: float
    cpu_pct_max: float
    rss_mb_max: float
    samples: int


class HostSummary(HostUsage, kw_only=True, forbid_unknown_fields=True):
    """The host over the cell's measured intervals, and whether it was too busy to measure on."""
    others_cpu_pct: NonNegative | None | UnsetType = UNSET
    busy: bool
    reasons: list[str]
    cpu_pressure_max_pct: Percent | None | UnsetType = UNSET
    span_s: NonNegative | UnsetType = UNSET


class CellVerdict(Strict, kw_only=True):
    """The sustainability verdict of a cell (brokerbench.verdict.sustainability) and the reasons it gives."""
    verdict: Literal["sustainable", "unsustainable", "inconclusive", "max-rate"]
    reasons: list[str]


class Warmup(Strict, kw_only=True):
    """The warm-up that ran before a cell's measured time: at least min_s, up to max_s; an adaptive one
    (until_steady) says whether it became steady and the half-second p99s (µs) it judged."""
    min_s: float
    max_s: float
    used_s: float
    until_steady: bool
    steady: bool | UnsetType = UNSET
    p99_us: list[float | None] | UnsetType = UNSET


class SearchStep(Strict, kw_only=True):
    """One measurement of a rate search: its rate ("max" for the unthrottled probe), verdict and figures (none for a
    step that failed)."""
    rate: float | Literal["max"]
    verdict: Literal["sustainable", "unsustainable", "inconclusive", "failed", "max-rate"]
    reasons: list[str]
    throughput_msgs_per_s: float | None | UnsetType = UNSET
    end_to_end_p50_us: float | None | UnsetType = UNSET
    end_to_end_p99_us: float | None | UnsetType = UNSET
    publish_latency_p99_us: float | None | UnsetType = UNSET
    measured_s: float | UnsetType = UNSET
    limit: Limit | UnsetType = UNSET
    host: HostSummary | None | UnsetType = UNSET  # the host over the step's measured sending


class LatencyAt(SearchStep, kw_only=True, forbid_unknown_fields=True):
    """A measurement at a fraction of the rate found."""
    fraction: float


class Dispute(Strict, kw_only=True):
    """A rate whose measurements disagreed, and how it counted."""
    rate: float
    verdicts: list[str]
    counted: Literal["sustainable", "not sustainable"]
    text: str


class Search(Strict, kw_only=True):
    """A rate search's record (worker/search.py): the rate found, every step, how it ended."""
    max_sustainable_rate: float | None
    sustainable_for_s: float | None | UnsetType = UNSET
    ended: str
    disputes: list[Dispute] | UnsetType = UNSET
    limit: Limit | None | UnsetType = UNSET
    steps: list[SearchStep]
    probe: SearchStep | None | UnsetType = UNSET
    latency_at: list[LatencyAt] | UnsetType = UNSET


class PriorityDrop(Strict, kw_only=True):
    """A process of the cell, or the broker, put back to normal priority during the cell (worker/priority.py)."""
    process: NonEmpty
    at_s: float | None  # from the measured start (negative: in the warm-up); None where it is not known
    why: NonEmpty


class Priority(Strict, kw_only=True):
    """What the cell's producers and consumers ("workers") and a local broker ran at: real-time (SCHED_FIFO) or the
    fair scheduler, why not real-time, and each drop back to normal priority."""
    workers: Literal["realtime", "normal", "mixed"]
    broker: Literal["realtime", "normal"]
    why_normal: list[NonEmpty] | UnsetType = UNSET
    dropped: list[PriorityDrop] | UnsetType = UNSET


class CellCompleted(Strict, kw_only=True):
    """A cell's result as stored: its totals, cumulative histograms, verdict and what limited it."""
    cell_id: str
    measured_s: Annotated[float, Meta(gt=0)]
    encoded_bytes: NonNegative
    delivery_window_s: NonNegative | None | UnsetType = UNSET
    delivery_window_start_s: float | None | UnsetType = UNSET
    delivery_window_end: Literal["last_delivery", "drain_end"] | UnsetType = UNSET
    broker_count: BrokerCount | None | UnsetType = UNSET
    latency_basis: Literal["intended", "enqueue"] | UnsetType = UNSET
    verdict: CellVerdict | UnsetType = UNSET
    limit: Limit | UnsetType = UNSET
    warmup: Warmup | UnsetType = UNSET
    search: Search | UnsetType = UNSET
    startup: Startup | UnsetType = UNSET
    bursts: Bursts | UnsetType = UNSET
    send_loop: Literal["native", "python", "mixed"] | UnsetType = UNSET
    sender: Annotated[str, Meta(pattern=r"^native-(pwire|capi)(, native-(pwire|capi))?$")] | UnsetType = UNSET
    ack_stamps: Annotated[str, Meta(pattern=STAMPS_PATTERN)] | UnsetType = UNSET
    delivery_stamps: Annotated[str, Meta(pattern=STAMPS_PATTERN)] | UnsetType = UNSET
    delivery_stamp_bound: StampBound | UnsetType = UNSET
    codec_floor_ns: CodecFloor | UnsetType = UNSET
    send_thread_nice: int | None | UnsetType = UNSET
    priority: Priority | UnsetType = UNSET
    intervals: NonNegativeInt
    totals: Totals
    digest: Digest | UnsetType = UNSET
    histograms: Histograms
    attempt: NonNegativeInt
    resources: dict[str, ResourceSummary] | UnsetType = UNSET
    host: HostSummary | None | UnsetType = UNSET
    faults: Faults | UnsetType = UNSET


class CellFailed(Data, kw_only=True):
    """A cell that ended without a result, with what it had measured."""
    cell_id: str
    reason: NonEmpty
    intervals: NonNegativeInt | UnsetType = UNSET
    attempt: NonNegativeInt | UnsetType = UNSET
    faults: Faults | UnsetType = UNSET
    totals: Totals | UnsetType = UNSET
    broker_count: BrokerCount | None | UnsetType = UNSET
    warmup: Warmup | UnsetType = UNSET
    search: Search | UnsetType = UNSET


class RunCompleted(Data, kw_only=True):
    status: Literal["completed", "completed_with_failures", "interrupted", "cancelled"]
    reason: str | UnsetType = UNSET
    cells_completed: NonNegativeInt
    cells_failed: NonNegativeInt


class RunFailed(Data, kw_only=True):
    reason: NonEmpty


class TargetLeft(Strict, kw_only=True):
    broker: NonEmpty
    error: str
    cause: str


class StepFailed(Strict, kw_only=True):
    step: Literal["Notify", "TeardownTargets"]
    reason: NonEmpty
    targets_left: Annotated[list[TargetLeft], Meta(min_length=1)] | UnsetType = UNSET


class Notified(Strict, kw_only=True):
    step: Literal["Notify", "RunFailed"]
    message_id: NonEmpty


class ReportBuilt(Data, kw_only=True):
    files: dict[str, str]


class RepeatCount(Data, kw_only=True):
    unsustainable: NonNegativeInt
    judged: NonNegativeInt
    runs: AtLeastOne | UnsetType = UNSET


class UnsustainableRepeats(Data, kw_only=True):
    candidate: RepeatCount
    history: RepeatCount


class Difference(Data, kw_only=True):
    setting: object
    before: object
    after: object


class StampsChanged(Data, kw_only=True):
    """How the earlier runs and the run checked stamped the latency a verdict is on (reports.regression.flag_stamps)."""
    of: Literal["ack_stamps", "delivery_stamps"]
    history: str
    candidate: str


class SendLoopsChanged(Data, kw_only=True):
    """The send loops of the baseline's and the candidate's cells, where they differ (regression.flag_send_loops)."""
    baseline: str
    candidate: str


class PrioritiesChanged(Data, kw_only=True):
    """The scheduling priority of the baseline's and the candidate's cells, where they differ
    (regression.flag_priority; figures.priority_text's words)."""
    baseline: str
    candidate: str


class RegressionDetected(Data, kw_only=True):
    baseline_run_id: str
    cell: str
    cell_id: str
    metric: str
    verdict: Literal["regression"]
    baseline_median: float | None
    candidate_median: float | None
    baseline_mean: float | None | UnsetType = UNSET
    candidate_mean: float | None | UnsetType = UNSET
    change: float | None
    p_value: Annotated[float, Meta(ge=0, le=1)] | None
    why: str | UnsetType = UNSET
    unsustainable_repeats: UnsustainableRepeats | UnsetType = UNSET
    source: Literal["pairwise", "change_point"] | UnsetType = UNSET
    began_run_id: str | UnsetType = UNSET
    before_run_id: str | UnsetType = UNSET
    runs_before: AtLeastOne | UnsetType = UNSET
    runs_after: AtLeastOne | UnsetType = UNSET
    versions: dict | UnsetType = UNSET
    differences: list[Difference] | UnsetType = UNSET
    history: str | UnsetType = UNSET
    stamps: StampsChanged | UnsetType = UNSET  # the latency was stamped otherwise before: a change of method
    send_loops: SendLoopsChanged | UnsetType = UNSET  # measured by another send loop before
    priorities: PrioritiesChanged | UnsetType = UNSET  # run at another scheduling priority before


class ScheduleTriggered(Data, kw_only=True):
    schedule: Annotated[str, Meta(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")]
    due_at: str
    outcome: Literal["claimed", "started", "not_started"]
    run_id: Annotated[str, Meta(pattern=RUN_ID)] | None
    reason: str | None


def given(value, default=None):
    """A field's value, or `default` where the stored event left it out (UNSET): the reports' None for "not known"."""
    return default if value is UNSET else value


def run_requested(events: list[dict]) -> tuple[Spec, Environment]:
    """The spec and environment of a run's RunRequested among `events`, typed (the planned cells are not read)."""
    data = next(e for e in events if e["type"] == "RunRequested")["data"]
    return convert(data["spec"], Spec), convert(data["environment"], Environment)


EVENT_TYPES: dict[str, type[Data]] = {t.__name__: t for t in (
    RunRequested, CellsPlanned, TargetsReady, CellStarted, IntervalMeasured, CellCompleted, CellFailed, RunCompleted,
    RunFailed, StepFailed, Notified, ReportBuilt, RegressionDetected, ScheduleTriggered)}
# The Structs of each stored schema_version's event data; a later version adds its own and keeps these readable.
DATA_TYPES: dict[int, dict[str, type[Data]]] = {SCHEMA_VERSION: EVENT_TYPES}
# What an Open Struct's other fields hold, where the schema types them (its additionalProperties)
OPEN_VALUES: dict[type[Data], object] = {Counters: NonNegativeInt, Totals: NonNegativeInt | None}
EventTypeName = Literal[tuple(EVENT_TYPES)]


class Envelope(Strict, kw_only=True):
    """An event around its data: where it is stored (its run's partition, or a schedule's for ScheduleTriggered),
    its type and version. `at` is an ISO 8601 time, which the schema names (format) and no validator asserted."""
    run_id: Annotated[str, Meta(pattern=r"^([0-9]{8}T[0-9]{6}Z-[0-9a-f]{6}|schedule#[a-z0-9][a-z0-9_-]{0,63})$")]
    sk: NonEmpty
    event_id: NonEmpty
    type: EventTypeName
    at: str
    schema_version: Literal[1]
    data: dict
    # The schema's if/then/else: a schedule's triggers in the schedule's partition, every other event in a run's
    PARTITIONS: ClassVar[tuple] = ("ScheduleTriggered", "^schedule#", RUN_ID)

    def __post_init__(self):
        kind, schedule, run = self.PARTITIONS
        pattern = schedule if self.type == kind else run
        if not re.search(pattern, self.run_id):
            raise ValueError(f"run_id {self.run_id!r} of a {self.type} event does not match {pattern!r}")


def unknown_fields(data: dict, data_type: type[Data], path: str = "data") -> list[str]:
    """The places in `data` (as `data.limit.bye`) of fields its Structs do not declare, where the schema does not
    leave the object open (Open): what a producer must not write, so that a misspelled field fails where it is
    written instead of being read back as missing."""
    return _each_object(data, data_type, path, _unknown_here)


def open_value_problems(data: dict, data_type: type[Data], path: str = "data") -> list[str]:
    """What an Open object's other fields hold against the type OPEN_VALUES gives them (`data.counters.lost:
    expected `int` >= 0`): msgspec reads only the fields a Struct names."""
    return _each_object(data, data_type, path, _open_values_here)


def _unknown_here(data: dict, data_type: type[Data], fields: dict, path: str) -> list[str]:
    return [] if issubclass(data_type, Open) else [f"{path}.{k}" for k in data if k not in fields]


def _open_values_here(data: dict, data_type: type[Data], fields: dict, path: str) -> list[str]:
    kind, found = OPEN_VALUES.get(data_type), []
    for name, value in data.items() if kind is not None else ():
        if name not in fields:
            try:
                convert(value, kind)
            except ValidationError as exc:
                found.append(f"{path}.{name}: {str(exc)[:1].lower()}{str(exc)[1:]}")
    return found


def _each_object(data: dict, data_type: type[Data], path: str, here) -> list[str]:
    """here(data, data_type, fields, path) of `data` and of every object in it its Structs name."""
    fields = _fields(data_type)
    found = here(data, data_type, fields, path)
    for name, value in data.items():
        if name in fields:
            found += _in(value, fields[name], f"{path}.{name}", here)
    return found


def _in(value, annotation, path: str, here) -> list[str]:
    """_each_object of a field's value, through the unions, lists and maps of its annotation."""
    if isinstance(value, dict):
        for option in _options(annotation):
            if isinstance(option, type) and issubclass(option, Data):
                return _each_object(value, option, path, here)
            if typing.get_origin(option) is dict and len(typing.get_args(option)) == 2:
                item = typing.get_args(option)[1]
                return [p for k, v in value.items() for p in _in(v, item, f"{path}.{k}", here)]
    elif isinstance(value, (list, tuple)):
        for option in _options(annotation):
            if typing.get_origin(option) is list and typing.get_args(option):
                item = typing.get_args(option)[0]
                return [p for i, v in enumerate(value) for p in _in(v, item, f"{path}[{i}]", here)]
    return []


def _options(annotation) -> tuple:
    """The types a field may hold: the members of a union, or the annotation itself."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


@cache
def _fields(data_type: type[Data]) -> dict[str, object]:
    """A Struct's fields by name, with their resolved annotations."""
    return {f.name: f.type for f in structs.fields(data_type)}


def build_types(namespace: dict) -> None:
    """Build msgspec's decoding information of every Struct a module defines (`namespace`: its globals, at the end of
    its import, which one thread runs). msgspec builds a type's information at its first use and puts it on the class
    before its fields' types are filled in; filling them runs Python code (the annotations are read), where another
    thread can run and use the half-built information: a local run's CLI died of SIGSEGV in msgspec's convert (a NULL
    read) while its threads read events and built reports. A Decoder builds the information of its type and of every
    type under it, so every later use, in any thread, finds it whole."""
    for value in list(namespace.values()):
        if isinstance(value, type) and issubclass(value, Struct) and value.__module__ == namespace["__name__"]:
            json.Decoder(value)


build_types(globals())
