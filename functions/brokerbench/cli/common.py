"""What the commands share: exit codes, the consoles, the local stack and its event store, results output."""

from __future__ import annotations

import json
from contextlib import ExitStack, contextmanager
from pathlib import Path

EXIT_OK, EXIT_CELLS_FAILED, EXIT_INVALID, EXIT_ENVIRONMENT, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_BROKEN_PROMISE = 1  # guarantees: acknowledged messages lost where the broker promises none (as a failed cell)


class _Console:
    """A rich Console made when a command first prints: importing rich takes about a tenth of a second, which
    `brokerbench --help` does not need. Anything asked of it is asked of the Console."""

    def __init__(self, make) -> None:
        self._make, self._console = make, None

    @property
    def real(self):
        """The Console itself, for what rich checks is one (a Progress's console)."""
        if self._console is None:
            self._console = self._make()
        return self._console

    def __getattr__(self, name: str):
        return getattr(self.real, name)


def _stdout_console():
    from rich.console import Console

    made = Console()
    return made if made.is_terminal else Console(width=180)  # logs and CI: wide enough for the comparison table


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


console = _Console(_stdout_console)
errors = _Console(_stderr_console)


def local_stack(args):
    from ..local.stack import LocalStack

    # --no-aof is the Redis service's setting (brokers/redis_streams/local.py); other services ignore it.
    return LocalStack(Path(args.state_dir) if args.state_dir else None, redis_aof=not getattr(args, "no_aof", False))


def disk_hint(stack) -> str:
    """Why a local event store may fail its writes: the disk of its data is full."""
    from ..local.stack import MIN_FREE_MB

    free = stack.free_mb()
    return (f" The disk of the local stack's data ({stack.state_dir}) has {free} MB free: DynamoDB Local cannot "
            "write to a full disk; free some space first." if free < MIN_FREE_MB else "")


def open_store(endpoints: dict):
    from ..events.dynamodb import DynamoEventStore

    db = endpoints["dynamodb"]
    store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    store.ensure_table()
    return store


KEEP_STACK_HELP = "leave the event store (DynamoDB Local) running afterwards when this command started it"


def add_store_options(parser) -> None:
    """The flags of every command that reads or writes the store, named and meaning as `run`'s."""
    parser.add_argument("--keep-stack", action="store_true", help=KEEP_STACK_HELP)


def quiet_log(message: str) -> None:
    """Starting and stopping the store, on stderr: a command's output (`show --json`) stays what it prints."""
    errors.print(f"[dim]{message}[/]", markup=True, highlight=False)


@contextmanager
def event_store(args, *, stack=None, log=quiet_log):
    """The local event store for the length of one command, as `brokerbench run` has it: DynamoDB Local started
    when it is not up and stopped at the end (unless --keep-stack, or another command still uses it); a store that
    was up is left as found (LocalStack.serving). Yields None, after saying why, when it cannot start."""
    from ..local.stack import StackError

    stack = stack or local_stack(args)
    with ExitStack() as held:
        try:
            endpoints = held.enter_context(stack.serving(["dynamodb"], keep=getattr(args, "keep_stack", False),
                                                         log=log))
        except StackError as exc:
            errors.print(f"[red]local stack:[/] {exc}")
            endpoints = None
        yield None if endpoints is None else open_store(endpoints)


def write_results(results: dict, out_dir: Path) -> Path:
    folder = out_dir / results["run_id"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "results.json"
    path.write_text(json.dumps(results, indent=2))
    return path


def print_results(results: dict) -> None:
    from ..reports.faults import VERDICTS, by_setting, result_rows, setting_text
    from ..reports.faults import cell_line as fault_line
    from ..reports.results import stamps_note
    from ..reports.table import comparison_tables, floor_note, host_note, limit_note

    env = results["environment"]
    brokers = ", ".join(f"{b} {t['broker_version']}" for b, t in env.get("brokers", {}).items())
    console.print(f"\n[bold]run {results['run_id']}[/] ({results['name']}) · {results['status']} · {brokers} · "
                  f"{env['host']['cores']} cores {env['host']['cpu_model']}")
    for table in comparison_tables(results):
        console.print(table)
    for note in (floor_note(results), limit_note(results), host_note(results), stamps_note(results)):
        if note:
            console.print(note, style="dim", markup=False, highlight=False)
    faulted = [line for line in map(fault_line, results["cells"]) if line]
    if faulted:  # the report's Guarantees table, a line per cell
        console.print("\n[bold]under faults[/]")
        for line in faulted:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        for row in by_setting(result_rows(results["cells"]), results.get("durability") or {}):
            style = {"broken": "bold red", "expected": "yellow", "discarded": "yellow", "unknown": "dim"}.get(row["verdict"])
            console.print(f"{row['broker']} ({row['label']}): {setting_text(row)} · {VERDICTS[row['verdict']]}",
                          style=style, markup=False, highlight=False, soft_wrap=True)
