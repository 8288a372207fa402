"""The argparse tree: the top-level options, then each command group's commands in the order --help lists them."""

from __future__ import annotations

import argparse

from .. import __version__
from . import local, meta, run, serve, stored, study, webconsole

DESCRIPTION = "brokerbench command line: run suites, manage the local stack, show stored runs."
GROUPS = (run, local, stored, study, serve, webconsole, meta)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="brokerbench", description=DESCRIPTION,
                                     epilog="Exit codes: 0 ok, 1 some cells or a workflow step failed, 2 invalid "
                                            "input, 3 environment not usable (or busy), 130 interrupted.")
    parser.add_argument("--version", action="version", version=f"brokerbench {__version__}")
    parser.add_argument("--state-dir", help="local stack state folder (default .brokerbench/local)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(sub)
    return parser
