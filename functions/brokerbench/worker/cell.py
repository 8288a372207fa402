"""One cell: start consumers and producers, merge their per-second snapshots, write the cell's events.

Producers and consumers are separate processes (forked from a fork server that never made a client, so no
client library state is shared: worker.processes); they compare the same monotonic clock, so end-to-end latency
needs no cross-host time. Interval i is written once every process has reported it, so events appear
while the cell runs and whatever was measured before a failure or Ctrl-C is kept.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Collection
from dataclasses import dataclass
from multiprocessing.connection import wait

import numpy as np

from .. import faults, histogram, host, limit, toxiproxy, verdict
from ..codecs.floor import call_floor_ns
from ..drivers import BrokerUnavailable, producer_window
from ..events import EventStore, cell_prefix, make_event
from ..figures import NOT_SENT_BOUNDS, cell_result, joined_stamps, merge_stamp_bounds
from ..registry import driver_modules, get_driver
from ..series import interval_digest, verdict_basis
from ..spec import lanes
from . import outcome, processes, resources, schedule, search
from .consumer import ConsumerTask, consumer_main
from .drain import Drain
from .cloud_faults import for_cell as cell_faults
from .framing import probe_header
from .intervals import IntervalAggregator
from .processes import death
from . import priority
from .resources import CpuSpan, ResourceSampler
from .warmup import WarmupWatch, warmup_max_s
from .producer import SECOND_NS, ProducerTask, producer_main
from .producer_figures import RECORDS, ProducerFigures, recv_records, window_shares

READY_TIMEOUT_S = 60
COUNT_WAIT_S = 60  # a broker that does not answer at a cell's end is waited for this long for its own count
FAULT_COUNT_WAIT_S = 20  # a cluster that answers after a fault, but not yet with its count, is asked this long
SEARCH = "sustainable"  # the rate that asks for the maximum sustainable rate search
START_LEAD_NS = 100_000_000
MEASURE_LEAD_NS = 200_000_000  # from the end of an adaptive warm-up to the first measured message
PROVISIONAL_MARGIN_NS = 1_000_000_000
MIN_HOST_SPAN_S = 0.5  # a shorter span of the host's counters says little (a pressure total moves in µs, steal in ticks)
COVER = 0.75  # CPU read over less than this share of the measured sending is not known (brokerbench.limit)
log = logging.getLogger(__name__)


class CellError(RuntimeError):
    pass


@dataclass
class CellOutcome:
    cell_id: str
    status: str  # completed | failed
    reason: str | None = None
    intervals: int = 0


class Phases:
    """Where a cell's wall time goes: named moments (time.monotonic_ns, one clock for the worker and its
    processes), logged at DEBUG when the cell ends; bench/cell_overhead.py reads them."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, int]] = [("begin", time.monotonic_ns())]

    def mark(self, name: str, at_ns: int | None = None) -> None:
        self.marks.append((name, time.monotonic_ns() if at_ns is None else at_ns))

    def seconds(self) -> dict[str, float]:
        """Each moment's distance from the one before it (in time order), in seconds: what the phase ending
        there took."""
        ordered = sorted(self.marks, key=lambda m: m[1])
        return {name: round((at - before) / 1e9, 4) for (_, before), (name, at) in zip(ordered, ordered[1:])}


@dataclass
class Progress:
    """What a progress bar shows while a cell runs."""

    cell_id: str
    phase: str  # starting | warm-up | measuring | draining | done
    fraction: float
    sent: int = 0
    received: int = 0


def topic_name(run_id: str, cell: dict) -> str:
    return f"bb-{run_id}-c{cell['index']:05d}"


def run_cell(run_id: str, cell: dict, endpoint: dict, store: EventStore,
             progress: Callable[[Progress], None] | None = None, worker: dict | None = None,
             stop: Collection[threading.Event] = ()) -> CellOutcome:
    """Measure one cell against `endpoint` and append its events to `store`.

    Idempotent per cell: a cell that already ended returns its stored outcome, and a new attempt
    (a retried worker) records its own start and intervals beside those of the earlier attempt.
    `stop`: events any one of which, once set, stops the cell (KeyboardInterrupt, after its end event is offered):
    its run's end (worker/run_end.py), a front end's Ctrl-C or cancel (the local workflow), a signal (the EC2 worker).
    Each caller passes its own: nothing module-wide stops a cell.
    """
    phases = Phases()
    try:
        return _run_cell(run_id, cell, endpoint, store, progress, worker, phases, stop)
    finally:
        phases.mark("end")
        log.debug("cell phases", extra={"cell_id": cell["cell_id"], "phases": phases.seconds()})


def _run_cell(run_id, cell, endpoint, store, progress, worker, phases: Phases, stop=()) -> CellOutcome:
    stored = store.read(run_id, prefix=cell_prefix(cell["index"]))
    for event in stored:
        if event["type"] in ("CellCompleted", "CellFailed"):
            data = event["data"]
            return CellOutcome(cell["cell_id"], "completed" if event["type"] == "CellCompleted" else "failed",
                               data.get("reason"), data.get("intervals", 0))
    attempt = sum(1 for e in stored if e["type"] == "CellStarted")
    topic = topic_name(run_id, cell) + (f"-a{attempt}" if attempt else "")
    started = {"cell_id": cell["cell_id"], "cell": cell, "topic": topic, "attempt": attempt}
    if worker:
        started["worker"] = worker
    store.append([make_event(run_id, "CellStarted", started, cell_index=cell["index"], attempt=attempt)])
    phases.mark("cell_started_written")
    progress = progress or (lambda p: None)
    if cell["rate"] == SEARCH:
        return _search_cell(run_id, cell, endpoint, store, topic, progress, attempt, stop)
    runner = _CellRun(run_id, cell, endpoint, store, topic, progress, attempt, phases, stop)
    try:
        return runner.run()
    except KeyboardInterrupt:
        runner.fail("stopped: the run was interrupted or cancelled", wait_for_broker=False)
        raise
    except (CellError, BrokerUnavailable) as exc:
        return runner.fail(str(exc))
    except Exception as exc:  # any other failure ends this cell only; the run goes on
        log.warning("cell %s failed on an unexpected error", cell["cell_id"], exc_info=True)
        return runner.fail(unexpected(exc))
    finally:
        runner.cleanup()


def unexpected(exc: BaseException) -> str:
    """The reason a cell that failed on an error nobody anticipated ends with: the error, and the innermost line of
    this package it came through, so that a reason such as "BrokenPipeError: [Errno 32] Broken pipe" names the
    write it came from instead of leaving it to a traceback nobody kept."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ours = [frame for frame in traceback.extract_tb(exc.__traceback__)
            if os.path.abspath(frame.filename).startswith(package + os.sep)]
    where = ""
    if ours:
        frame = ours[-1]
        where = f" (at {os.path.relpath(frame.filename, os.path.dirname(package))}:{frame.lineno} in {frame.name})"
    return f"{type(exc).__name__}: {exc}{where}"


class _Collected:
    """An event sink for a search step: its events are kept in memory until the search decides."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def append(self, events: list[dict]) -> None:
        self.events += events


def _measure_step(run_id, cell, endpoint, topic, progress, attempt, rate, stop=()) -> search.Step:
    """One fixed-rate step of a search: a whole cell measurement with its own topic and verdict."""
    step_cell = {**cell, "rate": rate}
    sink = _Collected()
    runner = _CellRun(run_id, step_cell, endpoint, sink, topic, progress, attempt, stop=stop)
    try:
        runner.run()
    except (CellError, BrokerUnavailable) as exc:
        runner.fail(str(exc))
    finally:
        runner.cleanup()
    end = sink.events[-1]
    if end["type"] == "CellFailed":
        return search.Step(rate, "failed", [end["data"]["reason"]], events=sink.events)
    data = end["data"]
    result = cell_result(step_cell, end)
    figures = {"throughput_msgs_per_s": result["throughput_msgs_per_s"],
               "end_to_end_p50_us": result["end_to_end_latency_us"]["p50"],
               "end_to_end_p99_us": result["end_to_end_latency_us"]["p99"],
               "publish_latency_p99_us": result["publish_latency_us"]["p99"]}
    return search.Step(rate, data["verdict"]["verdict"], data["verdict"]["reasons"], figures, sink.events,
                       data.get("measured_s"), data.get("limit"), data.get("host"))


def _search_cell(run_id, cell, endpoint, store, topic, progress, attempt, stop=()) -> CellOutcome:
    """rates: ["sustainable"]: search the highest rate the verdict calls sustainable; the cell's figures
    are those of that rate's latest sustainable step, and every step is recorded in `search`, with the
    measured seconds behind the rate found (sustainable_for_s) and any rate whose measurements disagreed."""
    settings = cell.get("search") or {}
    counter = iter(range(10**6))

    def measure(rate):
        return _measure_step(run_id, cell, endpoint, f"{topic}-s{next(counter)}", progress, attempt, rate, stop)

    start = settings.get("start_rate")
    probe = None
    if start is None:  # seed the bracket from what the broker delivers unthrottled
        probe = measure("max")
        start = 0.9 * probe.figures.get("throughput_msgs_per_s", 0) if probe.verdict != "failed" else 1000
    found = search.search(measure, max(1.0, start), precision=settings.get("precision", search.PRECISION),
                          max_steps=settings.get("max_steps", search.MAX_STEPS))
    best, ended = found.best, found.ended
    record = {**found.record(), "probe": probe.summary() if probe else None,
              "latency_at": [{"fraction": f, **measure(max(1, round(f * best.rate))).summary()}
                             for f in (settings.get("latency_at") or [])] if best else []}
    if best is None:
        kept = found.steps[-1].events
        store.append([e for e in kept if e["type"] == "IntervalMeasured"])
        store.append([make_event(run_id, "CellFailed", {
            "cell_id": cell["cell_id"], "attempt": attempt, "reason": f"no sustainable rate found: {ended}",
            "search": record}, cell_index=cell["index"])])
        return CellOutcome(cell["cell_id"], "failed", f"no sustainable rate found: {ended}")
    # The kept step's intervals and end become the cell's; the search record goes with them.
    store.append([e for e in best.events if e["type"] == "IntervalMeasured"])
    end = best.events[-1]
    # What held the search below the rate above the one found is the cell's limit (the kept step kept its schedule).
    data = {k: v for k, v in end["data"].items() if k != "limit"}
    store.append([make_event(run_id, "CellCompleted", {**data, "search": record,
                                                       **({"limit": found.limit} if found.limit else {})},
                             cell_index=cell["index"])])
    progress(Progress(cell["cell_id"], "done", 1.0))
    return CellOutcome(cell["cell_id"], "completed", intervals=end["data"]["intervals"])


class _Outbox:
    """What the cell sends its processes while it measures, sent in order by a thread of its own. The sequence
    numbers of every unacknowledged message (told to the consumers once the producers are done) can fill the pipe
    until the consumer reads them, and a consumer that is itself sending (an interval's snapshot) reads only once the
    cell has read that: sent from the cell's loop, which does the reading, the two waited for each other for ever (a
    Pulsar cell that left most messages unacknowledged hung so). A process gone meanwhile is the loop's to find out
    (its connection ends)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="cell-outbox", daemon=True)
        self._thread.start()

    def send(self, conn, message) -> None:
        self._queue.put((conn, message))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            conn, message = item
            try:
                conn.send(message)
            except (OSError, EOFError, ValueError):  # the process has gone (or its end was closed): nothing to tell
                pass

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)


class _CellRun:
    """Supervises one cell's processes: starts them, speaks the pipe protocol, drives the drain, and
    writes the cell's events. The arithmetic lives in `intervals` (merging) and `outcome` (counts,
    delivery window, failure rule), which are tested on their own."""

    def __init__(self, run_id, cell, endpoint, store, topic, progress, attempt, phases: Phases | None = None,
                 stop: Collection[threading.Event] = ()) -> None:
        self.run_id, self.cell, self.endpoint, self.store, self.topic = run_id, cell, endpoint, store, topic
        self.stop = tuple(stop)
        self.group = f"{topic}-g"
        self.attempt = attempt
        self.progress = progress
        self.phases = phases or Phases()
        self.driver = get_driver(cell["broker"], endpoint, cell["client"])
        self.phases.mark("driver")
        self.processes: list[multiprocessing.Process] = []
        self.stacks_fds: dict = {}  # conn -> the process's stacks file descriptor (processes.stacks_of)
        self.conns: dict = {}  # connection -> ("producer"|"consumer", id)
        self.aggregator = IntervalAggregator([])
        self.series: list[dict] = []  # per written interval, its data without histograms: the verdict's and digest's
        self.topic_created = False
        self.probes = 0  # readiness probe messages in the topic
        self.probe: tuple | None = None  # the readiness probe's producer while it is open, its acks, its partitions
        self.warmup: WarmupWatch | None = None  # an adaptive warm-up's watch
        self.resources: ResourceSampler | None = None  # CPU and memory of the workers and a local broker
        self.resource_samples: list[dict] = []
        self.host: host.HostSampler | None = None  # the host's CPU and memory pressure and steal, per interval write
        # The host at the measured start and at the schedule's end (read with `sending`): the cell's host figures.
        self.host_span: list[host.Reading] = []
        # The producers' and the broker's CPU over the measured sending (measured start to the schedule's end): what
        # brokerbench.limit judges on. `sending` reads them from the measured start; `sent` is what they used.
        self.sending: CpuSpan | None = None
        self.sent: dict | None = None
        self.drain_gave_up_ns: int | None = None  # when the drain stopped waiting for what had not arrived
        self.attach_due: int | None = None  # a startup backlog: when the consumers attach (the broker is asked then)
        self.at_attach: dict | None = None
        self.figures: dict = {}  # producer connection -> ProducerFigures: its intervals' figures, worked out here
        self.faults = cell_faults(cell, endpoint, topic)  # the spec's faults, applied by this supervisor at their times
        self.fault_figures: dict | None = None  # what the cell stores of them (_finish_faults)
        self.fault_intervals: list[dict] = []  # a faulted cell's intervals with their histograms
        self.broker_grant: priority.BrokerGrant | None = None  # a local broker at real-time priority for the cell
        self.normal_why: str | None = None  # why the cell's processes run at normal priority (priority.decide)
        self.priority_dropped: tuple[int, str, list[str]] | None = None  # (ns, why, processes put back): the guard's

    # -- lifecycle ---------------------------------------------------------------------------
    def run(self) -> CellOutcome:
        cell = self.cell
        self.progress(Progress(cell["cell_id"], "starting", 0.0))
        self.driver.check()
        self.phases.mark("check")
        self.driver.create_topic(self.topic, lanes(cell))
        self.topic_created = True
        self.phases.mark("create_topic")
        # The probe goes first, also for a publish-only cell (its acknowledgement through every partition says the
        # new topic's leaders serve before anything is measured), where the topic keeps what no consumer has read
        # yet: the consumers read it from its start, so the probe waits for them there while their processes start
        # (see _send_probe). A topic that drops unread messages (a non-persistent Pulsar topic: `keeps_unread`
        # False) gets it once they are ready.
        early = not cell["consumers"] or getattr(self.driver, "keeps_unread", True)
        if early:
            self._send_probe()
        producer_rate = None if cell["rate"] == "max" else cell["rate"] / cell["producers"]
        limit = None if cell["messages"] is None else math.ceil(cell["messages"] / cell["producers"])
        self.broker_grant, self.normal_why = priority.decide(cell, self.endpoint)
        self._start_processes(producer_rate, limit)
        self.phases.mark("spawn")
        if self.probe is not None:
            self._probe_acknowledged()
            self.phases.mark("probe_acknowledged")
        ready = self._collect_ready()
        self.phases.mark("processes_began", max(info["began_ns"] for info in ready.values()))
        self.phases.mark("processes_ready")
        if cell["consumers"] and not early:
            self._send_probe()
            self._probe_acknowledged()
        if cell["consumers"]:
            self._probe_received()
            self.phases.mark("probe_received")
        encoded = [info["encoded_bytes"] for (role, _), info in ready.items() if role == "producer"]
        self.encoded_bytes = sum(encoded) / len(encoded)
        loops = {info["send_loop"] for (role, _), info in ready.items() if role == "producer"}
        self.send_loop = loops.pop() if len(loops) == 1 else "mixed"
        senders = {info.get("sender") for (role, _), info in ready.items() if role == "producer"}
        self.sender = ", ".join(sorted(filter(None, senders))) or None  # Pulsar's native path (producer.sender_path)
        # Before "go", while the processes wait: the timed call's own cost on the loops the cell runs.
        self.codec_floor = call_floor_ns(self.send_loop)
        self.phases.mark("codec_floor")

        t_start = time.monotonic_ns() + START_LEAD_NS
        # With an adaptive warm-up the measured start is provisional (the bound) until the consumers'
        # warm-up latency is steady; then every process is told the real one ("measure").
        # (A backlog or bursts keep the warm-up as given: their latency is not meant to be steady. So does max
        # rate: sending faster than the consumers read, its latency grows with the backlog and settles only
        # when the broker's queue is as long as the machine lets it get, seconds of messages that the measured
        # ones then wait behind.)
        adaptive = (bool(cell.get("warmup_until_steady")) and cell["consumers"] > 0 and cell["rate"] != "max"
                    and not schedule.shaped(cell))
        max_s = warmup_max_s(cell)
        if adaptive:
            self.warmup = WarmupWatch([c for c, key in self.conns.items() if key[0] == "consumer"], t_start,
                                      cell["warmup_s"], max_s)
        # The provisional start lies past the bound, so the parent's decision (made at the bound at the
        # latest) always comes first; processes that learn it late still agree, because what is measured
        # is decided by each message's intended send time.
        measure_start = t_start + (int(max_s * SECOND_NS) + PROVISIONAL_MARGIN_NS if adaptive
                                   else int(cell["warmup_s"] * SECOND_NS))
        attach = schedule.attach_ns(cell, t_start) if cell.get("backlog") else None
        if cell["messages"] is None:  # with a startup backlog, duration_s runs from when the consumers attach
            t_end = max(measure_start, attach or 0) + int(cell["duration_s"] * SECOND_NS)
        elif producer_rate:
            t_end = measure_start + int((limit / producer_rate + 1) * SECOND_NS)
        else:
            t_end = measure_start + 24 * 3600 * SECOND_NS
        self.timing = {"t_start": t_start, "measure_start": measure_start, "t_end": t_end,
                       "warmup_until_steady": adaptive, **({"attach_ns": attach} if attach else {})}
        self.attach_due = attach - schedule.COUNT_BEFORE_ATTACH_NS if attach and cell["consumers"] else None
        self.figures = self._producer_figures(ready, t_start)
        self._faults_from(measure_start)
        if self.faults:  # the consumers watch their deliveries from the first fault on
            self.timing["fault_at_ns"] = faults.first_fault_ns(cell["faults"])
        self.resources = ResourceSampler(self._process_groups())
        self.host = host.HostSampler()
        for conn in self.conns:
            self._tell(conn, ("go", self.timing))
        self.phases.mark("go")
        done = self._measure()
        self.phases.mark("processes_done")
        self.fault_figures = self._finish_faults(done)
        for name in ("t_start", "measure_start", "t_end"):  # the schedule
            self.phases.mark(name, self.timing[name])
        outcome = self._complete(done)
        self.phases.mark("complete")
        return outcome

    def _producer_figures(self, ready: dict, t_start: int) -> dict:
        """Each producer's figures are derived here from its raw records (producer_figures), with its pool's encoded
        sizes, its schedule (the one it sends by, from the same start) and its in-flight window (the driver's, for
        this cell's mode, lanes and payload size)."""
        figures = {}
        cell = self.cell
        for conn, (role, number) in self.conns.items():
            if role == "producer":
                info = ready[(role, number)]
                sizes = np.frombuffer(info["encoded_sizes"], dtype=np.int64)
                window = producer_window(self.driver, cell["mode"], lanes(cell), info["encoded_bytes"])
                figures[conn] = ProducerFigures(sizes, info["pool_size"],
                                                schedule.producer_schedule(cell, number, t_start), window)
        return figures

    def _process_groups(self, roles: tuple[str, ...] = ("workers", "producers", "broker")) -> dict[str, list[int]]:
        """The pids of each process group resources are sampled for: the cell's workers (producers and consumers),
        its producers alone, and a local broker's processes (those its target names)."""
        groups = {"workers": [p.pid for p in self.processes],
                  "producers": [p.pid for p in self.processes if p.name.startswith("producer-")],
                  "consumers": [p.pid for p in self.processes if p.name.startswith("consumer-")],
                  "broker": list(self.endpoint.get("pids") or [])}
        return {role: groups[role] for role in roles}

    def _watch_sending(self, now: int, producer_done: bool) -> int | None:
        """Reads the producers' and the broker's CPU from the measured start to the schedule's end (or until a producer
        finished first, a cell run by message count), at each look, so that the last reading is at most one look
        before the producers end (and their processes, their ticks); returns when it next needs to look (None:
        done)."""
        if self.sent is not None:
            return None
        start = self.timing["measure_start"]
        if self.sending is None:
            if now < start:
                return start
            self.sending = CpuSpan(self._process_groups(("producers", "consumers", "workers", "broker")))
            self.host_span = [host.read()]
        self.sending.update()
        if now < self.timing["t_end"] and not producer_done:
            return self.timing["t_end"]
        self.host_span.append(host.read())
        # Readings that began late (a parent that looked late on a stalled host) or ended early cover too little of it.
        self.sent = self.sending.cpu_pct((now - start) / SECOND_NS, COVER)
        return None

    def _start_processes(self, producer_rate: float | None, limit: int | None) -> None:
        cell, ctx = self.cell, processes.context(driver_modules())
        # through the proxies where a network fault needs them (the supervisor's own driver reaches the nodes directly)
        endpoint = toxiproxy.client_endpoint(self.endpoint)
        for c in range(cell["consumers"]):
            assigned = [p for p in range(lanes(cell)) if p % cell["consumers"] == c]
            self._spawn(ctx, consumer_main, ConsumerTask(cell, endpoint, self.topic, self.group, c, assigned,
                                                         self.normal_why),
                        ("consumer", c))
        for p in range(cell["producers"]):
            self._spawn(ctx, producer_main, ProducerTask(cell, endpoint, self.topic, p, producer_rate, limit,
                                                         self.normal_why),
                        ("producer", p))
        self.aggregator = IntervalAggregator(list(self.conns))

    def _spawn(self, ctx, target, task, key) -> None:
        parent, child = ctx.Pipe()
        process = ctx.Process(target=processes.start, args=(*key, dict(os.environ), target, child, task), daemon=True,
                              name=f"{key[0]}-{key[1]}")
        process.start()
        child.close()
        self.processes.append(process)
        self.conns[parent] = key

    def _collect_ready(self) -> dict:
        ready = {}
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(ready) < len(self.conns):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CellError(f"workers not ready after {READY_TIMEOUT_S} s")
            for conn in wait([c for c in self.conns if self.conns[c] not in ready], timeout=min(remaining, 1)):
                kind, payload = self._recv(conn)
                if kind == "ready":
                    ready[self.conns[conn]] = payload
                    self.stacks_fds[conn] = payload.get("stacks_fd")
        return ready

    def _send_probe(self) -> None:
        """The readiness probe: one message through every partition (every lane), acknowledged by the broker
        (_probe_acknowledged) and received by the consumers (_probe_received) before anything is measured, so a
        topic whose leaders or a group that is not serving yet does not show as latency, nor the consumers'
        start-up as a burst of catching up. It is sent as the cell's processes start: every driver's consumer
        reads the cell's new topic from its start (Kafka's earliest offset, Redis's group at 0, Pulsar's
        earliest position), so it waits there for them, and their start-up and its round trip overlap."""
        partitions = lanes(self.cell)
        acks: list[bool] = []
        producer = self.driver.producer(self.topic, partitions, "single", lambda header, ok, _at: acks.append(ok))
        self.probe = (producer, acks, partitions)  # closed by _probe_acknowledged, or by cleanup after a failure
        for partition in range(partitions):
            producer.send(probe_header(partition), b"", partition)

    def _probe_acknowledged(self) -> None:
        (producer, acks, partitions), self.probe = self.probe, None
        try:
            producer.flush(READY_TIMEOUT_S)
        finally:
            producer.close()
        if len(acks) < partitions or not all(acks):
            raise CellError(f"the broker did not acknowledge the readiness probe ({acks.count(True)} of {partitions})")
        self.probes = partitions

    def _probe_received(self) -> None:
        waiting = [c for c, key in self.conns.items() if key[0] == "consumer"]
        deadline = time.monotonic() + READY_TIMEOUT_S
        while waiting:
            if time.monotonic() > deadline:
                raise CellError(f"the consumers did not receive the readiness probe in {READY_TIMEOUT_S} s")
            for conn in wait(waiting, timeout=1):
                kind, _ = self._recv(conn)
                if kind == "probed":
                    waiting.remove(conn)

    def _recv(self, conn):
        try:
            message = conn.recv()
        except (EOFError, OSError):
            raise CellError(self._death(conn)) from None
        if message[0] == "error":
            raise CellError(message[1])
        if message[0] == RECORDS:  # a producer's interval: its raw buffers follow
            try:
                return RECORDS, recv_records(conn, *message[1:])
            except (EOFError, OSError):
                raise CellError(self._death(conn)) from None
        return message[0], message[1:] if message[0] == "interval" else message[1]

    def _tell(self, conn, message) -> None:
        """A message to one process before the cell measures (from the loop on, the outbox sends them): a process
        that died, or closed its pipe, since it said it was ready fails the cell with why (_gone), not with the
        pipe's error."""
        try:
            conn.send(message)
        except (OSError, ValueError):  # BrokenPipeError, ConnectionResetError; ValueError: a closed connection
            raise CellError(self._gone(conn)) from None

    def _gone(self, conn) -> str:
        """Why a process that can no longer be written to is gone: its own failure, when it reported one before it
        closed its pipe (still unread there), else how it ended (_death)."""
        try:
            while conn.poll(0):
                message = conn.recv()
                if message[0] == "error":
                    return message[1]
        except (EOFError, OSError, ValueError):
            pass
        return self._death(conn)

    def _death(self, conn) -> str:
        """Why the process behind `conn` stopped talking (processes.death), once it has exited."""
        role, number = self.conns[conn]
        process = next((p for p in self.processes if p.name == f"{role}-{number}"), None)
        if process is not None:
            process.join(timeout=2)
        return death(role, number, process.pid if process else None, process.exitcode if process else None)

    def _measure(self) -> dict:
        self._outbox = _Outbox()  # every message to the processes from here on: in order, never from the loop
        try:
            return self._measure_loop(self._outbox)
        finally:
            self._outbox.close()

    def _measure_loop(self, outbox: _Outbox) -> dict:
        cell = self.cell
        done: dict = {}
        producers = [c for c, key in self.conns.items() if key[0] == "producer"]
        consumers = [c for c, key in self.conns.items() if key[0] == "consumer"]
        drain: Drain | None = None
        heard = dict.fromkeys(self.conns, time.monotonic())  # when each process last reported
        run_s = (self.timing["t_end"] - self.timing["t_start"]) / SECOND_NS
        # The producers flush for up to the same bound as the drain (see Drain.cap_s).
        deadline = time.monotonic() + run_s + 2 * Drain.cap_s(cell["drain_timeout_s"], run_s) + READY_TIMEOUT_S
        while len(done) < len(self.conns):
            if any(event.is_set() for event in self.stop):
                raise KeyboardInterrupt
            if time.monotonic() > deadline:
                reason = self._unfinished(done, heard, drain)
                self._log_stacks(done)
                raise CellError("the cell did not finish in time (a client is stuck or the broker stopped answering): "
                                + reason)
            now = time.monotonic_ns()
            due = [at for at in (self.attach_due, self._watch_sending(now, any(c in done for c in producers)))
                   if at is not None]
            timeout = min([0.1] + [max(0, at - now) / 1e9 for at in due])
            for conn in wait([c for c in self.conns if c not in done], timeout=timeout):
                kind, payload = self._recv(conn)
                heard[conn] = time.monotonic()
                if kind == "interval":
                    interval, snapshot = payload
                    self.aggregator.add(conn, self.conns[conn][0], interval, snapshot)
                elif kind == RECORDS:
                    snapshot = self.figures[conn].add(payload)
                    if snapshot is not None:  # the warm-up's records only count in the producer's totals
                        self.aggregator.add(conn, "producer", payload["interval"], snapshot)
                elif kind == "progress" and drain is not None:
                    drain.update(conn, payload, time.monotonic())
                elif kind == "warm" and self.warmup is not None:
                    self.warmup.add(conn, *payload)
                elif kind == "done":
                    done[conn] = self.figures[conn].finish(payload) if conn in self.figures else payload
                    self.aggregator.finished(conn)
            if self.faults.error:
                raise CellError(f"fault: {self.faults.error}")
            writing = time.monotonic()
            self._write_intervals()
            # Time spent waiting for the event store (an outage: its writes retry with backoff) is not a client's or
            # the broker's: the deadline moves by it, or a store started again after a loaded host's slow restart
            # failed the cell as "did not finish in time" once its intervals were all written.
            deadline += time.monotonic() - writing
            if self.attach_due is not None and time.monotonic_ns() >= self.attach_due:
                self._count_at_attach()
            if self.warmup is not None and self.warmup.decided is None and self.warmup.decide(time.monotonic_ns()):
                self._start_measuring(done)
            if drain is None and all(c in done for c in producers):
                # Every producer has flushed: the consumers now drain what the broker still holds.
                self.phases.mark("producers_done")
                expected = sum(done[c]["sent_total"] - done[c]["failed_total"] for c in producers)
                sending_s = (time.monotonic_ns() - self.timing["t_start"]) / SECOND_NS
                drain = Drain(consumers, expected, cell["drain_timeout_s"], sending_s, time.monotonic(),
                              unanswered=sum(done[c].get("unacked") or 0 for c in producers))
                not_acked = {done[c]["producer_id"]: done[c]["not_acked"] for c in producers
                             if done[c].get("not_acked") is not None and done[c]["not_acked"].size}
                for conn in consumers:
                    if not_acked:  # which of them arrive anyway, the consumers say in their "done"
                        outbox.send(conn, ("not_acked", not_acked))
                    outbox.send(conn, ("expect", expected))
            if drain is not None:
                if drain.wants_backlog(time.monotonic()):
                    drain.backlog(self._group_backlog(), time.monotonic())
                for command in drain.decide(time.monotonic()):
                    if command[0] == "late":  # the drain gave up: what is not in by now is not in time
                        self.drain_gave_up_ns = time.monotonic_ns()
                    for conn in consumers:
                        if conn not in done:
                            outbox.send(conn, command)
            self._report_progress(drain is not None)
        self._watch_sending(time.monotonic_ns(), True)  # the producers finished before the loop looked again
        return done

    def _unfinished(self, done: dict, heard: dict, drain: "Drain | None") -> str:
        """Which processes had not finished when the cell's time ran out, how long since each last reported, and
        how far the drain had come: what tells a stuck client from a broker that stopped answering."""
        now = time.monotonic()
        waiting = [f"{role}-{number} (last heard {now - heard[c]:.1f} s ago)"
                   for c, (role, number) in self.conns.items() if c not in done]
        stage = "still sending" if drain is None else f"draining, {drain.received} of {drain.expected} received"
        return f"{', '.join(waiting)} not finished; {stage}"

    def _log_stacks(self, done: dict) -> None:
        """Each unfinished process's threads' stacks, as it gives them (processes.stacks_of), into the log: where a
        stuck client waits, or that its stacks show it working while the broker does not answer."""
        for conn, (role, number) in self.conns.items():
            process = next((p for p in self.processes if p.name == f"{role}-{number}"), None)
            if conn in done or process is None or process.pid is None:
                continue
            stacks = processes.stacks_of(process.pid, self.stacks_fds.get(conn))
            log.warning("%s-%d had not finished; its threads were at:\n%s", role, number,
                        stacks or "(it did not say: gone, or without a stacks file)")

    def _group_backlog(self) -> int | None:
        """The broker's count of what it still holds for the cell's group (None: it cannot tell now)."""
        try:
            return self.driver.backlog(self.topic, self.group, lanes(self.cell))
        except Exception:  # noqa: BLE001 (a broker that does not answer now is waited for, as without a count)
            return None

    def _count_at_attach(self) -> None:
        """The broker's own count of the startup backlog, just before the consumers attach to it: they hold until
        it is taken ("attach"), so on a loaded host that takes it late they attach late, after it (counted_s, from
        the first send as attach_s, says when), and it never finds any of the backlog read."""
        self.attach_due = None
        count = self.driver.message_count(self.topic, lanes(self.cell))
        self.at_attach = {"broker_backlog": self.driver.backlog(self.topic, self.group, lanes(self.cell)),
                          "broker_messages": None if count is None else count - self.probes,
                          "counted_s": round((time.monotonic_ns() - self.timing["t_start"]) / SECOND_NS, 6)}
        for conn, (role, _) in self.conns.items():
            if role == "consumer":
                self._outbox.send(conn, ("attach", None))

    def _start_measuring(self, done: dict) -> None:
        """The warm-up is over: measurement starts a moment from now, for every process alike."""
        start = min(time.monotonic_ns() + MEASURE_LEAD_NS, self.timing["measure_start"])
        span = self.timing["t_end"] - self.timing["measure_start"]
        self.timing.update(measure_start=start, t_end=start + span)
        self._faults_from(start)
        for conn in self.conns:
            if conn not in done:
                self._outbox.send(conn, ("measure", start))

    def _faults_from(self, measure_start: int) -> None:
        """The faults' clock starts at the measured start, and the producers' acknowledgement gaps are watched from
        the first fault on."""
        if not self.faults:
            return
        self.faults.start(measure_start)
        for figures in self.figures.values():
            figures.gap.from_ns = self.faults.first_due()

    def _finish_faults(self, done: dict) -> dict | None:
        """The cluster brought back whole, and what the cell stores of its faults: each action, and the longest
        stretch without a producer's acknowledgement, and without a consumer's delivery, from the first fault on
        (from the measured start, in s)."""
        record = self.faults.finish()
        if record is None:
            return None
        acks = []
        for figures in self.figures.values():
            figures.gap.finish(self.timing["t_end"])
            if figures.gap.longest is not None:
                acks.append(self._gap(*figures.gap.longest, figures.gap.until_end))
        receipts = [self._gap(*d["receipt_gap"]) for c, d in done.items()
                    if self.conns[c][0] == "consumer" and d.get("receipt_gap")]
        record = {**record, "producer_ack_gap": max(acks, key=lambda g: g["s"], default=None),
                  "consumer_receipt_gap": max(receipts, key=lambda g: g["s"], default=None)}
        self._write_intervals(final=True)  # every interval in fault_intervals
        sending_s = (self.timing["t_end"] - self.timing["measure_start"]) / SECOND_NS
        return {**record, "phases": faults.phases(self.fault_intervals, record, not self.cell["consumers"], sending_s)}

    def _gap(self, start: int, end: int, until_end: bool) -> dict:
        at = lambda ns: round((ns - self.timing["measure_start"]) / SECOND_NS, 6)  # noqa: E731
        return {"from_s": at(start), "to_s": at(end), "s": round((end - start) / SECOND_NS, 6), "until_end": until_end}

    def _warmup_record(self) -> dict:
        cell, t = self.cell, self.timing
        record = {"min_s": cell["warmup_s"], "max_s": warmup_max_s(cell) if self.warmup else cell["warmup_s"],
                  "used_s": round((t["measure_start"] - t["t_start"]) / SECOND_NS, 3), "until_steady": False}
        if self.warmup is not None:
            decided = self.warmup.decided or {"steady": False, "p99_us": []}
            record.update(until_steady=True, steady=decided["steady"],
                          p99_us=[None if p is None else round(p, 1) for p in decided["p99_us"]])
        return record

    def _report_progress(self, draining: bool) -> None:
        now = time.monotonic_ns()
        t = self.timing
        if draining:
            phase, fraction = "draining", 0.99
        elif now < t["measure_start"]:
            phase, fraction = "warm-up", 0.0
        else:
            phase = "measuring"
            fraction = min(0.98, (now - t["measure_start"]) / max(1, t["t_end"] - t["measure_start"]))
        totals = self.aggregator.totals
        self.progress(Progress(self.cell["cell_id"], phase, fraction, totals["sent"], totals["received"]))

    # -- events ------------------------------------------------------------------------------
    def _write_intervals(self, final: bool = False) -> None:
        merged = self.aggregator.take_complete(final)
        if not merged:
            return
        # The broker's own view of the backlog, sampled once per write (about once a second).
        backlog = self.driver.backlog(self.topic, self.group, lanes(self.cell)) if self.cell["consumers"] else None
        used = self.resources.sample() if self.resources else {}
        if used:
            self.resource_samples.append(used)
        machine = self.host.sample() if self.host else None
        self._guard_priority(used, machine)
        events = []
        for data in merged:
            data = {"cell_id": self.cell["cell_id"], "attempt": self.attempt, **data, "backlog": backlog}
            if used:
                data["resources"] = used
            if machine:
                data["host"] = machine
            self.series.append({k: v for k, v in data.items() if k != "histograms"})
            if self.faults:  # the phases before, during and after are worked out from them (_finish_faults)
                self.fault_intervals.append({k: data.get(k) for k in ("interval", "counters", "histograms")})
            events.append(make_event(self.run_id, "IntervalMeasured", data, cell_index=self.cell["index"],
                                     interval=data["interval"], attempt=self.attempt))
        self.store.append(events)

    def _guard_priority(self, used: dict, machine: dict | None) -> None:
        """The cell's processes and the broker back to the fair scheduler together, for the rest of the cell, when
        priority.guard says so after an interval (a process went back on its own, the cell took more than its share
        of the host, or the host's CPUs were busy). Looked at with each interval write."""
        if self.priority_dropped is not None or self.normal_why is not None:  # a raised broker: only beside them
            return
        back = [p.name for p in self.processes if priority.policy_of(p.pid) == priority.NORMAL]
        cpu = [(used.get(group) or {}).get("cpu_pct") for group in ("workers", "broker")]
        cell_cpu = None if cpu[0] is None else cpu[0] + (cpu[1] or 0.0)
        why = priority.guard(back, cell_cpu, machine, (machine or {}).get("cpus") or os.cpu_count() or 1)
        if why is None:
            return
        at = time.monotonic_ns()
        self.priority_dropped = (at, why, [p.name for p in self.processes if priority.drop_process(p.pid)])
        if self.broker_grant is not None:
            self.broker_grant.drop(why)  # once, and only where it was raised

    def _priority(self, producers: list[dict], consumers: list[dict]) -> dict:
        """What the cell's processes and the broker ran at (priority.Grant's records, the broker's grant), with each
        drop back to normal priority and when, in s from the measured start."""
        start = self.timing["measure_start"]
        grant = self.broker_grant
        records = {f"producer-{d.get('producer_id', i)}": d.get("priority") or {} for i, d in enumerate(producers)}
        records.update({f"consumer-{d.get('consumer_id', i)}": d.get("priority") or {}
                        for i, d in enumerate(consumers)})
        policies = {r.get("policy", priority.NORMAL) for r in records.values()}
        dropped = [{"process": name, "at_s": round((r["dropped_ns"] - start) / SECOND_NS, 3),
                    "why": f"ran {priority.RUN_LIMIT_US // 1000} ms without blocking"}
                   for name, r in sorted(records.items()) if r.get("dropped_ns") is not None]
        if self.priority_dropped is not None:  # the supervisor's guard put back those still at real-time priority
            at, reason, names = self.priority_dropped
            dropped += [{"process": name, "at_s": round((at - start) / SECOND_NS, 3), "why": reason}
                        for name in sorted(names) if records.get(name, {}).get("dropped_ns") is None]
        why = sorted({r["why_normal"] for r in records.values() if r.get("why_normal")})
        broker = grant.policy if grant is not None else priority.NORMAL
        if grant is not None and grant.why_normal and grant.why_normal not in why:  # the switch: said once
            why = sorted({*why, f"broker: {grant.why_normal}"})
        if grant is not None and grant.dropped is not None:
            dropped.append({"process": "broker", "at_s": round((grant.dropped[0] - start) / SECOND_NS, 3),
                            "why": grant.dropped[1]})
        elif grant is not None and grant.policy == priority.REALTIME and not grant.held():
            dropped.append({"process": "broker", "at_s": None, "why": "put back during the cell by another"})
        return {"workers": policies.pop() if len(policies) == 1 else "mixed", "broker": broker,
                **({"why_normal": why} if why else {}), **({"dropped": dropped} if dropped else {})}

    def _final_count(self) -> int | None:
        """The broker's own count at the cell's end. A broker that does not answer then (it crashed, and the cell
        ended before it was back: a client that gives up at once on a lost connection sends nothing more) is
        waited for up to COUNT_WAIT_S and asked again; one that answers but cannot count is not waited for, unless
        the cell ran faults (FAULT_COUNT_WAIT_S)."""
        count = self.driver.message_count(self.topic, lanes(self.cell))
        if count is not None:
            return count
        back = self._broker_back()
        if back is None:
            return None
        count = self.driver.message_count(self.topic, lanes(self.cell))
        # After a fault, a cluster that answers may still be settling its leaders (a restarted node taking its
        # partitions back), and a broker that was down and answers again may still refuse a client's connection from
        # before (a pooled one the restart closed): the count is asked again for a while.
        deadline = time.monotonic() + (FAULT_COUNT_WAIT_S if self.faults or back else 0)
        while count is None and time.monotonic() < deadline:
            time.sleep(1.0)
            count = self.driver.message_count(self.topic, lanes(self.cell))
        return count

    def _broker_back(self) -> bool | None:
        """Whether the broker answers, waiting up to COUNT_WAIT_S for one that does not (yet): False when it answered
        at once, True when it answered after it had not, None when it never did."""
        deadline = time.monotonic() + COUNT_WAIT_S
        refused = False
        while True:
            try:  # asked briefly first, so that a broker on its way back is told from one that answered at once
                self.driver.check(timeout_s=min(5.0, max(0.5, deadline - time.monotonic())) if refused else 1.0)
                return refused
            except Exception:  # noqa: BLE001 (unreachable, whatever the client raises)
                if time.monotonic() >= deadline:
                    return None
                refused = True
                time.sleep(0.5)

    def _complete(self, done: dict) -> CellOutcome:
        self._write_intervals(final=True)
        cell = self.cell
        producers = [d for c, d in done.items() if self.conns[c][0] == "producer"]
        consumers = [d for c, d in done.items() if self.conns[c][0] == "consumer"]
        consumed = cell["consumers"] > 0  # publish-only cells cannot know what arrived
        queued = self.driver.backlog(self.topic, self.group, lanes(cell)) if consumed else None
        counts = outcome.totals(producers, consumers, self.aggregator.totals, consumed, queued)
        broker_count = outcome.broker_count(self._final_count(), producers, self.probes, consumers)
        if cell.get("backlog"):  # the backlog phase, then duration_s
            schedule_s = (self.timing["t_end"] - self.timing["measure_start"]) / SECOND_NS
        elif cell["messages"] is None:
            schedule_s = float(cell["duration_s"])
        else:
            last = max(p["last_send_ns"] for p in producers)
            schedule_s = max(1e-9, (last - self.timing["measure_start"]) / SECOND_NS)
        reason = outcome.failure_reason(counts, consumed, sum(p["sent_total"] for p in producers))
        if reason is not None:
            return self.fail(reason, {"totals": counts, "broker_count": broker_count, "warmup": self._warmup_record()})
        delivered = outcome.delivery(producers, consumers, consumed, self.timing["measure_start"],
                                     self.aggregator.totals,
                                     self.drain_gave_up_ns if outcome.waiting(counts) else None)
        shaped = schedule.shaped(cell)
        basis = verdict_basis(cell["rate"], schedule_s, not consumed, shaped)  # what the verdict is judged on
        judged = verdict.sustainability(basis["target"], verdict.interval_inputs(self.series, schedule_s),
                                        publish_only=not consumed, shaped=shaped,
                                        not_sent=counts["not_sent"], due=counts["due"])
        # The digest of the intervals lets a report leave them unread (reports.model.interval_digest).
        digest = interval_digest(self.series, basis)
        counts.update(delivered=delivered["delivered"], bytes_delivered=delivered["bytes_delivered"])
        self.store.append([make_event(self.run_id, "CellCompleted", {
            "cell_id": cell["cell_id"], "attempt": self.attempt, "measured_s": schedule_s,
            "delivery_window_s": delivered["window_s"],
            # where the window starts (outcome.delivery), from the start of measurement
            "delivery_window_start_s": (delivered["window_start_ns"] - self.timing["measure_start"]) / SECOND_NS,
            **({"delivery_window_end": delivered["window_end"]} if delivered["window_end"] else {}),
            "encoded_bytes": self.encoded_bytes, "send_loop": self.send_loop, "codec_floor_ns": self.codec_floor,
            **({"sender": self.sender} if self.sender else {}),
            **_stamps(producers, consumers),
            **_stamp_bound(consumers),
            "send_thread_nice": _nice(producers),
            "priority": self._priority(producers, consumers),
            "intervals": self.aggregator.written, "totals": counts, "broker_count": broker_count,
            "latency_basis": "enqueue" if cell["rate"] == "max" else "intended",
            "warmup": self._warmup_record(),
            **self._shape_figures(consumers),
            "resources": resources.summarize(self.resource_samples),
            "host": self._host_figures(),
            "verdict": {"verdict": judged["verdict"], "reasons": judged["reasons"]},
            "limit": self._limit(judged, producers, consumers, counts["sent"] / schedule_s, schedule_s),
            **({"digest": digest} if digest else {}),
            **({"faults": self.fault_figures} if self.fault_figures else {}),
            "histograms": {**self.aggregator.cumulative_histograms(), **_not_sent_bounds(producers)},
        }, cell_index=cell["index"])])
        self.progress(Progress(cell["cell_id"], "done", 1.0, counts["sent"], counts["received"] or 0))
        return CellOutcome(cell["cell_id"], "completed", intervals=self.aggregator.written)

    def _host_figures(self) -> dict | None:
        """The host over the measured sending (measured start to the schedule's end, as the CPU `limit` judges on),
        judged by host.RULE, with the highest CPU pressure of a single interval write beside it; None when the span
        was not read (a cell whose producers ended before its measured start)."""
        if len(self.host_span) < 2 or self.host_span[-1].at - self.host_span[0].at < MIN_HOST_SPAN_S:
            return None
        figures = host.between(*self.host_span)
        used = self.sent or {}
        own = None if used.get("workers") is None else used["workers"] + (used.get("broker") or 0.0)
        pressures = [s["host"]["cpu_pressure_pct"] for s in self.series
                     if (s.get("host") or {}).get("cpu_pressure_pct") is not None]
        return {**host.judged(figures, own), "cpu_pressure_max_pct": max(pressures, default=None),
                "span_s": round(self.host_span[-1].at - self.host_span[0].at, 3)}

    def _limit(self, judged: dict, producers: list[dict], consumers: list[dict], sent_rate: float,
               schedule_s: float) -> dict:
        """What limited the cell's rate (brokerbench.limit): its schedule, when its producers kept it (a rated cell
        whose publish delay did not fail the verdict, nor left more unsent than the not-sent rule allows); else the
        broker or the producers, told by how long they waited for room in their in-flight windows and how busy their
        processes were: CPU over the measured sending, per producer."""
        cell = self.cell
        checks = judged.get("checks") or {}
        delay = checks.get("publish_delay") or {}
        unsent = checks.get("not_sent") or {}
        flights = [p["in_flight"] for p in producers if p.get("in_flight") is not None]
        shares = window_shares(flights)
        windows = {f.window for f in flights}
        used = self.sent or {}
        producer_cpu = used.get("producers")
        limited = limit.cell_limit(
            kept_schedule=cell["rate"] != "max" and delay.get("passed") is not False and unsent.get("passed") is not False,
            window=windows.pop() if len(windows) == 1 else None, window_full_share=shares.full,
            in_flight_mean_share=shares.in_flight_mean, window_wait_share=shares.waited,
            producer_cpu_pct=None if producer_cpu is None else producer_cpu / max(1, cell["producers"]),
            broker_cpu_pct=used.get("broker"))
        if cell["consumers"]:
            backlog = checks.get("backlog")
            if backlog is None and not schedule.shaped(cell) and sent_rate > 0:  # at max rate the verdict judges none
                backlog = verdict.backlog_growth(sent_rate, verdict.interval_inputs(self.series, schedule_s))
            limited["consumers"] = self._consumer_limit(backlog or {}, consumers)
        return limited

    def _consumer_limit(self, backlog: dict, consumers: list[dict]) -> dict:
        """Whether the consumers were the limit (limit.consumer_limit): the verdict's backlog rule (the broker's own
        lag, else sent minus received) found it growing, and how idle and how busy the consumers were meanwhile."""
        followed = [backlog[k] for k in ("broker", "counted") if isinstance(backlog.get(k), dict)]
        idle = [c["idle_share"] for c in consumers if c.get("idle_share") is not None]
        cpu = (self.sent or {}).get("consumers")
        return limit.consumer_limit(
            backlog_grew=any(f.get("growing") for f in followed) if followed else None,
            idle_share=sum(idle) / len(idle) if idle and len(idle) == len(consumers) else None,
            consumer_cpu_pct=None if cpu is None else cpu / max(1, self.cell["consumers"]))

    def _shape_figures(self, consumers: list[dict]) -> dict:
        """A shaped schedule's own figures (outcome.startup, outcome.bursts); nothing for a constant rate."""
        cell, t = self.cell, self.timing
        records = [c["shape"] for c in consumers if "shape" in c]
        out = {}
        if cell.get("backlog") and records:
            out["startup"] = outcome.startup(cell, t["attach_ns"], t["t_start"], records, self.at_attach)
        if cell.get("burst") and records:
            windows = schedule.burst_windows(cell, t["t_start"], t["measure_start"], t["t_end"])
            out["bursts"] = outcome.bursts(cell, windows, records)
        return out

    def fail(self, reason: str, figures: dict | None = None, wait_for_broker: bool = True) -> CellOutcome:
        """Record the cell as failed with what it measured. A cell whose broker answered at its start (its topic
        was made) and does not now (it crashed, or restarts) waits for it up to COUNT_WAIT_S before it ends, so
        that the run's next cell measures the broker started again instead of being refused while it starts; a
        broker that never answered is not waited for (each cell of a run against one that is down fails in the
        check's 5 s)."""
        self._stop_processes()
        try:
            self._write_intervals(final=True)  # keep what was measured
        except Exception:
            pass
        faulted = self.fault_figures if self.faults.finished else self.faults.finish()  # the cluster back whole
        self.store.append([make_event(self.run_id, "CellFailed",
                                      {"cell_id": self.cell["cell_id"], "reason": reason, "attempt": self.attempt,
                                       "intervals": self.aggregator.written, **(figures or {}),
                                       **({"faults": faulted} if faulted else {})},
                                      cell_index=self.cell["index"])])
        if wait_for_broker and self.topic_created:
            self._broker_back()
        totals = self.aggregator.totals
        self.progress(Progress(self.cell["cell_id"], "done", 1.0, totals["sent"], totals["received"]))
        return CellOutcome(self.cell["cell_id"], "failed", reason, self.aggregator.written)

    def _stop_processes(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)

    def cleanup(self) -> None:
        try:
            self.faults.finish()  # a cell stopped before its end leaves no node down or paused
            if self.probe is not None:  # a cell that failed before its probe was acknowledged
                self.probe[0].close()
                self.probe = None
            self._stop_processes()
            self.phases.mark("processes_stopped")
        finally:
            # The broker as it was, once the cell's processes have gone: a client still at real-time priority beside
            # a broker back in the fair scheduler would take the core from it mid-reply (priority.decide)
            if self.broker_grant is not None:
                self.broker_grant.restore()
        for conn in self.conns:
            conn.close()
        if self.topic_created:
            self.driver.delete_topic(self.topic, lanes(self.cell))
            self.phases.mark("delete_topic")
        self.driver.close()
        self.phases.mark("driver_closed")


def _not_sent_bounds(producers: list[dict]) -> dict[str, str]:
    """The least latency of every message due and never sent, over the producers (ProducerFigures.finish), as the
    cell's NOT_SENT_BOUNDS histogram; nothing when every due message was sent."""
    found = [p["not_sent_bounds"] for p in producers if p.get("not_sent_bounds") is not None]
    return {NOT_SENT_BOUNDS: histogram.encode(histogram.merge(found))} if found else {}


def _stamps(producers: list[dict], consumers: list[dict]) -> dict:
    """How the cell's acknowledgements and deliveries were stamped (brokerbench.figures: ARRIVAL, READ,
    client_stamps), each the distinct values of its producers or consumers; left out where none said."""
    stamps = {"ack_stamps": joined_stamps(p.get("stamps") for p in producers),
              "delivery_stamps": joined_stamps(c.get("stamps") for c in consumers)}
    return {key: value for key, value in stamps.items() if value}


def _stamp_bound(consumers: list[dict]) -> dict:
    """The consumers' delivery stamp bounds (consumer.ArrivalBound) as the cell's (figures.merge_stamp_bounds); left
    out where no consumer had one."""
    bound = merge_stamp_bounds(c.get("stamp_bound") for c in consumers)
    return {"delivery_stamp_bound": bound} if bound else {}


def _nice(producers: list[dict]) -> int | None:
    """The send threads' nice value (the highest, if they differ); None for unthrottled cells."""
    values = [p["send_thread_nice"] for p in producers if p.get("send_thread_nice") is not None]
    return max(values) if values else None
