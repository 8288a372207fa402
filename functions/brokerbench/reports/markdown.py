"""The report as Markdown (terminal, pull requests): regressions first, then claims, rules and grids.

It reads the report's typed rows (reports.rows): `render` converts the report once; the helpers take rows."""

from __future__ import annotations

from collections import Counter

import msgspec

from ..figures import STAMP_MARK, stamp_note, stamped_late
from ..limit import CONSUMER_LEGEND, CONSUMER_MARK, LEGEND, MARK, client_bound, rate_found_text
from ..metrics import shown_in
from . import faults, history_view
from .model import RESOURCES_NOTE, need_label, rate_text, send_loop_text, sender_text
from .regression import FIGURES, figure_text, stamps_differ_text
from .rows import AtAttach, Bursts, Check, Config, Cost, Group, Report, Search, SearchLimit, Startup, Verdict
from .rows import report as typed_rows

VERDICT_ORDER = {"regression": 0, "unstable": 1, "improvement": 2, "unchanged": 3}


def _num(value, digits=0, scale=1.0) -> str:
    if value is None:
        return "–"
    return f"{value / scale:,.{digits}f}"


def _metric(cell: Config, name: str, digits=0, scale=1.0) -> str:
    est = cell.metrics[name]
    if est.median is None and est.withheld:
        return need_label(est.withheld)  # the percentile is finer than the sample supports
    if est.median is None and est.lower_bound is not None:  # missing messages at +∞: a lower bound
        return f"≥ {_num(est.lower_bound, digits, scale)}"
    text = _num(est.median, digits, scale)
    if est.n > 1 and est.ci_low is not None and est.ci_high != est.ci_low:
        text += f" ({_num(est.ci_low, digits, scale)}–{_num(est.ci_high, digits, scale)})"
    if name in cell.best:
        text = f"**{text}**"
    return text


def floor_text(config: Config) -> str:
    """The median call floor (model.CODEC_RULE) as 'encode / decode' ns, or a dash when a repeat has none."""
    floor = config.codec_floor_ns
    return "–" if floor is None else f"{_num(floor.encode_ns, 1)} / {_num(floor.decode_ns, 1)}"


# The grid's metric columns (brokerbench.metrics, the codecs' measured p50s each beside its net figure), then the
# columns every row has after them: the call floor, loss and the throughput ratios against the references.
GRID = shown_in("grid")
AFTER_METRICS = ("floor ns (enc / dec)", "loss", "vs format", "vs broker")


def _ratio(cell: Config, axis: str, name: str) -> str:
    ratio = cell.ratio(axis, name)
    return "–" if ratio is None else f"{ratio:.2f}×"


def loss_text(config: Config) -> str:
    """'0', or each loss class that occurred (flagged ⚠), the broker's count when it disagrees and an accounting
    residual; a split of undelivered and lost the broker could not tell is shown as their sum, not flagged as loss,
    and so are the messages due and never sent (the producer fell behind)."""
    loss = config.loss
    behind = f"not sent {config.not_sent:,} (producer behind)" if config.not_sent else ""
    if all(getattr(loss, k) is None for k in ("lost", "late", "send_errors", "unacknowledged", "undelivered_or_lost")):
        return "; ".join(t for t in (_num(config.lost), behind) if t)
    unknown = loss.backlog_unknown
    names = ("late", "send_errors", "unacknowledged") if unknown else ("lost", "undelivered", "late", "send_errors",
                                                                         "unacknowledged")
    parts = [f"{name.replace('_', ' ')} {getattr(loss, name):,}" for name in names if getattr(loss, name)]
    if loss.broker_count_difference:
        parts.append(f"broker count {loss.broker_count_difference:+,}")
    if loss.residual:
        parts.append(f"accounting residual {loss.residual:+,}")
    text = "⚠ " + ", ".join(parts) if parts else ""
    if unknown:
        text += ("; " if text else "") + f"undelivered or lost {loss.undelivered_or_lost:,} (broker backlog unknown)"
    if behind:  # due and never sent: not loss at the broker
        text += ("; " if text else "") + behind
    return text or "0"


def resource_figures(config: Config) -> list[str]:
    """Per process group: 'CPU mean / max' and RSS MB, or — for a group that was not sampled."""
    out = []
    for used in (config.resources.broker, config.resources.workers) if config.resources else (None, None):
        out += ["—", "—"] if not used else [f"{_num(used.cpu_pct_mean, 1)} / {_num(used.cpu_pct_max, 1)}",
                                            _num(used.rss_mb_max, 1)]
    return out


def resource_rows(report: Report) -> list[list[str]]:
    """broker, format, mode, size, rate and the resource figures of each configuration that has them."""
    return [[c.broker, c.format, c.mode, f"{c.size_bytes:,} B", rate_text(c.rate_target),
             *resource_figures(c)] for g in report.groups for c in g.cells if c.resources]


def resources_section(report: Report) -> list[str]:
    rows = resource_rows(report)
    if not rows:
        return []
    return (["## Resources", "",
             "| broker | format | mode | size | rate | broker CPU % (mean / max) | broker RSS MB "
             "| workers CPU % (mean / max) | workers RSS MB |", "|---|---|---|---:|---|---:|---:|---:|---:|"]
            + [f"| {' | '.join(row)} |" for row in rows] + ["", RESOURCES_NOTE, ""])


def _price_text(value: float) -> str:
    """A unit price in dollars with all its digits (list prices go down to $0.000000125 per request unit)."""
    return "$" + (f"{value:.12f}".rstrip("0").rstrip(".") or "0")


def _quantity_text(value: float) -> str:
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.4f}".rstrip("0").rstrip(".") if abs(value) >= 0.001 else f"{value:.2e}"


def cost_summary(cost: Cost) -> str:
    """What the total means: a local run's sentence, the figure with default targets, the price basis."""
    prices, on_aws = cost.prices, cost.on_aws
    parts = []
    if cost.where == "local":
        parts.append(f"run on the local stack: no AWS cost; on AWS with the default targets: ${on_aws.total:,.2f}")
    elif on_aws:
        parts.append(f"with every broker on its default provisioned target: ${on_aws.total:,.2f}")
    return " · ".join(parts + [f"{cost.currency}, list prices for {prices.region} as of {prices.as_of}"])


def cost_rows(estimate: Cost) -> list[list[str]]:
    """item, quantity, unit, unit price, cost of each item of an estimate."""
    return [[i.what, _quantity_text(i.quantity), i.unit, _price_text(i.unit_price), f"${i.cost:,.4f}"]
            for i in estimate.items]


def cost_assumptions(cost: Cost) -> list[str]:
    return cost.assumptions + (cost.listed.assumptions if cost.listed is not cost else [])


def cost_section(report: Report) -> list[str]:
    """The run's estimated AWS cost (brokerbench.cost): the total, its items, the prices' date, the assumptions."""
    cost = report.cost
    if cost is None:
        return []
    lines = ["## Estimated AWS cost", ""]
    if cost.error:
        return lines + [f"No estimate: {cost.error}", ""]
    lines += [f"**${cost.total:,.2f}** · {cost_summary(cost)}.", ""]
    listed = cost.listed
    if listed is not cost:
        lines += ["What the same run would cost on AWS:", ""]
    lines += (["| item | quantity | unit | unit price | cost |", "|---|---:|---|---:|---:|"]
              + [f"| {' | '.join(row)} |" for row in cost_rows(listed)]
              + [f"| **total** | | | | **${listed.total:,.2f}** |", ""]
              + [f"- {assumption}" for assumption in cost_assumptions(cost)] + [""])
    return lines


def _figure(value, digits=1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and value == float("inf"):
        return "∞"
    return f"{value:,.{digits}f}"


def _change(value) -> str:
    if value is None:
        return "–"
    return "∞" if value in (float("inf"), float("-inf")) else f"{value:+.1%}"


def _p(value) -> str:
    return "–" if value is None else f"{value:.2g}"


def _tally(check: Check) -> str:
    """'2 regression, 38 unchanged': the verdicts counted by kind, in VERDICT_ORDER."""
    tally = Counter(v.verdict for v in check.verdicts)
    return ", ".join(f"{n} {k}" for k, n in sorted(tally.items(), key=lambda kv: VERDICT_ORDER.get(kv[0], 9)))


def check_summary(check: Check) -> str:
    """One line: the baseline (and history), the correction for multiplicity, the verdicts' tally."""
    counts = _tally(check)
    if not check.baseline_run_id:
        return "Checked, but no baseline was found (no earlier completed run of this suite on the same target " \
               "configuration): nothing was compared."
    history = [h for h in check.history_run_ids if h != check.baseline_run_id]
    alpha = check.corrected_alpha
    text = f"Checked against baseline run {check.baseline_run_id}"
    if history:
        text += f" (run-to-run noise from {len(history) + 1} runs: the baseline and {', '.join(history)})"
    if alpha is not None:
        text += f" · corrected α {alpha:.2g}"
    elif check.alpha is not None:
        comparisons = len(check.verdicts) if check.comparisons is None else check.comparisons
        text += f" · family-wise α {check.alpha:g} over {comparisons} tests"
    return text + f" · {counts or 'no verdicts'}."


def _method_lines(check: Check) -> list[str]:
    method = check.rule or check.method
    if not method:
        return []
    if isinstance(method, dict):
        return ["", "Rule: " + "; ".join(f"{k}: {v}" for k, v in method.items()) + "."]
    return ["", f"Rule: {method}"]


VERDICT_HEADER = "| cell | metric | verdict | baseline (geo. mean) | candidate (geo. mean) | change | p |"

# The regression verdicts that found a change (a reader acts on these): both reports show them first. The others,
# `unchanged` and `unstable` (no change beyond noise, or too little history to tell), are counted in one line there
# and listed further down (report.html: behind a click): a quick suite's 40 of them would fill the first screen.
FOUND = ("regression", "improvement")


def changes_found(check: Check) -> list[Verdict]:
    return [v for v in check.verdicts if v.verdict in FOUND]


def regression_line(check: Check) -> str:
    """The check in one line: how many verdicts on how many configurations, against how many earlier runs, and
    whether any found a change beyond noise."""
    verdicts = check.verdicts
    if not check.baseline_run_id:
        return check_summary(check)
    runs = len({check.baseline_run_id, *check.history_run_ids})
    configurations = len({v.name for v in verdicts})
    found = changes_found(check)
    counts = _tally(check)
    outcome = f"{len(found)} change{'s' if len(found) != 1 else ''} beyond noise" if found else "no change beyond noise"
    return (f"{len(verdicts)} verdicts on {configurations} configuration{'s' if configurations != 1 else ''} against "
            f"{runs} earlier run{'s' if runs != 1 else ''}: {outcome} ({counts or 'no verdicts'}).")


def verdict_words(v: Verdict, bold: bool = False) -> str:
    """The verdict column: the verdict (in bold, `bold`, when a regression), and beside it whether the latency it is
    on was stamped otherwise in the earlier runs than in this one (regression.flag_stamps): a change of method, not
    of the broker."""
    shown = f"**{v.verdict}**" if bold and v.verdict == "regression" else v.verdict
    return shown + (f" ({stamps_differ_text(v.stamps.history, v.stamps.candidate)})" if v.stamps else "")


def _verdict_rows(verdicts: list[Verdict]) -> list[str]:
    return [VERDICT_HEADER, "|---|---|---|---:|---:|---:|---:|"] + [
        f"| {v.name} | {'–' if v.metric is None else v.metric} | "
        f"{verdict_words(v, bold=True)} | "
        f"{figure_text(v.baseline_mean)} | {figure_text(v.candidate_mean)} | "
        f"{_change(v.change)} | {_p(v.p_value)} |" for v in verdicts]


def regression_summary(report: Report) -> list[str]:
    """The summary's regression lines: the check in one line and the changes it found; or the regressions recorded
    without a check; or that none was recorded."""
    check = report.regression_check
    if check is not None:
        found = changes_found(check)
        return [f"**Regression check:** {regression_line(check)}", ""] + (
            [*_verdict_rows(found), ""] if found else [])
    recorded = [r for r in report.regressions if r.verdict == "regression"]
    if recorded:
        return [f"**{len(recorded)} regression{'s' if len(recorded) != 1 else ''}** recorded: see Regressions below.",
                ""]
    return ["No regression check recorded for this run.", ""]


def regression_section(report: Report) -> list[str]:
    """The regression check's verdicts and its baseline, or what was recorded, or that none was."""
    check = report.regression_check
    lines = ["## Regressions", ""]
    if check is not None:
        verdicts = sorted(check.verdicts, key=lambda v: VERDICT_ORDER.get(v.verdict, 9))
        lines.append(check_summary(check))
        lines += _method_lines(check)
        if verdicts:
            lines += ["", f"{FIGURES[0].upper()}{FIGURES[1:]}.", "", *_verdict_rows(verdicts)]
        return lines + [""]
    regressions = [r for r in report.regressions if r.verdict == "regression"]
    if regressions:
        baselines = sorted({r.baseline_run_id for r in regressions if r.baseline_run_id})
        lines += [f"Against baseline run {', '.join(baselines) or '–'}.", "", f"{FIGURES[0].upper()}{FIGURES[1:]}.",
                  "", VERDICT_HEADER, "|---|---|---|---:|---:|---:|---:|"]
        for r in regressions:
            lines.append(f"| {r.cell} | {r.metric} | **{r.verdict}** | {figure_text(r.baseline_mean)} | "
                         f"{figure_text(r.candidate_mean)} | {_change(r.change)} | {_p(r.p_value)} |")
    else:
        lines.append("No regression check recorded for this run.")
    return lines + [""]


def send_loop_header(report: Report) -> str:
    """The header's send loop when every cell used one (each row names its own otherwise: format_text)."""
    loops, paths = report.send_loops, report.senders
    if len(loops) != 1 or report.send_loop_note:
        return ""
    path = f" ({sender_text(next(iter(paths)))})" if len(paths) == 1 else ""  # Pulsar's native path, when one
    return f" · {send_loop_text(next(iter(loops)))}{path}"


def format_text(c: Config, report: Report) -> str:
    """A row's format, with the send loop that measured it when the report's cells mix loops, and Pulsar's native
    path when its rows used more than one."""
    text = c.format
    if report.send_loop_note and c.send_loop:
        text += f" · {send_loop_text(c.send_loop)}"
    if len(report.senders) > 1 and c.sender:
        text += f" · {sender_text(c.sender)}"
    return text + stamp_mark(c)


def stamp_mark(c: Config) -> str:
    """' †' for a configuration whose publish or end-to-end latency was not stamped at arrival (figures.STAMP_MARK;
    its group's footnote, stamp_footnote, says how it was)."""
    return f" {STAMP_MARK}" if stamped_late(c.ack_stamps, c.delivery_stamps) else ""


def stamp_footnote(cells: list[Config]) -> str | None:
    """The footnote under a grid with marked rows (figures.stamp_note)."""
    return stamp_note((f"{c.broker} {c.format}", c.ack_stamps, c.delivery_stamps, c.delivery_stamp_bound)
                      for c in cells)


def send_loop_lines(report: Report) -> list[str]:
    note = report.send_loop_note
    return [f"**Send loops differ:** {note}.", ""] if note else []


def claims_section(report: Report, heading: str = "## Highlights") -> list[str]:
    lines = [heading, ""]
    if report.claims_note:
        return lines + [f"{report.claims_note[0].upper()}{report.claims_note[1:]}.", ""]
    if not report.highlights:
        return lines + ["No difference between configurations exceeded the run's own noise.", ""]
    return lines + [f"- {h.text}" for h in report.highlights] + [""]


def _yes_no(value) -> str:
    return {True: "yes", False: "no", None: "unknown"}.get(value, str(value))


def durability_rows(report: Report) -> list[list[str]]:
    """One row per broker: whether its acknowledgement waited for a disk sync, replicas, or memory only."""
    return [[broker, _yes_no(d.fsync), "unknown" if d.replicas is None else str(d.replicas),
             _yes_no(d.memory_only), d.text] for broker, d in report.durability.items()]


def durability_section(report: Report) -> list[str]:
    rows = durability_rows(report)
    if not rows:
        return []
    lines = ["## Durability: what an acknowledgement waited for", "",
             "| broker | fsync | replicas | memory only | acknowledgement |", "|---|---|---:|---|---|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows] + [""]


# The report's rules (report["rules"]) in the order "How to read this report" lists them, with their labels.
RULE_LABELS = (("sustainability", "Sustainability"), ("claims", "Claims"), ("percentiles", "Percentiles"),
               ("max_rate", "Max rate"), ("limit", "What limited a cell"), ("missing", "Missing messages"),
               ("not_sent", "Messages not sent"), ("accounting", "Accounting"), ("codec", "Codec figures"),
               ("send_loop", "Send loop"), ("durability", "Durability"), ("host", "Host busy"), ("stamps", "Stamps"))


# Where the rules are written once: the repository's page, relative to reports/<run_id>/report.{md,html} in a
# checkout. A report is also stored and served alone (S3, the API), so the rules it applied come with it, last.
METHODOLOGY = "../../docs/methodology.md"
RULES_LEAD = ("Figures are medians over repeats with a distribution-free interval; a difference is claimed (bold, a "
              "highlight) only beyond the run's own noise, and a regression only beyond run-to-run noise.")


def applied_rules(report: Report) -> list[tuple[str, str]]:
    """(label, rule) of each rule the report applied, in RULE_LABELS' order."""
    return [(label, getattr(report.rules, key)) for key, label in RULE_LABELS if getattr(report.rules, key)]


def rules_section(report: Report) -> list[str]:
    return ["## How to read this report", "",
            f"{RULES_LEAD} The rules are in [docs/methodology.md]({METHODOLOGY}); those this report applied:", ""] + [
        f"- **{label}.** {rule}" for label, rule in applied_rules(report)] + [""]


def client_bound_text(report: Report) -> str | None:
    """The line above the grids when some configuration was client-bound: how many, and what the mark means."""
    lines = [f"{label} in {len(bound)} configuration(s): {legend}"
             for label, legend, bound in (("Client-bound", LEGEND, report.configurations_client_bound),
                                          ("Consumer-bound", CONSUMER_LEGEND, report.configurations_consumer_bound))
             if bound]
    return ". ".join(lines) or None


def search_text(c: Config) -> str:
    """A rate search's result: 'max sustainable N msgs/s (held D s)'; over repeats, the median rate and the range
    of the seconds each repeat's rate held (its sustainable steps' measured seconds)."""
    found = c.max_sustainable_rate.median
    if found is None:
        return "no sustainable rate found"
    searches = [s for s in c.searches if s.max_sustainable_rate is not None]
    held = [s.sustainable_for_s for s in searches if s.sustainable_for_s is not None]
    parts = [f"median of {len(searches)} repeats"] if len(searches) > 1 else []
    if held:
        low, high = min(held), max(held)
        parts.append(f"held {low:,.0f} s" if round(low) == round(high) else f"held {low:,.0f}–{high:,.0f} s")
    # The load generator stopped a repeat's search: the median is only a lower bound of the broker's (limit.RULE).
    bound = next((s.limit for s in searches if client_bound(s.limit)), None)
    return f"max sustainable {rate_found_text(found, bound)}" + (f" ({', '.join(parts)})" if parts else "")


def host_busy_mark(c: Config) -> str:
    """' · host busy (repeats 2, 3: CPU pressure 78% > 50% ...)' for a configuration with repeats measured on a busy
    host (reports.model.busy_repeats): their figures enter no claim and no regression verdict."""
    busy = c.busy_repeats
    if not busy:
        return ""
    which = "" if len(busy) == c.completed_repeats == 1 else \
        f"repeat{'s' if len(busy) > 1 else ''} {', '.join(map(str, busy))}: "
    return f" · ⚠ host busy ({which}{'; '.join(c.host.reasons)})"


def host_busy_lines(report: Report) -> list[str]:
    note = report.host_note
    return [f"**Host busy:** {note}.", ""] if note else []


def client_bound_mark(c: Config) -> str:
    """' · client-bound' (with how many repeats, when not all) for a configuration the load generator limited; a
    search says so in its rate instead (search_text)."""
    repeats = len(c.limit.by)
    marks = ""
    for mark, bound in ((MARK, c.limit.client_bound), (CONSUMER_MARK, c.limit.consumer_bound)):
        if bound and c.sustainability.verdict != "search":
            marks += f" · {mark}" + (f" ({bound} of {repeats} repeats)" if bound < repeats else "")
    return marks


def verdict_text(c: Config) -> str:
    verdict = c.sustainability.verdict
    if verdict == "search":
        verdict = search_text(c)
    verdict += client_bound_mark(c) + host_busy_mark(c)
    if c.sustainability.verdict in ("unsustainable", "inconclusive"):
        mark = "⚠ " if verdict.startswith("unsustainable") else ""
        verdict = f"{mark}{verdict}: " + "; ".join(c.sustainability.reasons)
    if c.status == "partial":
        verdict += f" ({c.completed_repeats} of {c.repeats} repeats completed: {'; '.join(c.reasons)})"
    return verdict


def header_brokers(report: Report) -> list[tuple[str, str]]:
    """(broker, version) of each broker the run measured; '?' where its version was not recorded."""
    return [(broker, str(info.broker_version)) for broker, info in report.environment.brokers.items()]


def render(data: dict) -> str:
    report = typed_rows(data)
    env = report.environment
    brokers = ", ".join(f"{b} {version}" for b, version in header_brokers(report)) or "–"
    lines = [
        f"# brokerbench run {report.run_id} ({report.name})",
        "",
        f"Status **{report.status}**{' — ' + report.reason if report.reason else ''} · brokers {brokers} · "
        f"{env.host.cores} cores {env.host.cpu_model} · code {env.code_version}"
        f"{send_loop_header(report)}",
        "",
    ]
    lines += ["## Summary", "", *regression_summary(report)]
    lines += claims_section(report, "### Differences beyond the run's noise")
    lines += send_loop_lines(report)
    lines += host_busy_lines(report)
    if report.configurations_with_loss:
        lines += [f"**Loss** in {len(report.configurations_with_loss)} configuration(s): see the loss column.", ""]
    if client_bound_text(report):
        lines += [f"**{client_bound_text(report)}.**", ""]
    refs = report.references
    for group in report.groups:
        lines += [f"## {group.title}", ""]
        if group.note:
            lines += [f"*{group.note}*", ""]
        lines += [f"Median over repeats (distribution-free interval); **bold** only where the intervals do not "
                  f"overlap; ratios of medians against {refs.format} (same broker) and {refs.broker} "
                  f"(same format).", "",
                  "| " + " | ".join(("broker", "format", *(m.column for m in GRID.values()), *AFTER_METRICS,
                                     "verdict")) + " |",
                  "|---|---|" + "---:|" * (len(GRID) + len(AFTER_METRICS)) + "---|"]
        for c in group.cells:
            if c.status == "failed":
                lines.append(f"| {c.broker} | {format_text(c, report)} | " + "– | " * (len(GRID) + len(AFTER_METRICS))
                             + f"FAILED: {'; '.join(c.reasons)} |")
                continue
            lines.append(
                f"| {c.broker} | {format_text(c, report)} | "
                + "".join(f"{_metric(c, name, m.digits, m.scale)} | " for name, m in GRID.items())
                + f"{floor_text(c)} | {loss_text(c)} | "
                f"{_ratio(c, 'format', 'throughput_msgs_per_s')} | {_ratio(c, 'broker', 'throughput_msgs_per_s')} | "
                f"{verdict_text(c)} |")
        lines.append("")
        if note := stamp_footnote(group.cells):
            lines += [note + ".", ""]
        lines += search_lines(group)
        lines += shape_lines(group)
    if report.regression_check is not None or report.regressions:
        lines += regression_section(report)
    lines += history_view.markdown_lines(data)
    lines += durability_section(report)
    lines += faults.markdown_lines(data)
    lines += resources_section(report)
    lines += cost_section(report)
    lines += rules_section(report)
    return "\n".join(lines)


def _seconds(value) -> str:
    return "–" if value is None else f"{value:,.3f} s"


def startup_text(startup: Startup) -> str:
    at = startup.at_attach or AtAttach()
    read = startup.backlog_read_s
    # The consumers attach when due, or after the broker's count if a loaded host took it later; the figures still
    # run from when they were due.
    late = at.counted_s is not None and at.counted_s > startup.attach_s
    attached = (f"attached {_seconds(at.counted_s)} after the first send (due at {_seconds(startup.attach_s)}; "
                f"they wait for the broker's count, taken late)" if late
                else f"attached {_seconds(startup.attach_s)} after the first send")
    return (f"startup backlog of {startup.messages:,} msgs sent at {startup.rate:,g} msgs/s: the consumers "
            f"{attached}, when the broker held "
            f"{_figure(at.broker_messages, 0)} msgs ({_figure(at.broker_backlog, 0)} unread by the "
            f"group); first message {_seconds(startup.first_delivery_s)} after "
            f"{'they were due' if late else 'attaching'}, the backlog read in "
            + (f"{_seconds(read)} ({_figure(startup.read_rate_msgs_per_s, 0)} msgs/s)" if read is not None
               else f"– (only {startup.received:,} of its messages arrived)"))


def bursts_text(bursts: Bursts) -> str:
    times = bursts.delivered_in_ms
    return (f"bursts of {bursts.messages:,} msgs every {bursts.every_s:g} s, due over {bursts.over_s:g} s: "
            f"{bursts.delivered} of {bursts.measured} measured bursts wholly delivered; from a burst's first "
            f"due message to its last delivery median {_figure(times.p50, 1)} ms, longest {_figure(times.max, 1)} ms")


def shape_lines(group: Group) -> list[str]:
    """Each configuration's startup backlog and burst figures, per repeat."""
    out = []
    for c in group.cells:
        for repeat, startup, bursts in zip(c.repeat_numbers, c.startups, c.bursts):
            name = f"- {c.broker} {c.format} repeat {repeat}: "
            out += [name + text for text in (startup and startup_text(startup), bursts and bursts_text(bursts)) if text]
    return out + [""] if out else []


def held_for_text(search: Search) -> str:
    """The measured seconds behind a search's rate found, as ", sustainable for D s" (nothing if not recorded)."""
    seconds = search.sustainable_for_s
    if seconds is None or search.max_sustainable_rate is None:
        return ""
    return f", sustainable for {seconds:,.0f} s"


def limit_clause(search: Search) -> str:
    """What held a search below the rate above the one found, when the load generator did."""
    if not client_bound(search.limit):
        return ""
    found = msgspec.convert(search.limit, SearchLimit)
    return (f"; the step at {found.rate:,.0f} msgs/s was {MARK}: its producers waited for room "
            f"{_share(found.window_wait_share)} of their time, a producer used "
            f"{_figure(found.producer_cpu_pct, 0)}% of a core")


def _share(value) -> str:
    return "–" if value is None else f"{value:.0%}"


def search_lines(group: Group) -> list[str]:
    """The maximum sustainable rate of each configuration of a search group, and every step of it."""
    out = []
    for c in group.cells:
        found = c.max_sustainable_rate
        for repeat, search in zip(c.repeat_numbers, c.searches):
            steps = ", ".join(f"{s.rate:,.0f} {'✓' if s.verdict == 'sustainable' else '✗ ' + s.verdict}"
                              + (f" ({MARK})" if client_bound(s.limit) else "")
                              + (" (host busy)" if (s.host or {}).get("busy") else "") for s in search.steps)
            found_text = ("–" if search.max_sustainable_rate is None
                          else rate_found_text(search.max_sustainable_rate, search.limit))
            out.append(f"- {c.broker} {c.format} repeat {repeat}: maximum sustainable rate "
                       f"{found_text}{held_for_text(search)} ({search.ended}{limit_clause(search)}); "
                       f"steps: {steps}")
            out += [f"  - at {a.fraction:.0%} ({a.rate:,.0f} msgs/s): {a.verdict}, end-to-end p99 "
                    f"{_figure((a.end_to_end_p99_us or 0) / 1000, 2)} ms" for a in search.latency_at]
        if found.median is not None and len(c.searches) > 1:
            out.append(f"- {c.broker} {c.format}: median {found.median:,.0f} msgs/s over "
                       f"{len(c.searches)} repeats")
    return out + [""] if out else []
