"""`brokerbench console --aws`: the web console of the deployed API, through a local proxy that signs with your AWS
credentials (api/signing_proxy.py)."""

from __future__ import annotations

from .common import EXIT_ENVIRONMENT, EXIT_INVALID, EXIT_OK, errors

DEFAULT_STACK = "Brokerbench"  # cdk/app.py's default brokerbench:stackName
DEFAULT_PORT = 8081  # beside `brokerbench serve`'s 8080


def cmd_console(args) -> int:
    """Serve the console on 127.0.0.1 and forward its API requests to the deployed API, SigV4-signed."""
    import signal
    import threading

    import boto3
    from botocore.exceptions import BotoCoreError

    from ..api.signing_proxy import ProxyConfigError, SigningProxy, api_url_from_stack, check_api_url, region_of

    if not args.aws:
        errors.print("brokerbench console opens the deployed API's console: give --aws. The local console is "
                     "served by `brokerbench serve`.", style="red", markup=False, highlight=False)
        return EXIT_INVALID
    try:
        session = boto3.Session(profile_name=args.profile, region_name=args.region)
        api_url = check_api_url(args.api_url or api_url_from_stack(session.client("cloudformation"), args.stack))
        region = region_of(api_url) or args.region or session.region_name
        if not region:
            raise ProxyConfigError(f"--region: the region of {api_url} is not in its host name; give --region")
        if session.get_credentials() is None:
            errors.print("no AWS credentials found: set AWS_PROFILE (or --profile), run `aws sso login`, or "
                         "export AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY", style="red", markup=False, highlight=False)
            return EXIT_ENVIRONMENT
        proxy = SigningProxy(api_url, region, session.get_credentials, args.host, args.port).start()
    except ProxyConfigError as exc:
        errors.print(str(exc), style="red", markup=False, highlight=False)
        return EXIT_INVALID
    except BotoCoreError as exc:  # a profile that does not exist, no region for CloudFormation, no network
        errors.print(f"AWS: {exc}", style="red", markup=False, highlight=False)
        return EXIT_ENVIRONMENT
    except OSError as exc:
        errors.print(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", style="red", markup=False)
        return EXIT_ENVIRONMENT
    print(f"serving {proxy.url}", flush=True)
    errors.print(f"open {proxy.url} in a browser: its API requests go to {api_url} ({region}), signed with your AWS "
                 "credentials. Ctrl-C stops it.", markup=False, highlight=False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    proxy.stop()
    return EXIT_OK


def register(sub) -> None:
    """Adds the console command to the top-level parser's subparsers."""
    console = sub.add_parser("console", help="open the deployed API's web console through a local SigV4-signing proxy",
                             description="Serves the web console on 127.0.0.1 and forwards its API requests to the "
                                         "deployed API, signed with SigV4 (service execute-api) with your own AWS "
                                         "credentials. Ctrl-C stops it.")
    console.add_argument("--aws", action="store_true", help="the deployed API (required; `brokerbench serve` serves "
                                                            "the local one)")
    console.add_argument("--stack", default=DEFAULT_STACK,
                         help=f"the deployed stack whose ApiUrl output is used (default {DEFAULT_STACK})")
    console.add_argument("--api-url", help="the API's URL, stage included (default: the stack's ApiUrl output)")
    console.add_argument("--profile", help="AWS profile to sign with (default: AWS_PROFILE or the default chain)")
    console.add_argument("--region", help="the API's region when its URL does not name it (default: the profile's)")
    console.add_argument("--port", type=int, default=DEFAULT_PORT,
                         help=f"port (0: any free port; default {DEFAULT_PORT})")
    console.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    console.set_defaults(func=cmd_console)
