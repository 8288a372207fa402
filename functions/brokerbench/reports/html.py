"""The report as one self-contained HTML page: inline CSS and SVG, no scripts, nothing fetched.

It reads the report's typed rows (reports.rows), as the Markdown does: `render` converts the report once."""

from __future__ import annotations

from collections import defaultdict
from html import escape

from . import faults, history_view, markdown
from .model import METRICS, RESOURCES_NOTE, min_samples, need_label
from .regression import FIGURES, figure_text
from .rows import Config, Group, Highlight, Report, Verdict
from .rows import report as typed_rows
from .svg import Bars, Line, bar_chart, line_chart

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 16px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
td:first-child,td:nth-child(2),th{text-align:left}.best{font-weight:700;background:#eef7ee}
.warn{color:#a15c00}.muted{color:#666}.withheld{color:#888}small{color:#777}
.bad{color:#b00020;font-weight:700}.nowrap{white-space:nowrap}.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{border:1px solid #eee;background:#fff}.title{font-size:13px;font-weight:600}.axis{font-size:11px;fill:#555}
.tick{font-size:10px;fill:#666}figure.series-chart{margin:0;max-width:560px}figure.series-chart ul{margin:4px 0;padding-left:18px}
.run-id{font-family:ui-monospace,monospace;font-size:12px}.legend{font-size:10px}.grid{stroke:#eee}.frame{stroke:#999}
tr.config>td:last-child{text-align:left;white-space:nowrap}tr.verdict-why td{text-align:left;border-top:0}details{margin:6px 0}summary{cursor:pointer;color:#335}
"""


def _cell_name(c: Config) -> str:
    return f"{c.broker} {c.format}"


def _td(c: Config, name: str, digits=0, scale=1.0) -> str:
    est = c.metrics[name]
    if est.median is None and est.withheld:
        return (f"<td class='withheld' title='needs at least {est.withheld:,} samples per repeat'>"
                f"{escape(need_label(est.withheld))}</td>")
    if est.median is None and est.lower_bound is not None:  # missing messages at +∞: a lower bound
        return (f"<td class='warn' title='missing messages count at +∞: at least this'>"
                f"≥ {est.lower_bound / scale:,.{digits}f}</td>")
    text = "–" if est.median is None else f"{est.median / scale:,.{digits}f}"
    css = ' class="best"' if name in c.best else ""
    title = ""
    if est.n > 1 and est.ci_low is not None:
        coverage = f"{est.coverage:.0%} " if est.coverage is not None else ""
        title = (f' title="{coverage}interval {est.ci_low / scale:,.{digits}f}–{est.ci_high / scale:,.{digits}f}'
                 f' (n={est.n})"')
        if est.ci_high != est.ci_low:  # shown, not hidden in a tooltip: a figure without its spread misleads
            text += f" <small>({est.ci_low / scale:,.{digits}f}–{est.ci_high / scale:,.{digits}f})</small>"
    return f"<td{css}{title}>{text}</td>"


def _loss_td(c: Config) -> str:
    text = markdown.loss_text(c)
    css = " class='bad'" if text.startswith("⚠") else (" class='warn'" if "backlog unknown" in text
                                                        or "not sent" in text else "")
    return f"<td{css}>{escape(text)}</td>"


def _ratio_td(c: Config, axis: str) -> str:
    ratio = c.ratio(axis, "throughput_msgs_per_s")
    return "<td>–</td>" if ratio is None else f"<td>{ratio:.2f}×</td>"


def verdict_label(c: Config) -> str:
    """The verdict column's few words: the verdict (or a search's rate found) and its marks; the reasons and a
    partial configuration's repeats go in a row under it (markdown.verdict_text has them all)."""
    verdict = c.sustainability.verdict
    text = markdown.search_text(c) if verdict == "search" else verdict
    text = ("⚠ " if verdict == "unsustainable" else "") + text + markdown.client_bound_mark(c)
    if c.busy_repeats:
        text += " · ⚠ host busy"
    return text + (f" ({c.completed_repeats} of {c.repeats} repeats)" if c.status == "partial" else "")


# The verdict column's class of the verdicts a reader should look twice at.
VERDICT_CSS = {"unsustainable": "warn", "inconclusive": "muted"}
# A guarantee verdict's class, for every verdict faults.VERDICTS names
GUARANTEE_CSS = {"held": "", "broken": "bad", "expected": "warn", "discarded": "warn", "lost": "", "unknown": "muted"}


def _grid(group: Group, report: Report) -> str:
    refs = report.references
    head = ("<tr><th>broker</th><th>format</th>" + "".join(f"<th>{escape(m.column)}</th>" for m in markdown.GRID.values())
            + "<th>floor ns (enc / dec)</th>"
            f"<th>loss</th><th>× {escape(refs.format)}</th><th>× {escape(refs.broker)}</th>"
            "<th>verdict</th></tr>")
    rows = []
    span = len(markdown.GRID) + len(markdown.AFTER_METRICS) + 2  # every column after the broker
    for c in group.cells:
        if c.status == "failed":
            rows.append(f"<tr><td>{escape(c.broker)}</td><td>{escape(markdown.format_text(c, report))}</td>"
                        f"<td colspan={span - 1} class='bad'>FAILED: {escape('; '.join(c.reasons))}</td></tr>")
            continue
        css = VERDICT_CSS.get(c.sustainability.verdict)
        css = "warn" if c.limit.client_bound else css  # its rate is the load generator's
        css = "bad" if c.busy_repeats else css  # measured on a busy host: no evidence
        short, full = verdict_label(c), markdown.verdict_text(c)
        verdict_html = f"<span class='{css}'>{escape(short)}</span>" if css else escape(short)
        rows.append("<tr class='config'>" + f"<td>{escape(c.broker)}</td><td>{escape(markdown.format_text(c, report))}</td>"
                    + "".join(_td(c, name, m.digits, m.scale) for name, m in markdown.GRID.items())
                    + f"<td class='nowrap'>{escape(markdown.floor_text(c))}</td>" + _loss_td(c)
                    + _ratio_td(c, "format") + _ratio_td(c, "broker")
                    + f"<td>{verdict_html}</td></tr>")
        if full != short:  # the reasons under the row, across the table, not in a column a word wide
            rows.append(f"<tr class='verdict-why'><td></td><td colspan={span} class='{css or ''}'>"
                        f"{escape(full)}</td></tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def _durability_section(report: Report) -> list[str]:
    rows = markdown.durability_rows(report)
    if not rows:
        return []
    head = ("<tr><th>broker</th><th>fsync</th><th>replicas</th><th>memory only</th>"
            "<th>acknowledgement</th></tr>")
    body = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in row) + "</tr>" for row in rows)
    return [f"<h2>Durability: what an acknowledgement waited for</h2><table>{head}{body}</table>"]


def _guarantees_section(report: Report) -> list[str]:
    """Per broker and durability setting, what held under the run's faults; a broken promise in red."""
    settings = report.guarantees_by_setting
    if not settings:
        return []
    head = ("<tr><th>broker</th><th>durability</th><th>what the broker promises when a node fails</th>"
            "<th>guarantee</th><th>verdict</th><th>cells</th><th>duplicated</th><th>send errors</th>"
            "<th>unavailable s (longest)</th></tr>")
    body = []
    for row in settings:
        css = GUARANTEE_CSS[row["verdict"]]
        gap = "–" if row["unavailable_s"] is None else f"{row['unavailable_s']:.2f}"
        cells = [f"{row['label']}: {row['setting']}", row["promise"]["text"], faults.setting_text(row)]
        body.append(f"<tr><td>{escape(row['broker'])}</td>" + "".join(f"<td>{escape(v)}</td>" for v in cells)
                    + f"<td class='{css}'>{escape(faults.VERDICTS[row['verdict']])}</td><td>{row['cells']}</td>"
                    f"<td>{row['duplicated']:,}</td><td>{row['send_errors']:,}</td><td>{gap}</td></tr>")
    return ["<h2>Guarantees under faults</h2><p>Every cell that ran faults, per broker and durability setting; each "
            "cell's own row is in report.md.</p>" f"<table>{head}{''.join(body)}</table>"]


def _resources_section(report: Report) -> list[str]:
    rows = markdown.resource_rows(report)
    if not rows:
        return []
    head = ("<tr><th>broker</th><th>format</th><th>mode</th><th>size</th><th>rate</th>"
            "<th>broker CPU % (mean / max)</th><th>broker RSS MB</th><th>workers CPU % (mean / max)</th>"
            "<th>workers RSS MB</th></tr>")
    body = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in row) + "</tr>" for row in rows)
    return [f"<h2>Resources</h2><table>{head}{body}</table><p><small>{escape(RESOURCES_NOTE)}</small></p>"]


def _cost_section(report: Report) -> list[str]:
    cost = report.cost
    if cost is None:
        return []
    if cost.error:
        return [f"<h2>Estimated AWS cost</h2><p class='muted'>No estimate: {escape(cost.error)}</p>"]
    listed = cost.listed
    intro = "<p>What the same run would cost on AWS:</p>" if listed is not cost else ""
    head = "<tr><th>item</th><th>quantity</th><th>unit</th><th>unit price</th><th>cost</th></tr>"
    body = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in row) + "</tr>" for row in markdown.cost_rows(listed))
    total = f"<tr><th>total</th><td></td><td></td><td></td><td><b>${listed.total:,.2f}</b></td></tr>"
    notes = "".join(f"<li>{escape(a)}</li>" for a in markdown.cost_assumptions(cost))
    return [f"<h2>Estimated AWS cost</h2><p><b>${cost.total:,.2f}</b> · {escape(markdown.cost_summary(cost))}.</p>"
            f"{intro}<table>{head}{body}{total}</table><ul class='muted'>{notes}</ul>"]


def _spectrum_chart(group: Group) -> str:
    # Percentiles finer than a cell's sample supports are None in the model and left out here.
    series = [Line(name=_cell_name(c), points=[(1 / (1 - p / 100) if p < 100 else 100_000, None if v is None else v / 1000)
                                               for p, v in c.latency["end_to_end_latency_us"].spectrum])
              for c in group.cells if c.status != "failed"]
    ticks = [(2, "p50"), (10, "p90"), (100, "p99"), (1000, "p99.9"), (10_000, "p99.99"), (100_000, "max")]
    basis = " (from enqueue)" if group.rate_target == "max" else ""
    return line_chart(f"End-to-end latency spectrum{basis} · {group.title}", series, x_label="percentile",
                      y_label="ms", log_x=True, log_y=True, x_ticks=ticks)


def _across_groups(report: Report, x_of, group_by, title: str, x_label: str, y_metric: str, y_label: str,
                   scale: float = 1.0, log_x: bool = False) -> list[str]:
    """One chart per `group_by` value: a series per broker × format, x from each group, y a metric."""
    charts: dict = defaultdict(lambda: defaultdict(list))
    for group in report.groups:
        for c in group.cells:
            value = c.metrics[y_metric].median
            charts[group_by(group)][_cell_name(c)].append((x_of(group), None if value is None else value / scale))
    out = []
    for key, series in charts.items():
        points = [Line(name=name, points=sorted(p for p in pts if p[0] is not None)) for name, pts in series.items()]
        if any(len(s.points) > 1 for s in points):
            out.append(line_chart(f"{title} · {key}", points, x_label=x_label, y_label=y_label, log_x=log_x))
    return out


def _serialization_charts(report: Report) -> list[str]:
    out = []
    by_size = defaultdict(dict)
    for group in report.groups:
        for c in group.cells:
            by_size[group.size_bytes].setdefault(c.format, c)
    for size, cells in sorted(by_size.items()):
        formats = sorted(cells)
        value = lambda f, m, s=1.0: (None if cells[f].metrics[m].median is None  # noqa: E731
                                     else cells[f].metrics[m].median / s)
        bars = [Bars(name=name, values=[value(f, metric, 1000) for f in formats]) for name, metric in
                (("encode µs (p50)", "encode_p50_ns"), ("encode net µs", "encode_net_p50_ns"),
                 ("decode µs (p50)", "decode_p50_ns"), ("decode net µs", "decode_net_p50_ns"))]
        # net of the call floor (model.CODEC_RULE) where it was measured: runs stored before it keep two bars
        bars = [b for b in bars if "net" not in b.name or any(v is not None for v in b.values)]
        out.append(bar_chart(f"Serialization cost per message · {size:,} B", formats, bars, y_label="µs"))
        out.append(bar_chart(f"Encoded size · {size:,} B", formats,
                             [Bars(name="bytes", values=[value(f, "encoded_bytes") for f in formats])], y_label="bytes"))
    return out


# A page draws the per-second charts (two per configuration) of at most this many configurations: a
# 2,000-configuration run's would be 4,000 charts and tens of MB. The first groups' are drawn, and the page
# says what was left out.
MAX_SERIES_CONFIGURATIONS = 100


def _charted(c: Config) -> bool:
    return c.status != "failed" and bool(c.intervals)


def _interval_charts(group: Group, limit: int | None = None) -> list[str]:
    """Per-second rate and p99 (of the first `limit` configurations that have any). An interval too small for
    a p99 shows its maximum instead, as its own series."""
    need = min_samples(99.0)
    out = []
    for c in [c for c in group.cells if _charted(c)][:limit]:
        rate, p99 = [], []
        for repeat, series in enumerate(c.intervals):
            suffix = f" #{repeat}" if len(c.intervals) > 1 else ""
            rate.append(Line(name=f"delivered/s{suffix}", points=list(zip(series.interval, series.throughput))))
            counts = series.end_to_end_count or [None] * len(series.interval)
            maxima = series.end_to_end_max_us or [None] * len(series.interval)
            rows = list(zip(series.interval, series.end_to_end_p99_us, maxima, counts))
            p99.append(Line(name=f"e2e p99 ms{suffix}", points=[
                (i, v / 1000) for i, v, _, n in rows if v is not None and (n is None or n >= need)]))
            small = [(i, m / 1000) for i, _, m, n in rows if m is not None and n is not None and n < need]
            if small:
                p99.append(Line(name=f"e2e max ms (n<{need:,}){suffix}", points=small))
        out.append(line_chart(f"{_cell_name(c)} · rate per second", rate, x_label="second", y_label="msgs/s"))
        out.append(line_chart(f"{_cell_name(c)} · p99 per second", p99, x_label="second", y_label="ms"))
    return out


def _series_section(report: Report) -> list[str]:
    """Each group's per-second charts, up to MAX_SERIES_CONFIGURATIONS configurations; then what was left out."""
    parts, room, left_out, groups_left = [], MAX_SERIES_CONFIGURATIONS, 0, 0
    for group in report.groups:
        charted = sum(_charted(c) for c in group.cells)
        if charted and not room:
            left_out, groups_left = left_out + charted, groups_left + 1
            continue
        parts.append(f"<h3>{escape(group.title)}</h3><div class='charts'>"
                     f"{''.join(_interval_charts(group, room))}</div>")
        if charted > room:
            left_out, groups_left = left_out + charted - room, groups_left + 1
        room = max(0, room - charted)
    if left_out:
        parts.append(f"<p class='muted'>Per-second charts are drawn for the first {MAX_SERIES_CONFIGURATIONS:,} "
                     f"configurations only: those of {left_out:,} more configuration{'s' if left_out > 1 else ''} "
                     f"(in {groups_left:,} group{'s' if groups_left > 1 else ''}) are left out of this page. Their "
                     f"per-second series are in report.json (each configuration's <code>intervals</code>) and at "
                     f"<code>GET /runs/{escape(report.run_id)}/cells/&lt;cell_id&gt;</code>.</p>")
    return parts


# A summary draws a chart for at most this many highlights (each claim's two configurations side by side); the
# others keep their text, and the comparison table below has every figure.
MAX_SUMMARY_CHARTS = 6


# The verdict column's class of a regression verdict.
REGRESSION_CSS = {"regression": "bad", "unstable": "warn"}


def _verdict_table(rows_of: list[Verdict], caption: str) -> str:
    rows = []
    for r in sorted(rows_of, key=lambda v: markdown.VERDICT_ORDER.get(v.verdict, 9)):
        css = REGRESSION_CSS.get(r.verdict, "")
        rows.append(f"<tr><td>{escape(str(r.name))}</td><td>{escape(str(r.metric))}</td>"
                    f"<td class='{css}'>{escape(markdown.verdict_words(r))}</td>"
                    f"<td>{figure_text(r.baseline_mean)}</td>"
                    f"<td>{figure_text(r.candidate_mean)}</td><td>{markdown._change(r.change)}</td>"
                    f"<td>{markdown._p(r.p_value)}</td></tr>")
    return (f"<table class='verdicts'><caption>{escape(caption)}</caption><tr><th>cell</th>"
            "<th>metric</th><th>verdict</th><th>baseline (geo. mean)</th><th>candidate (geo. mean)</th>"
            f"<th>change</th><th>p</th></tr>{''.join(rows)}</table>")


def _regression_summary(report: Report) -> list[str]:
    """The regression check at the top: its changes in full, everything else collapsed behind one line."""
    check = report.regression_check
    if check is None:
        recorded = [r for r in report.regressions if r.verdict == "regression"]
        if not recorded:
            return ["<p id='regressions'>No regression check recorded for this run.</p>"]
        baselines = sorted({r.baseline_run_id for r in recorded if r.baseline_run_id})
        return [f"<p id='regressions' class='bad'>{len(recorded)} regression{'s' if len(recorded) != 1 else ''} "
                f"against baseline run {escape(', '.join(baselines) or '–')}:</p>",
                _verdict_table(recorded, FIGURES[0].upper() + FIGURES[1:])]
    verdicts = check.verdicts
    found = markdown.changes_found(check)
    css = "bad" if any(v.verdict == "regression" for v in found) else ""
    parts = [f"<p id='regressions' class='regression-line {css}'><b>Regression check:</b> "
             f"{escape(markdown.regression_line(check))}</p>"]
    if found:
        parts.append(_verdict_table(found, "Changes beyond noise. " + FIGURES[0].upper() + FIGURES[1:]))
    method = "".join(f"<p>{escape(line)}</p>" for line in markdown._method_lines(check) if line)
    table = _verdict_table(verdicts, FIGURES[0].upper() + FIGURES[1:]) if verdicts else ""
    parts.append(f"<details class='all-verdicts'><summary>All {len(verdicts)} verdicts, the baseline and the rule"
                 f"</summary><p>{escape(markdown.check_summary(check))}</p>{method}{table}</details>")
    return parts


def _configurations_by_key(report: Report) -> dict[str, tuple[Config, Group]]:
    return {c.key: (c, group) for group in report.groups for c in group.cells}


def highlight_chart(highlight: Highlight, by_key: dict[str, tuple[Config, Group]]) -> str | None:
    """A claim's two configurations side by side: the median of the claimed metric of each (none where the claim
    names a metric or a configuration the report does not have)."""
    metric = METRICS.get(highlight.metric)
    pair = [by_key.get(highlight.cell), by_key.get(highlight.reference)]
    if metric is None or None in pair:
        return None
    values = [c.metrics[metric.key].median for c, _ in pair]
    return bar_chart(f"{metric.label} · {pair[0][1].title}", [_cell_name(c) for c, _ in pair],
                     [Bars(name=f"median ({metric.unit})",
                           values=[None if v is None else v / metric.scale for v in values])], y_label=metric.unit)


def _summary_section(report: Report) -> list[str]:
    """What a reader decides on, first: the regression check, the differences beyond noise (each with its figure
    and a chart), and what weakens the figures below (loss, a busy host, mixed send loops, client-bound cells)."""
    parts = ["<h2 id='summary'>Summary</h2>", *_regression_summary(report)]
    if report.claims_note:
        parts.append(f"<p>{escape(report.claims_note[0].upper() + report.claims_note[1:])}.</p>")
    elif report.highlights:
        by_key = _configurations_by_key(report)
        parts.append("<h3>Differences beyond the run's noise</h3><ul class='highlights'>"
                     + "".join(f"<li>{escape(h.text)}</li>" for h in report.highlights) + "</ul>")
        charts = [chart for h in report.highlights[:MAX_SUMMARY_CHARTS] if (chart := highlight_chart(h, by_key))]
        parts.append(f"<div class='charts highlight-charts'>{''.join(charts)}</div>")
        if len(report.highlights) > MAX_SUMMARY_CHARTS:
            parts.append(f"<p class='muted'>Charts are drawn for the first {MAX_SUMMARY_CHARTS} differences; every "
                         f"figure is in the comparison below.</p>")
    else:
        parts.append("<p>No difference between configurations exceeded the run's own noise.</p>")
    if report.send_loop_note:
        parts.append(f"<p class='warn'><b>Send loops differ:</b> {escape(report.send_loop_note)}.</p>")
    if report.configurations_with_loss:
        parts.append(f"<p class='bad'>Loss in {len(report.configurations_with_loss)} configuration(s): see the loss column.</p>")
    if markdown.client_bound_text(report):
        parts.append(f"<p class='warn'>{escape(markdown.client_bound_text(report))}.</p>")
    if report.host_note:
        parts.append(f"<p class='bad'><b>Host busy:</b> {escape(report.host_note)}.</p>")
    return parts


def _rules_section(report: Report) -> list[str]:
    items = [f"<li><b>{label}.</b> {escape(rule)}</li>" for label, rule in markdown.applied_rules(report)]
    if not items:
        return []
    return [f"<h2 id='rules'>How to read this report</h2><p>{escape(markdown.RULES_LEAD)} The rules are in the "
            f"repository's <a href='{markdown.METHODOLOGY}'>docs/methodology.md</a>; those this report applied:</p>"
            f"<details class='rules'><summary>{len(items)} rules</summary><ul>{''.join(items)}</ul></details>"]


def _list_items(lines: list[str]) -> str:
    """Markdown list lines ('- …', nested '  - …') as <li> items, the nested ones in their parent's own list."""
    items = []
    for line in lines:
        if line.startswith("  - ") and items:
            items[-1][1].append(line[4:])
        elif line.startswith("- "):
            items.append((line[2:], []))
    return "".join(f"<li>{escape(text)}" + (f"<ul>{''.join(f'<li>{escape(n)}</li>' for n in nested)}</ul>"
                                             if nested else "") + "</li>" for text, nested in items)


def render(data: dict) -> str:
    report = typed_rows(data)
    env = report.environment
    brokers = ", ".join(f"{escape(b)} {escape(version)}" for b, version in markdown.header_brokers(report))
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>brokerbench {escape(report.run_id)}</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>brokerbench run {escape(report.run_id)} ({escape(report.name)})</h1>",
             f"<p>Status <b>{escape(report.status)}</b>{' — ' + escape(report.reason) if report.reason else ''}"
             f" · {brokers} · {env.host.cores} cores {escape(env.host.cpu_model)} · code "
             f"{escape(env.code_version)}{escape(markdown.send_loop_header(report))}</p>"]
    parts += _summary_section(report)
    refs = report.references
    parts.append(f"<h2 id='comparison'>Comparison</h2><p class='muted'>Median over repeats (interval in brackets); "
                 f"<b>bold</b> only where the intervals do not overlap; ratios of medians against "
                 f"{escape(refs.format)} (same broker) and {escape(refs.broker)} (same format); "
                 f"<a href='#rules'>how to read</a>.</p>")
    for group in report.groups:
        note = f"<p><i>{escape(group.note)}</i></p>" if group.note else ""
        searches = _list_items(markdown.search_lines(group))
        shapes = _list_items(markdown.shape_lines(group))
        stamps = markdown.stamp_footnote(group.cells)  # the rows marked † (markdown.stamp_mark)
        parts.append(f"<h3>{escape(group.title)}</h3>{note}{_grid(group, report)}"
                     + (f"<p class='muted stamps'>{escape(stamps)}.</p>" if stamps else "")
                     + (f"<ul class='searches'>{searches}</ul>" if searches else "")
                     + (f"<ul class='shapes'>{shapes}</ul>" if shapes else "")
                     + f"<div class='charts'>{_spectrum_chart(group)}</div>")
    parts += history_view.html_parts(data)
    parts += _durability_section(report)
    parts += _guarantees_section(report)
    parts += _resources_section(report)
    parts += _cost_section(report)
    parts.append("<h2>Throughput and latency across the matrix</h2><div class='charts'>")
    parts += _across_groups(report, lambda g: g.size_bytes, lambda g: f"{g.rate_target} msgs/s · {g.mode}",
                            "Throughput vs message size", "message size (B)", "throughput_msgs_per_s", "msgs/s", log_x=True)
    parts += _across_groups(report, lambda g: g.rate_target if isinstance(g.rate_target, (int, float)) else None,
                            lambda g: f"{g.size_bytes:,} B · {g.mode}", "End-to-end p99 vs rate",
                            "target rate (msgs/s)", "end_to_end_p99_us", "ms", scale=1000, log_x=True)
    parts.append("</div><h2>Serialization</h2><div class='charts'>")
    parts += _serialization_charts(report)
    parts.append("</div><h2>Per-second series</h2>")
    parts += _series_section(report)
    parts += _rules_section(report)
    parts.append(f"<h2>Markdown</h2><details><summary>the same report as Markdown</summary><pre>"
                 f"{escape(markdown.render(data))}</pre></details></body></html>")
    return "\n".join(parts)
