"""What the tool knows about itself: brokers, schema, openapi."""

from __future__ import annotations

import json
from pathlib import Path

from .common import EXIT_CELLS_FAILED, EXIT_OK, console, errors


def broker_rows() -> list[dict]:
    """Each registered broker: its version here, where it runs and what it supports."""
    from ..registry import plugins

    rows = []
    for plugin in plugins().values():
        installed = plugin.local.installed_version() if plugin.local else None
        first_use = getattr(plugin.local, "install_version", lambda: None)() if plugin.local else None
        missing = f"not installed ({first_use} on first use)" if first_use else "not installed"
        nodes = getattr(plugin.local, "max_nodes", 1) if plugin.local else 0
        where = [f"local (1 to {nodes} nodes)" if place == "local" and nodes > 1 else place for place in plugin.where()]
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
        # One place per line: "cloud: Amazon MSK" is never cut, however many brokers narrow the columns.
        table.add_row(row["name"], row["driver"], row["version"], "\n".join(row["runs"]), ", ".join(row["modes"]),
                      row["partitions"], ", ".join(row["persistence"]))
    console.print(table)
    console.print("[dim]Any endpoint of a driver's protocol can be benchmarked under its own name: "
                  '"targets": {"NAME": {"driver": DRIVER, ...}} with NAME in brokers.[/]')
    return EXIT_OK


def cmd_schema(args) -> int:
    """The run-request schema with its broker and format parts generated from the registries."""
    from .. import schema

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
    from ..api import build_app, openapi_json
    from ..api.deps import Deps

    document = openapi_json(build_app(Deps(store=None, starter=None, reports=None, schedules=list, mode="local")))
    if args.write:
        Path(args.write).write_text(document + "\n")
        console.print(f"written: {args.write}")
    else:
        print(document)
    return EXIT_OK


def register(sub) -> None:
    """Adds the brokers, schema and openapi commands to the top-level parser's subparsers."""
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
