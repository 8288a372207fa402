"""`brokerbench serve`: the API's Lambda handler behind a local HTTP server.

A thin adapter: each HTTP request becomes the API Gateway REST proxy event Lambda would get, the SAME
handler answers it, and its proxy result becomes the HTTP response. Handler calls are serialized, as one
Lambda instance takes one request at a time (Powertools keeps the current event on the resolver's class).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import threading
import time
import uuid
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from .http_handler import AnyMethodHandler

MAX_BODY = 1024 * 1024  # a run spec is a few KB; API Gateway's own cap is 10 MB
DRAIN_LIMIT = 16 * MAX_BODY  # larger bodies are not read at all: the connection is closed after the 413
TEXT_TYPES = ("application/json", "text/", "application/x-www-form-urlencoded")


class RemoteBindRefused(ValueError):
    pass


def check_bind(host: str, allow_remote: bool) -> None:
    """Loopback only, unless the caller asked for another address explicitly."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not allow_remote:
        raise RemoteBindRefused(f"--host {host} is not a loopback address: the local API has no authentication, "
                                "so it binds 127.0.0.1 unless --allow-remote is given")


def to_event(method: str, target: str, headers: dict[str, str], body: bytes, source_ip: str) -> dict:
    """An API Gateway REST API (v1) proxy event for one HTTP request."""
    parts = urlsplit(target)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    multi: dict[str, list[str]] = {}
    for key, value in pairs:
        multi.setdefault(key, []).append(value)
    content_type = headers.get("content-type", "")
    text = not body or any(content_type.startswith(t) for t in TEXT_TYPES)
    try:
        payload = body.decode() if text else None
    except UnicodeDecodeError:
        payload = None
    request_id = str(uuid.uuid4())
    return {
        "resource": parts.path,
        "path": parts.path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": {k: v[-1] for k, v in multi.items()} or None,
        "multiValueQueryStringParameters": multi or None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": parts.path, "httpMethod": method, "path": parts.path, "stage": "local",
            "requestId": request_id, "requestTimeEpoch": int(time.time() * 1000),
            "identity": {"sourceIp": source_ip, "userAgent": headers.get("user-agent")},
            "protocol": "HTTP/1.1", "accountId": "local", "apiId": "local",
        },
        "body": payload if payload is not None else (base64.b64encode(body).decode() if body else None),
        "isBase64Encoded": bool(body) and payload is None,
    }


class LocalContext:
    """The Lambda context of a local API invocation."""

    function_name = "brokerbench-api"
    invoked_function_arn = "local:api"
    function_version = "$LATEST"
    memory_limit_in_mb = None
    log_group_name = "local"
    log_stream_name = "api"

    def __init__(self) -> None:
        self.aws_request_id = str(uuid.uuid4())

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 29_000  # API Gateway's integration timeout


class ApiServer:
    def __init__(self, handler: Callable[[dict, object], dict], host: str = "127.0.0.1", port: int = 8080) -> None:
        self.handler = handler
        self._one_at_a_time = threading.Lock()
        server = self

        class Handler(AnyMethodHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    length = int(headers.get("content-length") or 0)
                except ValueError:
                    return self._answer(400, {"content-type": "application/json"},
                                        b'{"message": "invalid Content-Length", "field": "Content-Length"}')
                if length > MAX_BODY:
                    self.close_connection = True
                    # Read what the client is sending before answering (up to a bound), so it gets the 413
                    # instead of a connection reset while it still writes.
                    remaining = length if length <= DRAIN_LIMIT else 0
                    while remaining > 0:
                        chunk = self.rfile.read(min(remaining, 65536))
                        if not chunk:
                            break
                        remaining -= len(chunk)
                    return self._answer(413, {"content-type": "application/json"},
                                        f'{{"message": "the body is larger than {MAX_BODY} bytes", '
                                        f'"field": "body"}}'.encode())
                body = self.rfile.read(length) if length else b""
                event = to_event(self.command, self.path, headers, body, self.client_address[0])
                status, out_headers, out_body = server.invoke(event)
                self._answer(status, out_headers, out_body)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.host, self.port = self.httpd.server_address[:2]
        self.url = f"http://{self.host}:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="api-server", daemon=True)

    def invoke(self, event: dict) -> tuple[int, dict, bytes]:
        try:
            with self._one_at_a_time:
                result = self.handler(event, LocalContext())
        except Exception as exc:  # what API Gateway answers when the function fails
            body = json.dumps({"message": f"the API failed: {type(exc).__name__}: {exc}", "field": None})
            return 502, {"Content-Type": "application/json"}, body.encode()
        headers = {k: v for k, v in (result.get("headers") or {}).items()}
        for name, values in (result.get("multiValueHeaders") or {}).items():
            headers.setdefault(name, ", ".join(values))
        raw = result.get("body") or ""
        body = base64.b64decode(raw) if result.get("isBase64Encoded") else raw.encode()
        return int(result["statusCode"]), headers, body

    def start(self) -> ApiServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
