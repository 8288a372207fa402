"""brokerbench command line: run suites, manage the local stack, show stored runs.

Exit codes: 0 every cell completed and every workflow step succeeded · 1 some cells failed, or a workflow
step failed (CheckRegression, Aggregate, Teardown), or, for compare, a regression · 2 invalid input · 3 the
environment is not usable (stack, event store, or another run holds the local stack) · 130 interrupted
(what was measured is kept).

One module per command group, each adding its commands with `register(sub)` (parser.py calls them in the
order `brokerbench --help` lists the commands): run.py (run, validate, cost, suites), local.py
(local), stored.py (show, report, compare, runs), study.py (study, import), serve.py (serve), webconsole.py
(console --aws), meta.py (brokers, schema, openapi); progress.py draws a run's progress from its events; common.py holds what they
share. A command imports what it needs inside its function, so `brokerbench --help` stays fast.
"""

from __future__ import annotations

from .common import (EXIT_CELLS_FAILED, EXIT_ENVIRONMENT, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK, console,
                     disk_hint, errors, local_stack, print_results, write_results)
from .parser import build_parser
from .run import _requests, run_exit_code

__all__ = ["EXIT_CELLS_FAILED", "EXIT_ENVIRONMENT", "EXIT_INTERRUPTED", "EXIT_INVALID", "EXIT_OK", "EventProgress",
           "_requests", "build_parser", "console", "errors", "main", "print_results", "run_exit_code",
           "write_results"]


def __getattr__(name: str):
    """EventProgress, loaded when asked for: it brings rich's progress bars, which only `run` draws."""
    if name == "EventProgress":
        from .progress import EventProgress

        return EventProgress
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # --help ends here: before the event store (numpy, jsonschema) loads
    from ..events import StoreUnavailable

    try:
        return args.func(args)
    except KeyboardInterrupt:
        errors.print("[yellow]interrupted[/]")
        return EXIT_INTERRUPTED
    except StoreUnavailable as exc:  # any command: say which store, and how to bring a local one back
        hint = disk_hint(local_stack(args))
        errors.print(f"event store: {exc}.{hint} A local store starts again with `brokerbench local up dynamodb`.",
                     style="red", markup=False, highlight=False)
        return EXIT_ENVIRONMENT

