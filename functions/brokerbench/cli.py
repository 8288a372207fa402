"""brokerbench command line: run suites, manage the local stack, show stored runs.

Exit codes: 0 every cell completed and every workflow step succeeded · 1 some cells failed, or a workflow
step failed (CheckRegression, Aggregate, Teardown), or, for compare, a regression · 2 invalid input · 3 the
environment is not usable (stack, event store, or another run holds the local stack) · 130 interrupted
(what was measured is kept).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import webbrowser
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from . import __version__

EXIT_OK, EXIT_CELLS_FAILED, EXIT_INVALID, EXIT_ENVIRONMENT, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

console = Console()
if not console.is_terminal:  # logs and CI: wide enough for the comparison table
    console = Console(width=180)
errors = Console(stderr=True, soft_wrap=True)


# -- helpers ---------------------------------------------------------------------------------
def _stack(args):
    from .local.stack import LocalStack

    # --no-aof is the Redis service's setting (brokers/redis_streams/local.py); other services ignore it.
    return LocalStack(Path(args.state_dir) if args.state_dir else None, redis_aof=not getattr(args, "no_aof", False))


def _disk_hint(stack) -> str:
    """Why a local event store may fail its writes: the disk of its data is full."""
    from .local.stack import MIN_FREE_MB

    free = stack.free_mb()
    return (f" The disk of the local stack's data ({stack.state_dir}) has {free} MB free: DynamoDB Local cannot "
            "write to a full disk; free some space first." if free < MIN_FREE_MB else "")


def _store(endpoints: dict):
    from .events.dynamodb import DynamoEventStore

    db = endpoints["dynamodb"]
    store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    store.ensure_table()
    return store


def _scale(text: str) -> float:
    """--scale F: a factor above 0 and at most 1 (argparse reports anything else and exits 2)."""
    from .spec import valid_scale

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
    from .spec import Problem, SpecError, load_file, scaled, suite_runs, validate

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


def write_results(results: dict, out_dir: Path) -> Path:
    folder = out_dir / results["run_id"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "results.json"
    path.write_text(json.dumps(results, indent=2))
    return path


def print_results(results: dict) -> None:
    from .reports.table import comparison_tables, floor_note

    env = results["environment"]
    brokers = ", ".join(f"{b} {t['broker_version']}" for b, t in env.get("brokers", {}).items())
    console.print(f"\n[bold]run {results['run_id']}[/] ({results['name']}) · {results['status']} · {brokers} · "
                  f"{env['host']['cores']} cores {env['host']['cpu_model']}")
    for table in comparison_tables(results):
        console.print(table)
    note = floor_note(results)
    if note:
        console.print(note, style="dim", markup=False, highlight=False)


class EventProgress:
    """Progress bars drawn from the run's stored events: the same for Lambda- and EC2-kind workers.

    Reads only what is new: the run header once, then, for the cells that may be running (the first
    max_concurrency unfinished ones, in the order the run executes them), the events stored after the
    last one read. Cells run in a shuffled order, so one cursor over the whole run would miss a cell
    whose sort key is lower than one already seen; each cell has its own.
    """

    def __init__(self, store, run_id: str, progress: Progress) -> None:
        self.store, self.run_id, self.progress = store, run_id, progress
        self.bars: dict[str, int] = {}
        self.overall = None
        self.finished: set[str] = set()
        self.cells: dict[str, dict] | None = None
        self.run_order: list[dict] = []  # cells in execution order
        self.window = 1  # cells that may run at once
        self.next = 0  # position in run_order of the first unfinished cell
        self.cursor: dict[str, str] = {}  # cell_id -> sort key of the last event read
        self.state: dict[str, dict] = {}
        self.reads = 0  # queries made (the tests check that a poll reads little)
        self.unavailable = False  # the last poll found the event store not answering

    def _header(self) -> bool:
        if self.cells is not None:
            return True
        from .events import InvalidEvent, planned_cells

        self.reads += 1
        header = self.store.read(self.run_id, prefix="00#run", interval_histograms=False)
        if not header or header[0]["type"] != "RunRequested":
            return False
        try:
            data, planned = header[0]["data"], planned_cells(header)
        except InvalidEvent:  # a large plan's chunks are still being written
            return False
        self.cells = {c["cell_id"]: c for c in planned}
        self.run_order = sorted(planned, key=lambda c: c.get("order", c["index"]))
        self.window = max(1, int(data["spec"].get("max_concurrency") or 1))
        order = data["spec"].get("order", "fixed")
        how = f"random order, seed {data['spec'].get('order_seed')}" if order == "random" else "fixed order"
        console.print(f"run [bold]{self.run_id}[/]: {len(self.cells)} cells ({how})")
        self.overall = self.progress.add_task("[bold]run", total=len(self.cells), status="")
        return True

    def poll(self) -> None:
        """Show what the stored events say so far; an event store that does not answer is shown, not fatal: the
        run's own writes retry, and the bars catch up once it answers again."""
        from .events import StoreUnavailable

        try:
            self._poll()
            if self.unavailable and self.cells is not None:
                self.progress.update(self.overall, status="")
            self.unavailable = False
        except StoreUnavailable:
            self.unavailable = True
            if self.cells is not None:
                self.progress.update(self.overall, status="[yellow]the event store does not answer; waiting[/]")

    def _poll(self) -> None:
        from .events import cell_prefix

        if not self._header():
            return
        while self.next < len(self.run_order) and self.run_order[self.next]["cell_id"] in self.finished:
            self.next += 1
        position, running = self.next, 0
        while position < len(self.run_order) and running < self.window:
            cell = self.run_order[position]
            position += 1
            if cell["cell_id"] in self.finished:
                continue
            self.reads += 1
            new = self.store.read(self.run_id, prefix=cell_prefix(cell["index"]), interval_histograms=False,
                                  after=self.cursor.get(cell["cell_id"]))
            if new:
                self.cursor[cell["cell_id"]] = new[-1]["sk"]
                self._apply(cell, new)
            if cell["cell_id"] not in self.finished:
                running += 1

    def _apply(self, spec: dict, events: list[dict]) -> None:
        cell_id = spec["cell_id"]
        cell = self.state.setdefault(cell_id, {"intervals": 0, "sent": 0, "received": 0, "end": None})
        for event in events:
            if event["type"] == "CellStarted":
                cell.update(intervals=0, sent=0, received=0, worker=event["data"].get("worker", {}).get("kind", ""))
            elif event["type"] == "IntervalMeasured":
                counters = event["data"]["counters"]
                cell["intervals"] += 1
                cell["sent"] += counters["sent"]
                cell["received"] += counters["received"]
            elif event["type"] in ("CellCompleted", "CellFailed"):
                cell["end"] = event
        bar = self.bars.get(cell_id)
        if bar is None:
            bar = self.bars[cell_id] = self.progress.add_task(cell_id, total=1.0, status="")
        if cell["end"] is not None:
            end = cell["end"]
            status = "[green]ok[/]" if end["type"] == "CellCompleted" else f"[red]FAILED[/] {end['data']['reason']}"
            self.progress.update(bar, completed=1.0, status=status)
            self.progress.advance(self.overall)
            self.finished.add(cell_id)
            return
        if spec["messages"] is None:
            fraction = cell["intervals"] / max(1, spec["duration_s"])
        else:
            fraction = cell["sent"] / spec["messages"]
        self.progress.update(bar, completed=min(0.99, fraction),
                             status=f"{cell.get('worker', '')} · sent {cell['sent']:,} · received {cell['received']:,}")


def _finish_interrupted(store, run_id: str, request: dict) -> None:
    """Ctrl-C: the run ends as interrupted and the targets it started are stopped (as teardown would)."""
    from .workflow.stop import finish_stopped

    finish_stopped(store, run_id, request, "interrupted")


# -- commands --------------------------------------------------------------------------------
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
    from .spec import SpecError

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

    from .events import new_run_id, read_report_events
    from .local.stack import StackBusy

    if args.keep_stack:
        request = {**request, "keep_targets": True}
    silent = _silent_targets(request)
    if silent:  # nothing can be measured on them: refused before anything starts, as a stack that is not up is
        errors.print("; ".join(silent) + ". Start the broker, or correct its endpoint in the spec's targets; nothing "
                     "was started.", style="red", markup=False, highlight=False)
        return EXIT_ENVIRONMENT, None
    stack = _stack(args)
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
    from .drivers import BrokerUnavailable, get_driver
    from .spec import validate

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
    from .events import StoreUnavailable

    try:
        return _run_on_stack(args, stack, request, suite, run_id)
    except StoreUnavailable as exc:
        errors.print(f"event store: {exc}.{_disk_hint(stack)}\nRun {run_id} could not be followed to its end. Start the store again with "
                     "`brokerbench local up dynamodb` (it comes back on its port with its data), then read what "
                     f"was stored with `brokerbench report {run_id}`.", style="red", markup=False, highlight=False)
        return EXIT_ENVIRONMENT


def _run_on_stack(args, stack, request: dict, suite: str | None, run_id: str) -> int:
    from .events import read_report_events
    from .local.stack import StackError
    from .local.workflow import LocalWorkflow, WorkflowError
    from .reports.results import build_results

    started_store = not stack.is_up(["dynamodb"])
    try:
        try:
            store = _store(stack.up(["dynamodb"], log=lambda m: console.print(f"[dim]{m}[/]")))
        except StackError as exc:
            errors.print(f"[red]local stack:[/] {exc}")
            return EXIT_ENVIRONMENT
        columns = [TextColumn("{task.description}", style="cyan"), BarColumn(bar_width=24), TaskProgressColumn(),
                   TimeElapsedColumn(), TextColumn("{task.fields[status]}")]
        interrupted, execution = False, None
        with Progress(*columns, console=console, transient=False) as progress:
            # The bars read without waiting out an outage: they show it and read again at the next poll.
            bars = EventProgress(type(store)(store.table, client=store.client, outage_s=0), run_id, progress)
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
    finally:
        if started_store and not args.keep_stack:
            stack.down(["dynamodb"], log=lambda m: console.print(f"[dim]{m}[/]"))


def cmd_validate(args) -> int:
    from .plan import run_seconds
    from .spec import SpecError, expand, validate

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

    from .cost import estimate_plan
    from .reports.markdown import cost_rows
    from .spec import SpecError, validate

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
        for row in cost_rows(estimate):
            table.add_row(*row)
        console.print(table)
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
    from .plan import suite_summary
    from .spec import all_suite_names

    for name in all_suite_names():
        full = suite_summary(name)
        runs = f", {len(full['runs'])} runs" if len(full["runs"]) > 1 else ""
        line = f"[bold]{name}[/] ({full['cells']} cells{runs}, at most {_duration(full['estimated_s'])}"
        if args.scale is not None:
            small = suite_summary(name, args.scale)
            line += f"; at scale {args.scale:g}: {small['cells']} cells, at most {_duration(small['estimated_s'])}"
        console.print(f"{line}): {full['description']}")
    return EXIT_OK


def cmd_local(args) -> int:
    from .local.stack import StackError

    stack = _stack(args)
    holder = stack.run_holder() if args.action == "down" else None
    if holder is not None:
        errors.print(f"local stack busy: run {holder.get('run_id', '?')} (pid {holder.get('pid', '?')}) is using it; "
                     "stop that run first (Ctrl-C), then `local down`", style="red", markup=False)
        return EXIT_ENVIRONMENT
    try:
        if args.action == "up":
            endpoints = stack.up(args.services or None, log=lambda m: console.print(m))
            if "dynamodb" in endpoints:  # the event store's table, ready for the first run
                _store(endpoints)
            clusters = {name: stack.endpoint(name) for name in args.services if "@" in name}
            console.print_json(json.dumps({**endpoints, **clusters}))
        elif args.action == "down":
            stack.down(args.services or None, log=lambda m: console.print(m))
        else:
            status = stack.status()
            width = max(map(len, status))
            for name, info in status.items():
                console.print(f"{name:{width}} {info['state']:8} " + (f"pid {', '.join(map(str, info['pids']))} "
                              f"port {info['port']} v{info['version']} log {info['log']}" if "pid" in info else ""),
                              markup=False)
            return EXIT_OK if all(i["state"] == "running" for i in status.values()) else EXIT_ENVIRONMENT
    except StackError as exc:
        errors.print(f"[red]local stack:[/] {exc}")
        return EXIT_ENVIRONMENT
    return EXIT_OK


def _stored(args):
    from .local.stack import StackError

    try:
        return _store(_stack(args).endpoints(required=["dynamodb"]))
    except StackError as exc:
        errors.print(f"[red]local stack:[/] {exc}")
        return None


def _run_events(args, *run_ids: str) -> list[list[dict]] | int:
    """Each run's events as reports read them (no per-interval histograms; a digested cell's intervals left
    out), or the exit code to return."""
    from .events import read_report_events

    store = _stored(args)
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
    from .reports.results import build_results

    found = _run_events(args, args.run_id)
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
    from .reports import html, markdown

    if fmt == "json":
        return json.dumps(report, indent=2)
    return markdown.render(report) if fmt == "md" else html.render(report)


def cmd_report(args) -> int:
    from .reports.model import build_report

    found = _run_events(args, args.run_id)
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
    return EXIT_OK


def _history(args, baseline_events: list[dict]) -> list[list[dict]] | int:
    """The baseline's history (earlier completed runs of its suite on the same target configuration, newest
    first, not the candidate), as reports read them; none with --no-history."""
    from .events import read_report_events
    from .reports.regression import HISTORY_RUNS, find_history

    if args.no_history:
        return []
    store = _stored(args)
    if store is None:
        return EXIT_ENVIRONMENT
    found = [h for h in find_history(store, args.baseline, baseline_events) if h != args.candidate]
    return [read_report_events(store, h) for h in found[:HISTORY_RUNS - 1]]


def _compare_table(title: str, verdicts: list[dict]):
    from rich.table import Table

    from .reports.regression import detectable_text

    table = Table(title=title, title_justify="left", header_style="bold")
    for name, justify in [("cell", "left"), ("metric", "left"), ("verdict", "left"), ("baseline", "right"),
                          ("candidate", "right"), ("change", "right"), ("p", "right"), ("detectable", "right"),
                          ("why", "left")]:
        table.add_column(name, justify=justify)
    colors = {"regression": "red", "improvement": "green", "unstable": "yellow", "unchanged": "white"}
    order = {"regression": 0, "unstable": 1, "improvement": 2, "unchanged": 3}
    fmt = lambda x: "–" if x is None else f"{x:,.1f}"  # noqa: E731
    for v in sorted(verdicts, key=lambda v: order[v["verdict"]]):
        shown = "cannot tell" if v.get("cannot_tell") else v["verdict"]
        table.add_row(v["cell"], v["metric"], f"[{colors[v['verdict']]}]{shown}[/]", fmt(v["baseline_median"]),
                      fmt(v["candidate_median"]), "–" if v["change"] is None else f"{v['change']:+.1%}",
                      "–" if v["p_value"] is None else f"{v['p_value']:.2g}",
                      detectable_text(v), v["why"])
    return table


def cmd_compare(args) -> int:
    from .reports.model import build_report
    from .reports.regression import ALPHA, METHOD, compare

    found = _run_events(args, args.baseline, args.candidate)
    if isinstance(found, int):
        return found
    history = _history(args, found[0])
    if isinstance(history, int):
        return history
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
    console.print(f"{line} · {path}")
    return EXIT_CELLS_FAILED if regressions else EXIT_OK


def cmd_runs(args) -> int:
    store = _stored(args)
    if store is None:
        return EXIT_ENVIRONMENT
    for event in store.list_runs(limit=args.limit, suite=args.suite):
        data = event["data"]
        console.print(f"{event['run_id']}  {data.get('suite') or data['spec'].get('name')}  {len(data['cells'])} cells")
    return EXIT_OK


def cmd_study(args) -> int:
    """A published study beside our stored runs of it (reports/study.py); `all` writes every study."""
    from .reports import study

    try:
        names = study.study_names() if args.name == "all" else [study.load_study(args.name)["name"]]
    except study.StudyError as exc:
        errors.print(f"[red]{exc}[/]", markup=False)
        return EXIT_INVALID
    if args.run and args.name == "all":
        errors.print("[red]--run: name one study to pick its runs (all takes each study's newest runs)[/]")
        return EXIT_INVALID
    store = _stored(args)
    if store is None:
        return EXIT_ENVIRONMENT
    comparisons = []
    for name in names:
        definition = study.load_study(name)
        try:
            runs = study.find_runs(store, definition, args.run)
        except study.StudyError as exc:
            errors.print(f"[red]{exc}[/]", markup=False)
            return EXIT_INVALID
        missing = [r["name"] for r in definition["runs"] if r["name"] not in runs]
        if missing:
            errors.print(f"[red]study {name}: no ended run of {', '.join(missing)} is stored; run "
                         f"`brokerbench run --suite {name}` (add --scale 0.1 for a short one) or name one with --run[/]",
                         markup=False)
            return EXIT_INVALID
        comparisons.append(study.compare(definition, runs))
        if args.archive:
            for run in runs.values():
                study.archive_run(store, run.run_id, Path(args.archive))
    if args.json:
        text = json.dumps(comparisons if args.name == "all" else comparisons[0], indent=2)
    else:
        text = study.document(comparisons) if args.name == "all" else study.markdown(comparisons[0])
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text if text.endswith("\n") else text + "\n")
        held = sum(c["ours"]["verdict"] == study.HOLDS for comp in comparisons for c in comp["conclusions"])
        checked = sum(c["ours"]["verdict"] in (study.HOLDS, study.FAILS) for comp in comparisons
                      for c in comp["conclusions"])
        console.print(f"{args.out}: {len(comparisons)} studies, {held} of {checked} checked conclusions hold here",
                      markup=False, highlight=False)
    else:
        print(text)
    return EXIT_OK


def cmd_import(args) -> int:
    """Load archived runs (brokerbench study --archive) into the event store."""
    from .reports import study

    store = _stored(args)
    if store is None:
        return EXIT_ENVIRONMENT
    for name in args.files:
        try:
            run_id, count = study.import_archive(store, Path(name))
        except (OSError, ValueError, KeyError) as exc:
            errors.print(f"[red]file {name}: {exc}[/]", markup=False)
            return EXIT_INVALID
        console.print(f"{run_id}: {count} events", markup=False, highlight=False)
    return EXIT_OK


def cmd_serve(args) -> int:
    """The API and console on 127.0.0.1, runs on the local stack, due schedules started."""
    import signal
    import threading

    from . import schedules
    from .api import build_app
    from .api.deps import local
    from .api.serve import ApiServer, RemoteBindRefused, check_bind
    from .local.stack import StackError
    from .observability import lambda_entry

    try:
        check_bind(args.host, args.allow_remote)
        schedule_list = [] if args.no_schedules else schedules.load(args.schedules)
    except (RemoteBindRefused, schedules.ScheduleError) as exc:
        errors.print(str(exc), style="red", markup=False, highlight=False)
        return EXIT_INVALID
    stack = _stack(args)
    started_store = not stack.is_up(["dynamodb"])
    try:
        endpoints = stack.up(["dynamodb"], log=lambda m: errors.print(f"[dim]{m}[/]"))
        store = _store(endpoints)
    except StackError as exc:
        errors.print(f"[red]local stack:[/] {exc}")
        return EXIT_ENVIRONMENT
    out = Path(args.out).resolve()
    os.environ.update({"BROKERBENCH_MODE": "local", "BROKERBENCH_STATE_DIR": str(stack.state_dir),
                       "BROKERBENCH_EVENTS_TABLE": store.table, "BROKERBENCH_DYNAMODB_ENDPOINT": store.client.meta.endpoint_url,
                       "BROKERBENCH_REPORTS": str(out)})
    deps = local(stack, store, out, args.schedules)
    app = build_app(deps)
    handler = lambda_entry(correlation_id_path=None)(lambda event, context: app.resolve(event, context))
    stop = threading.Event()
    try:
        server = ApiServer(handler, args.host, args.port).start()
    except OSError as exc:
        errors.print(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", style="red", markup=False)
        if started_store:
            stack.down(["dynamodb"], log=lambda m: None)
        return EXIT_ENVIRONMENT
    print(f"serving {server.url}", flush=True)
    if schedule_list:
        scheduler = schedules.Scheduler(schedule_list, store, deps.starter.start)
        threading.Thread(target=scheduler.run, args=(stop,), name="scheduler", daemon=True).start()
        errors.print(f"[dim]{len(schedule_list)} schedules watched[/]")
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        stop.set()
    errors.print("[dim]stopping: runs in progress are cancelled (what they measured is kept)[/]")
    server.stop()
    deps.starter.cancel_all()
    deps.starter.wait(120)
    if started_store:
        stack.down(["dynamodb"], log=lambda m: errors.print(f"[dim]{m}[/]"))
    return EXIT_OK


def broker_rows() -> list[dict]:
    """Each registered broker: its version here, where it runs and what it supports."""
    from .brokers import plugins

    rows = []
    for plugin in plugins().values():
        installed = plugin.local.installed_version() if plugin.local else None
        first_use = getattr(plugin.local, "install_version", lambda: None)() if plugin.local else None
        nodes = getattr(plugin.local, "max_nodes", 1) if plugin.local else 0
        where = [f"local (1 to {nodes} nodes)" if place == "local" and nodes > 1 else place for place in plugin.where()]
        missing = f"not installed ({first_use} on first use)" if first_use else "not installed"
        rows.append({"name": plugin.name, "description": plugin.description, "driver": plugin.family,
                     "version": installed or (missing if plugin.local else "-"), "runs": where,
                     "local_nodes": nodes,
                     "modes": plugin.capabilities.modes, "partitions": plugin.capabilities.partitions,
                     "persistence": plugin.capabilities.persistence})
    return rows


def cmd_brokers(args) -> int:
    from rich.table import Table

    rows = broker_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    table = Table(title="registered brokers", title_justify="left", header_style="bold")
    for name in ("broker", "driver", "local version", "runs", "modes", "partitions", "persistence (default first)"):
        table.add_column(name)
    for row in rows:
        table.add_row(row["name"], row["driver"], row["version"], ", ".join(row["runs"]), ", ".join(row["modes"]),
                      row["partitions"], ", ".join(row["persistence"]))
    console.print(table)
    console.print("[dim]Any endpoint of a driver's protocol can be benchmarked under its own name: "
                  '"targets": {"NAME": {"driver": DRIVER, ...}} with NAME in brokers.[/]')
    return EXIT_OK


def cmd_schema(args) -> int:
    """The run-request schema with its broker and format parts generated from the registries."""
    from . import schema

    if args.write:
        console.print(f"{'rewritten' if schema.write() else 'up to date'}: {schema.REQUEST_SCHEMA}")
        return EXIT_OK
    document = schema.generated()
    if args.check:
        if document != schema.checked_in():
            errors.print(f"{schema.REQUEST_SCHEMA} differs from the registries: run `brokerbench schema --write`")
            return EXIT_CELLS_FAILED
        return EXIT_OK
    print(json.dumps(document, indent=2, ensure_ascii=False))
    return EXIT_OK


def cmd_openapi(args) -> int:
    """The OpenAPI document the API generates (schemas/openapi.json is this output)."""
    from .api import build_app, openapi_json
    from .api.deps import Deps

    document = openapi_json(build_app(Deps(store=None, starter=None, reports=None, schedules=list, mode="local")))
    if args.write:
        Path(args.write).write_text(document + "\n")
        console.print(f"written: {args.write}")
    else:
        print(document)
    return EXIT_OK


SCALE_HELP = ("shorten durations, message counts and repeats by F (0 < F <= 1); brokers, sizes, rates, formats "
              "and modes stay as they are (spec.scaled)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="brokerbench", description=__doc__.split("\n")[0],
                                     epilog="Exit codes: 0 ok, 1 some cells or a workflow step failed, 2 invalid "
                                            "input, 3 environment not usable (or busy), 130 interrupted.")
    parser.add_argument("--version", action="version", version=f"brokerbench {__version__}")
    parser.add_argument("--state-dir", help="local stack state folder (default .brokerbench/local)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a suite or a spec on the local stack and print the comparison")
    source = run.add_mutually_exclusive_group()
    source.add_argument("--suite", default="quick", help="named suite (default quick; see `brokerbench suites`)")
    source.add_argument("--spec", help="run request JSON file (schemas/run-request.schema.json)")
    run.add_argument("--out", default="reports", help="results folder (default reports/): writes OUT/<run_id>/results.json")
    run.add_argument("--keep-stack", action="store_true", help="leave a stack this run started running afterwards")
    run.add_argument("--no-open", action="store_true",
                     help="do not open the HTML report in a browser at the end (it opens only where $BROWSER or a "
                          "display is set, never under $CI)")
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

    local = sub.add_parser("local", help="start, stop or inspect the local stack (the brokers, DynamoDB Local)")
    local.add_argument("action", choices=["up", "down", "status"])
    local.add_argument("services", nargs="*", metavar="SERVICE",
                       help="only these (default: every one); a Kafka cluster of 3 nodes is kafka@3 or "
                            "kafka-zookeeper@3, beside the single node")
    local.add_argument("--no-aof", action="store_true", help="start Redis without AOF persistence")
    local.set_defaults(func=cmd_local)

    show = sub.add_parser("show", help="print a stored run's comparison, rebuilt from its events")
    show.add_argument("run_id")
    show.add_argument("--json", action="store_true", help="print results.json instead of tables")
    show.set_defaults(func=cmd_show)

    report = sub.add_parser("report", help="build a run's comparison report from its events")
    report.add_argument("run_id")
    report.add_argument("--format", choices=sorted(REPORT_FILES), default="md", help="md (printed), html or json")
    report.add_argument("--out", default="reports", help="writes OUT/<run_id>/report.<format> (default reports/)")
    report.set_defaults(func=cmd_report)

    compare = sub.add_parser("compare", help="regression check of CANDIDATE against BASELINE (exit 1 on a regression)")
    compare.add_argument("baseline")
    compare.add_argument("candidate")
    compare.add_argument("--out", default="reports", help="writes OUT/<candidate>/compare-<baseline>.json")
    compare.add_argument("--no-history", action="store_true",
                         help="compare the two runs alone (default: with the baseline's history from the store)")
    compare.set_defaults(func=cmd_compare)

    runs = sub.add_parser("runs", help="list stored runs, newest first")
    runs.add_argument("--suite")
    runs.add_argument("--limit", type=int, default=20)
    runs.set_defaults(func=cmd_runs)

    study = sub.add_parser("study", help="a published study's tables and conclusions beside our stored runs of it",
                           description="Writes the comparison of a study (a suite with a published section: "
                                       "tallberg, helenius, myastovskiy, downard) from stored runs: its tables "
                                       "beside ours with the ratio, and which of its conclusions hold here. Without "
                                       "--run, each of the study's runs is its newest ended run. `all` writes "
                                       "every study (docs/STUDIES.md).")
    study.add_argument("name", help="study name, or all")
    study.add_argument("--run", action="append", metavar="RUN_ID", help="use this stored run (repeat for each run)")
    study.add_argument("--out", help="write to this file (default: print)")
    study.add_argument("--json", action="store_true", help="the comparison as JSON instead of Markdown")
    study.add_argument("--archive", metavar="DIR", help="also write the runs' events to DIR/<run_id>.jsonl.gz")
    study.set_defaults(func=cmd_study)

    load = sub.add_parser("import", help="load archived runs (study --archive) into the event store")
    load.add_argument("files", nargs="+", metavar="FILE")
    load.set_defaults(func=cmd_import)

    serve = sub.add_parser("serve", help="serve the HTTP API and the web console locally; runs due schedules",
                           description="Serves the API's Lambda handler on 127.0.0.1 (runs execute on the local stack, "
                                       "one at a time) and starts due scheduled checks. Ctrl-C stops it.")
    serve.add_argument("--port", type=int, default=8080, help="port (0: any free port; default 8080)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host (no authentication!)")
    serve.add_argument("--schedules", help="schedules file (default: the built-in schedules.json)")
    serve.add_argument("--no-schedules", action="store_true", help="do not start scheduled checks")
    serve.add_argument("--out", default="reports", help="folder for run results and reports (default: reports)")
    serve.set_defaults(func=cmd_serve)

    brokers = sub.add_parser("brokers", help="list the registered brokers: version, where they run, what they support")
    brokers.add_argument("--json", action="store_true", help="print them as JSON")
    brokers.set_defaults(func=cmd_brokers)

    schema = sub.add_parser("schema", help="print the run-request schema generated from the broker and codec registries")
    what = schema.add_mutually_exclusive_group()
    what.add_argument("--write", action="store_true", help="rewrite schemas/run-request.schema.json")
    what.add_argument("--check", action="store_true", help="exit 1 when the checked-in schema differs")
    schema.set_defaults(func=cmd_schema)

    openapi = sub.add_parser("openapi", help="print the API's OpenAPI document")
    openapi.add_argument("--write", metavar="FILE", help="write it to FILE (e.g. schemas/openapi.json)")
    openapi.set_defaults(func=cmd_openapi)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .events import StoreUnavailable

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        errors.print("[yellow]interrupted[/]")
        return EXIT_INTERRUPTED
    except StoreUnavailable as exc:  # any command: say which store, and how to bring a local one back
        hint = _disk_hint(_stack(args))
        errors.print(f"event store: {exc}.{hint} A local store starts again with `brokerbench local up dynamodb`.",
                     style="red", markup=False, highlight=False)
        return EXIT_ENVIRONMENT


if __name__ == "__main__":
    sys.exit(main())
