"""`brokerbench serve` over HTTP, against the real local stack: runs started, followed, cancelled and read back."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brokerbench.events.dynamodb import DynamoEventStore

BIN = Path(sys.executable).with_name("brokerbench")
TINY = {"name": "api-tiny", "brokers": ["redis-streams"], "sizes": [1024], "rates": [200], "formats": ["raw"],
        "duration_s": 1, "warmup_s": 0.5, "warmup_until_steady": False}
ENDED = ("completed", "completed_with_failures", "failed", "cancelled", "interrupted", "incomplete")


def wait_for(served, run_id: str, statuses=ENDED, timeout_s: float = 180) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, _, run = served.request("GET", f"/runs/{run_id}")
        assert status == 200, run
        if run["status"] in statuses:
            return run
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} still {run['status']} after {timeout_s} s")


@pytest.fixture(scope="module")
def events_store(stack):
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    return DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])


def test_a_run_started_over_http_is_followed_to_its_report(served_api, events_store):
    key = {"Idempotency-Key": "tiny-run-1"}
    status, _, started = served_api.request("POST", "/runs", TINY, key)
    assert status == 202, started
    run_id = started["run_id"]
    status, _, listing = served_api.request("GET", "/runs?limit=1")  # listed from the start, stored or not
    assert listing["runs"][0]["run_id"] == run_id and listing["runs"][0]["name"] == "api-tiny"
    status, _, busy = served_api.request("POST", "/runs", TINY)  # one run at a time on a local stack
    assert status == 409 and busy["run_id"] == run_id
    status, _, again = served_api.request("POST", "/runs", TINY, key)  # a retry: the same run, nothing new started
    assert status == 202 and again["run_id"] == run_id and again["replayed"] is True

    run = wait_for(served_api, run_id)
    assert run["status"] == "completed" and run["progress"]["fraction"] == 1.0
    stored = events_store.read(run_id, interval_histograms=False)
    assert [e["type"] for e in stored].count("CellCompleted") == run["cells"]["completed"] == 1

    cell_id = run["cells_detail"][0]["cell_id"]
    status, _, cell = served_api.request("GET", f"/runs/{run_id}/cells/{cell_id}")
    intervals = [e for e in stored if e["type"] == "IntervalMeasured"]
    assert status == 200 and len(cell["series"]) == len(intervals) > 0
    # the per-second series: what arrived in each measured second (messages delivered during the drain, after
    # the last second closed, count for the cell but fall in no second)
    in_seconds = sum(r["received"] for r in cell["series"] if r["in_schedule"])
    assert 0.9 * cell["cell"]["received"] <= in_seconds <= cell["cell"]["received"]

    status, headers, page = served_api.request("GET", f"/runs/{run_id}/report?format=html")
    assert status == 200 and headers["Content-Type"].startswith("text/html") and 'class="chart' in page
    published = served_api.out_dir / run_id / "report.html"
    assert published.is_file() and published.read_text() == page  # the workflow's report, served as published

    status, _, page = served_api.request("GET", f"/runs/{run_id}/events?limit=2")
    assert status == 200 and [e["type"] for e in page["events"]] == ["RunRequested", "TargetsReady"] and page["next"]

    status, _, listing = served_api.request("GET", "/runs?suite=api-tiny&limit=5")
    assert status == 200 and listing["runs"][0]["run_id"] == run_id


def test_cancel_stops_a_run_mid_cell_and_keeps_what_it_measured(served_api, events_store):
    status, _, started = served_api.request("POST", "/runs", {**TINY, "name": "api-cancel", "duration_s": 60})
    assert status == 202
    run_id = started["run_id"]
    deadline = time.monotonic() + 120
    while not events_store.read(run_id, prefix="10#c00000#1#"):  # the first measured second is stored
        assert time.monotonic() < deadline, "no interval measured in 120 s"
        time.sleep(0.5)
    status, _, body = served_api.request("POST", f"/runs/{run_id}/cancel")
    assert status == 202 and body["status"] == "cancelling"
    run = wait_for(served_api, run_id, timeout_s=60)
    assert run["status"] == "cancelled"
    stored = events_store.read(run_id, interval_histograms=False)
    ends = [e for e in stored if e["type"] in ("CellCompleted", "CellFailed")]
    assert len(ends) == 1 and ends[0]["type"] == "CellFailed" and "cancelled" in ends[0]["data"]["reason"]
    assert any(e["type"] == "IntervalMeasured" for e in stored)  # measured seconds are kept
    assert stored[-1]["type"] == "RunCompleted" and stored[-1]["data"]["status"] == "cancelled"
    assert run["reason"] == "cancelled by request"
    status, _, body = served_api.request("POST", f"/runs/{run_id}/cancel")
    assert status == 409
    status, _, started = served_api.request("POST", "/runs", TINY)  # the stack is free again
    assert status == 202
    assert wait_for(served_api, started["run_id"])["status"] == "completed"


def test_a_run_cancelled_while_starting_ends_cancelled(served_api):
    status, _, started = served_api.request("POST", "/runs", {**TINY, "name": "api-cancel-early"})
    assert status == 202
    status, _, body = served_api.request("POST", f"/runs/{started['run_id']}/cancel")
    assert status == 202
    run = wait_for(served_api, started["run_id"], timeout_s=60)
    assert run["status"] == "cancelled" and run["reason"]


def test_bad_requests_are_4xx_with_the_field(served_api):
    status, _, body = served_api.request("POST", "/runs", raw=b"x" * (1024 * 1024 + 1))
    assert status == 413 and body["field"] == "body"
    status, _, body = served_api.request("POST", "/runs", raw=b"{\"brokers\": [")
    assert status == 422 and body["field"] == "body"
    status, _, body = served_api.request("POST", "/runs", raw=b'{"suite": "smoke"}',
                                         headers={"content-type": "application/x-www-form-urlencoded"})
    assert status == 415 and body["field"] == "Content-Type"  # curl -d: refused plainly, nothing started
    status, _, body = served_api.request("POST", "/runs", {**TINY, "formats": ["yaml"]})
    assert status == 422 and body["field"].startswith("formats")
    status, _, body = served_api.request("GET", "/runs/..%2F..%2Fetc%2Fpasswd")
    assert 400 <= status < 500 and body["message"]
    # Traversal and injection in every id and in the report's format: refused by name, never a file or a 5xx.
    run_id = "20261125T000000Z-abcdef"
    for path, field in [("/runs/..%2F..%2Fetc%2Fpasswd/report", "run_id"),
                        (f"/runs/{run_id}/report?format=..%2F..%2Fetc%2Fpasswd", "format"),
                        (f"/runs/{run_id}/report?format=html%00.json", "format"),
                        ("/runs/x%27%20OR%20%271%27%3D%271/cells/c", "run_id"),
                        (f"/runs/{run_id}/cells/..%2F..%2Fresults.json", "cell_id"),
                        (f"/runs/{run_id}/cells/%3Cscript%3Ealert(1)%3C%2Fscript%3E", "cell_id"),
                        ("/runs/%24%7Bjndi%3Aldap%3A%2F%2Fx%7D/events", "run_id")]:
        status, _, body = served_api.request("GET", path)
        assert 400 <= status < 500 and isinstance(body, dict) and body["message"], (path, status, body)
        assert status == 404 or field in (body.get("field") or "") or field in body["message"], (path, body)
        assert "root:" not in json.dumps(body) and "<script>" not in json.dumps(body), path
    status, _, body = served_api.request("GET", "/console/..%2Fserve.py")
    assert 400 <= status < 500
    status, headers, page = served_api.request("GET", "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")


def test_serve_refuses_a_non_loopback_address_unless_asked(tmp_path):
    result = subprocess.run([str(BIN), "--state-dir", str(tmp_path), "serve", "--host", "0.0.0.0", "--port", "0"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "--allow-remote" in result.stderr
    assert not (tmp_path / "stack.json").exists()  # refused before anything started


def test_openapi_served_is_the_checked_in_document(served_api):
    status, _, document = served_api.request("GET", "/openapi.json")
    checked_in = json.loads((Path(__file__).parents[2] / "schemas" / "openapi.json").read_text())
    assert status == 200 and document == checked_in
