"""The report as Markdown (terminal, pull requests): regressions first, then highlights and grids."""

from __future__ import annotations


def _num(value, digits=0, scale=1.0) -> str:
    if value is None:
        return "–"
    return f"{value / scale:,.{digits}f}"


def _metric(cell: dict, name: str, digits=0, scale=1.0) -> str:
    est = cell["metrics"][name]
    text = _num(est["median"], digits, scale)
    if est["n"] > 1 and est["ci_low"] is not None and est["ci_high"] != est["ci_low"]:
        text += f" ({_num(est['ci_low'], digits, scale)}–{_num(est['ci_high'], digits, scale)})"
    if name in cell.get("best", []):
        text = f"**{text}**"
    return text


def _ratio(cell: dict, axis: str, name: str) -> str:
    ratio = cell.get("ratios", {}).get(axis, {}).get(name)
    return "–" if ratio is None else f"{ratio:.2f}×"


def regression_table(regressions: list[dict]) -> list[str]:
    lines = ["| cell | metric | verdict | baseline | candidate | change | p |", "|---|---|---|---:|---:|---:|---:|"]
    for r in regressions:
        lines.append(f"| {r['cell']} | {r['metric']} | **{r['verdict']}** | {_num(r['baseline_median'], 1)} | "
                     f"{_num(r['candidate_median'], 1)} | {r['change']:+.1%} | {r['p_value']:.2g} |")
    return lines


def _send_loops(report: dict) -> str:
    loops = sorted({c.get("send_loop") for g in report["groups"] for c in g["cells"] if c.get("send_loop")})
    return f" · send loop {', '.join(loops)}" if loops else ""


def render(report: dict) -> str:
    env = report["environment"]
    brokers = ", ".join(f"{b} {t['broker_version']}" for b, t in env.get("brokers", {}).items()) or "–"
    lines = [
        f"# brokerbench run {report['run_id']} ({report['name']})",
        "",
        f"Status **{report['status']}**{' — ' + report['reason'] if report.get('reason') else ''} · brokers {brokers} · "
        f"{env['host']['cores']} cores {env['host']['cpu_model']} · code {env['code_version']}"
        f"{_send_loops(report)}",
        "",
    ]
    regressions = [r for r in report["regressions"] if r["verdict"] == "regression"]
    lines.append("## Regressions")
    lines.append("")
    if regressions:
        lines += regression_table(regressions)
    else:
        baseline = report.get("baseline")
        lines.append(f"None against {baseline}." if baseline else "No regression check has been recorded for this run.")
    lines.append("")
    if report["highlights"]:
        lines += ["## Highlights", ""] + [f"- {h}" for h in report["highlights"]] + [""]
    refs = report["references"]
    for group in report["groups"]:
        lines += [f"## {group['title']}", "",
                  f"Median over repeats (95% interval); **bold** is the best of the group; ratios against "
                  f"{refs['format']} (same broker) and {refs['broker']} (same format).", "",
                  "| broker | format | bytes | msgs/s | MB/s | e2e p50 ms | e2e p99 ms | e2e p99.9 ms | pub p99 ms "
                  "| delay p99 ms | enc µs | dec µs | lost | vs format | vs broker | verdict |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for c in group["cells"]:
            if c["status"] == "failed":
                lines.append(f"| {c['broker']} | {c['format']} | " + "– | " * 13 + f"FAILED: {'; '.join(c['reasons'])} |")
                continue
            verdict = c["sustainability"]["verdict"]
            if verdict == "unsustainable":
                verdict = "⚠ unsustainable: " + "; ".join(c["sustainability"]["reasons"])
            lines.append(
                f"| {c['broker']} | {c['format']} | {_metric(c, 'encoded_bytes')} | {_metric(c, 'throughput_msgs_per_s')} | "
                f"{_metric(c, 'throughput_mb_per_s', 2)} | {_metric(c, 'end_to_end_p50_us', 2, 1000)} | "
                f"{_metric(c, 'end_to_end_p99_us', 2, 1000)} | {_metric(c, 'end_to_end_p999_us', 2, 1000)} | "
                f"{_metric(c, 'publish_latency_p99_us', 2, 1000)} | {_metric(c, 'publish_delay_p99_us', 2, 1000)} | "
                f"{_metric(c, 'encode_p50_ns', 1, 1000)} | {_metric(c, 'decode_p50_ns', 1, 1000)} | {_num(c['lost'])} | "
                f"{_ratio(c, 'format', 'throughput_msgs_per_s')} | {_ratio(c, 'broker', 'throughput_msgs_per_s')} | "
                f"{verdict} |")
        lines.append("")
    return "\n".join(lines)
