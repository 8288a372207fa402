"""The report as Markdown (terminal, pull requests): regressions first, then claims, rules and grids."""

from __future__ import annotations

from ..limit import CONSUMER_LEGEND, CONSUMER_MARK, LEGEND, MARK, client_bound, rate_found_text
from ..metrics import shown_in
from . import faults, history_view
from .model import RESOURCES_NOTE, busy_repeats, need_label, rate_text, send_loop_text, sender_text
from .regression import FIGURES, figure_text

VERDICT_ORDER = {"regression": 0, "unstable": 1, "improvement": 2, "unchanged": 3}


def _num(value, digits=0, scale=1.0) -> str:
    if value is None:
        return "–"
    return f"{value / scale:,.{digits}f}"


def _metric(cell: dict, name: str, digits=0, scale=1.0) -> str:
    est = cell["metrics"][name]
    if est["median"] is None and est.get("withheld"):
        return need_label(est["withheld"])  # the percentile is finer than the sample supports
    if est["median"] is None and est.get("lower_bound") is not None:  # missing messages at +∞: a lower bound
        return f"≥ {_num(est['lower_bound'], digits, scale)}"
    text = _num(est["median"], digits, scale)
    if est["n"] > 1 and est["ci_low"] is not None and est["ci_high"] != est["ci_low"]:
        text += f" ({_num(est['ci_low'], digits, scale)}–{_num(est['ci_high'], digits, scale)})"
    if name in cell.get("best", []):
        text = f"**{text}**"
    return text


def floor_text(config: dict) -> str:
    """The median call floor (model.CODEC_RULE) as 'encode / decode' ns, or a dash when a repeat has none."""
    floor = config.get("codec_floor_ns")
    return "–" if not floor else f"{_num(floor['encode_ns'], 1)} / {_num(floor['decode_ns'], 1)}"


# The grid's metric columns (brokerbench.metrics, the codecs' measured p50s each beside its net figure), then the
# columns every row has after them: the call floor, loss and the throughput ratios against the references.
GRID = shown_in("grid")
AFTER_METRICS = ("floor ns (enc / dec)", "loss", "vs format", "vs broker")


def _ratio(cell: dict, axis: str, name: str) -> str:
    ratio = cell.get("ratios", {}).get(axis, {}).get(name)
    return "–" if ratio is None else f"{ratio:.2f}×"


def loss_text(config: dict) -> str:
    """'0', or each loss class that occurred (flagged ⚠), the broker's count when it disagrees and an accounting
    residual; a split of undelivered and lost the broker could not tell is shown as their sum, not flagged as loss,
    and so are the messages due and never sent (the producer fell behind)."""
    loss = config.get("loss") or {}
    behind = f"not sent {config['not_sent']:,} (producer behind)" if config.get("not_sent") else ""
    if all(loss.get(k) is None for k in ("lost", "late", "send_errors", "unacknowledged", "undelivered_or_lost")):
        return "; ".join(t for t in (_num(config.get("lost")), behind) if t)
    unknown = bool(loss.get("backlog_unknown"))
    names = ("late", "send_errors", "unacknowledged") if unknown else ("lost", "undelivered", "late", "send_errors",
                                                                         "unacknowledged")
    parts = [f"{name.replace('_', ' ')} {loss[name]:,}" for name in names if loss.get(name)]
    if loss.get("broker_count_difference"):
        parts.append(f"broker count {loss['broker_count_difference']:+,}")
    if loss.get("residual"):
        parts.append(f"accounting residual {loss['residual']:+,}")
    text = "⚠ " + ", ".join(parts) if parts else ""
    if unknown:
        text += ("; " if text else "") + f"undelivered or lost {loss['undelivered_or_lost']:,} (broker backlog unknown)"
    if behind:  # due and never sent: not loss at the broker
        text += ("; " if text else "") + behind
    return text or "0"


RESOURCE_GROUPS = ("broker", "workers")


def resource_figures(config: dict) -> list[str]:
    """Per process group: 'CPU mean / max' and RSS MB, or — for a group that was not sampled."""
    out = []
    for name in RESOURCE_GROUPS:
        used = (config.get("resources") or {}).get(name)
        out += ["—", "—"] if not used else [f"{_num(used['cpu_pct_mean'], 1)} / {_num(used['cpu_pct_max'], 1)}",
                                            _num(used["rss_mb_max"], 1)]
    return out


def resource_rows(report: dict) -> list[list[str]]:
    """broker, format, mode, size, rate and the resource figures of each configuration that has them."""
    return [[c["broker"], c["format"], c["mode"], f"{c['size_bytes']:,} B", rate_text(c["rate_target"]),
             *resource_figures(c)] for g in report["groups"] for c in g["cells"] if c.get("resources")]


def resources_section(report: dict) -> list[str]:
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


def cost_listed(cost: dict) -> dict:
    """The estimate whose items a report lists: a local run's own has none, so what it would cost on AWS."""
    return cost["on_aws"] if cost.get("where") == "local" and cost.get("on_aws") else cost


def cost_summary(cost: dict) -> str:
    """What the total means: a local run's sentence, the figure with default targets, the price basis."""
    prices, on_aws = cost["prices"], cost.get("on_aws")
    parts = []
    if cost.get("where") == "local":
        parts.append(f"run on the local stack: no AWS cost; on AWS with the default targets: ${on_aws['total']:,.2f}")
    elif on_aws:
        parts.append(f"with every broker on its default provisioned target: ${on_aws['total']:,.2f}")
    return " · ".join(parts + [f"{cost['currency']}, list prices for {prices['region']} as of {prices['as_of']}"])


def cost_rows(estimate: dict) -> list[list[str]]:
    """item, quantity, unit, unit price, cost of each item of an estimate."""
    return [[i["what"], _quantity_text(i["quantity"]), i["unit"], _price_text(i["unit_price"]), f"${i['cost']:,.4f}"]
            for i in estimate["items"]]


def cost_assumptions(cost: dict) -> list[str]:
    return cost["assumptions"] + (cost_listed(cost)["assumptions"] if cost_listed(cost) is not cost else [])


def cost_section(report: dict) -> list[str]:
    """The run's estimated AWS cost (brokerbench.cost): the total, its items, the prices' date, the assumptions."""
    cost = report.get("cost")
    if not cost:
        return []
    lines = ["## Estimated AWS cost", ""]
    if cost.get("error"):
        return lines + [f"No estimate: {cost['error']}", ""]
    lines += [f"**${cost['total']:,.2f}** · {cost_summary(cost)}.", ""]
    listed = cost_listed(cost)
    if listed is not cost:
        lines += ["What the same run would cost on AWS:", ""]
    lines += (["| item | quantity | unit | unit price | cost |", "|---|---:|---|---:|---:|"]
              + [f"| {' | '.join(row)} |" for row in cost_rows(listed)]
              + [f"| **total** | | | | **${listed['total']:,.2f}** |", ""]
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


def check_summary(check: dict) -> str:
    """One line: the baseline (and history), the correction for multiplicity, the verdicts' tally."""
    tally: dict = {}
    for v in check.get("verdicts", []):
        tally[v.get("verdict")] = tally.get(v.get("verdict"), 0) + 1
    counts = ", ".join(f"{n} {k}" for k, n in sorted(tally.items(), key=lambda kv: VERDICT_ORDER.get(kv[0], 9)))
    if not check.get("baseline_run_id"):
        return "Checked, but no baseline was found (no earlier completed run of this suite on the same target " \
               "configuration): nothing was compared."
    history = [h for h in check.get("history_run_ids") or [] if h != check["baseline_run_id"]]
    alpha = check.get("corrected_alpha")
    text = f"Checked against baseline run {check['baseline_run_id']}"
    if history:
        text += f" (run-to-run noise from {len(history) + 1} runs: the baseline and {', '.join(history)})"
    if alpha is not None:
        text += f" · corrected α {alpha:.2g}"
    elif check.get("alpha") is not None:
        text += f" · family-wise α {check['alpha']:g} over {check.get('comparisons', len(check.get('verdicts', [])))} tests"
    return text + f" · {counts or 'no verdicts'}."


def _method_lines(check: dict) -> list[str]:
    method = check.get("rule") or check.get("method")
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


def changes_found(check: dict) -> list[dict]:
    return [v for v in check.get("verdicts", []) if v.get("verdict") in FOUND]


def regression_line(check: dict) -> str:
    """The check in one line: how many verdicts on how many configurations, against how many earlier runs, and
    whether any found a change beyond noise."""
    verdicts = check.get("verdicts", [])
    if not check.get("baseline_run_id"):
        return check_summary(check)
    runs = len({check["baseline_run_id"], *(check.get("history_run_ids") or [])})
    configurations = len({v.get("cell", v.get("key")) for v in verdicts})
    found = changes_found(check)
    tally: dict = {}
    for v in verdicts:
        tally[v.get("verdict")] = tally.get(v.get("verdict"), 0) + 1
    counts = ", ".join(f"{n} {k}" for k, n in sorted(tally.items(), key=lambda kv: VERDICT_ORDER.get(kv[0], 9)))
    outcome = f"{len(found)} change{'s' if len(found) != 1 else ''} beyond noise" if found else "no change beyond noise"
    return (f"{len(verdicts)} verdicts on {configurations} configuration{'s' if configurations != 1 else ''} against "
            f"{runs} earlier run{'s' if runs != 1 else ''}: {outcome} ({counts or 'no verdicts'}).")


def _verdict_rows(verdicts: list[dict]) -> list[str]:
    return [VERDICT_HEADER, "|---|---|---|---:|---:|---:|---:|"] + [
        f"| {v.get('cell', v.get('key', '–'))} | {v.get('metric', '–')} | "
        f"{'**' + v.get('verdict') + '**' if v.get('verdict') == 'regression' else v.get('verdict')} | "
        f"{figure_text(v.get('baseline_mean'))} | {figure_text(v.get('candidate_mean'))} | "
        f"{_change(v.get('change'))} | {_p(v.get('p_value'))} |" for v in verdicts]


def regression_summary(report: dict) -> list[str]:
    """The summary's regression lines: the check in one line and the changes it found; or the regressions recorded
    without a check; or that none was recorded."""
    check = report.get("regression_check")
    if check:
        found = changes_found(check)
        return [f"**Regression check:** {regression_line(check)}", ""] + (
            [*_verdict_rows(found), ""] if found else [])
    recorded = [r for r in report["regressions"] if r["verdict"] == "regression"]
    if recorded:
        return [f"**{len(recorded)} regression{'s' if len(recorded) != 1 else ''}** recorded: see Regressions below.",
                ""]
    return ["No regression check recorded for this run.", ""]


def regression_section(report: dict) -> list[str]:
    """The regression check's verdicts and its baseline, or what was recorded, or that none was."""
    check = report.get("regression_check")
    lines = ["## Regressions", ""]
    if check:
        verdicts = sorted(check.get("verdicts", []), key=lambda v: VERDICT_ORDER.get(v.get("verdict"), 9))
        lines.append(check_summary(check))
        lines += _method_lines(check)
        if verdicts:
            lines += ["", f"{FIGURES[0].upper()}{FIGURES[1:]}.", "", *_verdict_rows(verdicts)]
        return lines + [""]
    regressions = [r for r in report["regressions"] if r["verdict"] == "regression"]
    if regressions:
        baselines = sorted({r["baseline_run_id"] for r in regressions if r.get("baseline_run_id")})
        lines += [f"Against baseline run {', '.join(baselines) or '–'}.", "", f"{FIGURES[0].upper()}{FIGURES[1:]}.",
                  "", VERDICT_HEADER, "|---|---|---|---:|---:|---:|---:|"]
        for r in regressions:
            lines.append(f"| {r['cell']} | {r['metric']} | **{r['verdict']}** | {figure_text(r.get('baseline_mean'))} | "
                         f"{figure_text(r.get('candidate_mean'))} | {_change(r['change'])} | {_p(r['p_value'])} |")
    else:
        lines.append("No regression check recorded for this run.")
    return lines + [""]


def send_loop_header(report: dict) -> str:
    """The header's send loop when every cell used one (each row names its own otherwise: format_text)."""
    loops, paths = report.get("send_loops") or {}, report.get("senders") or {}
    if len(loops) != 1 or report.get("send_loop_note"):
        return ""
    path = f" ({sender_text(next(iter(paths)))})" if len(paths) == 1 else ""  # Pulsar's native path, when one
    return f" · {send_loop_text(next(iter(loops)))}{path}"


def format_text(c: dict, report: dict) -> str:
    """A row's format, with the send loop that measured it when the report's cells mix loops, and Pulsar's native
    path when its rows used more than one."""
    text = c["format"]
    if report.get("send_loop_note") and c.get("send_loop"):
        text += f" · {send_loop_text(c['send_loop'])}"
    if len(report.get("senders") or {}) > 1 and c.get("sender"):
        text += f" · {sender_text(c['sender'])}"
    return text


def send_loop_lines(report: dict) -> list[str]:
    note = report.get("send_loop_note")
    return [f"**Send loops differ:** {note}.", ""] if note else []


def claims_section(report: dict, heading: str = "## Highlights") -> list[str]:
    lines = [heading, ""]
    if report.get("claims_note"):
        return lines + [f"{report['claims_note'][0].upper()}{report['claims_note'][1:]}.", ""]
    if not report["highlights"]:
        return lines + ["No difference between configurations exceeded the run's own noise.", ""]
    return lines + [f"- {h['text']}" for h in report["highlights"]] + [""]


def _yes_no(value) -> str:
    return {True: "yes", False: "no", None: "unknown"}.get(value, str(value))


def durability_rows(report: dict) -> list[list[str]]:
    """One row per broker: whether its acknowledgement waited for a disk sync, replicas, or memory only."""
    return [[broker, _yes_no(d["fsync"]), "unknown" if d["replicas"] is None else str(d["replicas"]),
             _yes_no(d["memory_only"]), d["text"]] for broker, d in (report.get("durability") or {}).items()]


def durability_section(report: dict) -> list[str]:
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
               ("send_loop", "Send loop"), ("durability", "Durability"), ("host", "Host busy"))


# Where the rules are written once: the repository's page, relative to reports/<run_id>/report.{md,html} in a
# checkout. A report is also stored and served alone (S3, the API), so the rules it applied come with it, last.
METHODOLOGY = "../../docs/methodology.md"
RULES_LEAD = ("Figures are medians over repeats with a distribution-free interval; a difference is claimed (bold, a "
              "highlight) only beyond the run's own noise, and a regression only beyond run-to-run noise.")


def rules_section(report: dict) -> list[str]:
    rules = report.get("rules") or {}
    return ["## How to read this report", "",
            f"{RULES_LEAD} The rules are in [docs/methodology.md]({METHODOLOGY}); those this report applied:", ""] + [
        f"- **{label}.** {rules[key]}" for key, label in RULE_LABELS if rules.get(key)] + [""]


def client_bound_text(report: dict) -> str | None:
    """The line above the grids when some configuration was client-bound: how many, and what the mark means."""
    lines = [f"{label} in {len(bound)} configuration(s): {legend}"
             for label, legend, bound in (("Client-bound", LEGEND, report.get("configurations_client_bound")),
                                          ("Consumer-bound", CONSUMER_LEGEND, report.get("configurations_consumer_bound")))
             if bound]
    return ". ".join(lines) or None


def search_text(c: dict) -> str:
    """A rate search's result: 'max sustainable N msgs/s (held D s)'; over repeats, the median rate and the range
    of the seconds each repeat's rate held (its sustainable steps' measured seconds)."""
    found = (c.get("max_sustainable_rate") or {}).get("median")
    if found is None:
        return "no sustainable rate found"
    searches = [s for s in c.get("searches") or [] if s.get("max_sustainable_rate") is not None]
    held = [s["sustainable_for_s"] for s in searches if s.get("sustainable_for_s") is not None]
    parts = [f"median of {len(searches)} repeats"] if len(searches) > 1 else []
    if held:
        low, high = min(held), max(held)
        parts.append(f"held {low:,.0f} s" if round(low) == round(high) else f"held {low:,.0f}–{high:,.0f} s")
    # The load generator stopped a repeat's search: the median is only a lower bound of the broker's (limit.RULE).
    bound = next((s.get("limit") for s in searches if client_bound(s.get("limit"))), None)
    return f"max sustainable {rate_found_text(found, bound)}" + (f" ({', '.join(parts)})" if parts else "")


def host_busy_mark(c: dict) -> str:
    """' · host busy (repeats 2, 3: CPU pressure 78% > 50% ...)' for a configuration with repeats measured on a busy
    host (reports.model.busy_repeats): their figures enter no claim and no regression verdict."""
    busy = busy_repeats(c)
    if not busy:
        return ""
    which = "" if len(busy) == c.get("completed_repeats", len(busy)) == 1 else \
        f"repeat{'s' if len(busy) > 1 else ''} {', '.join(map(str, busy))}: "
    return f" · ⚠ host busy ({which}{'; '.join(c['host']['reasons'])})"


def host_busy_lines(report: dict) -> list[str]:
    note = report.get("host_note")
    return [f"**Host busy:** {note}.", ""] if note else []


def client_bound_mark(c: dict) -> str:
    """' · client-bound' (with how many repeats, when not all) for a configuration the load generator limited; a
    search says so in its rate instead (search_text)."""
    limited = c.get("limit") or {}
    repeats = len(limited.get("by") or [])
    marks = ""
    for mark, bound in ((MARK, limited.get("client_bound")), (CONSUMER_MARK, limited.get("consumer_bound"))):
        if bound and c["sustainability"]["verdict"] != "search":
            marks += f" · {mark}" + (f" ({bound} of {repeats} repeats)" if bound < repeats else "")
    return marks


def verdict_text(c: dict) -> str:
    verdict = c["sustainability"]["verdict"]
    if verdict == "search":
        verdict = search_text(c)
    verdict += client_bound_mark(c) + host_busy_mark(c)
    if c["sustainability"]["verdict"] in ("unsustainable", "inconclusive"):
        mark = "⚠ " if verdict.startswith("unsustainable") else ""
        verdict = f"{mark}{verdict}: " + "; ".join(c["sustainability"]["reasons"])
    if c["status"] == "partial":
        verdict += f" ({c['completed_repeats']} of {c['repeats']} repeats completed: {'; '.join(c['reasons'])})"
    return verdict


def render(report: dict) -> str:
    env = report["environment"]
    brokers = ", ".join(f"{b} {t.get('broker_version', '?')}" for b, t in env.get("brokers", {}).items()) or "–"
    lines = [
        f"# brokerbench run {report['run_id']} ({report['name']})",
        "",
        f"Status **{report['status']}**{' — ' + report['reason'] if report.get('reason') else ''} · brokers {brokers} · "
        f"{env['host']['cores']} cores {env['host']['cpu_model']} · code {env['code_version']}"
        f"{send_loop_header(report)}",
        "",
    ]
    lines += ["## Summary", "", *regression_summary(report)]
    lines += claims_section(report, "### Differences beyond the run's noise")
    lines += send_loop_lines(report)
    lines += host_busy_lines(report)
    if report.get("configurations_with_loss"):
        lines += [f"**Loss** in {len(report['configurations_with_loss'])} configuration(s): see the loss column.", ""]
    if client_bound_text(report):
        lines += [f"**{client_bound_text(report)}.**", ""]
    refs = report["references"]
    for group in report["groups"]:
        lines += [f"## {group['title']}", ""]
        if group.get("note"):
            lines += [f"*{group['note']}*", ""]
        lines += [f"Median over repeats (distribution-free interval); **bold** only where the intervals do not "
                  f"overlap; ratios of medians against {refs['format']} (same broker) and {refs['broker']} "
                  f"(same format).", "",
                  "| " + " | ".join(("broker", "format", *(m.column for m in GRID.values()), *AFTER_METRICS,
                                     "verdict")) + " |",
                  "|---|---|" + "---:|" * (len(GRID) + len(AFTER_METRICS)) + "---|"]
        for c in group["cells"]:
            if c["status"] == "failed":
                lines.append(f"| {c['broker']} | {format_text(c, report)} | " + "– | " * (len(GRID) + len(AFTER_METRICS))
                             + f"FAILED: {'; '.join(c['reasons'])} |")
                continue
            lines.append(
                f"| {c['broker']} | {format_text(c, report)} | "
                + "".join(f"{_metric(c, name, m.digits, m.scale)} | " for name, m in GRID.items())
                + f"{floor_text(c)} | {loss_text(c)} | "
                f"{_ratio(c, 'format', 'throughput_msgs_per_s')} | {_ratio(c, 'broker', 'throughput_msgs_per_s')} | "
                f"{verdict_text(c)} |")
        lines.append("")
        lines += search_lines(group)
        lines += shape_lines(group)
    if report.get("regression_check") or report["regressions"]:
        lines += regression_section(report)
    lines += history_view.markdown_lines(report)
    lines += durability_section(report)
    lines += faults.markdown_lines(report)
    lines += resources_section(report)
    lines += cost_section(report)
    lines += rules_section(report)
    return "\n".join(lines)


def _seconds(value) -> str:
    return "–" if value is None else f"{value:,.3f} s"


def startup_text(startup: dict) -> str:
    at = startup.get("at_attach") or {}
    read = startup["backlog_read_s"]
    # The consumers attach when due, or after the broker's count if a loaded host took it later; the figures still
    # run from when they were due.
    late = at.get("counted_s") is not None and at["counted_s"] > startup["attach_s"]
    attached = (f"attached {_seconds(at['counted_s'])} after the first send (due at {_seconds(startup['attach_s'])}; "
                f"they wait for the broker's count, taken late)" if late
                else f"attached {_seconds(startup['attach_s'])} after the first send")
    return (f"startup backlog of {startup['messages']:,} msgs sent at {startup['rate']:,g} msgs/s: the consumers "
            f"{attached}, when the broker held "
            f"{_figure(at.get('broker_messages'), 0)} msgs ({_figure(at.get('broker_backlog'), 0)} unread by the "
            f"group); first message {_seconds(startup['first_delivery_s'])} after "
            f"{'they were due' if late else 'attaching'}, the backlog read in "
            + (f"{_seconds(read)} ({_figure(startup['read_rate_msgs_per_s'], 0)} msgs/s)" if read is not None
               else f"– (only {startup['received']:,} of its messages arrived)"))


def bursts_text(bursts: dict) -> str:
    times = bursts["delivered_in_ms"]
    return (f"bursts of {bursts['messages']:,} msgs every {bursts['every_s']:g} s, due over {bursts['over_s']:g} s: "
            f"{bursts['delivered']} of {bursts['measured']} measured bursts wholly delivered; from a burst's first "
            f"due message to its last delivery median {_figure(times['p50'], 1)} ms, longest {_figure(times['max'], 1)} ms")


def shape_lines(group: dict) -> list[str]:
    """Each configuration's startup backlog and burst figures, per repeat."""
    out = []
    for c in group["cells"]:
        for repeat, startup, bursts in zip(c.get("repeat_numbers", []), c.get("startups") or [], c.get("bursts") or []):
            name = f"- {c['broker']} {c['format']} repeat {repeat}: "
            out += [name + text for text in (startup and startup_text(startup), bursts and bursts_text(bursts)) if text]
    return out + [""] if out else []


def held_for_text(search: dict) -> str:
    """The measured seconds behind a search's rate found, as ", sustainable for D s" (nothing if not recorded)."""
    seconds = search.get("sustainable_for_s")
    if seconds is None or search.get("max_sustainable_rate") is None:
        return ""
    return f", sustainable for {seconds:,.0f} s"


def limit_clause(search: dict) -> str:
    """What held a search below the rate above the one found, when the load generator did."""
    found = search.get("limit")
    if not client_bound(found):
        return ""
    return (f"; the step at {found['rate']:,.0f} msgs/s was {MARK}: its producers waited for room "
            f"{_share(found.get('window_wait_share'))} of their time, a producer used "
            f"{_figure(found.get('producer_cpu_pct'), 0)}% of a core")


def _share(value) -> str:
    return "–" if value is None else f"{value:.0%}"


def search_lines(group: dict) -> list[str]:
    """The maximum sustainable rate of each configuration of a search group, and every step of it."""
    out = []
    for c in group["cells"]:
        found = c.get("max_sustainable_rate") or {}
        for repeat, search in zip(c.get("repeat_numbers", []), c.get("searches") or []):
            steps = ", ".join(f"{s['rate']:,.0f} {'✓' if s['verdict'] == 'sustainable' else '✗ ' + s['verdict']}"
                              + (f" ({MARK})" if client_bound(s.get("limit")) else "") for s in search["steps"])
            found_text = ("–" if search["max_sustainable_rate"] is None
                          else rate_found_text(search["max_sustainable_rate"], search.get("limit")))
            out.append(f"- {c['broker']} {c['format']} repeat {repeat}: maximum sustainable rate "
                       f"{found_text}{held_for_text(search)} ({search['ended']}{limit_clause(search)}); "
                       f"steps: {steps}")
            out += [f"  - at {a['fraction']:.0%} ({a['rate']:,.0f} msgs/s): {a['verdict']}, end-to-end p99 "
                    f"{_figure((a.get('end_to_end_p99_us') or 0) / 1000, 2)} ms" for a in search.get("latency_at", [])]
        if found.get("median") is not None and len(c.get("searches") or []) > 1:
            out.append(f"- {c['broker']} {c['format']}: median {found['median']:,.0f} msgs/s over "
                       f"{len(c['searches'])} repeats")
    return out + [""] if out else []
