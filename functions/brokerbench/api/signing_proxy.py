"""`brokerbench console --aws`: the web console on 127.0.0.1, in front of the deployed API.

The deployed API authorizes every method with IAM (SigV4), and a browser cannot sign. This server serves the
console's own files (api/console/, the files the API serves at / and /console/<name>) and forwards every other
request to the API's URL, signed with SigV4 (botocore's SigV4Auth, service `execute-api`, the API's region)
with the caller's own AWS credentials, read again for each request so a refreshed session keeps working.

What is forwarded is what is signed: the method, the path under the API's stage, the query string in SigV4's
canonical form (each name and value percent-encoded except A-Z a-z 0-9 - _ . ~, as API Gateway re-encodes what it
receives before it checks the signature), the body, and the headers the API reads (Content-Type, Accept,
Idempotency-Key). Cookies and every other browser header stay on this machine. It binds loopback only: whoever
reaches it acts with the credentials it signs with; and it refuses what another site open in the same browser could
send it (another Origin, another Host).
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from urllib.parse import quote, unquote_plus, urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

from .http_handler import HOP_BY_HOP, AnyMethodHandler
from .meta import CONSOLE_DIR, CONTENT_TYPES
from .serve import MAX_BODY

SERVICE = "execute-api"
FORWARDED_HEADERS = ("content-type", "accept", "idempotency-key")  # what the API reads; nothing else leaves
UPSTREAM_TIMEOUT_S = 35  # API Gateway's integration timeout is 29 s
EXECUTE_API_HOST = re.compile(r"^[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")
CONSOLE_PATH = re.compile(r"^/console/([A-Za-z0-9_-]+\.[a-z]+)$")


class ProxyConfigError(ValueError):
    """A bad --api-url, region or bind address; the message names the option."""


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def check_api_url(url: str) -> str:
    """The API's base URL (its stage included), https, or http on a loopback address (a local stand-in)."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ProxyConfigError(f"--api-url {url!r} is not an http(s) URL (the stack's ApiUrl output, e.g. "
                               "https://abc123.execute-api.eu-west-1.amazonaws.com/v1/)")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise ProxyConfigError(f"--api-url {url}: signed requests go over https only (http is for a loopback "
                               "address)")
    if parts.query or parts.fragment:
        raise ProxyConfigError(f"--api-url {url}: a base URL has no query or fragment")
    return url


def region_of(url: str) -> str | None:
    """The region in an execute-api host name (abc.execute-api.REGION.amazonaws.com); None for any other host."""
    match = EXECUTE_API_HOST.match(urlsplit(url).hostname or "")
    return match.group(1) if match else None


def canonical_query(query: str) -> str:
    """A query string as SigV4 canonicalizes it: every name and value decoded, then percent-encoded except the
    unreserved characters, the pairs sorted. Sent in this form, the signed and the received query are one."""
    pairs = []
    for pair in filter(None, query.split("&")):
        name, _, value = pair.partition("=")
        pairs.append((quote(unquote_plus(name), safe="-_.~"), quote(unquote_plus(value), safe="-_.~")))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def upstream_url(api_url: str, target: str) -> str:
    """The API's URL for a request target (path and query) received by the proxy."""
    base, parts = urlsplit(api_url), urlsplit(target)
    path = base.path.rstrip("/") + (parts.path if parts.path.startswith("/") else "/" + parts.path)
    query = canonical_query(parts.query)
    return f"{base.scheme}://{base.netloc}{path}" + (f"?{query}" if query else "")


def signed_request(method: str, url: str, headers: dict[str, str], body: bytes, credentials,
                   region: str) -> AWSRequest:
    """The request to send: the forwarded headers of `headers` (lower-case names), the body, and SigV4's
    Authorization, X-Amz-Date and (for temporary credentials) X-Amz-Security-Token."""
    kept = {name: headers[name] for name in FORWARDED_HEADERS if name in headers}
    request = AWSRequest(method=method, url=url, data=body or None, headers=kept)
    SigV4Auth(credentials, SERVICE, region).add_auth(request)
    return request


def send(request: AWSRequest, timeout_s: float = UPSTREAM_TIMEOUT_S) -> tuple[int, list[tuple[str, str]], bytes]:
    """Send a signed request as it was signed (the same path, query, headers and body)."""
    parts = urlsplit(request.url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname, parts.port, timeout=timeout_s)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(request.method, target, body=request.body or None, headers=dict(request.headers.items()))
        response = connection.getresponse()
        return response.status, response.getheaders(), response.read()
    finally:
        connection.close()


class SigningProxy:
    """The console's files from this package, everything else to `api_url`, signed.

    `credentials` is called for each request and returns botocore credentials (refreshable ones are read afresh:
    get_frozen_credentials), or None when there are none."""

    def __init__(self, api_url: str, region: str, credentials: Callable[[], object], host: str = "127.0.0.1",
                 port: int = 8081) -> None:
        if not _loopback(host):
            raise ProxyConfigError(f"--host {host} is not a loopback address: the proxy signs with your AWS "
                                   "credentials, so only this machine may reach it")
        self.api_url, self.region, self.credentials = check_api_url(api_url), region, credentials
        proxy = self

        class Handler(AnyMethodHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                refused = proxy.refused(headers)
                if refused:
                    self.close_connection = True
                    return self._answer(403, [("Content-Type", "application/json")],
                                        json.dumps({"message": refused, "field": None}).encode())
                local = proxy.console_file(self.command, self.path)
                if local is not None:
                    return self._answer(*local)
                try:
                    length = int(headers.get("content-length") or 0)
                except ValueError:
                    return self._answer(400, [("Content-Type", "application/json")],
                                        b'{"message": "invalid Content-Length", "field": "Content-Length"}')
                if length > MAX_BODY:
                    self.close_connection = True
                    return self._answer(413, [("Content-Type", "application/json")],
                                        f'{{"message": "the body is larger than {MAX_BODY} bytes", '
                                        f'"field": "body"}}'.encode())
                body = self.rfile.read(length) if length else b""
                self._answer(*proxy.forward(self.command, self.path, headers, body))

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.host, self.port = self.httpd.server_address[:2]
        self.url = f"http://{self.host}:{self.port}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="signing-proxy", daemon=True)

    def refused(self, headers: dict[str, str]) -> str | None:
        """Why a request is not this machine's console speaking (None: it is). Another site open in the same browser
        could send requests here, and they would be signed: a request whose Host is not this server's address (DNS
        rebinding) or whose Origin is another site's (a cross-site form or fetch; browsers send Origin with every
        such request) is refused. A request without Origin comes from a program, not from another site's page."""
        mine = {f"{name}:{self.port}" for name in (self.host, "localhost", "127.0.0.1")}
        if headers.get("host") not in mine:
            return f"Host {headers.get('host')!r} is not this console's address ({self.url})"
        origin = headers.get("origin")
        if origin is not None and urlsplit(origin).netloc not in mine:
            return f"requests from {origin} are not forwarded: only this console's own page ({self.url}) is signed for"
        return None

    @staticmethod
    def console_file(method: str, target: str) -> tuple[int, list[tuple[str, str]], bytes] | None:
        """GET / and GET /console/<name>: the console's files, served here; None for everything else."""
        path = urlsplit(target).path
        match = CONSOLE_PATH.match(path)
        if method not in ("GET", "HEAD") or (path != "/" and not match):
            return None
        path = CONSOLE_DIR / (match.group(1) if match else "index.html")
        if not path.is_file() or path.suffix not in CONTENT_TYPES:
            return 404, [("Content-Type", "application/json")], json.dumps(
                {"message": f"no console file {path.name}", "field": "name"}).encode()
        return 200, [("Content-Type", CONTENT_TYPES[path.suffix]), ("Cache-Control", "no-cache")], path.read_bytes()

    def forward(self, method: str, target: str, headers: dict[str, str],
                body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request to the API, signed; a failure to reach it is a 502 that says why."""
        try:
            credentials = self.credentials()
            if credentials is None:
                raise ProxyConfigError("no AWS credentials found (AWS_PROFILE, AWS_ACCESS_KEY_ID, aws sso login)")
            request = signed_request(method, upstream_url(self.api_url, target), headers, body,
                                     credentials.get_frozen_credentials(), self.region)
            return send(request)
        except (OSError, http.client.HTTPException, ProxyConfigError) as exc:
            message = f"the API at {self.api_url} was not reached: {type(exc).__name__}: {exc}"
            return 502, [("Content-Type", "application/json")], json.dumps({"message": message, "field": None}).encode()

    def start(self) -> SigningProxy:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def api_url_from_stack(cloudformation, stack_name: str) -> str:
    """The deployed stack's ApiUrl output (cdk/stack.py)."""
    try:
        stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    except cloudformation.exceptions.ClientError as exc:
        raise ProxyConfigError(f"--stack {stack_name}: {exc.response.get('Error', {}).get('Message', exc)} "
                               "(give the stack's name, or the API's URL with --api-url)") from None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs") or []}
    if "ApiUrl" not in outputs:
        raise ProxyConfigError(f"--stack {stack_name} has no ApiUrl output (is it the brokerbench stack?)")
    return outputs["ApiUrl"]
