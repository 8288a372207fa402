"""`brokerbench serve`: the API and console on 127.0.0.1, runs on the local stack."""

from __future__ import annotations

from pathlib import Path

from .common import EXIT_ENVIRONMENT, EXIT_INVALID, EXIT_OK, add_store_options, errors, event_store, local_stack


def cmd_serve(args) -> int:
    """The API and console on 127.0.0.1, runs on the local stack, due schedules started."""
    from .. import schedules
    from ..api.serve import RemoteBindRefused, check_bind

    try:
        check_bind(args.host, args.allow_remote)
        schedule_list = [] if args.no_schedules else schedules.load(args.schedules)
    except (RemoteBindRefused, schedules.ScheduleError) as exc:
        errors.print(str(exc), style="red", markup=False, highlight=False)
        return EXIT_INVALID
    stack = local_stack(args)
    with event_store(args, stack=stack) as store:
        if store is None:
            return EXIT_ENVIRONMENT
        return _serve(args, stack, store, schedule_list)


def _serve(args, stack, store, schedule_list: list) -> int:
    """Serves until Ctrl-C or SIGTERM; the runs in progress are cancelled before it returns."""
    import os
    import signal
    import threading

    from .. import schedules
    from ..api import build_app
    from ..api.deps import local
    from ..api.serve import ApiServer
    from ..observability import lambda_entry

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
    return EXIT_OK


def register(sub) -> None:
    """Adds the serve command to the top-level parser's subparsers."""
    serve = sub.add_parser("serve", help="serve the HTTP API and the web console locally; runs due schedules",
                           description="Serves the API's Lambda handler on 127.0.0.1 (runs execute on the local stack, "
                                       "one at a time) and starts due scheduled checks. Ctrl-C stops it.")
    serve.add_argument("--port", type=int, default=8080, help="port (0: any free port; default 8080)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host (no authentication!)")
    serve.add_argument("--schedules", help="schedules file (default: the built-in schedules.json)")
    serve.add_argument("--no-schedules", action="store_true", help="do not start scheduled checks")
    serve.add_argument("--out", default="reports", help="folder for run results and reports (default: reports)")
    add_store_options(serve)
    serve.set_defaults(func=cmd_serve)
