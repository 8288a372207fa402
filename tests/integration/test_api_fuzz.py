"""schemathesis against `brokerbench serve`: the OpenAPI document it serves, fuzzed over loopback.

Every operation gets positive and negative cases (schemathesis' examples, coverage and fuzzing phases; at most
25 generated examples per operation, derandomized so a failure replays the same way). A response must not be a
5xx, must have a documented status code and content type, and must match its schema; invalid input must be
refused with a 4xx.

Excluded, and why:
- POST /runs gets negative cases only, in a test of its own: a valid spec starts a REAL run that holds the local
  stack for its whole duration. A body that names `brokers` or `suite` is never sent, even in negative mode,
  where another part of the request (a header) may be the only invalid one.
- POST /runs/{run_id}/cancel is kept: generated run ids name no run (404), and the stored runs given as examples
  have ended (409). Nothing running is ever cancelled.
- TRACE and QUERY are left out of schemathesis' unexpected-method cases, which it sends to every operation
  first: they are asserted once, in test_methods_the_api_does_not_serve_are_4xx, so that one answer does not
  stop every operation's exploration.

Two synthetic runs are stored first and their ids (and a cell id) are the parameters' examples, so the GET routes
also answer 200 with real bodies, not only 404.
"""

import copy
import http.client
from urllib.parse import urlsplit

import hypothesis
import pytest
import schemathesis
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, negative_data_rejection,
                                               response_schema_conformance, status_code_conformance)

from synthetic import synthetic_run

from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from reliability_log import tally

SPEC = {"name": "fuzz", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000],
        "formats": ["raw", "json"]}
MAX_EXAMPLES = 25
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          negative_data_rejection]
RUN_REQUEST_KEYS = ("brokers", "suite")
ASSERTED_APART = {"trace", "query"}


@pytest.fixture(scope="module")
def stored_runs(stack):
    """A baseline and a candidate, completed, in the served API's event table."""
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    runs = {}
    for name, seed in (("baseline", 1), ("candidate", 2)):
        run_id = new_run_id()
        events = synthetic_run(SPEC, intervals=5, run_id=run_id, seed=seed)
        store.append(events)
        runs[name] = run_id
    runs["cell_id"] = next(e["data"]["cell_id"] for e in events if e["type"] == "CellStarted")
    return runs


def _with_examples(document: dict, runs: dict) -> dict:
    """The served document, with the stored runs' ids as examples of the parameters that take them."""
    values = {"run_id": [runs["baseline"], runs["candidate"]], "cell_id": [runs["cell_id"]],
              "baseline": [runs["baseline"]], "candidate": [runs["candidate"]], "name": ["quick", "smoke"]}
    document = copy.deepcopy(document)
    for operations in document["paths"].values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter["name"] in values:
                    parameter["examples"] = {f"stored{i}": {"value": v} for i, v in enumerate(values[parameter["name"]])}
    return document


def _schema(served_api, stored_runs, modes):
    assert urlsplit(served_api.url).hostname == "127.0.0.1"  # loopback only
    status, _, document = served_api.request("GET", "/openapi.json")
    assert status == 200, document
    schema = schemathesis.openapi.from_dict(_with_examples(document, stored_runs))
    schema.config.update(base_url=served_api.url, request_timeout=60)
    schema.config.generation.update(modes=modes, max_examples=MAX_EXAMPLES, deterministic=True, database="none")
    coverage = schema.config.phases.coverage
    coverage.unexpected_methods = set(coverage.unexpected_methods) - ASSERTED_APART
    return schema


@pytest.fixture(scope="module")
def api_schema(served_api, stored_runs):
    return _schema(served_api, stored_runs, [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])


@pytest.fixture(scope="module")
def start_run_schema(served_api, stored_runs):
    return _schema(served_api, stored_runs, [GenerationMode.NEGATIVE])


@pytest.fixture(autouse=True)
def _node_id_for_schemathesis(request):
    """schemathesis 4.32's lazy loader reads `node._nodeid`, which pytest 9.2 no longer sets (it keeps `_id`)."""
    request.node._nodeid = request.node.nodeid


every_operation = schemathesis.pytest.from_fixture("api_schema").exclude(method="POST", path="/runs")
start_run = schemathesis.pytest.from_fixture("start_run_schema").include(method="POST", path="/runs")


@every_operation.parametrize()
def test_every_operation_answers_as_documented(case):
    response = case.call_and_validate(checks=CHECKS)
    tally("bad-input-api", f"{response.status_code // 100}xx")


@start_run.parametrize()
def test_start_run_refuses_what_is_not_a_run_request(case):
    if isinstance(case.body, dict) and any(key in case.body for key in RUN_REQUEST_KEYS):
        hypothesis.reject()  # could be a valid run request: it would start a real run
    response = case.call_and_validate(checks=CHECKS)
    tally("bad-input-api", f"{response.status_code // 100}xx")
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])


def _status(served_api, method: str, path: str, body: bytes = b"", content_type: str | None = None):
    """The status of one raw request, or None when the server closed the connection without answering."""
    parts = urlsplit(served_api.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        connection.request(method, path, body=body, headers={"Content-Type": content_type} if content_type else {})
        return connection.getresponse().status
    except (http.client.RemoteDisconnected, ConnectionResetError):
        return None
    finally:
        connection.close()


@pytest.mark.parametrize("method", sorted(m.upper() for m in ASSERTED_APART))
def test_methods_the_api_does_not_serve_are_4xx(served_api, method):
    for path in ("/health", "/runs"):
        status = _status(served_api, method, path)
        assert status is not None and 400 <= status < 500, f"{method} {path} -> {status}"


@pytest.mark.parametrize("content_type, body", [
    ("multipart/form-data", b"{}"),  # no boundary
    ("application/json", b"\x80"),  # not UTF-8
], ids=["multipart-without-boundary", "json-not-utf8"])
def test_bodies_the_validator_cannot_read_are_4xx(served_api, content_type, body):
    """Found by the negative cases of POST /runs; kept as plain requests so each one is seen on its own."""
    status = _status(served_api, "POST", "/runs", body, content_type)
    assert status is not None and 400 <= status < 500, f"POST /runs ({content_type}, {body!r}) -> {status}"


def test_stored_runs_are_served(served_api, stored_runs):
    """The fuzzed GET routes reach the stored runs, not only their 404s."""
    baseline, candidate, cell_id = stored_runs["baseline"], stored_runs["candidate"], stored_runs["cell_id"]
    status, _, run = served_api.request("GET", f"/runs/{baseline}")
    assert status == 200 and run["status"] == "completed" and run["cells"]["total"] == 4
    status, _, cell = served_api.request("GET", f"/runs/{baseline}/cells/{cell_id}")
    assert status == 200 and len(cell["series"]) == 5
    status, _, page = served_api.request("GET", f"/compare?baseline={baseline}&candidate={candidate}")
    assert status == 200 and len(page["verdicts"]) > 0
    status, _, body = served_api.request("POST", f"/runs/{baseline}/cancel")
    assert status == 409, body
