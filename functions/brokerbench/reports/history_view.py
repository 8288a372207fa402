"""The suite's series in a run's report: each configuration's metric over the suite's runs, its change points
marked, the runs on either side named (Markdown: a table of the change points; HTML: a small chart for each).

Where it comes from: the scheduled check (`history.watch`, the workflow's CheckRegression step) already reads the
suite's runs from the store to look for change points, and its result (`changes`: the runs, every series with
its points and change points, the alerts this run raised) is stored as regression.json and passed to the report
as report["regression_check"]. So the report draws what the check judged, and building the report stays a pure
function of a run's events and that result: no store is read here. A report without a check (a run outside the
workflow, a check stored before change points) has no series section.

What is shown: the series with at least one change point (significant after the check's multiplicity control,
reports.changes), whether or not it is an alert; a series without one is counted, not drawn, so a suite of many
configurations gives a page of charts only where something moved. At most MAX_CHARTS charts per page.
"""

from __future__ import annotations

from html import escape

from ..metrics import regression_metrics
from .changes import MEDIAN_REPEATS, MIN_SERIES, NEWEST_MIN
from .history import alert_text, broker_changes, code_text
from .regression import figure_text
from .rows import ChangePoint, Changes, ChangeSeries, change_series, section
from .svg import Line, Mark, line_chart

MAX_CHARTS = 24  # a page of small charts; the table (and report.json) has every change point
# The checked metrics' words, unit and scale (brokerbench.metrics).
METRIC_LABELS = {name: (m.label, m.unit, m.scale) for name, m in regression_metrics().items()}


def _changes(report: dict) -> Changes | None:
    check = section(report).regression_check
    return None if check is None else check.changes


def _metric(metric: str) -> tuple[str, str, float]:
    return METRIC_LABELS.get(metric, (metric, "", 1.0))


def changed_series(changes: Changes) -> list[ChangeSeries]:
    """The series with at least one change point, alerts first."""
    found = [s for s in changes.series if s.change_points]
    return sorted(found, key=lambda s: not any(c.alert for c in s.change_points))


def status_text(series: ChangeSeries, point: ChangePoint, raised: set) -> str:
    """What a change point is: an alert this run raised, one told before, or why it is no alert."""
    if point.alert:
        return ("alert, raised by this run" if (series.key, series.metric, point.began_run_id) in raised
                else "alert (told on an earlier run)")
    if point.direction == "improvement":
        return "improvement"
    return f"below the {point.min_effect:.0%} an alert needs"


def _raised(changes: Changes) -> set:
    return {(a.key, a.metric, a.began_run_id) for a in changes.alerts}


def summary_text(changes: Changes) -> str:
    """One line: the runs the series span, how many series were searched, what was found."""
    runs, series = changes.runs, changes.series
    searched, tested = [s for s in series if s.searched], [s for s in series if s.checked and not s.searched]
    points = [c for s in series for c in s.change_points]
    span = f"{runs[0].run_id} to {runs[-1].run_id}" if runs else "–"
    text = (f"The suite's newest {len(runs)} completed runs ({span}), one series per configuration and metric: "
            f"{len(searched)} of {len(series)} series have the {MIN_SERIES} runs a change-point search needs")
    if tested:
        text += f", {len(tested)} more the {NEWEST_MIN} a test of their newest runs needs"
    if not searched and not tested:
        return text + "; until then the pairwise verdicts above stand alone."
    alerts = sum(c.alert for c in points)
    return text + (f"; {len(points)} change point{'s' if len(points) != 1 else ''} found, {alerts} of them "
                   f"alert{'s' if alerts != 1 else ''} ({len(changes.alerts)} raised by this run)."
                   if points else "; no change point in any of them.")


def net_text(series: ChangeSeries) -> str:
    """What a series net of the host says under its chart ('' for one read as measured)."""
    a = series.adjustment
    if a is None:
        return ""
    return (f" Drawn net of the host: each repeat x (the {a.reference:,.0f} µs median publish delay p99 of its "
            f"group / its own) ** {a.slope:.2f}, the slope within runs ({a.df} degrees of freedom); the dots are the "
            "figures as measured.")


def _differs(point: ChangePoint) -> str:
    names = [d.setting for d in point.differences if d.setting != "code_version"]
    return ", ".join(names) or "–"


def _versions(point: ChangePoint) -> str:
    return "; ".join([code_text(point.versions), *broker_changes(point.versions)])


TABLE_HEADER = ("| configuration | metric | began with run | the run before | before → after (geo. mean) | change | "
                "p | status | code and brokers | settings that differ |")


def markdown_lines(report: dict) -> list[str]:
    """The section of report.md: the summary line and one table row per change point."""
    changes = _changes(report)
    if not changes:
        return []
    lines = ["## The suite's series", "", summary_text(changes), ""]
    shown = changed_series(changes)
    if not shown:
        return lines
    raised = _raised(changes)
    lines += ["Change points, alerts first: each configuration's figure per run (the geometric mean of its repeats, "
              f"their median from {MEDIAN_REPEATS} on) moved at the run named, from the mean of the runs before it "
              "to the mean of the runs after (each bounded by the neighbouring change points).", "", TABLE_HEADER,
              "|---|---|---|---|---:|---:|---:|---|---|---|"]
    for s in shown:
        for c in s.change_points:
            lines.append(f"| {s.cell} | {s.metric}{' (net of the host)' if s.adjustment else ''} | "
                         f"{c.began_run_id} | {c.before_run_id} | "
                         f"{figure_text(c.before_mean)} → {figure_text(c.after_mean)} | {c.change:+.1%} | "
                         f"{c.p_value:.2g} | {status_text(s, c, raised)} | "
                         f"{_versions(c)} | {_differs(c)} |")
    return lines + [""]


def _segments(series: ChangeSeries) -> list[tuple[int, int, float]]:
    """(first run, last run, geometric mean) of the runs between neighbouring change points, 1-based."""
    points, found = series.points, series.change_points
    bounds = [0] + [c.index for c in found] + [len(points)]
    means = [found[0].before_mean] + [c.after_mean for c in found]
    return [(bounds[k] + 1, bounds[k + 1], means[k]) for k in range(len(found) + 1)]


def series_chart(series: dict | ChangeSeries) -> str:
    """One series as a small chart: a point per run (x: its place in the suite's runs, oldest first; its title the
    run id), the mean of each segment as a dashed step, each change point as a line between the run before it
    and the run it began with, those two runs drawn larger."""
    series = change_series(series)
    name, unit, scale = _metric(series.metric)
    net = series.adjustment is not None  # change points found on the figures net of the host: those are drawn
    values = [(i + 1, (p.tested if net and p.tested is not None else p.value) / scale, p.run_id)
              for i, p in enumerate(series.points)]
    measured = [Line(name="as measured", points=[(i + 1, p.value / scale, p.run_id)
                                                 for i, p in enumerate(series.points)], style="dots")] if net else []
    step = []
    for first, last, mean in _segments(series):
        step += [(first - 0.5 if first > 1 else first, mean / scale), (last + 0.5 if last < len(values) else last,
                                                                        mean / scale)]
    sides = [values[i] for c in series.change_points for i in (c.index - 1, c.index)]
    marks = [Mark(x=c.index + 0.5, label=f"{c.change:+.1%}", css="change-point",
                  title=f"began with run {c.began_run_id}; the run before: {c.before_run_id}")
             for c in series.change_points]
    return line_chart(f"{name} · {series.cell}",
                      [Line(name="per run, net of the host" if net else "per run (geo. mean)", points=values),
                       Line(name="segment mean", points=step, style="step"),
                       Line(name="either side of a change", points=sides, style="dots"), *measured],
                      x_label="run of the suite (oldest → newest)", y_label=unit, marks=marks)


def html_parts(report: dict) -> list[str]:
    """The section of report.html: the summary, a chart per changed series (up to MAX_CHARTS) with what it shows
    in words, then the same table as report.md."""
    changes = _changes(report)
    if not changes:
        return []
    parts = ["<h2 id='series'>The suite's series</h2>", f"<p>{escape(summary_text(changes))}</p>"]
    shown = changed_series(changes)
    if not shown:
        return parts
    raised = _raised(changes)
    figures = []
    for s in shown[:MAX_CHARTS]:
        said = "".join(f"<li><b>{escape(status_text(s, c, raised))}:</b> "
                       f"{escape(alert_text(c))}</li>" for c in s.change_points)
        figures.append(f"<figure class='series-chart' data-key='{escape(s.key)}' data-metric='{escape(s.metric)}'>"
                       f"{series_chart(s)}<figcaption><small>{escape(_metric(s.metric)[0])} of {escape(s.cell)}, "
                       f"one point per run (the geometric mean of its repeats, their median from {MEDIAN_REPEATS} "
                       f"on); the dashed line is the mean between change points.{escape(net_text(s))}</small>"
                       f"<ul>{said}</ul>"
                       "</figcaption></figure>")
    parts.append(f"<div class='charts'>{''.join(figures)}</div>")
    if len(shown) > MAX_CHARTS:
        parts.append(f"<p class='muted'>Charts are drawn for the first {MAX_CHARTS} series with a change point; "
                     f"the other {len(shown) - MAX_CHARTS} are in the table below and in report.json "
                     f"(<code>regression_check.changes</code>).</p>")
    rows = "".join(
        f"<tr><td>{escape(s.cell)}</td><td>{escape(s.metric)}</td><td class='run-id'>{escape(c.began_run_id)}</td>"
        f"<td class='run-id'>{escape(c.before_run_id)}</td><td>{figure_text(c.before_mean)} → "
        f"{figure_text(c.after_mean)}</td><td>{c.change:+.1%}</td><td>{c.p_value:.2g}</td>"
        f"<td class='{'bad' if c.alert else 'muted'}'>"
        f"{escape(status_text(s, c, raised))}</td>"
        f"<td>{escape(_versions(c))}</td><td>{escape(_differs(c))}</td></tr>"
        for s in shown for c in s.change_points)
    head = "".join(f"<th>{escape(h.strip())}</th>" for h in TABLE_HEADER.strip("|").split("|"))
    parts.append(f"<table class='change-points'><tr>{head}</tr>{rows}</table>")
    return parts
