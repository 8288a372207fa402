"""A SigV4 check as API Gateway makes it (IAM authorization), for requests the console's signing proxy forwards.

`verify` recomputes the signature of a received request from known credentials with botocore's signer, after
putting the query string in the canonical form AWS computes from what it receives (each name and value decoded
and re-encoded), and answers why it refuses, or None. `VerifyingUpstream` is an HTTP server on 127.0.0.1 in front
of a local API (`brokerbench serve`): it answers 403 to any request whose signature does not verify, and
forwards the others below its stage path, without their signing headers. Nothing here is the proxy's code.
"""

from __future__ import annotations

import hmac
import http.client
import json
import re
import threading
from datetime import datetime, timedelta, timezone
from http.server import ThreadingHTTPServer
from urllib.parse import quote, unquote_plus, urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

from brokerbench.api.http_handler import AnyMethodHandler

AUTHORIZATION = re.compile(r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                           r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$")
SKEW = timedelta(minutes=5)  # API Gateway refuses a signature older or newer than this
MUST_SIGN = ("host", "x-amz-date", "content-type", "idempotency-key", "x-amz-security-token")  # when present


def aws_canonical_query(query: str) -> str:
    """The query as AWS canonicalizes what it receives (written from the SigV4 documentation, not the proxy)."""
    pairs = []
    for pair in query.split("&"):
        if pair:
            name, _, value = pair.partition("=")
            pairs.append(tuple(quote(unquote_plus(p), safe="-_.~") for p in (name, value)))
    return "&".join(f"{n}={v}" for n, v in sorted(pairs))


def verify(method: str, target: str, headers: dict[str, str], body: bytes, credentials, region: str,
           service: str = "execute-api", now: datetime | None = None) -> str | None:
    """Why the request's signature is refused (None: it verifies). `headers`: names in lower case."""
    found = AUTHORIZATION.match(headers.get("authorization", ""))
    if not found:
        return f"no SigV4 Authorization header: {headers.get('authorization')!r}"
    key, day, signed_region, signed_service, signed, signature = found.groups()
    amz_date = headers.get("x-amz-date", "")
    if key != credentials.access_key or (signed_region, signed_service) != (region, service):
        return f"signed for {key}/{signed_region}/{signed_service}"
    try:
        at = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return f"X-Amz-Date {amz_date!r} is not a SigV4 time"
    if day != amz_date[:8] or (now is not None and abs(now - at) > SKEW):
        return f"X-Amz-Date {amz_date} is not now ({now})"
    if credentials.token and headers.get("x-amz-security-token") != credentials.token:
        return "X-Amz-Security-Token is not the session's token"
    names = signed.split(";")
    unsigned = [n for n in MUST_SIGN if n in headers and n not in names]
    if unsigned or "host" not in names:
        return f"headers not signed: {unsigned or ['host']}"
    parts = urlsplit(target)
    query = aws_canonical_query(parts.query)
    request = AWSRequest(method=method, url=f"http://{headers['host']}{parts.path}" + (f"?{query}" if query else ""),
                         data=body or None, headers={n: headers.get(n, "") for n in names})
    request.context["timestamp"] = amz_date
    signer = SigV4Auth(credentials, service, region)
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    if not hmac.compare_digest(expected, signature):
        return "The request signature we calculated does not match the signature you provided"
    return None


class VerifyingUpstream:
    """Stands where API Gateway stands: `base_url` + STAGE; verified requests go on to `api_url`."""

    STAGE = "/v1"

    def __init__(self, api_url: str, credentials, region: str) -> None:
        self.api, self.credentials, self.region = urlsplit(api_url), credentials, region
        self.accepted: list[dict] = []
        self.rejected: list[dict] = []
        upstream = self

        class Handler(AnyMethodHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                body = self.rfile.read(int(headers.get("content-length") or 0))
                self._answer(*upstream.handle(self.command, self.path, headers, body))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}{self.STAGE}/"
        threading.Thread(target=self.httpd.serve_forever, name="sigv4-upstream", daemon=True).start()

    def handle(self, method: str, target: str, headers: dict, body: bytes):
        seen = {"method": method, "target": target, "body": len(body)}
        problem = verify(method, target, headers, body, self.credentials, self.region, now=datetime.now(timezone.utc))
        if problem is None and not target.startswith(self.STAGE + "/"):
            problem = f"{target} is not under the stage {self.STAGE}"
        if problem:
            self.rejected.append({**seen, "problem": problem})
            return 403, [("Content-Type", "application/json")], json.dumps({"message": problem}).encode()
        self.accepted.append(seen)
        forwarded = {k: v for k, v in headers.items()
                     if k in ("content-type", "accept", "idempotency-key")}
        connection = http.client.HTTPConnection(self.api.hostname, self.api.port, timeout=60)
        try:
            connection.request(method, target[len(self.STAGE):], body=body or None, headers=forwarded)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
