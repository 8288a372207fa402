"""`brokerbench local`: start, stop or inspect the local stack."""

from __future__ import annotations

import json

from .common import EXIT_ENVIRONMENT, EXIT_OK, console, errors, local_stack, open_store


def cmd_local(args) -> int:
    from ..local.stack import StackError

    stack = local_stack(args)
    holder = stack.run_holder() if args.action == "down" else None
    if holder is not None:
        errors.print(f"local stack busy: run {holder.get('run_id', '?')} (pid {holder.get('pid', '?')}) is using it; "
                     "stop that run first (Ctrl-C), then `local down`", style="red", markup=False)
        return EXIT_ENVIRONMENT
    try:
        if args.action == "up":
            endpoints = stack.up(args.services or None, log=lambda m: console.print(m))
            if "dynamodb" in endpoints:  # the event store's table, ready for the first run
                open_store(endpoints)
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


def register(sub) -> None:
    """Adds the local command to the top-level parser's subparsers."""
    local = sub.add_parser("local", help="start, stop or inspect the local stack (the brokers, DynamoDB Local)")
    local.add_argument("action", choices=["up", "down", "status"])
    local.add_argument("services", nargs="*", metavar="SERVICE",
                       help="only these (default: every one); a cluster of 3 nodes, beside the single node, is "
                            "kafka@3, kafka-zookeeper@3, nats@3 (NATS JetStream servers) or rabbitmq@3; redis@2 or "
                            "redis@3 is a Redis master with 1 or 2 replicas and three Sentinels that fail it over")
    local.add_argument("--no-aof", action="store_true", help="start Redis without AOF persistence")
    local.set_defaults(func=cmd_local)
