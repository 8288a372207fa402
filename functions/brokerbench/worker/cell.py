"""One cell: start consumers and producers, merge their per-second snapshots, write the cell's events.

Producers and consumers are separate processes (started, not forked, so no client library
state is shared); they compare the same monotonic clock, so end-to-end latency needs no
cross-host time. Interval i is written once every process has reported it, so events appear
while the cell runs and whatever was measured before a failure or Ctrl-C is kept.
"""

from __future__ import annotations

import math
import multiprocessing
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait

import numpy as np

from .. import histogram
from ..drivers import BrokerUnavailable, get_driver
from ..events import EventStore, cell_prefix, make_event
from .consumer import ConsumerTask, consumer_main
from .producer import SECOND_NS, ProducerTask, producer_main

READY_TIMEOUT_S = 60
START_LEAD_NS = 100_000_000
PRODUCER_COUNTERS = {"sent": "sent", "bytes": "bytes_sent", "acked": "acked", "send_errors": "send_errors"}
CONSUMER_COUNTERS = {"received": "received", "bytes": "bytes_received"}
# Metric -> divisor from the recorded nanoseconds to the histogram's unit.
METRIC_UNITS = {"publish_latency_us": 1000, "publish_delay_us": 1000, "end_to_end_latency_us": 1000,
                "encode_ns": 1, "decode_ns": 1}
COUNTERS = ("sent", "bytes_sent", "acked", "send_errors", "received", "bytes_received")
# Set by a front end on Ctrl-C when cells run in threads (the local workflow's Lambda-kind cells).
CANCELLED = threading.Event()


class CellError(RuntimeError):
    pass


@dataclass
class CellOutcome:
    cell_id: str
    status: str  # completed | failed
    reason: str | None = None
    intervals: int = 0


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
             progress: Callable[[Progress], None] | None = None, worker: dict | None = None) -> CellOutcome:
    """Measure one cell against `endpoint` and append its events to `store`.

    Idempotent per cell: a cell that already ended returns its stored outcome, and a new attempt
    (a retried worker) records its own start and intervals beside those of the earlier attempt.
    """
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
    runner = _CellRun(run_id, cell, endpoint, store, topic, progress or (lambda p: None), attempt)
    try:
        return runner.run()
    except KeyboardInterrupt:
        runner.fail("interrupted by the user")
        raise
    except (CellError, BrokerUnavailable) as exc:
        return runner.fail(str(exc))
    except Exception as exc:  # any other failure ends this cell only; the run goes on
        return runner.fail(f"{type(exc).__name__}: {exc}")
    finally:
        runner.cleanup()


class _CellRun:
    def __init__(self, run_id, cell, endpoint, store, topic, progress, attempt) -> None:
        self.run_id, self.cell, self.endpoint, self.store, self.topic = run_id, cell, endpoint, store, topic
        self.attempt = attempt
        self.progress = progress
        self.driver = get_driver(cell["broker"], endpoint, cell["client"])
        self.processes: list[multiprocessing.Process] = []
        self.conns: dict = {}  # connection -> ("producer"|"consumer", id)
        self.parts: dict[int, list] = defaultdict(list)  # interval -> [(role, snapshot)]
        self.reported: dict = {}  # connection -> highest interval reported (math.inf when done)
        self.written_intervals = 0
        self.cumulative: dict[str, list] = defaultdict(list)
        self.totals = dict.fromkeys(COUNTERS, 0)
        self.topic_created = False

    # -- lifecycle ---------------------------------------------------------------------------
    def run(self) -> CellOutcome:
        cell = self.cell
        self.progress(Progress(cell["cell_id"], "starting", 0.0))
        self.driver.check()
        self.driver.create_topic(self.topic, cell["partitions"])
        self.topic_created = True
        ctx = multiprocessing.get_context("spawn")
        producer_rate = None if cell["rate"] == "max" else cell["rate"] / cell["producers"]
        limit = None if cell["messages"] is None else math.ceil(cell["messages"] / cell["producers"])
        for c in range(cell["consumers"]):
            assigned = [p for p in range(cell["partitions"]) if p % cell["consumers"] == c]
            self._spawn(ctx, consumer_main, ConsumerTask(cell, self.endpoint, self.topic, f"{self.topic}-g", c, assigned),
                        ("consumer", c))
        for p in range(cell["producers"]):
            phase = int(SECOND_NS / cell["rate"] * p) if producer_rate else 0
            self._spawn(ctx, producer_main, ProducerTask(cell, self.endpoint, self.topic, p, producer_rate, phase, limit),
                        ("producer", p))
        ready = self._collect_ready()
        encoded = [info["encoded_bytes"] for (role, _), info in ready.items() if role == "producer"]
        self.encoded_bytes = sum(encoded) / len(encoded)
        loops = {info["send_loop"] for (role, _), info in ready.items() if role == "producer"}
        self.send_loop = loops.pop() if len(loops) == 1 else "mixed"

        t_start = time.monotonic_ns() + START_LEAD_NS
        measure_start = t_start + int(cell["warmup_s"] * SECOND_NS)
        if cell["messages"] is None:
            t_end = measure_start + int(cell["duration_s"] * SECOND_NS)
        elif producer_rate:
            t_end = measure_start + int((limit / producer_rate + 1) * SECOND_NS)
        else:
            t_end = measure_start + 24 * 3600 * SECOND_NS
        self.timing = {"t_start": t_start, "measure_start": measure_start, "t_end": t_end}
        for conn in self.conns:
            conn.send(("go", self.timing))
        done = self._measure()
        return self._complete(done)

    def _spawn(self, ctx, target, task, key) -> None:
        parent, child = ctx.Pipe()
        process = ctx.Process(target=target, args=(child, task), daemon=True, name=f"{key[0]}-{key[1]}")
        process.start()
        child.close()
        self.processes.append(process)
        self.conns[parent] = key
        self.reported[parent] = -1

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
        return ready

    def _recv(self, conn):
        try:
            message = conn.recv()
        except (EOFError, OSError):
            raise CellError(f"{self.conns[conn][0]} {self.conns[conn][1]} exited unexpectedly") from None
        if message[0] == "error":
            raise CellError(message[1])
        return message[0], message[1:] if message[0] == "interval" else message[1]

    def _measure(self) -> dict:
        cell = self.cell
        done: dict = {}
        producers = [c for c, key in self.conns.items() if key[0] == "producer"]
        consumers = [c for c, key in self.conns.items() if key[0] == "consumer"]
        expected_sent = False
        run_ns = self.timing["t_end"] - self.timing["t_start"]
        deadline = time.monotonic() + (run_ns / SECOND_NS) + cell["drain_timeout_s"] + READY_TIMEOUT_S
        while len(done) < len(self.conns):
            if CANCELLED.is_set():
                raise KeyboardInterrupt
            if time.monotonic() > deadline:
                raise CellError("the cell did not finish in time (a client is stuck or the broker stopped answering)")
            for conn in wait([c for c in self.conns if c not in done], timeout=0.25):
                kind, payload = self._recv(conn)
                if kind == "interval":
                    interval, snapshot = payload
                    self.parts[interval].append((self.conns[conn][0], snapshot))
                    self.reported[conn] = interval
                elif kind == "done":
                    done[conn] = payload
                    self.reported[conn] = math.inf
            self._write_complete_intervals()
            if not expected_sent and all(c in done for c in producers):
                expected = {done[c]["producer_id"]: {"sent_total": done[c]["sent_total"],
                                                     "first_measured_seq": done[c]["first_measured_seq"]}
                            for c in producers}
                for conn in consumers:
                    conn.send(("expect", expected))
                expected_sent = True
            self._report_progress(expected_sent)
        return done

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
        self.progress(Progress(self.cell["cell_id"], phase, fraction, self.totals["sent"], self.totals["received"]))

    # -- intervals ---------------------------------------------------------------------------
    def _write_complete_intervals(self, final: bool = False) -> None:
        complete = math.inf if final else min(self.reported.values())
        events = []
        for interval in sorted(i for i in self.parts if i <= complete):
            events.append(self._interval_event(interval, self.parts.pop(interval)))
        if events:
            self.store.append(events)

    def _interval_event(self, interval: int, parts: list) -> dict:
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
        self.written_intervals += 1
        return make_event(self.run_id, "IntervalMeasured",
                          {"cell_id": self.cell["cell_id"], "attempt": self.attempt, "interval": interval,
                           "counters": counters, "histograms": hists, "summary": summaries},
                          cell_index=self.cell["index"], interval=interval, attempt=self.attempt)

    # -- endings -----------------------------------------------------------------------------
    def _complete(self, done: dict) -> CellOutcome:
        self._write_complete_intervals(final=True)
        cell = self.cell
        producers = [d for c, d in done.items() if self.conns[c][0] == "producer"]
        consumers = [d for c, d in done.items() if self.conns[c][0] == "consumer"]
        sent = sum(p["sent"] for p in producers)
        received = sum(r["received"] for c in consumers for r in c["per_producer"].values())
        if cell["messages"] is None:
            measured_s = float(cell["duration_s"])
        else:
            last = max(p["last_send_ns"] for p in producers)
            measured_s = max(1e-9, (last - self.timing["measure_start"]) / SECOND_NS)
        consumed = cell["consumers"] > 0  # publish-only cells cannot know what arrived
        totals = {
            "sent": sent,
            "received": received if consumed else None,
            "lost": sent - received if consumed else None,
            "duplicated": sum(c["duplicated"] for c in consumers) if consumed else None,
            "out_of_order": sum(c["out_of_order"] for c in consumers) if consumed else None,
            "send_errors": self.totals["send_errors"],
            "unacked": sum(p["unacked"] for p in producers),
            "acked": self.totals["acked"],
            "bytes_sent": self.totals["bytes_sent"],
            "bytes_received": self.totals["bytes_received"],
        }
        hists = {metric: histogram.encode(histogram.merge(parts)) for metric, parts in self.cumulative.items()}
        self.store.append([make_event(self.run_id, "CellCompleted", {
            "cell_id": cell["cell_id"], "attempt": self.attempt, "measured_s": measured_s, "encoded_bytes": self.encoded_bytes,
            "send_loop": self.send_loop, "send_thread_nice": _nice(producers),
            "intervals": self.written_intervals, "totals": totals, "histograms": hists,
        }, cell_index=cell["index"])])
        self.progress(Progress(cell["cell_id"], "done", 1.0, sent, received))
        return CellOutcome(cell["cell_id"], "completed", intervals=self.written_intervals)

    def fail(self, reason: str) -> CellOutcome:
        self._stop_processes()
        try:
            self._write_complete_intervals(final=True)  # keep what was measured
        except Exception:
            pass
        self.store.append([make_event(self.run_id, "CellFailed",
                                      {"cell_id": self.cell["cell_id"], "reason": reason, "attempt": self.attempt,
                                       "intervals": self.written_intervals},
                                      cell_index=self.cell["index"])])
        self.progress(Progress(self.cell["cell_id"], "done", 1.0, self.totals["sent"], self.totals["received"]))
        return CellOutcome(self.cell["cell_id"], "failed", reason, self.written_intervals)

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
        self._stop_processes()
        for conn in self.conns:
            conn.close()
        if self.topic_created:
            self.driver.delete_topic(self.topic, self.cell["partitions"])


def _nice(producers: list[dict]) -> int | None:
    """The send threads' nice value (the highest, if they differ); None for unthrottled cells."""
    values = [p["send_thread_nice"] for p in producers if p.get("send_thread_nice") is not None]
    return max(values) if values else None
