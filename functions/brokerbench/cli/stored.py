"""The commands that read stored runs: show, report, compare, runs.

Each reads what it needs with the event store up (common.event_store starts DynamoDB Local for the command when
the local stack is not up, and stops it afterwards), then renders with the store stopped again."""

from __future__ import annotations

import json
from pathlib import Path

from .common import (EXIT_CELLS_FAILED, EXIT_ENVIRONMENT, EXIT_INVALID, EXIT_OK, add_store_options, console, errors,
                     event_store, print_results)
from .run import NO_OPEN_HELP, open_report


def _run_events(store, *run_ids: str) -> list[list[dict]] | int:
    """Each run's events as reports read them (no per-interval histograms; a digested cell's intervals left
    out), or the exit code to return (the store could not start: None)."""
    from ..events import read_report_events

    if store is None:
        return EXIT_ENVIRONMENT
    found = []
    for run_id in run_ids:
        events = read_report_events(store, run_id)
        if not events:
            errors.print(f"[red]no run {run_id}[/]")
            return EXIT_INVALID
        found.append(events)
    return found


def cmd_show(args) -> int:
    from ..reports.results import build_results

    with event_store(args) as store:
        found = _run_events(store, args.run_id)
    if isinstance(found, int):
        return found
    results = build_results(found[0])
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_results(results)
    return EXIT_OK


REPORT_FILES = {"md": "report.md", "html": "report.html", "json": "report.json"}


def _render(report: dict, fmt: str) -> str:
    from ..reports import html, markdown

    if fmt == "json":
        return json.dumps(report, indent=2)
    return markdown.render(report) if fmt == "md" else html.render(report)


def cmd_report(args) -> int:
    from ..reports.model import build_report

    with event_store(args) as store:
        found = _run_events(store, args.run_id)
        exports = [] if isinstance(found, int) else _write_exports(args, store, found[0])
    if isinstance(found, int):
        return found
    report = build_report(found[0])
    check = Path(args.out) / args.run_id / "regression.json"  # the workflow's CheckRegression result, when here
    if check.is_file():
        report["regression_check"] = json.loads(check.read_text())
        report["baseline"] = report["regression_check"].get("baseline_run_id")
    body = _render(report, args.format)
    path = Path(args.out) / args.run_id / REPORT_FILES[args.format]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    if args.format == "md":
        print(body)
    console.print(f"report: {path}")
    console.print(f"for other tools: {', '.join(exports)}")
    if args.format == "html" and not args.no_open and open_report(path):
        console.print("(opened in the browser)", style="dim")
    return EXIT_OK


def _write_exports(args, store, events: list[dict]) -> list[str]:
    """cells.csv and hlog/ beside the report, as the workflow's Aggregate writes them (the logs read each cell's
    intervals from the store, so this runs with the store up); where they are."""
    from ..reports import export
    from ..reports.results import build_results
    from ..workflow.outputs import FolderReports

    sink = FolderReports(args.out)
    written = [sink.write(args.run_id, export.CELLS_CSV, export.cells_csv(build_results(events)))]
    folder = export.write_hlogs(lambda name, text: sink.write(args.run_id, name, text), store, args.run_id, events)
    return written + ([folder] if folder else [])


def _history(args, store, baseline_events: list[dict]) -> list[list[dict]]:
    """The baseline's history (earlier completed runs of its suite on the same target configuration, newest
    first, not the candidate), as reports read them; none with --no-history."""
    from ..events import read_report_events
    from ..reports.regression import HISTORY_RUNS, find_history

    if args.no_history:
        return []
    found = [h for h in find_history(store, args.baseline, baseline_events) if h != args.candidate]
    return [read_report_events(store, h) for h in found[:HISTORY_RUNS - 1]]


def _compare_table(title: str, verdicts: list[dict]):
    """The verdicts, regressions first. The two figures are those the change is of (the geometric means of each
    run's samples), so that change = candidate ÷ baseline − 1 can be checked by hand."""
    from rich.table import Table

    from ..reports.regression import FIGURES, detectable_text, figure_text

    table = Table(title=title, title_justify="left", header_style="bold", caption=FIGURES, caption_justify="left")
    for name, justify in [("cell", "left"), ("metric", "left"), ("verdict", "left"), ("baseline (geo. mean)", "right"),
                          ("candidate (geo. mean)", "right"), ("change", "right"), ("p", "right"),
                          ("detectable", "right"), ("why", "left")]:
        table.add_column(name, justify=justify)
    colors = {"regression": "red", "improvement": "green", "unstable": "yellow", "unchanged": "white"}
    order = {"regression": 0, "unstable": 1, "improvement": 2, "unchanged": 3}
    for v in sorted(verdicts, key=lambda v: order[v["verdict"]]):
        shown = "cannot tell" if v.get("cannot_tell") else v["verdict"]
        table.add_row(v["cell"], v["metric"], f"[{colors[v['verdict']]}]{shown}[/]", figure_text(v.get("baseline_mean")),
                      figure_text(v.get("candidate_mean")), "–" if v["change"] is None else f"{v['change']:+.1%}",
                      "–" if v["p_value"] is None else f"{v['p_value']:.2g}",
                      detectable_text(v), v["why"])
    return table


def cmd_compare(args) -> int:
    from ..reports.model import build_report
    from ..reports.regression import ALPHA, METHOD, compare

    with event_store(args) as store:
        found = _run_events(store, args.baseline, args.candidate)
        if isinstance(found, int):
            return found
        history = _history(args, store, found[0])
    history_ids = [h[0]["run_id"] for h in history]
    verdicts = compare(build_report(found[0]), build_report(found[1]), [build_report(h) for h in history])
    console.print(_compare_table(f"{args.candidate} against {args.baseline}"
                                 + (f" and {len(history)} earlier runs" if history else " (no history)"), verdicts))
    path = Path(args.out) / args.candidate / f"compare-{args.baseline}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"baseline": args.baseline, "candidate": args.candidate,
                                "history_run_ids": [args.baseline, *history_ids], "alpha": ALPHA, "method": METHOD,
                                "verdicts": verdicts}, indent=2))
    regressions = sum(v["verdict"] == "regression" for v in verdicts)
    unknown = [v for v in verdicts if v.get("cannot_tell")]
    line = f"{len(verdicts)} comparisons, {regressions} regressions"
    if unknown:
        need = max(v["runs_needed"] for v in unknown)
        line += (f", {len(unknown)} cannot tell (run-to-run noise unknown: {need} more completed "
                 f"run{'s' if need != 1 else ''} of the suite needed)")
    across = [v for v in verdicts if v.get("send_loops")]
    if across:
        line += (f", [yellow]{len(across)} between cells of different send loops (native C and Python): their "
                 "changes may be the loop's[/]")
    stamped = [v for v in verdicts if v.get("stamps")]
    if stamped:
        line += (f", [yellow]{len(stamped)} on a latency stamped differently in the earlier runs and in this one "
                 "(a change of method, not of the broker)[/]")
    console.print(f"{line} · {path}")
    return EXIT_CELLS_FAILED if regressions else EXIT_OK


def cmd_runs(args) -> int:
    with event_store(args) as store:
        if store is None:
            return EXIT_ENVIRONMENT
        listed = store.list_runs(limit=args.limit, suite=args.suite)
    for event in listed:
        data = event["data"]
        console.print(f"{event['run_id']}  {data.get('suite') or data['spec'].get('name')}  {len(data['cells'])} cells")
    return EXIT_OK


def register(sub) -> None:
    """Adds the show, report, compare and runs commands to the top-level parser's subparsers."""
    show = sub.add_parser("show", help="print a stored run's comparison, rebuilt from its events")
    show.add_argument("run_id")
    show.add_argument("--json", action="store_true", help="print results.json instead of tables")
    add_store_options(show)
    show.set_defaults(func=cmd_show)

    report = sub.add_parser("report", help="build a run's comparison report from its events")
    report.add_argument("run_id")
    report.add_argument("--format", choices=sorted(REPORT_FILES), default="md", help="md (printed), html or json")
    report.add_argument("--out", default="reports",
                        help="writes OUT/<run_id>/report.<format>, cells.csv and hlog/ (default reports/)")
    report.add_argument("--no-open", action="store_true", help=NO_OPEN_HELP.replace("the HTML report", "an HTML report"))
    add_store_options(report)
    report.set_defaults(func=cmd_report)

    compare = sub.add_parser("compare", help="regression check of CANDIDATE against BASELINE (exit 1 on a regression)")
    compare.add_argument("baseline")
    compare.add_argument("candidate")
    compare.add_argument("--out", default="reports", help="writes OUT/<candidate>/compare-<baseline>.json")
    compare.add_argument("--no-history", action="store_true",
                         help="compare the two runs alone (default: with the baseline's history from the store)")
    add_store_options(compare)
    compare.set_defaults(func=cmd_compare)

    runs = sub.add_parser("runs", help="list stored runs, newest first")
    runs.add_argument("--suite")
    runs.add_argument("--limit", type=int, default=20)
    add_store_options(runs)
    runs.set_defaults(func=cmd_runs)
