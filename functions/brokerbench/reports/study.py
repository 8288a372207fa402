"""A published study beside our measurements of it: `brokerbench study NAME` and docs/STUDIES.md.

A study's suite file (suites/NAME.json) holds, under `published`, the study's tables as it printed them (rows,
columns, units and figures) and its conclusions, each with the checks that decide it. Every figure of ours is
computed here from stored runs of the suite, read from the event store, and each table names the run it comes from.

Our figure for a table's row and column is taken over the run's completed cells that match both (broker, size,
rate, format, mode, ...): throughput and codec times are the median over those cells (the repeats), latency
figures come from their end-to-end latency histograms merged (every measured message of every repeat), and
consumer lag from every one-second sample of the broker's backlog in those cells while the producers send.
"""

from __future__ import annotations

import gzip
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from msgspec import UNSET, Struct, UnsetType, ValidationError, convert

from .. import verdict
from ..metrics import shown_in
from ..eventdata import CellCompleted, Counters, Host, Spec, build_types, given
from ..events import RUN_EVENTS, read_report_events
from ..spec import SpecError, all_suite_names, load_suite_file
from .rows import Environment, missing_in, result_cell
from .results import (_RANGES, bucket_percentiles, bucket_summary, build_results, decode_buckets, merge_blobs,
                      with_missing)

MIB = 1 << 20
# A selector's keys (in a table, a row or a column) and the cell result fields they match.
SELECTORS = {"broker": "broker", "size": "size_bytes", "rate": "rate_target", "format": "format", "mode": "mode",
             "producers": "producers", "consumers": "consumers", "partitions": "partitions"}
LATENCY = {"e2e_mean_ms": "mean", "e2e_min_ms": "min", "e2e_max_ms": "max", "e2e_p25_ms": 25.0,
           "e2e_p50_ms": 50.0, "e2e_p75_ms": 75.0, "e2e_p99_ms": 99.0}
# A startup backlog's figures (median over the cells) and the bursts' (over every measured burst of the cells).
STARTUP = {"first_delivery_s": "first_delivery_s", "backlog_read_s": "backlog_read_s",
           "backlog_read_rate": "read_rate_msgs_per_s"}
BURSTS = {"burst_delivered_p50_ms": 50.0, "burst_delivered_max_ms": 100.0}
# The metrics a study is compared on (brokerbench.metrics); our_figure computes each.
METRICS = tuple(shown_in("study"))
CHECKS = ("order", "highest", "lowest", "ratio", "range")
HOLDS, FAILS, UNKNOWN = "holds", "does not hold", "cannot tell"


class StudyError(ValueError):
    """A study that cannot be compared as asked: `field` names what is wrong (exit 2)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


def study_names() -> list[str]:
    """The built-in suites that carry a published study to compare with."""
    return [name for name in all_suite_names() if "published" in load_suite_file(name)]


def load_study(name: str) -> Suite:
    try:
        doc = load_suite_file(name)
    except SpecError as exc:
        raise StudyError("study", exc.problems[0].message) from None
    if "published" not in doc:
        raise StudyError("study", f"suite {name!r} has no published study to compare with "
                                  f"(studies: {', '.join(study_names())})")
    return suite_definition(name, doc)


# -- the stored runs a study is compared with ------------------------------------------------------------------
@dataclass
class StoredRun:
    run_id: str
    name: str
    results: dict
    events: list[dict]
    completed: dict = field(default_factory=dict)  # cell_id -> CellCompleted data
    intervals: dict = field(default_factory=dict)  # cell_id -> [IntervalMeasured data] (undigested cells)


def read_run(store, run_id: str) -> StoredRun:
    events = read_report_events(store, run_id)
    if not any(e["type"] == "RunRequested" for e in events):
        raise StudyError("run", f"no stored run {run_id}")
    return stored_run(events)


def stored_run(events: list[dict]) -> StoredRun:
    """A run as a study reads it, from its events as read_report_events gives them."""
    results = build_results(events)
    run = StoredRun(results["run_id"], results["name"], results, events)
    for event in events:
        if event["type"] == "CellCompleted":
            run.completed[event["data"]["cell_id"]] = event["data"]
    ended = {cell_id: data["attempt"] for cell_id, data in run.completed.items()}  # the attempt each cell ended with
    for event in events:
        data = event["data"]
        if event["type"] == "IntervalMeasured" and data["attempt"] == ended.get(data["cell_id"], 0):
            run.intervals.setdefault(data["cell_id"], []).append(data)
    return run


def find_runs(store, study: Suite, run_ids: list[str] | None = None) -> dict[str, StoredRun]:
    """The study's runs by name: those given (each must be one of the study's runs), else for each of its runs the
    newest stored one of the suite that completed every cell, or failing that the newest that ended."""
    names = [run.name for run in study.runs]
    found: dict[str, StoredRun] = {}
    for run_id in run_ids or []:
        run = read_run(store, run_id)
        if run.name not in names:
            raise StudyError("run", f"run {run_id} is {run.name!r}, not one of {study.name}'s runs ({', '.join(names)})")
        if run.name in found:
            raise StudyError("run", f"two runs given for {run.name}: {found[run.name].run_id} and {run_id}")
        found[run.name] = run
    missing = [name for name in names if name not in found]
    fallback: dict[str, str] = {}  # the newest run that ended with some cells failed, when none completed
    if missing:
        for requested in store.list_runs(limit=200, suite=study.name):
            name = given(convert(requested["data"]["spec"], Spec).name)
            if name in missing and name not in found:
                end = next((e for e in store.read(requested["run_id"], prefix="90#") if e["type"] == "RunCompleted"),
                           None)
                if end is not None and end["data"]["status"] == "completed":
                    found[name] = read_run(store, requested["run_id"])
                elif end is not None:
                    fallback.setdefault(name, requested["run_id"])
    for name, run_id in fallback.items():
        if name not in found:
            found[name] = read_run(store, run_id)
    return found


# -- our figures ------------------------------------------------------------------------------------------------
class Selection(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A table's `select`, one of its rows or one of its columns, as written: its label, and what it narrows the
    table to: the run (a row), the metric and unit (a row or a column) and the cells (SELECTORS' keys). A key it
    does not know (a misspelled selector) fails naming it, rather than being ignored (a wider selection than meant)."""
    label: str = ""
    run: str | None = None
    metric: str | None = None
    unit: str | None = None
    broker: str | None = None
    size: int | None = None
    rate: int | float | str | None = None
    format: str | None = None
    mode: str | None = None
    producers: int | None = None
    consumers: int | None = None
    partitions: int | None = None


class Table(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One of the study's tables as it printed them (`published.tables[]`): its rows and columns, their figures
    (`values`, None where the study has none), the run our figures come from (a row may name its own), the metric
    (a row or a column may name its own) and the unit (a column may state its own)."""
    id: str
    title: str
    short: str | None = None  # how a conclusion's check names the table (default: its id)
    run: str
    unit: str
    metric: str | None = None
    select: Selection = Selection()
    rows: list[Selection]
    columns: list[Selection]
    values: list[list[int | float | None]]
    note: str | None = None
    missing: str = "n/r"  # what a figure the study does not give reads as


def _selector(*parts: dict | Selection) -> dict:
    """The cells a table's select, row and column narrow it to, by SELECTORS' keys (a later part's key wins)."""
    out: dict = {}
    for part in map(lambda p: _typed(p, Selection), parts):
        out.update({k: v for k in SELECTORS if (v := getattr(part, k)) is not None})
    return out


def _metric(table: dict | Table, row: dict | Selection, column: dict | Selection) -> str | None:
    """The metric of a table's figure: its column's, else its row's, else the table's."""
    return _typed(column, Selection).metric or _typed(row, Selection).metric or _typed(table, Table).metric


def matching_cells(run: StoredRun, select: dict) -> list[dict]:
    return [c for c in run.results["cells"] if c["status"] == "completed"
            and all(c[SELECTORS[k]] == v for k, v in select.items())]


def _histogram_min(buckets) -> float | None:
    if int(buckets.total) == 0:
        return None
    return float(_RANGES[0][int(buckets.indexes[0])])


def our_figure(run: StoredRun, select: dict, metric: str) -> tuple[float | None, list[str]]:
    """Our figure for `metric` over the run's completed cells matching `select`, and those cells' ids."""
    cells = [result_cell(c) for c in matching_cells(run, select)]
    ids = [c.cell_id for c in cells]
    if not cells:
        return None, ids
    if metric.startswith("throughput_"):
        if metric == "throughput_mib_per_s":
            values = [c.throughput_mb_per_s * 1e6 / MIB for c in cells]
        else:
            values = [getattr(c, metric) for c in cells]
        return float(statistics.median(values)), ids
    if metric in LATENCY:
        return _latency_figure(run, cells, LATENCY[metric])[0], ids
    if metric == "max_sustainable_rate":  # what each cell's search found, median over the cells
        values = [c.max_sustainable_rate for c in cells if c.max_sustainable_rate is not None]
        return (float(statistics.median(values)) if values else None), ids
    if metric in ("encode_mean_us", "decode_mean_us"):  # the codec's time per record, median over the cells
        means = [c.latency(f"{metric[:6]}_ns").mean for c in cells]
        values = [v for v in means if v is not None]
        return (float(statistics.median(values)) / 1000.0 if values else None), ids
    if metric in STARTUP:  # None where a cell's backlog was not wholly delivered: no figure for that cell
        values = [getattr(c.startup, STARTUP[metric]) for c in cells if c.startup is not None]
        values = [v for v in values if v is not None]
        return (float(statistics.median(values)) if values else None), ids
    if metric in BURSTS:  # a burst not wholly delivered counts as never delivered: no figure at all then
        rows = [row for c in cells if c.bursts is not None for row in c.bursts.cycles]
        if not rows or any(row.delivered_in_ms is None for row in rows):
            return None, ids
        return float(np.percentile([row.delivered_in_ms for row in rows], BURSTS[metric])), ids
    if metric.startswith("lag_"):
        samples = [v for c in cells for v in _backlog(run, c.cell_id) if v is not None]
        if not samples:
            return None, ids
        return float({"lag_mean": np.mean, "lag_min": np.min, "lag_max": np.max}[metric](samples)), ids
    raise StudyError("metric", f"{metric!r} is not a metric of ours ({', '.join(METRICS)})")


def _latency_figure(run: StoredRun, cells: list, wanted: str | float) -> tuple[float | None, float | None]:
    """End-to-end latency (ms) over the cells' merged histograms, by the rules the report's figures follow: the
    messages not received in time at +infinity (results.MISSING_RULE) and those due and never sent at no less than
    their bounds (results.NOT_SENT_RULE). A figure they put out of reach (the mean, the maximum, a percentile whose
    rank falls among them) is None, as the report gives none, with the least it can be beside it (value, at least);
    the minimum is the least measured value, unless an unsent message's bound lies below it."""
    ends = [_end(run, c.cell_id).histograms for c in cells]
    blobs = [b for h in ends if (b := given(h.end_to_end_latency_us))]
    if not blobs:
        return None, None
    merged = merge_blobs(blobs)
    owed = [b for h in ends if (b := given(h.not_sent_bound_us))]
    unsent = merge_blobs(owed) if owed else None
    missing = missing_in(cells)
    bound = None
    if wanted == "min":
        least = _histogram_min(merged)
        below = unsent is not None and least is not None and (_histogram_min(unsent) or least) < least
        value = None if below else least
    elif not missing and unsent is None:
        value = bucket_percentiles(merged, [wanted])[0] if isinstance(wanted, float) else bucket_summary(merged)[wanted]
    else:
        values, bounds = with_missing(merged, missing, {wanted: wanted} if isinstance(wanted, float) else {}, unsent)
        value, bound = values.get(wanted), bounds.get(wanted)  # the mean and the maximum: never measured whole
    return (None if value is None else value / 1000.0), (None if bound is None else bound / 1000.0)


def our_bound(run: StoredRun, select: dict, metric: str) -> float | None:
    """Where our figure for `metric` is out of reach (a latency some of whose messages were never measured), the
    least it can be; None otherwise."""
    if metric not in LATENCY:
        return None
    cells = [result_cell(c) for c in matching_cells(run, select)]
    return _latency_figure(run, cells, LATENCY[metric])[1] if cells else None


def _end(run: StoredRun, cell_id: str) -> CellCompleted:
    """A completed cell's end event, typed."""
    return convert(run.completed[cell_id], CellCompleted)


class _Sampled(Struct, frozen=True, kw_only=True):
    """An interval as a study's lag reads it (IntervalMeasured data): its number, its counts and the broker's
    backlog (None: not read)."""
    interval: int
    counters: Counters
    backlog: int | None = None


def _backlog(run: StoredRun, cell_id: str) -> list:
    """The broker's backlog samples of a cell's send schedule (the drain after it, emptying the backlog, is left
    out: a study's lag is sampled while the producers send)."""
    completed = _end(run, cell_id)
    schedule = verdict.schedule_end(completed.measured_s)
    if digest := given(completed.digest):
        rows = zip(digest.interval, digest.sent, digest.backlog)
    else:
        sampled = sorted((convert(d, _Sampled) for d in run.intervals.get(cell_id, [])), key=lambda i: i.interval)
        rows = ((i.interval, i.counters.sent, i.backlog) for i in sampled)
    return [backlog for interval, sent, backlog in rows if verdict.in_schedule(interval, sent, schedule)]


# -- tables and conclusions -------------------------------------------------------------------------------------
def compare_table(table: dict | Table, runs: dict[str, StoredRun]) -> dict:
    """A table's figures, theirs and ours; a row may name its own run (e.g. one run per topology)."""
    table = _typed(table, Table)
    rows, used = [], []
    for r, row in enumerate(table.rows):
        run = runs.get(row.run or table.run)
        if run is not None and run.run_id not in used:
            used.append(run.run_id)
        figures = []
        for c, column in enumerate(table.columns):
            theirs = table.values[r][c]
            ours, cells, at_least = (None, [], None)
            if run is not None:
                select, metric = _selector(table.select, row, column), _metric(table, row, column)
                ours, cells = our_figure(run, select, metric)
                at_least = our_bound(run, select, metric) if ours is None and cells else None
            ratio = ours / theirs if ours is not None and theirs not in (None, 0) else None
            figures.append({"theirs": theirs, "ours": ours, "ratio": ratio, "cells": cells,
                            **({"ours_at_least": at_least} if at_least is not None else {})})
        rows.append({"label": row.label, "figures": figures})
    return {"id": table.id, "title": table.title, "short": table.id if table.short is None else table.short,
            "unit": table.unit, "run": table.run, "run_ids": used, "columns": [c.label for c in table.columns],
            "column_units": [table.unit if c.unit is None else c.unit for c in table.columns],
            "rows": rows, "note": table.note, "missing": table.missing}


def _value(tables: dict, side: str, table_id: str, row: str, column: str) -> float | None:
    table = tables[table_id]
    r = next(i for i, x in enumerate(table["rows"]) if x["label"] == row)
    c = table["columns"].index(column)
    return table["rows"][r]["figures"][c][side]


class Side(Struct, frozen=True, kw_only=True):
    """One side of a ratio check: a figure by row and column, of the check's table unless it names another."""
    row: str
    column: str
    table: str | None = None


class Check(Struct, frozen=True, kw_only=True):
    """A conclusion's check (a study's `published.conclusions[].checks[]`, CHECKS): the order of `rows`, the
    highest or lowest `row` of a column, the ratio of side `a` to side `b`, or one figure in a range; a ratio
    or a range is bounded by `min`, `max` or both."""
    kind: str
    table: str
    column: str | None = None
    row: str | None = None
    rows: list[str] = []
    a: Side | None = None
    b: Side | None = None
    min: int | float | None = None  # as written: an integer bound prints as one
    max: int | float | None = None


class Conclusion(Struct, frozen=True, kw_only=True):
    """One of the study's conclusions, with the checks that decide it (none: `not_checked` says why)."""
    claim: str
    checks: list[Check] = []
    not_checked: str = ""


class FaultRequest(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A fault a suite's run applies (schemas/run-request.schema.json `faults[]`, which checks the ranges when the
    run is requested): its fields in the schema's order, a field left out UNSET (written back as it was, without
    it)."""
    kind: Literal["kill", "stop", "pause", "restart", "network", "reboot"]
    target: str | UnsetType = UNSET
    at_s: int | float
    duration_s: int | float | UnsetType = UNSET
    effect: Literal["latency", "bandwidth", "reset", "blackhole"] | UnsetType = UNSET
    direction: Literal["both", "upstream", "downstream"] | UnsetType = UNSET
    latency_ms: int | float | UnsetType = UNSET
    rate_kbps: int | float | UnsetType = UNSET


class SuiteRun(Struct, frozen=True, kw_only=True):
    """One run request of a suite as the studies and the guarantees page read it: its name, description, notes and
    faults (None where it gives none). The run request's other settings are checked by its schema when the run is
    requested."""
    name: str
    description: str = ""
    notes: list[str] = []
    faults: list[FaultRequest] | None = None


class Published(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A study as it was published (a suite's `published`): where, on what machine, its tables and conclusions."""
    source: str
    machine: str
    tables: list[Table]
    conclusions: list[Conclusion]


class Suite(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A suite file read as a study (spec.SUITE_FIELDS): its name, description, the study's title and notes, its
    runs in order (a suite that is one run request: that one) and the published study, if it compares with one."""
    name: str
    description: str = ""
    study: str | None = None
    notes: list[str] = []
    runs: list[SuiteRun]
    published: Published | None = None


def suite_definition(name: str, doc: dict) -> Suite:
    """A suite file (as spec.load_suite_file reads it) typed: a field misspelled or of the wrong type fails naming
    the file and the field's place in it."""
    try:
        if "runs" in doc:
            return convert({"name": name, **doc}, Suite)
        run = convert(doc, SuiteRun)
    except ValidationError as exc:
        raise StudyError("suite", f"suites/{name}.json: {exc}") from None
    # One run request: the suite is named, described and annotated by it.
    return Suite(name=run.name, description=run.description, notes=run.notes, runs=[run])


def _typed(data, kind: type):
    """A table, check or conclusion of a study as written, typed; a field of the wrong type fails naming it."""
    if isinstance(data, kind):
        return data
    try:
        return convert(data, kind)
    except ValidationError as exc:
        raise StudyError(kind.__name__.lower(), str(exc)) from None


def evaluate(check: dict | Check, tables: dict, side: str) -> tuple[str, str]:
    """(holds | does not hold | cannot tell, the figures it was decided on) for one check on one side."""
    check = _typed(check, Check)
    kind = check.kind
    at = lambda row, column=None, table=None: _value(tables, side, table or check.table, row,  # noqa: E731
                                                     column or check.column)
    unit = tables[check.table]["unit"]
    where = tables[check.table]["short"]
    if kind in ("order", "highest", "lowest"):
        column = f"{where}, {check.column}"
        labels = check.rows if kind == "order" else [r["label"] for r in tables[check.table]["rows"]]
        values = {label: at(label) for label in labels}
        shown = ", ".join(f"{label} {fmt(v)}" for label, v in values.items())
        if kind != "order":  # the highest or lowest of the figures given (a study may not give them all)
            values = {label: v for label, v in values.items() if v is not None}
            if check.row not in values or len(values) < 2:
                return UNKNOWN, f"{column}: {shown}"
        elif any(v is None for v in values.values()):
            return UNKNOWN, f"{column}: {shown}"
        if kind == "order":
            ok = all(values[a] > values[b] for a, b in zip(labels, labels[1:]))
            return (HOLDS if ok else FAILS), f"{column}, {unit}: " + " > ".join(f"{k} {fmt(v)}" for k, v in
                                                                              sorted(values.items(), key=lambda kv: -kv[1]))
        best = (max if kind == "highest" else min)(values, key=values.get)
        return (HOLDS if best == check.row else FAILS), f"{column}, {unit}: {shown}"
    if kind == "ratio":
        a, b = check.a, check.b
        va, vb = at(a.row, a.column, a.table), at(b.row, b.column, b.table)
        side_a, side_b = tables[a.table or check.table]["short"], tables[b.table or check.table]["short"]
        text = f"{a.row} {side_a}, {a.column} {fmt(va)} ÷ {b.row} {side_b}, {b.column} {fmt(vb)}"
        if va is None or vb is None or vb == 0:
            return UNKNOWN, text
        ratio = va / vb
        return (HOLDS if _within(ratio, check) else FAILS), f"{text} = {ratio:.2f} (wanted {_bounds(check)})"
    if kind == "range":
        v = at(check.row)
        table = tables[check.table]
        units = table.get("column_units") or [table["unit"]] * len(table["columns"])
        unit = units[table["columns"].index(check.column)]  # a column may state its own
        text = f"{check.row} {where}, {check.column} {fmt(v)} {unit}"
        if v is None:
            return UNKNOWN, text
        return (HOLDS if _within(v, check) else FAILS), f"{text} (wanted {_bounds(check)})"
    raise StudyError("check", f"{kind!r} is not a check ({', '.join(CHECKS)})")


def _within(value: float, check: Check) -> bool:
    """Within the check's bounds (an absent bound: no limit on that side)."""
    low = -np.inf if check.min is None else check.min
    high = np.inf if check.max is None else check.max
    return low <= value <= high


def _bounds(check: Check) -> str:
    low, high = check.min, check.max
    if low is not None and high is not None:
        return f"{fmt(low)} to {fmt(high)}"
    return f"at least {fmt(low)}" if low is not None else f"at most {fmt(high)}"


def judge(conclusion: dict | Conclusion, tables: dict, side: str) -> dict:
    conclusion = _typed(conclusion, Conclusion)
    checks = conclusion.checks
    if not checks:
        return {"verdict": "not checked", "figures": [conclusion.not_checked]}
    outcomes = [evaluate(check, tables, side) for check in checks]
    verdicts = {v for v, _ in outcomes}
    verdict = FAILS if FAILS in verdicts else UNKNOWN if UNKNOWN in verdicts else HOLDS
    return {"verdict": verdict, "figures": list(dict.fromkeys(text for _, text in outcomes))}  # each figure once


def compare(study: Suite, runs: dict[str, StoredRun]) -> dict:
    published = study.published
    tables = [compare_table(table, runs) for table in published.tables]
    by_id = {t["id"]: t for t in tables}
    conclusions = [{"claim": c.claim, "ours": judge(c, by_id, "ours"), "theirs": judge(c, by_id, "theirs")}
                   for c in published.conclusions]
    return {"study": study.name, "title": study.study, "description": study.description,
            "source": published.source, "machine": published.machine, "notes": study.notes,
            "runs": [_run_summary(runs[r.name]) if r.name in runs else {"name": r.name, "run_id": None}
                     for r in study.runs],
            "tables": tables, "conclusions": conclusions}


def _run_summary(run: StoredRun) -> dict:
    results = run.results
    cells = results["cells"]
    environment = convert(results["environment"], Environment)
    notes = given(convert(results["spec"], Spec).notes, [])
    return {"name": run.name, "run_id": run.run_id, "status": results["status"],
            "requested_at": results["requested_at"], "finished_at": results["finished_at"],
            "cells": len(cells), "completed": sum(1 for c in cells if c["status"] == "completed"),
            "host": results["environment"]["host"], "code_version": environment.code_version,
            "scale": next((n for n in notes if n.startswith("scaled by ")), None),
            "brokers": {b: f"{t.broker_version} ({t.client_library} {t.client_version})"
                        for b, t in sorted(environment.brokers.items())}}


# -- markdown ---------------------------------------------------------------------------------------------------
def fmt(value) -> str:
    if value is None:
        return "n/r"
    if isinstance(value, int) or (isinstance(value, float) and abs(value) >= 1000):
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _ratio(value) -> str:
    if value is None:
        return "–"
    return f"×{value:,.0f}" if value >= 100 else f"×{value:.2g}"


def _host(described: dict) -> str:
    host = convert(described, Host)
    gb = f", {host.memory_bytes / 2**30:.0f} GiB RAM" if host.memory_bytes else ""
    return (f"{given(host.cpu_model, '?')}, {given(host.cores, '?')} cores{gb}, {given(host.os, '?')} "
            f"(host {given(host.hostname, '?')})")


def markdown(comparison: dict, heading: str = "#") -> str:
    out = [f"{heading} {comparison['title']} (`{comparison['study']}`)", "", comparison["description"], ""]
    out += [f"**Their figures:** {comparison['source']}", "", f"**Their machine:** {comparison['machine']}", ""]
    out += ["**Our runs** (every figure of ours below comes from one of these stored runs):", ""]
    hosts = set()
    for run in comparison["runs"]:
        if run["run_id"] is None:
            out.append(f"- `{run['name']}`: no stored run")
            continue
        out.append(f"- `{run['name']}`: run `{run['run_id']}`, {run['status']}, {run['completed']} of {run['cells']} "
                   f"cells completed, {run['requested_at']} to {run['finished_at']}, code {run['code_version']}")
        if run["scale"]:
            out.append(f"  - {run['scale']}")
        out.append("  - brokers: " + "; ".join(f"{b} {v}" for b, v in run["brokers"].items()))
        hosts.add(_host(run["host"]))
    out += ["", "**Our machine:** " + " / ".join(sorted(hosts)) if hosts else "", ""]
    for table in comparison["tables"]:
        out += [f"{heading}# {table['title']}", ""]
        ids = table["run_ids"]
        source = (("run " if len(ids) == 1 else "runs ") + ", ".join(f"`{i}`" for i in ids)) if ids else "no stored run"
        out += [f"Unit: {table['unit']}. Theirs as published; ours from {source}; × is ours ÷ theirs.", ""]
        header = ["", *[f"{c} {side}" for c in table["columns"] for side in ("theirs", "ours", "×")]]
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "---|" * len(header))
        for row in table["rows"]:
            cells = [row["label"]]
            for figure in row["figures"]:
                theirs = fmt(figure["theirs"]) if figure["theirs"] is not None else table["missing"]
                ours = fmt(figure["ours"]) if figure["cells"] else "not run"
                if figure.get("ours_at_least") is not None:  # messages never measured put it out of reach
                    ours = f"≥ {fmt(figure['ours_at_least'])}"
                cells += [theirs, ours, _ratio(figure["ratio"])]
            out.append("| " + " | ".join(cells) + " |")
        if table["note"]:  # compare_table sets it (None: no note)
            out += ["", table["note"]]
        out.append("")
    out += [f"{heading}# Their conclusions, here", ""]
    out += ["| Claim | In their figures | Here | Our figures |", "|---|---|---|---|"]
    for c in comparison["conclusions"]:
        figures = "; ".join(f for f in c["ours"]["figures"] if f)
        out.append(f"| {c['claim']} | {c['theirs']['verdict']} | **{c['ours']['verdict']}** | {figures} |")
    out += ["", f"{heading}# How our runs differ from theirs", ""]
    out += [f"- {note}" for note in comparison["notes"]]
    out.append("")
    return "\n".join(out)


DOCUMENT_INTRO = """# The published studies, measured again

Generated by `brokerbench study all --out docs/STUDIES.md` from stored runs; do not edit by hand. Each study below
names the runs its figures come from, when and on what machine they were measured. The runs' events are kept in
`docs/studies/` (`brokerbench import docs/studies/*.jsonl.gz` loads them into an event store), and a test
rebuilds this document from them.

Our figures come from scaled-down runs on a small shared machine (see each run's scale and host): their use is
to show the same comparison made again with one command, and which conclusions hold here, not to restate the
studies' absolute numbers. A ratio far from 1 is expected where the machines differ as much as they do.
"""


def at_a_glance(comparisons: list[dict]) -> str:
    """One line per study: its runs, the measured window, and how many of its checked conclusions hold here."""
    lines = ["| Study | Our runs | Measured | Conclusions checked | Hold here | Do not hold | Cannot tell |",
             "|---|---|---|---|---|---|---|"]
    for c in comparisons:
        verdicts = [x["ours"]["verdict"] for x in c["conclusions"]]
        runs = [r for r in c["runs"] if r["run_id"]]
        first, last = (min(r["requested_at"] for r in runs), max(r["finished_at"] for r in runs)) if runs else ("", "")
        when = f"{first[:16].replace('T', ' ')} to {last[:16].replace('T', ' ')} UTC" if runs else "not measured"
        checked = sum(v in (HOLDS, FAILS, UNKNOWN) for v in verdicts)
        lines.append(f"| [{c['title']}](#{_anchor(c)}) | {len(runs)} of {len(c['runs'])} | {when} | "
                     f"{checked} | {verdicts.count(HOLDS)} | {verdicts.count(FAILS)} | {verdicts.count(UNKNOWN)} |")
    return "\n".join(lines) + "\n"


def _anchor(comparison: dict) -> str:
    """GitHub's anchor of a study's heading."""
    heading = f"{comparison['title']} ({comparison['study']})".lower()
    return "".join(ch for ch in heading.replace(" ", "-") if ch.isalnum() or ch in "-_")


def document(comparisons: list[dict]) -> str:
    parts = [DOCUMENT_INTRO, at_a_glance(comparisons)]
    parts += [markdown(c, heading="##") for c in comparisons]
    return "\n".join(parts)


# -- archives: a run's events in a file, and back into a store -----------------------------------------------
def archive_run(store, run_id: str, folder: Path) -> Path:
    """The events a report and a study read of a run, one JSON object a line, gzipped (deterministic bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    events = read_report_events(store, run_id)
    if not any(e["type"] in RUN_EVENTS for e in events):
        raise StudyError("run", f"run {run_id} has not ended: only an ended run is archived")
    path = folder / f"{run_id}.jsonl.gz"
    body = "".join(json.dumps(e, sort_keys=True, separators=(",", ":")) + "\n" for e in events).encode()
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as out:
        out.write(body)
    return path


def import_archive(store, path: Path) -> tuple[str, int]:
    """Put an archived run's events into `store` (events already there are kept, never doubled)."""
    with gzip.open(path, "rt") as f:
        events = [json.loads(line) for line in f if line.strip()]
    if not events or events[0]["type"] != "RunRequested":
        raise StudyError("file", f"{path} is not a run archive (its first event must be RunRequested)")
    store.append(events)
    return events[0]["run_id"], len(events)


__all__ = ["StudyError", "study_names", "load_study", "find_runs", "compare", "markdown", "document",
           "archive_run", "import_archive"]


build_types(globals())  # msgspec's information on its Structs, built now (eventdata.build_types)
