"""The workflow's steps: what each Task state of statemachines/benchmark_run.asl.json does.

Each function takes the state's payload and returns its result; handlers/ wraps them for Lambda.
Adapters (event store, targets, fleet, outputs) come from brokerbench.workflow.wiring.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

from .. import environment
from ..drivers import BrokerUnavailable
from ..events import RUN_EVENTS, cell_prefix, make_event, new_run_id, read_report_events, sort_key
from ..events.run import run_completed_event, run_requested_events
from ..observability import logger
from ..plan import plan
from ..registry import get_driver
from ..reports import export, history, html, markdown
from ..reports.model import build_report
from ..reports.results import build_results
from ..spec import SpecError, lanes, validate
from ..targets import GONE, TEARDOWN_DONE, TEARDOWN_TIMEOUT_S, TEARDOWN_WAIT_S, torn_down
from ..worker.cell import run_cell as measure_cell
from ..worker.run_end import RunEndWatch
from . import wiring


class InvalidRequest(ValueError):
    """The run request is invalid (the message lists every problem); nothing was started."""


def validate_request(event: dict) -> dict:
    request = event.get("request")
    try:
        spec = validate(request)
    except SpecError as exc:
        raise InvalidRequest("; ".join(str(p) for p in exc.problems)) from None
    unprovidable = list(dict.fromkeys(  # a rule of the whole request (a local reboot) named once, not per broker
        problem for broker in spec["brokers"] if (problem := wiring.provider_problem(broker, spec))))
    if unprovidable:  # e.g. a broker with no cloud provider in AWS mode: refused before anything starts
        raise InvalidRequest("; ".join(unprovidable))
    return {"run_id": event.get("run_id") or new_run_id(), "spec": spec, "suite": event.get("suite")}


STATE_CELLS = 200  # more cells than this leave the execution state (256 KB) for an object the map reads


def plan_cells(run: dict) -> dict:
    """The cells in the order they run (the RunCells map takes them in list order), recorded in RunRequested
    with the spec's order_seed, so the stored order is the one that ran.

    A large plan's cells go to the reports store (cells_location: the S3 object a Distributed Map's
    ItemReader reads) instead of the execution state; where the store is a local folder there is no
    state limit and they stay inline."""
    planned = plan(run["spec"])
    cells = planned["cells"]
    wiring.event_store().append(run_requested_events(run["run_id"], run["spec"], cells, run.get("suite")))
    location = None
    if len(cells) > STATE_CELLS:
        location = wiring.reports().put_items(run["run_id"], "plan-cells.json", cells)
    return {**planned, "cells": [] if location else cells, "cells_location": location, "cell_count": len(cells)}


def provision_target(event: dict) -> dict:
    return wiring.target_provider(event["broker"], event["spec"]).provision(event["run_id"], event["broker"], event["spec"])


def check_target(target: dict) -> dict:
    # The provider kind travels in the target; the spec is only needed to pick "existing".
    spec = {"targets": {target["broker"]: target["endpoint"]}} if target["provider"] == "existing" else {}
    return wiring.target_provider(target["broker"], spec).check(target)


def describe_targets(brokers: list[str], endpoints: dict, client: dict) -> dict:
    """Broker and client versions of each target that answers (a silent one is left out; one that cannot serve
    the client settings raises TargetRefused)."""
    targets = {}
    for broker in brokers:
        driver = get_driver(broker, endpoints[broker], client)
        try:
            driver.check(timeout_s=5)
        except BrokerUnavailable:
            continue
        targets[broker] = driver.describe()
    return targets


def record_targets_ready(event: dict) -> dict:
    endpoints = {t["broker"]: t["endpoint"] for t in event["targets"]}
    client = event["spec"]["client"]
    described = environment.with_settings(describe_targets(list(endpoints), endpoints, client), endpoints, client)
    wiring.event_store().append([make_event(event["run_id"], "TargetsReady", {"targets": described})])
    return {"endpoints": endpoints}


def lambda_worker() -> dict:
    """Where a Lambda cell runs, with the function's memory as Lambda states it (the cost estimate prices it)."""
    worker = {"kind": "lambda", "host": socket.gethostname()}
    memory = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
    if memory and memory.isdigit():
        worker["memory_mb"] = int(memory)
    return worker


RUN_ENDED = "stopped: the run ended before the cell did (nothing written after the run's end)"


def run_cell(event: dict, worker: dict | None = None, stop: threading.Event | None = None) -> dict:
    """One cell, on whichever worker calls it (RunCell on Lambda, the EC2 worker, the local workflow). The cell
    watches its run's end in the store (worker/run_end.py): a run cancelled or failed while it measures stops it
    within about an interval, and nothing it would write after the run's end is written. `stop`, the caller's own
    (a signal to the EC2 worker, the local workflow's Ctrl-C or cancel), stops it as on Ctrl-C."""
    cell, run_id = event["cell"], event["run_id"]
    watch = RunEndWatch(wiring.event_store(), run_id)
    if watch.check():  # a cell the Map started after the run had ended measures nothing
        return {"cell_id": cell["cell_id"], "status": "failed", "reason": RUN_ENDED}
    with watch:
        try:
            outcome = measure_cell(run_id, cell, event["targets"][cell["broker"]], watch,
                                   worker=worker or lambda_worker(),
                                   stop=(watch.ended,) if stop is None else (watch.ended, stop))
        except KeyboardInterrupt:
            if not watch.ended.is_set():
                raise  # Ctrl-C or a local cancel: the front end that stopped it goes on
            outcome = None
    if outcome is None or watch.dropped:
        logger.warning("cell stopped: its run ended", extra={"cell_id": cell["cell_id"], "not_written": watch.dropped})
        return {"cell_id": cell["cell_id"], "status": "failed", "reason": RUN_ENDED}
    return {"cell_id": outcome.cell_id, "status": outcome.status, "reason": outcome.reason}


def start_ec2_worker(event: dict) -> dict:
    job = {"run_id": event["run_id"], "cell": event["cell"], "targets": event["targets"]}
    return wiring.fleet().launch(job, event["task_token"])


def record_cell_failed(event: dict) -> dict:
    """A worker that crashed or timed out: the cell ends FAILED (a no-op when it already ended), and the
    topics its attempts made are deleted (a worker deletes its own at its end; a killed one cannot)."""
    cell, error = event["cell"], event.get("error") or {}
    reason = f"{error.get('Error', 'WorkerFailed')}: {error.get('Cause', 'no cause given')}"
    store = wiring.event_store()
    store.append([make_event(event["run_id"], "CellFailed", {"cell_id": cell["cell_id"], "reason": reason},
                             cell_index=cell["index"])])
    removed = _remove_cell_topics(store, event["run_id"], cell, (event.get("targets") or {}).get(cell["broker"]))
    return {"cell_id": cell["cell_id"], "status": "failed", "topics_removed": removed}


def _remove_cell_topics(store, run_id: str, cell: dict, endpoint: dict | None) -> list[str]:
    """Best effort and bounded: a broker that does not answer within 5 s keeps the topics (each cell has its
    own, so later cells are not affected). A completed cell's worker deleted its topic itself. The steps of a
    rate search have topics of their own that no event names; they are left."""
    stored = store.read(run_id, prefix=cell_prefix(cell["index"]))
    topics = [e["data"]["topic"] for e in stored if e["type"] == "CellStarted"]
    if not endpoint or not topics or any(e["type"] == "CellCompleted" for e in stored):
        return []
    driver = None
    try:  # cleanup never fails the step that records the failure
        driver = get_driver(cell["broker"], endpoint, cell["client"])
        driver.check(timeout_s=5)
        for topic in topics:
            driver.delete_topic(topic, lanes(cell))
        return topics
    except Exception as exc:  # noqa: BLE001
        logger.warning("cell topics kept", extra={"cell_id": cell["cell_id"], "topics": topics, "error": str(exc)})
        return []
    finally:
        if driver is not None:
            driver.close()


REGRESSION_FILE = "regression.json"


def publish_reports(store, run_id: str, events: list[dict] | None = None,
                    regression_check: dict | None = None) -> dict[str, str]:
    """results.json, the comparison report (json, md, html) and the files other tools read (cells.csv, and hlog/:
    the cells' interval histograms as HdrHistogram logs), built from the run's events.

    `regression_check` is CheckRegression's result, passed through as it is (report["regression_check"]).
    The files are named one per kind; hlog/ by its folder (a run of many cells has thousands of logs), left out for a
    run of more than export.AGGREGATE_MAX_INTERVALS cell-seconds.
    """
    events = events if events is not None else read_report_events(store, run_id)
    report = build_report(events)
    if regression_check is not None:
        report["regression_check"] = regression_check
        report["baseline"] = regression_check.get("baseline_run_id")
    sink = wiring.reports()
    results = build_results(events)
    files = {
        "results": sink.write(run_id, "results.json", json.dumps(results, indent=2)),
        "json": sink.write(run_id, "report.json", json.dumps(report, indent=2)),
        "md": sink.write(run_id, "report.md", markdown.render(report)),
        "html": sink.write(run_id, "report.html", html.render(report)),
        "csv": sink.write(run_id, export.CELLS_CSV, export.cells_csv(results)),
    }
    intervals = export.run_intervals(events)
    if intervals > export.AGGREGATE_MAX_INTERVALS:
        logger.warning("HdrHistogram logs not written: too many intervals for this step (brokerbench report writes "
                       "them)", extra={"run_id": run_id, "intervals": intervals,
                                       "limit": export.AGGREGATE_MAX_INTERVALS})
        return files
    folder = export.write_hlogs(lambda name, text: sink.write(run_id, name, text), store, run_id, events)
    return {**files, "hlog": folder} if folder else files


# What the notification says of each regression: a change point also names the run it began with, the run before
# it and where its series is shown.
ALERT_FIELDS = ("cell", "metric", "source", "baseline_mean", "candidate_mean", "change", "p_value", "began_run_id",
                "before_run_id", "history", "console", "why")


def check_regression(event: dict) -> dict:
    """Failed cells, and regressions against the baseline (the latest completed run of the suite).

    Runs before Aggregate, so the report can show the check. The whole result (every verdict) goes to
    the run's outputs as regression.json, where Aggregate reads it: it can be larger than a state's
    payload may be. The state gets the summary that Notify needs.
    """
    store = wiring.event_store()
    run_id = event["run_id"]
    requested = store.read(run_id, prefix="00#run")[0]["data"]["spec"]
    checked = history.watch(store, run_id, event.get("baseline_run_id") or requested.get("baseline_run_id"))
    check_file = wiring.reports().write(run_id, REGRESSION_FILE, json.dumps(checked, indent=2, default=_plain))
    results = build_results(read_report_events(store, run_id))
    failed = [{"cell_id": c["cell_id"], "reason": c.get("reason")} for c in results["cells"] if c["status"] != "completed"]
    regressions = [{k: r.get(k) for k in ALERT_FIELDS if k in r} for r in checked["regressions"]]
    return {"failed_cells": failed, "regressions": regressions, "baseline_run_id": checked.get("baseline_run_id"),
            "check_file": check_file, "notify": bool(failed or regressions)}


def aggregate(event: dict) -> dict:
    """The run's outputs, then its end: RunCompleted is written only once the reports are published,
    so a failure here ends the run RunFailed (the workflow's catch) instead of hiding behind it."""
    store = wiring.event_store()
    run_id = event["run_id"]
    events = read_report_events(store, run_id)
    results = build_results(events)
    completed = sum(1 for c in results["cells"] if c["status"] == "completed")
    failed = len(results["cells"]) - completed
    status = "completed" if not failed else "completed_with_failures"
    end = next((e for e in events if e["type"] in RUN_EVENTS), None)  # a retried step keeps the stored end
    if end is None:
        end = run_completed_event(run_id, status, completed, failed)
    # The published files already show the run as ended: they are built with the end event it is about to get.
    final = sorted([e for e in events if e["type"] not in RUN_EVENTS] + [end], key=lambda e: e["sk"])
    files = publish_reports(store, run_id, final, regression_check=_regression_check(run_id, event.get("check")))
    store.append([make_event(run_id, "ReportBuilt", {"files": files})])
    store.append([end])
    return {"status": status, "cells_completed": completed, "cells_failed": failed, "report": files["html"]}


def _plain(value):
    """numpy scalars and the like, as JSON numbers."""
    return value.item() if hasattr(value, "item") else str(value)


def _regression_check(run_id: str, check: dict | None) -> dict | None:
    """CheckRegression's full result (None when no check ran before this step)."""
    if not check:
        return None
    body = wiring.reports().read(run_id, REGRESSION_FILE)
    if body is None:
        raise FileNotFoundError(f"{REGRESSION_FILE} of run {run_id} is missing (CheckRegression wrote "
                                f"{check.get('check_file')})")
    return json.loads(body)


def recipients(store, run_id: str) -> list[str]:
    """Who the run's request asks to be told (its `notify`), besides the service's own topic."""
    requested = store.read(run_id, prefix="00#run")
    return list(requested[0]["data"]["spec"].get("notify") or []) if requested else []


def notify(event: dict) -> dict:
    check, summary = event["check"], event["summary"]
    parts = []
    if check["failed_cells"]:
        parts.append(f"{len(check['failed_cells'])} failed cells")
    if check["regressions"]:
        parts.append(f"{len(check['regressions'])} regressions")
    run_id = event["run_id"]
    subject = f"brokerbench run {run_id}: {', '.join(parts)}"
    message = {"run_id": run_id, "summary": summary, **check,
               "text": notify_text(run_id, check, wiring.api_url())}
    return {"message_id": notify_once(wiring.event_store(), run_id, "Notify", subject, message)}


def notify_text(run_id: str, check: dict, api_url: str | None) -> list[str]:
    """What the notification says in words, a line each: every failed cell and regression, and for a change point
    where its series is drawn: the API's history (a full URL when the API's is known: `api_url`) and the console's
    history page (a route of the console, which opens signed through `brokerbench console --aws`, or at
    `brokerbench serve`'s address locally: the API itself answers only signed requests)."""
    base = (api_url or "").rstrip("/")
    lines = [f"Run {run_id}: report at {base}/runs/{run_id}/report?format=html" if base else f"Run {run_id}."]
    lines += [f"Cell {c['cell_id']} failed: {c.get('reason') or 'no reason recorded'}" for c in check["failed_cells"]]
    for r in check["regressions"]:
        line = f"Regression of {r.get('metric')} in {r.get('cell')}: {r.get('why')}"
        if r.get("history"):
            line += f". The series: {base}{r['history']}"
        if r.get("console"):
            line += f"; in the console (brokerbench console --aws, or brokerbench serve): {r['console']}"
        lines.append(line)
    return lines


def notify_once(store, run_id: str, step: str, subject: str, message: dict) -> str:
    """Sends the step's notification unless a Notified event says it was sent: a retry of a step that had
    already told people (its answer lost, a Lambda retry) tells nobody again. The event is written after the
    send, so only a step that dies between the two can send twice; a send that fails writes nothing and
    raises, so its retry sends."""
    sent = store.read(run_id, prefix=sort_key("Notified", key=step))
    if sent:
        return sent[0]["data"]["message_id"]
    message_id = wiring.notifier().publish(run_id, subject, message, to=recipients(store, run_id))
    store.append([make_event(run_id, "Notified", {"step": step, "message_id": message_id}, key=step)])
    return message_id


def record_run_failed(event: dict) -> dict:
    """RunFailed, then a notification. The event comes first and a notification that cannot be sent is
    reported in the result (notify_error), not raised: a retry must not be needed to keep the run's end.

    A retry of this step (its RunFailed already stored) sends the notification only if no Notified event
    says it was sent (notify_once). A run that had already ended otherwise did not fail, and nobody is told it
    did.
    """
    failure = event.get("failure") or {}
    reason = f"{failure.get('Error', 'RunFailed')}: {failure.get('Cause', 'no cause given')}"
    store, run_id = wiring.event_store(), event["run_id"]
    result = store.append([make_event(run_id, "RunFailed", {"reason": reason})])
    out = {"recorded": bool(result.written)}
    if not result.written:
        stored_end = [e["type"] for e in store.read(run_id, prefix=sort_key("RunFailed"))]
        if stored_end != ["RunFailed"]:
            return out
    try:
        out["message_id"] = notify_once(store, run_id, "RunFailed", f"brokerbench run {run_id} failed: {reason}",
                                        {"run_id": run_id, "status": "failed", "reason": reason})
    except Exception as exc:  # noqa: BLE001 (the run's end is stored; the failure to tell is reported)
        out["notify_error"] = f"{type(exc).__name__}: {exc}"
    return out


def record_step_failed(event: dict) -> dict:
    """StepFailed for a step that failed after the run's end was decided (Notify, TeardownTargets): the run's
    status then says so (events.run_status) and so does the CLI's exit code. Stored once per step: a retry of
    this step writes nothing new."""
    failure = event.get("failure") or {}
    reason = f"{failure.get('Error', 'States.TaskFailed')}: {failure.get('Cause', 'no cause given')}"
    data = {"step": event["step"], "reason": reason}
    left = targets_left(failure.get("targets") or [])
    if left:
        data["targets_left"] = left
        data["reason"] = f"{failure.get('Error', 'TargetsNotDeleted')}: " + "; ".join(
            f"{t['broker']} not deleted ({t['error']}: {t['cause']})" for t in left)
    result = wiring.event_store().append([make_event(event["run_id"], "StepFailed", data, key=event["step"])])
    return {"recorded": bool(result.written), "step": event["step"], "targets_left": [t["broker"] for t in left]}


def targets_left(results: list[dict]) -> list[dict]:
    """The targets TeardownTargets' Map could not delete, from its results (TargetTimedOut and TargetNotTornDown give
    theirs `not_deleted`, {Error, Cause}): {broker, error, cause} each."""
    return [{"broker": r["broker"], "error": r["not_deleted"].get("Error") or "States.TaskFailed",
             "cause": r["not_deleted"].get("Cause") or "no cause given"} for r in results if r.get("not_deleted")]


def teardown_target(event: dict) -> dict:
    """One round of the workflow's teardown loop (TeardownTarget, asked again after TEARDOWN_WAIT_S until `done`).

    `event["teardown"]` is the previous round's answer, when there was one: its deadline holds for the whole loop
    (TEARDOWN_TIMEOUT_S from the first round), and `timed_out` says the loop should give up."""
    previous = event.get("teardown") or {}
    deadline = previous.get("deadline") or time.time() + TEARDOWN_TIMEOUT_S
    problem = wiring.provider_problem(event["broker"], event["spec"])
    if problem:  # nothing was provisioned for it
        answer = torn_down(event["broker"], GONE, f"nothing to tear down ({problem})")
    else:
        provider = wiring.target_provider(event["broker"], event["spec"])
        answer = provider.teardown(event["run_id"], event["broker"], event["spec"])
    done = answer["state"] in TEARDOWN_DONE
    return {**answer, "done": done, "rounds": previous.get("rounds", 0) + 1, "deadline": deadline,
            "wait_s": TEARDOWN_WAIT_S, "timed_out": not done and time.time() > deadline}
