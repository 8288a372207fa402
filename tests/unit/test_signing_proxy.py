"""`brokerbench console --aws`'s signing proxy (brokerbench/api/signing_proxy.py), on 127.0.0.1 in front of a
capturing upstream: what it forwards carries the SigV4 signature that botocore's signer, given the same known test
credentials and a fixed clock, computes independently for the request the browser made; and the SigV4 check the
console's browser test relies on (tests/sigv4_verifier.py) refuses what AWS would refuse."""

import json
import threading
import urllib.error
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import botocore.auth
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from brokerbench.api.meta import CONSOLE_DIR
from brokerbench.api.signing_proxy import (ProxyConfigError, SigningProxy, canonical_query, check_api_url,
                                           region_of, upstream_url)
from sigv4_verifier import verify

# AWS's documented example keys (never valid), with a session token as temporary credentials have.
CREDENTIALS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "FQoGZXIvYXdzEXAMPLETOKEN//=")
CLOCK = datetime(2026, 11, 26, 23, 59, 30)  # botocore's clock is naive UTC
REGION = "eu-west-1"


class Capture:
    """An upstream that records each request it receives, as received, and answers 200 with a JSON body."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        capture = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                capture.requests.append({"method": self.command, "target": self.path, "body": body,
                                         "headers": {k.lower(): v for k, v in self.headers.items()}})
                answer = b'{"ok": true}'
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST = do_DELETE = _serve

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fixed_clock(monkeypatch):
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: CLOCK)


@pytest.fixture
def proxied(fixed_clock):
    upstream = Capture()
    proxy = SigningProxy(upstream.url, REGION, lambda: CREDENTIALS, port=0).start()
    yield proxy, upstream
    proxy.stop()
    upstream.stop()


def call(url: str, method: str = "GET", body: bytes | None = None, headers: dict | None = None):
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def independently_signed(method: str, url: str, headers: dict, body: bytes | None) -> AWSRequest:
    """What botocore's signer makes of the request the API should receive, under the same fixed clock."""
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    SigV4Auth(CREDENTIALS, "execute-api", REGION).add_auth(request)
    return request


def test_a_post_with_a_query_and_a_body_is_forwarded_with_the_signature_botocore_computes(proxied):
    proxy, upstream = proxied
    body = json.dumps({"suite": "smoke", "name": "café: ü"}).encode()
    status, headers, answer = call(proxy.url + "runs?z=1&suite=smoke:nightly&a=x%20y", "POST", body, {
        "Content-Type": "application/json", "Idempotency-Key": "0f8e7d6c-5b4a-4987-a654-3210fedcba98",
        "Cookie": "session=secret", "Origin": proxy.url.rstrip("/"), "X-Other": "kept here"})
    assert (status, json.loads(answer)) == (201, {"ok": True}) and headers["Content-Type"] == "application/json"
    [got] = upstream.requests
    # the path under the API's stage, the query in SigV4's canonical form (sorted, ":" and " " encoded)
    assert got["method"] == "POST" and got["target"] == "/v1/runs?a=x%20y&suite=smoke%3Anightly&z=1"
    assert got["body"] == body
    expected = independently_signed(
        "POST", upstream.url.rstrip("/") + "/runs?a=x%20y&suite=smoke%3Anightly&z=1",
        {"content-type": "application/json", "idempotency-key": "0f8e7d6c-5b4a-4987-a654-3210fedcba98"}, body)
    for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token"):
        assert got["headers"][name.lower()] == expected.headers[name], name
    assert got["headers"]["x-amz-date"] == "20261126T235930Z"
    assert "SignedHeaders=content-type;host;idempotency-key;x-amz-date;x-amz-security-token," in (
        got["headers"]["authorization"])
    # nothing of the browser's own goes out: no cookie, no origin, no other header
    assert not {"cookie", "origin", "x-other"} & set(got["headers"])


def test_a_get_without_a_body_is_signed_over_the_empty_body(proxied):
    proxy, upstream = proxied
    status, _, _ = call(proxy.url + "runs/20261126T235900Z-abc123/report?format=html", headers={"Accept": "text/html"})
    assert status == 201
    [got] = upstream.requests
    expected = independently_signed("GET", upstream.url + "runs/20261126T235900Z-abc123/report?format=html",
                                    {"accept": "text/html"}, None)
    assert got["headers"]["authorization"] == expected.headers["Authorization"]
    assert got["body"] == b""


def test_what_the_proxy_forwards_verifies_and_any_change_is_refused(proxied):
    """The check of the browser test accepts the forwarded request as AWS would, and refuses it once its body, its
    query, its method, a signed header or its time is not what was signed."""
    proxy, upstream = proxied
    body = b'{"suite": "smoke"}'
    call(proxy.url + "runs?b=2&a=1", "POST", body, {"Content-Type": "application/json", "Idempotency-Key": "k-1"})
    [got] = upstream.requests
    now = CLOCK.replace(tzinfo=timezone.utc)

    def check(method=got["method"], target=got["target"], headers=got["headers"], payload=got["body"], at=now):
        return verify(method, target, headers, payload, CREDENTIALS, REGION, now=at)

    assert check() is None
    assert "does not match" in check(payload=b'{"suite": "nightly"}')
    assert "does not match" in check(target=got["target"].replace("b=2", "b=3"))
    assert "does not match" in check(method="PUT")
    assert "does not match" in check(headers={**got["headers"], "idempotency-key": "k-2"})
    assert "token" in check(headers={k: v for k, v in got["headers"].items() if k != "x-amz-security-token"})
    assert "not now" in check(at=now.replace(hour=23, minute=40))
    assert "no SigV4" in check(headers={k: v for k, v in got["headers"].items() if k != "authorization"})
    other = Credentials(CREDENTIALS.access_key, "another secret", CREDENTIALS.token)
    assert "does not match" in verify(got["method"], got["target"], got["headers"], got["body"], other, REGION, now=now)


def test_the_verifier_accepts_aws_own_sigv4_test_vector():
    """get-vanilla from AWS's SigV4 test suite: its published signature, checked by the verifier."""
    headers = {"host": "example.amazonaws.com", "x-amz-date": "20150830T123600Z",
               "authorization": "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                                "SignedHeaders=host;x-amz-date, "
                                "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"}
    keys = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    assert verify("GET", "/", headers, b"", keys, "us-east-1", service="service") is None
    assert verify("GET", "/?a=1", headers, b"", keys, "us-east-1", service="service") is not None


def test_the_console_files_are_served_here_and_not_forwarded(proxied):
    proxy, upstream = proxied
    status, headers, page = call(proxy.url)
    assert status == 200 and page == (CONSOLE_DIR / "index.html").read_bytes()
    assert headers["Content-Type"].startswith("text/html")
    status, headers, script = call(proxy.url + "console/app.js")
    assert status == 200 and script == (CONSOLE_DIR / "app.js").read_bytes()
    assert call(proxy.url + "console/missing.js")[0] == 404
    assert upstream.requests == []


def test_an_api_that_cannot_be_reached_is_a_502_that_says_why(fixed_clock):
    upstream = Capture()
    url = upstream.url
    upstream.stop()  # nothing listens there any more
    proxy = SigningProxy(url, REGION, lambda: CREDENTIALS, port=0).start()
    try:
        status, _, body = call(proxy.url + "runs")
    finally:
        proxy.stop()
    assert status == 502 and "was not reached" in json.loads(body)["message"]


def test_no_credentials_is_a_502_naming_what_to_set(fixed_clock):
    proxy = SigningProxy("http://127.0.0.1:9/v1/", REGION, lambda: None, port=0).start()
    try:
        status, _, body = call(proxy.url + "runs")
    finally:
        proxy.stop()
    assert status == 502 and "no AWS credentials" in json.loads(body)["message"]


def test_canonical_query_decodes_and_reencodes_as_sigv4_does():
    assert canonical_query("z=1&a=b:c&a=%20x&empty=&plus=a+b") == "a=%20x&a=b%3Ac&empty=&plus=a%20b&z=1"
    assert canonical_query("") == ""
    assert upstream_url("https://abc.execute-api.eu-west-1.amazonaws.com/v1/", "/runs?x=1") == (
        "https://abc.execute-api.eu-west-1.amazonaws.com/v1/runs?x=1")


def test_the_api_url_and_the_bind_address_are_checked():
    assert region_of("https://abc123.execute-api.eu-west-1.amazonaws.com/v1/") == "eu-west-1"
    assert region_of("https://api.example.com/v1/") is None
    assert check_api_url("http://127.0.0.1:8080/v1/")
    with pytest.raises(ProxyConfigError, match="--api-url .*https only"):
        check_api_url("http://abc.execute-api.eu-west-1.amazonaws.com/v1/")
    with pytest.raises(ProxyConfigError, match="--api-url"):
        check_api_url("abc.execute-api.eu-west-1.amazonaws.com")
    with pytest.raises(ProxyConfigError, match="--host 0.0.0.0 is not a loopback"):
        SigningProxy("https://abc.execute-api.eu-west-1.amazonaws.com/v1/", REGION, lambda: CREDENTIALS,
                     host="0.0.0.0", port=0)


def test_the_command_needs_aws_and_names_a_bad_option(capsys, monkeypatch):
    from brokerbench.cli import main

    for name, value in {"AWS_ACCESS_KEY_ID": CREDENTIALS.access_key, "AWS_SECRET_ACCESS_KEY": CREDENTIALS.secret_key,
                        "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert main(["console"]) == 2
    assert "give --aws" in capsys.readouterr().err
    assert main(["console", "--aws", "--api-url", "http://abc.execute-api.eu-west-1.amazonaws.com/v1/"]) == 2
    assert "--api-url" in capsys.readouterr().err
    assert main(["console", "--aws", "--api-url", "https://api.example.com/v1/", "--port", "0"]) == 2
    assert "--region" in capsys.readouterr().err  # no region in the host name, none given, none configured
    assert main(["console", "--aws", "--api-url", "https://abc.execute-api.eu-west-1.amazonaws.com/v1/",
                 "--host", "192.0.2.1"]) == 2
    assert "not a loopback address" in capsys.readouterr().err


def test_requests_another_site_could_make_from_the_browser_are_refused_and_never_signed(proxied):
    """A page of another site open in the same browser can send requests to 127.0.0.1: a cross-site POST carries its
    Origin, a DNS-rebinding page its own Host. Neither reaches the API; the console's own page does."""
    proxy, upstream = proxied
    body, json_type = b'{"suite": "smoke"}', {"Content-Type": "application/json"}
    status, _, answer = call(proxy.url + "runs", "POST", body, {**json_type, "Origin": "https://evil.example"})
    assert status == 403 and "https://evil.example" in json.loads(answer)["message"]
    status, _, answer = call(proxy.url + "runs", "POST", body, {**json_type, "Host": f"evil.example:{proxy.port}"})
    assert status == 403 and "Host" in json.loads(answer)["message"]
    assert upstream.requests == []
    own = f"http://127.0.0.1:{proxy.port}"
    assert call(proxy.url + "runs", "POST", body, {**json_type, "Origin": own})[0] == 201
    assert call(proxy.url + "runs", "POST", body, {**json_type, "Origin": f"http://localhost:{proxy.port}"})[0] == 201
    assert call(proxy.url + "runs", "POST", body, json_type)[0] == 201  # a program sends no Origin
    assert len(upstream.requests) == 3
