"""The commands that run or check a suite or spec: run, validate, cost, suites."""

from __future__ import annotations

import argparse
import json
import math
import os
import webbrowser
from pathlib import Path

from .common import (EXIT_CELLS_FAILED, EXIT_ENVIRONMENT, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK, console,
                     disk_hint, errors, event_store, local_stack, print_results, write_results)


def _scale(text: str) -> float:
    """--scale F: a factor above 0 and at most 1 (argparse reports anything else and exits 2)."""
    from ..spec import valid_scale

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: give a factor above 0 and at most 1, "
                                         "e.g. 0.1") from None
    if not valid_scale(value):
        raise argparse.ArgumentTypeError(f"{text} is not above 0 and at most 1: give a factor such as 0.1")
    return value


def _requests(args) -> tuple[list[dict], str | None]:
    """The run requests to run or check, each validated as written, then scaled by --scale: a spec's one,
    or a suite's (a study may hold several runs, run one after another). SpecError when any is invalid."""
    from ..spec import Problem, SpecError, load_file, scaled, suite_runs, validate

    requests = [load_file(args.spec)] if args.spec else suite_runs(args.suite)
    only = getattr(args, "only", None)
    if only:  # some of a study's runs (e.g. one to run again)
        names = [str(r.get("name")) for r in requests]
        unknown = [name for name in only if name not in names]
        if args.spec or unknown:
            where = "a spec is one run" if args.spec else f"suite {args.suite} runs {', '.join(names)}"
            raise SpecError([Problem("--only", f"{', '.join(unknown) or only[0]} is not one of its runs ({where})")])
        requests = [r for r in requests if r.get("name") in only]
    for request in requests:
        validate(request)
    scale = getattr(args, "scale", None)
    if scale is not None:
        requests = [scaled(request, scale) for request in requests]
        for request in requests:
            validate(request)
    return requests, (None if args.spec else args.suite)


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 1:
        return f"{math.ceil(seconds)} s"
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def _print_problems(exc) -> None:
    errors.print("[bold red]invalid run request[/]")
    for problem in exc.problems:
        errors.print(f"  - {problem}", markup=False, highlight=False)


def _finish_interrupted(store, run_id: str, request: dict) -> None:
    """Ctrl-C: the run ends as interrupted and the targets it started are stopped (as teardown would)."""
    from ..workflow.stop import finish_stopped

    finish_stopped(store, run_id, request, "interrupted")


# What a failed workflow step means, for the message of a run whose workflow did not succeed.
WORKFLOW_ERRORS = {
    "TeardownFailed": "tearing down the targets failed (brokers this run started may still be running)",
    "RunFailed": "the run failed",
    "ProvisioningTimedOut": "a target was not ready in time",
}


def run_exit_code(results: dict, execution) -> tuple[int, list[str]]:
    """The exit code of a finished (not interrupted) run, and what to tell the user.

    Both the stored outcome and the workflow execution count: a run whose cells all completed is still
    not a success when a later step (CheckRegression, Aggregate, Teardown) failed.
    """
    problems = []
    code = EXIT_OK if results["status"] == "completed" else EXIT_CELLS_FAILED
    reason = results.get("reason") or ""
    if results["status"] == "failed":
        problems.append(f"run failed: {results['reason']}")
    elif results["status"] == "completed_with_failures" and reason:  # a step after the run's end failed
        problems.append(f"run completed with failures: {reason}")
    elif results["status"] not in ("completed", "completed_with_failures"):
        problems.append(f"run ended {results['status']}" + (f": {reason}" if reason else ""))
    if execution is not None and execution.status != "SUCCEEDED":
        code = code or EXIT_CELLS_FAILED
        if execution.error != "RunFailed" or results["status"] != "failed":  # not already said above
            what = WORKFLOW_ERRORS.get(execution.error, f"the workflow failed ({execution.error})")
            problems.append(f"workflow: {what}: {execution.cause}")
    return code, problems


def cmd_run(args) -> int:
    from ..spec import SpecError

    try:
        requests, suite = _requests(args)  # nothing starts when any of a study's runs is invalid
    except SpecError as exc:
        _print_problems(exc)
        return EXIT_INVALID
    if args.scale is not None:  # what the scale changed, as the run's notes keep it
        console.print(requests[0]["notes"][-1], style="dim", markup=False, highlight=False)
    if len(requests) == 1:
        return _run_one(args, requests[0], suite)[0]
    # A study of several runs (e.g. one per topology): one after another, each its own run and run id.
    names = ", ".join(str(r.get("name", "adhoc")) for r in requests)
    console.print(f"suite [bold]{suite}[/]: {len(requests)} runs, one after another: {names}")
    finished = []
    for number, request in enumerate(requests, 1):
        console.rule(f"run {number} of {len(requests)}: {request.get('name', 'adhoc')}")
        code, run_id = _run_one(args, request, suite)
        finished.append((request.get("name", "adhoc"), run_id, code))
        if code in (EXIT_INTERRUPTED, EXIT_ENVIRONMENT):
            break  # interrupted, or the stack is not usable: the later runs would not fare better
    console.print(f"\nsuite [bold]{suite}[/]: {len(finished)} of {len(requests)} runs")
    for name, run_id, code in finished:
        console.print(f"  {run_id or 'not started':22}  {name}  exit {code}", markup=False, highlight=False)
    for request in requests[len(finished):]:
        console.print(f"  {'-':22}  {request.get('name', 'adhoc')}  not run", markup=False, highlight=False)
    codes = {code for _, _, code in finished}
    return next(code for code in (EXIT_INTERRUPTED, EXIT_ENVIRONMENT, EXIT_INVALID, EXIT_CELLS_FAILED, EXIT_OK)
                if code in codes or code == EXIT_OK)


def _run_one(args, request: dict, suite: str | None) -> tuple[int, str | None]:
    """One validated run request on the local stack, under the stack's run lock: (exit code, run id; None when
    nothing started)."""
    from contextlib import ExitStack

    from ..events import new_run_id, read_report_events
    from ..local.stack import StackBusy

    if args.keep_stack:
        request = {**request, "keep_targets": True}
    silent = _silent_targets(request)
    if silent:  # nothing can be measured on them: refused before anything starts, as a stack that is not up is
        errors.print("; ".join(silent) + ". Start the broker, or correct its endpoint in the spec's targets; nothing "
                     "was started.", style="red", markup=False, highlight=False)
        return EXIT_ENVIRONMENT, None
    stack = local_stack(args)
    run_id = new_run_id()
    with ExitStack() as held:
        try:  # one run at a time per local stack: the second is refused before it touches anything
            held.enter_context(stack.run_lock(run_id))
        except StackBusy as exc:
            errors.print(f"local stack busy: {exc}", style="red", markup=False)
            return EXIT_ENVIRONMENT, run_id
        return _run_locked(args, stack, request, suite, run_id), run_id


def _silent_targets(request: dict) -> list[str]:
    """The endpoints a request names in `targets` that do not answer (5 s each), as `targets.BROKER: why`. A target
    that answers but cannot serve the client settings is left to the workflow, which ends the run before any cell."""
    from ..drivers import BrokerUnavailable
    from ..registry import get_driver
    from ..spec import validate

    spec = validate(request)
    silent = []
    for broker in spec["brokers"]:
        if broker in spec.get("targets", {}):
            try:
                get_driver(broker, spec["targets"][broker], spec["client"]).check(timeout_s=5)
            except BrokerUnavailable as exc:
                silent.append(f"targets.{broker}: {exc}")
            except Exception:  # noqa: BLE001 (TargetRefused and the like: the workflow's RecordTargetsReady says it)
                continue
    return silent


def _print_report(results_path: Path, args) -> None:
    """The run's last lines: where its results and reports are (the reports written by the workflow's Aggregate
    step), the HTML report last; opened in a browser only where one can show it (open_report)."""
    console.print(f"\nresults: {results_path.resolve()}", markup=False, highlight=False, soft_wrap=True)
    reports = [results_path.parent / name for name in ("report.md", "report.html")
               if (results_path.parent / name).is_file()]
    for report in reports:  # whole paths, never wrapped: one can copy or click them
        console.print(f"report:  {report.resolve()}", markup=False, highlight=False, soft_wrap=True)
    html = results_path.parent / "report.html"
    if html in reports and not args.no_open and open_report(html):
        console.print("(opened in the browser)", style="dim")


def open_report(html: Path, environ=None) -> bool:
    """Open the HTML report in a browser when one can show it: $BROWSER names one, or a display ($DISPLAY,
    $WAYLAND_DISPLAY) exists; never under CI ($CI set). True when a browser was started."""
    env = os.environ if environ is None else environ
    if env.get("CI") or not any(env.get(name) for name in ("BROWSER", "DISPLAY", "WAYLAND_DISPLAY")):
        return False
    try:
        return webbrowser.open(html.resolve().as_uri())
    except webbrowser.Error:
        return False


def _run_locked(args, stack, request: dict, suite: str | None, run_id: str) -> int:
    from ..events import StoreUnavailable

    try:
        return _run_on_stack(args, stack, request, suite, run_id)
    except StoreUnavailable as exc:
        errors.print(f"event store: {exc}.{disk_hint(stack)}\nRun {run_id} could not be followed to its end. Start the store again with "
                     "`brokerbench local up dynamodb` (it comes back on its port with its data), then read what "
                     f"was stored with `brokerbench report {run_id}`.", style="red", markup=False, highlight=False)
        return EXIT_ENVIRONMENT


def _run_on_stack(args, stack, request: dict, suite: str | None, run_id: str) -> int:
    """The run with the event store up: started for it when the stack's is not up, stopped afterwards unless
    --keep-stack (common.event_store)."""
    with event_store(args, stack=stack, log=lambda m: console.print(f"[dim]{m}[/]")) as store:
        if store is None:
            return EXIT_ENVIRONMENT
        return _run_with_store(args, stack, store, request, suite, run_id)


def _run_with_store(args, stack, store, request: dict, suite: str | None, run_id: str) -> int:
    from ..events import read_report_events
    from ..local.workflow import LocalWorkflow, WorkflowError
    from ..reports.results import build_results
    from .progress import EventProgress, progress_bars

    interrupted, execution = False, None
    with progress_bars() as progress:
        # The bars read without waiting out an outage: they show it and read again at the next poll, until it
        # has lasted as long as the store's own wait; then the run is stopped (as Ctrl-C stops it) and the CLI
        # says how to bring the store back (exit 3).
        bars = EventProgress(type(store)(store.table, client=store.client, outage_s=0), run_id, progress,
                             give_up_s=store.outage_s)
        try:
            execution = LocalWorkflow(stack, Path(args.out)).execute(request, suite=suite, run_id=run_id,
                                                                     on_poll=bars.poll)
        except KeyboardInterrupt:
            interrupted = True
            _finish_interrupted(store, run_id, request)
        except WorkflowError as exc:
            errors.print(f"[red]workflow:[/] {exc}")
            return EXIT_ENVIRONMENT
        bars.poll()
    events = read_report_events(store, run_id)
    if not events:
        if interrupted:
            return EXIT_INTERRUPTED
        errors.print(f"[red]run failed before it started:[/] {execution.error}: {execution.cause}")
        return EXIT_INVALID if execution.error == "InvalidRequest" else EXIT_CELLS_FAILED
    results = build_results(events)
    path = write_results(results, Path(args.out))
    print_results(results)
    if interrupted:
        errors.print("[yellow]interrupted: what was measured is stored and written below[/]")
        _print_report(path, args)
        return EXIT_INTERRUPTED
    if (execution is not None and (execution.output or {}).get("notify_error")
            and "Notify failed" not in (results.get("reason") or "")):  # else the run's reason says it
        cause = execution.output["notify_error"].get("Cause", "")
        errors.print(f"notification not sent: {cause}", style="yellow", markup=False, highlight=False)
    code, problems = run_exit_code(results, execution)
    for problem in problems:
        errors.print(problem, style="red", markup=False, highlight=False)
    _print_report(path, args)
    return code


def cmd_validate(args) -> int:
    from ..plan import run_seconds
    from ..spec import SpecError, expand, validate

    try:
        requests, _ = _requests(args)
        specs = [validate(request) for request in requests]
    except SpecError as exc:
        _print_problems(exc)
        return EXIT_INVALID
    counts = [(spec, expand(spec)) for spec in specs]
    total_s = sum(run_seconds(spec, cells) for spec, cells in counts)
    scaled = f" at scale {args.scale:g}" if args.scale is not None else ""
    if len(specs) == 1:
        console.print(f"valid: {len(counts[0][1])} cells{scaled}, at most {_duration(total_s)}")
        return EXIT_OK
    console.print(f"valid: {len(specs)} runs, {sum(len(cells) for _, cells in counts)} cells{scaled}, "
                  f"at most {_duration(total_s)}")
    for spec, cells in counts:
        console.print(f"  {spec['name']}: {len(cells)} cells, at most {_duration(run_seconds(spec, cells))}",
                      markup=False, highlight=False)
    return EXIT_OK


def cmd_cost(args) -> int:
    """A run's estimated AWS cost before it runs: its plan on the default provisioned targets; a study of
    several runs gets each run's estimate and their sum."""
    from rich.table import Table

    from ..cost import estimate_plan, hourly_text
    from ..reports import rows
    from ..reports.markdown import cost_rows
    from ..spec import SpecError, validate

    try:
        requests, suite = _requests(args)
        estimates = [(request.get("name", "adhoc"), estimate_plan(validate(request))) for request in requests]
    except SpecError as exc:
        _print_problems(exc)
        return EXIT_INVALID
    total = round(sum(estimate["total"] for _, estimate in estimates), 2)
    currency = estimates[0][1]["currency"]
    if args.json:
        if len(estimates) == 1:
            print(json.dumps(estimates[0][1], indent=2))
        else:
            print(json.dumps({"suite": suite, "total": total, "currency": currency,
                              "runs": [{"name": name, **estimate} for name, estimate in estimates]}, indent=2))
        return EXIT_OK
    name = f"suite {suite}" if suite else args.spec
    for run_name, estimate in estimates:
        title = name if len(estimates) == 1 else f"{name}, run {run_name}"
        table = Table(title=f"estimated AWS cost of {title}: ${estimate['total']:,.2f} {estimate['currency']}",
                      title_justify="left", header_style="bold")
        for column, justify in (("item", "left"), ("quantity", "right"), ("unit", "left"), ("unit price", "right"),
                                ("cost", "right")):
            table.add_column(column, justify=justify)
        for row in cost_rows(rows.cost(estimate)):
            table.add_row(*row)
        console.print(table)
        console.print(hourly_text(estimate["hourly"], estimate["currency"]), markup=False, highlight=False)
    if len(estimates) > 1:
        console.print(f"[bold]{name}: {len(estimates)} runs, ${total:,.2f} {currency} in all[/]")
    prices = estimates[0][1]["prices"]
    console.print(f"list prices for {prices['region']} as of {prices['as_of']}", markup=False, highlight=False)
    for assumption in dict.fromkeys(a for _, estimate in estimates for a in estimate["assumptions"]):
        console.print(f"- {assumption}", markup=False, highlight=False)
    return EXIT_OK


def cmd_suites(args) -> int:
    """Every built-in suite: its one-line description, cells and estimated time (plan.estimated_seconds,
    summed over a study's runs), and with --scale the scaled run's."""
    from ..plan import suite_summary
    from ..spec import all_suite_names

    for name in all_suite_names():
        full = suite_summary(name)
        runs = f", {len(full['runs'])} runs" if len(full["runs"]) > 1 else ""
        line = f"[bold]{name}[/] ({full['cells']} cells{runs}, at most {_duration(full['estimated_s'])}"
        if args.scale is not None:
            small = suite_summary(name, args.scale)
            line += f"; at scale {args.scale:g}: {small['cells']} cells, at most {_duration(small['estimated_s'])}"
        console.print(f"{line}): {full['description']}")
    return EXIT_OK


NO_OPEN_HELP = ("do not open the HTML report in a browser at the end (it opens only where $BROWSER or a display is "
                "set, never under $CI)")
SCALE_HELP = ("shorten durations, message counts and repeats by F (0 < F <= 1); brokers, sizes, rates, formats "
              "and modes stay as they are (spec.scaled)")


def register(sub) -> None:
    """Adds the run, validate, cost and suites commands to the top-level parser's subparsers."""
    run = sub.add_parser("run", help="run a suite or a spec on the local stack and print the comparison")
    source = run.add_mutually_exclusive_group()
    source.add_argument("--suite", default="quick", help="named suite (default quick; see `brokerbench suites`)")
    source.add_argument("--spec", help="run request JSON file (schemas/run-request.schema.json)")
    run.add_argument("--out", default="reports", help="results folder (default reports/): writes OUT/<run_id>/results.json")
    run.add_argument("--keep-stack", action="store_true", help="leave a stack this run started running afterwards")
    run.add_argument("--no-open", action="store_true", help=NO_OPEN_HELP)
    run.add_argument("--no-aof", action="store_true", help="start Redis without AOF persistence (default: AOF on)")
    run.add_argument("--scale", type=_scale, metavar="F", help=SCALE_HELP)
    run.add_argument("--only", action="append", metavar="RUN", help="run only this run of a study (repeatable)")
    run.set_defaults(func=cmd_run)

    validate = sub.add_parser("validate", help="check a spec or suite without running it")
    vsource = validate.add_mutually_exclusive_group(required=True)
    vsource.add_argument("--suite")
    vsource.add_argument("--spec")
    validate.add_argument("--scale", type=_scale, metavar="F", help=SCALE_HELP)
    validate.set_defaults(func=cmd_validate)

    cost = sub.add_parser("cost", help="estimate a suite's or spec's AWS cost before it runs (list prices)")
    csource = cost.add_mutually_exclusive_group(required=True)
    csource.add_argument("--suite")
    csource.add_argument("--spec")
    cost.add_argument("--json", action="store_true", help="print the estimate as JSON")
    cost.add_argument("--scale", type=_scale, metavar="F", help="the cost of the run scaled by F (0 < F <= 1)")
    cost.set_defaults(func=cmd_cost)

    suites = sub.add_parser("suites", help="list the built-in suites: description, cells and estimated time")
    suites.add_argument("--scale", type=_scale, metavar="F", help="also the estimate at this scale (0 < F <= 1)")
    suites.set_defaults(func=cmd_suites)
