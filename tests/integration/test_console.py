"""The web console in a browser (tests/e2e/console.mjs), against `brokerbench serve` on the session's stack
(the `served_api` fixture).

Two tiny real runs are started from the console and watched to their end; the report's charts, the
comparison of the two runs and the schedules are read as a person sees them. Nothing may leave
127.0.0.1 and the page may log no error. Screenshots of every step go to BROKERBENCH_SCREENSHOTS when it
names a folder (e.g. reports/screenshots), else to the test's tmp_path.

The same walk runs a second time through `brokerbench console --aws` (the SigV4-signing proxy for the deployed
API), in front of a stand-in for API Gateway's IAM authorization that refuses any request signed wrong.
"""

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from botocore.credentials import Credentials
import pytest
from synthetic import synthetic_run

from brokerbench.events.dynamodb import DynamoEventStore
from sigv4_verifier import VerifyingUpstream

CONSOLE_CHECK = Path(__file__).parents[1] / "e2e" / "console.mjs"
HISTORY_CHECK = Path(__file__).parents[1] / "e2e" / "console_history.mjs"
STAMPS_CHECK = Path(__file__).parents[1] / "e2e" / "console_stamps.mjs"
RUN_TIMEOUT_S = 180  # a tiny run takes ~5 s here; the bound is for a slow, busy machine
# AWS's documented example keys (never valid), with a session token as temporary credentials have.
TEST_CREDENTIALS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "FQoGZXIvYXdzEXAMPLETOKEN//=")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def _number(text: str) -> tuple[float, float]:
    """A printed figure ("2,002 msgs/s", "-25.2 %") and half its last digit."""
    digits = re.sub(r"[^0-9.\-−]", "", text).replace("−", "-")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return float(digits), 0.5 * 10 ** -decimals


def _change_recomputes(baseline: str, candidate: str, change: str) -> bool:
    (b, db), (c, dc), (shown, ds) = _number(baseline), _number(candidate), _number(change)
    lowest, highest = (c - dc) / (b + db) - 1, (c + dc) / (b - db) - 1
    return lowest * 100 - ds <= shown <= highest * 100 + ds


def _tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


@pytest.fixture
def screenshots(tmp_path, request):
    named = os.environ.get("BROKERBENCH_SCREENSHOTS")
    kind = "console-aws" if "signing_proxy" in request.node.name else "console"  # through `console --aws`
    folder = Path(named) / kind if named else tmp_path / "screenshots"
    if folder.exists():
        shutil.rmtree(folder)  # only this run's pictures
    folder.mkdir(parents=True)
    return folder


def drive_console(url: str, screenshots: Path, server_log: Path) -> dict:
    """console.mjs against `url`: what the browser saw (its JSON summary, also written beside the pictures)."""
    started = time.monotonic()
    seen = subprocess.run(["node", str(CONSOLE_CHECK), url, str(screenshots)], capture_output=True, text=True,
                          timeout=2 * RUN_TIMEOUT_S + 180, env={**os.environ, "RUN_TIMEOUT_S": str(RUN_TIMEOUT_S)})
    assert seen.returncode == 0, seen.stderr
    view = json.loads(seen.stdout.strip().splitlines()[-1])
    (screenshots / "summary.json").write_text(json.dumps(view, indent=2))  # what the browser saw, beside its pictures
    print(f"console test: {time.monotonic() - started:.0f} s, runs "
          + ", ".join(f"{r['run_id']} {r['status']} in {r['seconds']:.0f} s" for r in view["runs"]))
    assert view["ok"], f"{view.get('error')}\n--- server log ---\n{_tail(server_log)}"
    return view


@pytest.mark.timeout(2 * RUN_TIMEOUT_S + 240)
def test_a_person_starts_watches_reads_and_compares_runs_in_the_console(served_api, screenshots):
    view = drive_console(served_api.url, screenshots, served_api.out_dir / "serve.stderr")
    check_what_the_person_saw(view, served_api, screenshots)


def check_what_the_person_saw(view: dict, served_api, screenshots: Path) -> None:
    """Everything the browser saw, as a person must see it."""
    # nothing left the machine, nothing went wrong in the page (the 422s of steps 3 and 3b are provoked on purpose;
    # a 409 is a run still busy, retried)
    assert view["blocked_requests"] == []
    assert view["console_errors"] == []
    provoked = {("field-error", "422"), ("study-scale-error", "422"), ("first-run", "409"), ("second-run", "409")}
    assert all((e["step"], e["text"].split("status of ")[1][:3]) in provoked for e in view["expected_errors"])
    assert sum("409" in e["text"] for e in view["expected_errors"]) == view["busy_retries"]

    # a spec that is not JSON is caught in the page and never sent
    assert view["json_error"]["sent"] == 0 and view["json_error"]["invalid"] == "true"
    assert "JSON" in view["json_error"]["text"] and "line 1" in view["json_error"]["text"]

    # the API's problem is shown at the field it names, and leads to it in the spec
    study = view["study_scale_error"]  # a study's run is chosen as its own option; scale 7 is refused at its field
    assert "scale" in study["text"] and "at most 1" in study["text"] and "startup backlog" in study["info"]
    field = view["field_error"]
    assert [p["field"] for p in field["problems"]] == ["sizes[0]"]
    assert field["problems"][0]["path"] == "sizes[0]" and "64" in field["problems"][0]["text"]
    assert field["invalid"] == "true" and "spec-errors" in field["described_by"] and field["next_to_field"]
    assert field["selected"] == '"sizes"'

    # every submission has its own Idempotency-Key
    keys = [k["key"] for k in view["idempotency_keys"]]
    assert len(keys) >= 3 and all(k and UUID.match(k) for k in keys) and len(set(keys)) == len(keys)

    # two tiny runs, watched live to their end
    assert len(view["runs"]) == 2
    for run in view["runs"]:
        assert run["status"] == "completed", run
        assert any(s["status"] in ("starting", "running") for s in run["seen"]), run["seen"]  # seen while active
        assert run["seen"][-1]["progress"] == "1 of 1 cells done"
        assert run["seen"][-1]["cancel"] is False  # no Cancel button once the run ended
        assert [c["status"] for c in run["cells"]] == ["completed"]
        assert run["cells"][0]["throughput"].endswith("msgs/s")
        assert run["seconds"] < RUN_TIMEOUT_S

    # the first run's HTML report, in the page, with its charts; the other formats linked
    report = view["report"]
    assert report["charts"] >= 1
    assert any(link.endswith("format=md") for link in report["links"])
    assert any(link.endswith("format=json") for link in report["links"])

    # the two runs compared: rows, regressions first
    compare = view["compare"]
    assert compare["error"] is None
    assert f"baseline={compare['baseline']}" in compare["url"] and f"candidate={compare['candidate']}" in compare["url"]
    verdicts = [r["verdict"] for r in compare["rows"]]
    assert verdicts, "the compare table has no rows"
    order = {"regression": 0, "unstable": 1, "improvement": 2, "unchanged": 3}
    assert set(verdicts) <= set(order) and verdicts == sorted(verdicts, key=order.get)
    throughput = [r["cells"] for r in compare["rows"] if r["cells"][2] == "throughput"]
    assert throughput and all(c.endswith("msgs/s") for c in throughput[0][3:5])  # both geometric means, with their unit
    # each change recomputes from the two figures printed beside it (candidate ÷ baseline − 1), within rounding
    assert all(_change_recomputes(*row[3:6]) for row in throughput if "–" not in row[3:6]), throughput

    status, _, listed = served_api.request("GET", "/schedules")
    assert status == 200 and {k: view["schedules"][k] for k in ("rows", "error")} == {
        "rows": len(listed["schedules"]), "error": None}
    # a schedule that builds a baseline says so under its cron, and only such a schedule
    assert view["schedules"]["baselines"] == [
        [s["name"], f"runs back to back until the suite has {s['baseline_runs']} completed runs"
         if s["baseline_runs"] > 1 else None] for s in listed["schedules"]]
    assert view["schedules"]["rows"] >= 1

    # a screenshot of every step, each a real PNG
    names = [Path(p).name for p in view["screenshots"]]
    for step in ("runs-list", "json-error", "field-error", "study-scale-error", "first-run-in-progress",
                 "first-run-finished", "report", "report-chart", "second-run-finished", "runs-after", "compare",
                 "schedules"):
        assert any(n.endswith(f"-{step}.png") for n in names), (step, names)
    for path in map(Path, view["screenshots"]):
        assert path.parent == screenshots
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, path


@pytest.mark.timeout(2 * RUN_TIMEOUT_S + 240)
def test_the_console_through_the_signing_proxy_signs_every_api_request(served_api, screenshots, tmp_path):
    """`brokerbench console --aws`, as a user starts it (known test credentials in the environment), in front of an
    upstream that stands where API Gateway stands: it refuses, as IAM authorization does, any request whose SigV4
    signature it does not compute the same from those credentials (tests/sigv4_verifier.py), and passes the others
    to the local API under its stage path. The same browser walk as above must come out the same, and every API
    request it made (POSTs with their bodies, GETs with query strings) must have been signed right."""
    upstream = VerifyingUpstream(served_api.url, TEST_CREDENTIALS, "us-east-1")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    environment.update({"AWS_ACCESS_KEY_ID": TEST_CREDENTIALS.access_key,
                        "AWS_SECRET_ACCESS_KEY": TEST_CREDENTIALS.secret_key,
                        "AWS_SESSION_TOKEN": TEST_CREDENTIALS.token, "AWS_CONFIG_FILE": str(tmp_path / "none"),
                        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true"})
    stderr = open(tmp_path / "console.stderr", "wb")
    proxy = subprocess.Popen([str(Path(sys.executable).with_name("brokerbench")), "console", "--aws", "--api-url",
                              upstream.url, "--region", "us-east-1", "--port", "0"],
                             stdout=subprocess.PIPE, stderr=stderr, env=environment)
    try:
        line = proxy.stdout.readline().decode().strip()  # "serving http://127.0.0.1:PORT/"
        assert line.startswith("serving http://127.0.0.1:"), (line, (tmp_path / "console.stderr").read_text())
        view = drive_console(line.split(" ", 1)[1], screenshots, served_api.out_dir / "serve.stderr")
    finally:
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(timeout=30)
        proxy.stdout.close()
        stderr.close()
        upstream.stop()
    assert upstream.rejected == []
    assert proxy.returncode == 0
    accepted = upstream.accepted
    assert sum(r["method"] == "POST" and r["target"] == "/v1/runs" and r["body"] > 0 for r in accepted) >= 3
    assert any(r["method"] == "GET" and "?" in r["target"] for r in accepted)  # query strings signed too
    assert any(r["target"].startswith("/v1/compare?") for r in accepted)
    check_what_the_person_saw(view, served_api, screenshots)


def test_a_suites_history_shows_each_series_with_its_change_point_marked_and_linked(served_api, stack, screenshots):
    """Eight stored runs of a suite (synthetic: events shaped as a real run's), the last two delivering half the
    throughput of the six before. The console's history page, opened from its navigation with the suite and metric
    chosen, draws each configuration's eight runs in order, each a link to its run page; one change line per
    series, between the sixth run (marked as the run before) and the seventh (marked as the one it began with),
    at half the height of the steady runs (the change injected), and the run it began with followed to its page."""
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    suite, token = f"history-{secrets.token_hex(3)}", secrets.token_hex(3)
    spec = {"name": suite, "brokers": ["redis-streams"], "sizes": [1024], "rates": [1000], "formats": ["raw", "json"],
            "repeats": 2}
    ids = [f"20210101T{i:06d}Z-{token}" for i in range(8)]
    for i, run_id in enumerate(ids):
        store.append(synthetic_run(spec, intervals=3, seed=60 + i, run_id=run_id, rate_scale=0.5 if i >= 6 else 1.0))
    seen = subprocess.run(["node", str(HISTORY_CHECK), served_api.url, str(screenshots), suite,
                           "throughput_msgs_per_s"], capture_output=True, text=True, timeout=120)
    assert seen.returncode == 0, seen.stderr
    view = json.loads(seen.stdout.strip().splitlines()[-1])
    assert view["ok"], view.get("error")
    assert view["blocked_requests"] == [] and view["console_errors"] == []
    assert view["url"] == f"#/history?suite={suite}&metric=throughput_msgs_per_s" and suite in view["heading"]
    assert view["summary"].startswith("8 completed run(s)")
    assert sorted(s["key"].split("|")[1] for s in view["series"]) == ["json", "raw"]
    for series in view["series"]:
        points = series["points"]
        assert [p["run"] for p in points] == ids and [p["href"] for p in points] == [f"#/runs/{r}" for r in ids]
        assert [p["kind"] for p in points] == ["run"] * 5 + ["change-before", "change-began", "run"]
        xs = [p["x"] for p in points]
        assert xs == sorted(xs)  # oldest to newest
        [mark] = series["marks"]
        assert (mark["began"], mark["before"], mark["alert"]) == (ids[6], ids[5], True)
        assert mark["x"] == pytest.approx((xs[5] + xs[6]) / 2, abs=0.11)
        assert _number(mark["label"])[0] == pytest.approx(-50, abs=3)
        # heights above the x axis (194 px) are proportional to throughput: the slow runs stand at half the others
        steady = sum(194 - p["y"] for p in points[:6]) / 6
        assert all((194 - p["y"]) / steady == pytest.approx(0.5, abs=0.03) for p in points[6:])
        [listed] = series["listed"]
        assert listed["links"] == [f"#/runs/{ids[6]}", f"#/runs/{ids[5]}"] and "alert" in listed["text"]
    assert view["followed"]["hash"] == f"#/runs/{ids[6]}" and ids[6] in view["followed"]["heading"]
    assert view["followed"]["suite_link"] == f"#/history?suite={suite}"


def test_a_runs_cells_not_stamped_at_arrival_are_marked_with_the_note_under_them(served_api, stack, screenshots):
    """A stored run (synthetic: events shaped as a real run's) whose Kafka cells stamped acknowledgements and
    deliveries in librdkafka and whose Redis cells at arrival: the console's run page marks the Kafka rows † beside
    their format, not the Redis rows, and shows the footnote the terminal table prints (results.stamps_note)."""
    from brokerbench.figures import stamp_note

    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    spec = {"name": f"stamps-{secrets.token_hex(3)}", "brokers": ["kafka", "redis-streams"], "sizes": [1024],
            "rates": [1000], "formats": ["raw"], "repeats": 1}
    run_id = f"20210102T000000Z-{secrets.token_hex(3)}"
    events = synthetic_run(spec, intervals=3, seed=71, run_id=run_id)
    brokers = {c["cell_id"]: c["broker"] for c in events[0]["data"]["cells"]}
    for event in events:
        if event["type"] == "CellCompleted":
            stamp = "client:librdkafka" if brokers[event["data"]["cell_id"]] == "kafka" else "arrival"
            event["data"].update(ack_stamps=stamp, delivery_stamps=stamp)
    store.append(events)
    seen = subprocess.run(["node", str(STAMPS_CHECK), served_api.url, str(screenshots), run_id],
                          capture_output=True, text=True, timeout=120)
    assert seen.returncode == 0, seen.stderr
    view = json.loads(seen.stdout.strip().splitlines()[-1])
    assert view["ok"], view.get("error")
    assert view["blocked_requests"] == [] and view["console_errors"] == []
    assert sorted((r["broker"], r["format"]) for r in view["rows"]) == [("kafka", "raw †"), ("redis-streams", "raw")]
    assert view["note"] == stamp_note([("kafka raw", "client:librdkafka", "client:librdkafka")])
