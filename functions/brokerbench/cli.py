"""brokerbench command line: run suites, manage the local stack, show stored runs.

Exit codes: 0 every cell completed · 1 some cells failed · 2 invalid input · 3 the environment
is not usable (stack, event store) · 130 interrupted (what was measured is kept).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from . import __version__

EXIT_OK, EXIT_CELLS_FAILED, EXIT_INVALID, EXIT_ENVIRONMENT, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

console = Console()
if not console.is_terminal:  # logs and CI: wide enough for the comparison table
    console = Console(width=160)
errors = Console(stderr=True, soft_wrap=True)


# -- helpers ---------------------------------------------------------------------------------
def _stack(args):
    from .local.stack import LocalStack

    return LocalStack(Path(args.state_dir) if args.state_dir else None, redis_aof=not getattr(args, "no_aof", False))


def _store(endpoints: dict):
    from .events.dynamodb import DynamoEventStore

    db = endpoints["dynamodb"]
    store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    store.ensure_table()
    return store


def _request(args) -> tuple[dict, str | None]:
    from .spec import load_file, load_suite

    if args.spec:
        return load_file(args.spec), None
    return load_suite(args.suite), args.suite


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
    from .reports.table import comparison_tables

    env = results["environment"]
    brokers = ", ".join(f"{b} {t['broker_version']}" for b, t in env.get("brokers", {}).items())
    console.print(f"\n[bold]run {results['run_id']}[/] ({results['name']}) · {results['status']} · {brokers} · "
                  f"{env['host']['cores']} cores {env['host']['cpu_model']}")
    for table in comparison_tables(results):
        console.print(table)


class _Bars:
    """One progress bar per cell, plus the whole run."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.tasks: dict[str, int] = {}
        self.overall = None

    def run_started(self, run_id, cells) -> None:
        console.print(f"run [bold]{run_id}[/]: {len(cells)} cells")
        self.overall = self.progress.add_task("[bold]run", total=len(cells), status="")

    def cell_progress(self, p) -> None:
        task = self.tasks.get(p.cell_id)
        if task is None:
            task = self.tasks[p.cell_id] = self.progress.add_task(p.cell_id, total=1.0, status="")
        self.progress.update(task, completed=p.fraction,
                             status=f"{p.phase} · sent {p.sent:,} · received {p.received:,}")

    def cell_finished(self, outcome) -> None:
        task = self.tasks.get(outcome.cell_id)
        status = "[green]ok[/]" if outcome.status == "completed" else f"[red]FAILED[/] {outcome.reason}"
        if task is not None:
            self.progress.update(task, completed=1.0, status=status)
        self.progress.advance(self.overall)


# -- commands --------------------------------------------------------------------------------
def cmd_run(args) -> int:
    from .local.stack import StackError
    from .reports.results import build_results
    from .runner import execute_run
    from .spec import SpecError, validate

    try:
        request, suite = _request(args)
        validate(request)  # nothing starts for an invalid request
    except SpecError as exc:
        _print_problems(exc)
        return EXIT_INVALID
    stack = _stack(args)
    started_stack = not stack.is_up()
    run_id = None
    try:
        try:
            endpoints = stack.up(log=lambda m: console.print(f"[dim]{m}[/]"))
            store = _store(endpoints)
        except StackError as exc:
            errors.print(f"[red]local stack:[/] {exc}")
            return EXIT_ENVIRONMENT
        endpoints = {**endpoints, **request.get("targets", {})}

        def remember(rid):
            nonlocal run_id
            run_id = rid

        columns = [TextColumn("{task.description}", style="cyan"), BarColumn(bar_width=24), TaskProgressColumn(),
                   TimeElapsedColumn(), TextColumn("{task.fields[status]}")]
        interrupted = False
        with Progress(*columns, console=console, transient=False) as progress:
            try:
                outcome = execute_run(request, endpoints, store, suite=suite, hooks=_Bars(progress), on_run_id=remember)
            except KeyboardInterrupt:
                interrupted = True
        if run_id is None:
            return EXIT_INTERRUPTED
        results = build_results(store.read(run_id))
        path = write_results(results, Path(args.out))
        print_results(results)
        console.print(f"\nresults: {path}")
        if interrupted:
            errors.print("[yellow]interrupted: what was measured is stored and written above[/]")
            return EXIT_INTERRUPTED
        return EXIT_OK if not outcome.failed else EXIT_CELLS_FAILED
    finally:
        if started_stack and not args.keep_stack:
            stack.down(log=lambda m: console.print(f"[dim]{m}[/]"))


def cmd_validate(args) -> int:
    from .spec import SpecError, expand, validate

    try:
        request, _ = _request(args)
        cells = expand(validate(request))
    except SpecError as exc:
        _print_problems(exc)
        return EXIT_INVALID
    console.print(f"valid: {len(cells)} cells")
    return EXIT_OK


def cmd_suites(args) -> int:
    from .spec import expand, load_suite, suite_names, validate

    for name in suite_names():
        request = load_suite(name)
        console.print(f"[bold]{name}[/] ({len(expand(validate(request)))} cells): {request.get('description', '')}")
    return EXIT_OK


def cmd_local(args) -> int:
    from .local.stack import StackError

    stack = _stack(args)
    try:
        if args.action == "up":
            endpoints = stack.up(log=lambda m: console.print(m))
            _store(endpoints)
            console.print_json(json.dumps(endpoints))
        elif args.action == "down":
            stack.down(log=lambda m: console.print(m))
        else:
            status = stack.status()
            for name, info in status.items():
                console.print(f"{name:9} {info['state']:8} " + (f"pid {info['pid']} port {info['port']} "
                              f"v{info['version']} log {info['log']}" if "pid" in info else ""))
            return EXIT_OK if all(i["state"] == "running" for i in status.values()) else EXIT_ENVIRONMENT
    except StackError as exc:
        errors.print(f"[red]local stack:[/] {exc}")
        return EXIT_ENVIRONMENT
    return EXIT_OK


def _stored(args):
    from .local.stack import StackError

    try:
        return _store(_stack(args).endpoints())
    except StackError as exc:
        errors.print(f"[red]local stack:[/] {exc}")
        return None


def cmd_show(args) -> int:
    from .reports.results import build_results

    store = _stored(args)
    if store is None:
        return EXIT_ENVIRONMENT
    events = store.read(args.run_id)
    if not events:
        errors.print(f"[red]no run {args.run_id}[/]")
        return EXIT_INVALID
    results = build_results(events)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_results(results)
    return EXIT_OK


def cmd_runs(args) -> int:
    store = _stored(args)
    if store is None:
        return EXIT_ENVIRONMENT
    for event in store.list_runs(limit=args.limit, suite=args.suite):
        data = event["data"]
        console.print(f"{event['run_id']}  {data.get('suite') or data['spec'].get('name')}  {len(data['cells'])} cells")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="brokerbench", description=__doc__.split("\n")[0],
                                     epilog="Exit codes: 0 ok, 1 some cells failed, 2 invalid input, "
                                            "3 environment not usable, 130 interrupted.")
    parser.add_argument("--version", action="version", version=f"brokerbench {__version__}")
    parser.add_argument("--state-dir", help="local stack state folder (default .brokerbench/local)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a suite or a spec on the local stack and print the comparison")
    source = run.add_mutually_exclusive_group()
    source.add_argument("--suite", default="quick", help="named suite (default quick; see `brokerbench suites`)")
    source.add_argument("--spec", help="run request JSON file (schemas/run-request.schema.json)")
    run.add_argument("--out", default="reports", help="results folder (default reports/): writes OUT/<run_id>/results.json")
    run.add_argument("--keep-stack", action="store_true", help="leave a stack this run started running afterwards")
    run.add_argument("--no-aof", action="store_true", help="start Redis without AOF persistence (default: AOF on)")
    run.set_defaults(func=cmd_run)

    validate = sub.add_parser("validate", help="check a spec or suite without running it")
    vsource = validate.add_mutually_exclusive_group(required=True)
    vsource.add_argument("--suite")
    vsource.add_argument("--spec")
    validate.set_defaults(func=cmd_validate)

    sub.add_parser("suites", help="list the built-in suites").set_defaults(func=cmd_suites)

    local = sub.add_parser("local", help="start, stop or inspect the local stack (Kafka, Redis, DynamoDB Local)")
    local.add_argument("action", choices=["up", "down", "status"])
    local.add_argument("--no-aof", action="store_true", help="start Redis without AOF persistence")
    local.set_defaults(func=cmd_local)

    show = sub.add_parser("show", help="print a stored run's comparison, rebuilt from its events")
    show.add_argument("run_id")
    show.add_argument("--json", action="store_true", help="print results.json instead of tables")
    show.set_defaults(func=cmd_show)

    runs = sub.add_parser("runs", help="list stored runs, newest first")
    runs.add_argument("--suite")
    runs.add_argument("--limit", type=int, default=20)
    runs.set_defaults(func=cmd_runs)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        errors.print("[yellow]interrupted[/]")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
