"""/runs: start a run (idempotently) or plan one (a dry run), list and follow runs, cancel one, read its events,
cells and report.

A dry run (POST /runs?dry_run=true) answers what `brokerbench cost --json` prints for the same request, beside the
plan's cells and time: the figures come from one place (cost.estimate_plan), so the API and the command line cannot
disagree. It validates exactly as a start does and then stops: no execution, no event, no idempotency record. It
also says whether a start would be admitted now (the starter's preview: the cap on runs in flight and the account's
quotas, read as a start reads them), reserving nothing: a start a moment later may still be refused.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query

from .. import observability
from ..cost import estimate_plan
from ..events import RUN_EVENTS, new_run_id, read_report_events
from ..plan import plan
from ..reports import html, markdown
from ..reports.model import build_report
from ..spec import SpecError, suite_request, validate
from ..workflow.admission import RunsInFlight
from ..workflow.starter import StarterBusy
from . import views
from .deps import Deps
from .errors import ApiError
from .models import (CELL_ID, RUN_ID, Cancelling, CellDetail, EventPage, RunDetail, RunList, RunPlan, RunStarted,
                     RunStatus, answers)

RunId = Annotated[str, Path(pattern=RUN_ID, description="a run id, e.g. 20261122T071300Z-1a2b3c")]
REPORT_TYPES = {"html": "text/html; charset=utf-8", "md": "text/markdown; charset=utf-8", "json": "application/json"}
REPORT_FILES = {"html": "report.html", "md": "report.md", "json": "report.json"}
REQUIRED = re.compile(r"^'([^']+)' is a required property$")
RUN_BODY = ("A run spec (schemas/run-request.schema.json, as `brokerbench run --spec` takes it), "
            'or {"suite": NAME} for a built-in suite, or {"suite": STUDY, "run": RUN} for one run of a study '
            '(GET /suites lists each study\'s runs); "scale" (above 0, at most 1) shortens a suite\'s run as '
            '`brokerbench run --scale` does.')
SUITE_BODY = ("suite", "run", "scale")
DRY_RUN = ("true: validate the request as a start does, start nothing and store nothing, and answer 200 with the "
           "run's plan and estimated AWS cost (what `brokerbench cost --json` prints), its hourly cost included, and "
           "whether a start would be admitted now (the cap on runs in flight, the quotas) and why not; nothing is "
           "reserved")


def request_of(body: dict) -> tuple[dict, str | None]:
    """The run request a POST body asks for, validated: nothing starts for an invalid one."""
    if "suite" in body and "brokers" not in body:
        extra = sorted(set(body) - set(SUITE_BODY))
        if extra:
            raise ApiError(422, f"a suite request takes only {', '.join(f'`{f}`' for f in SUITE_BODY)}; unexpected: "
                                f"{', '.join(extra)}", extra[0])
        for field in ("suite", "run"):
            if field in body and not isinstance(body[field], str):
                raise ApiError(422, f"{field} must be a {field} name (a string)", field)
        suite = body["suite"]
        try:
            request = suite_request(suite, body.get("run"), body.get("scale"))
        except SpecError as exc:
            raise _invalid(exc) from None
    else:
        request, suite = body, None
    try:
        validate(request)
    except SpecError as exc:
        raise _invalid(exc) from None
    return request, suite


def run_plan(request: dict, suite: str | None) -> dict:
    """A dry run's answer for a validated request: its cells, workers and time (plan.plan) and its estimate
    (cost.estimate_plan, as `brokerbench cost --json`)."""
    spec = validate(request)
    planned = plan(spec)
    return {"dry_run": True, "name": spec["name"], "suite": suite, "cells": len(planned["cells"]),
            "workers": dict(Counter(cell["worker"] for cell in planned["cells"])),
            "max_concurrency": planned["max_concurrency"], "estimated_s": planned["estimated_s"],
            "cost": estimate_plan(spec)}


def _invalid(exc: SpecError) -> ApiError:
    problems = [{"field": _field(p.path, p.message), "message": p.message} for p in exc.problems]
    first = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return ApiError(422, f"invalid run request: {first['field']}: {first['message']}{more}", first["field"], problems)


def _field(path: str, message: str) -> str:
    """The field a problem is about: a missing property names itself, not the object that lacks it."""
    missing = REQUIRED.match(message)
    if missing:
        return f"{path}.{missing.group(1)}" if path else missing.group(1)
    return path or "body"


def router(deps: Deps) -> Router:
    runs = Router()

    def start(body: dict) -> dict:
        request, suite = request_of(body)
        run_id = new_run_id()
        try:
            deps.starter.start(request, suite, run_id)
        except RunsInFlight as exc:  # the deployment's cap (-c brokerbench:maxRunsInFlight): try again later
            raise ApiError(429, str(exc), None, run_ids=exc.run_ids) from None
        except StarterBusy as exc:
            raise ApiError(409, str(exc), None, run_id=exc.run_id) from None
        observability.set_run(run_id)
        observability.count("RunsStarted")
        observability.logger.info("run started", extra={"suite": suite, "run_id": run_id})
        return {"run_id": run_id, "status": "starting", "links": views.links(run_id)}

    start_once = _idempotent(deps, start)

    @runs.post("/runs", status_code=202, summary="Start a run, or plan it (dry_run)",
               responses={**answers(RunStarted, 409, 415, 422, 429, status=202, description="the run was started"),
                          200: {"description": "dry_run: the run's plan and estimated cost; nothing was started",
                                "content": {"application/json": {"model": RunPlan}}}}, tags=["runs"])
    def post_run(body: Annotated[dict[str, Any], Body(description=RUN_BODY)],
                 idempotency_key: Annotated[str | None, Header(
                     alias="Idempotency-Key", min_length=1, max_length=128,
                     description="a retried POST with the same key and body returns the same run "
                                 "(a dry run stores nothing and ignores it)")] = None,
                 dry_run: Annotated[bool, Query(description=DRY_RUN)] = False,
                 ) -> RunStarted | RunPlan:
        if dry_run:
            request, suite = request_of(body)
            return Response(200, "application/json", {**run_plan(request, suite),
                                                      "admission": deps.starter.preview(request)})
        if idempotency_key is None:
            return RunStarted(**start(body))
        return RunStarted(**start_once({"key": idempotency_key, "body": body}, runs.lambda_context))

    @runs.get("/runs", summary="List runs, newest first", responses=answers(RunList, 422), tags=["runs"])
    def list_runs(suite: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9_.-]{1,64}$")] = None,
                  status: Annotated[RunStatus | None, Query()] = None,
                  since: Annotated[str | None, Query(
                      pattern=r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?)?$",
                      description="ISO 8601 time: runs requested at or after it")] = None,
                  limit: Annotated[int, Query(ge=1, le=100)] = 20,
                  next: Annotated[str | None, Query(max_length=2048, description="the previous page's `next`")] = None,
                  ) -> RunList:
        return RunList(**views.run_page(deps.store, deps.starter, suite=suite, status=status, since=_utc(since),
                                        limit=limit, token=next))

    @runs.get("/runs/<run_id>", summary="A run: status, progress, timings, cells", responses=answers(RunDetail, 404, 422),
              tags=["runs"])
    def get_run(run_id: RunId) -> RunDetail:
        observability.set_run(run_id)
        return RunDetail(**views.run_detail(deps.store, deps.starter, run_id))

    @runs.post("/runs/<run_id>/cancel", status_code=202, summary="Cancel a run (teardown still runs)",
               responses=answers(Cancelling, 404, 409, 415, 422, status=202, description="cancelling"), tags=["runs"])
    def cancel_run(run_id: RunId) -> Cancelling:
        observability.set_run(run_id)
        detail = views.run_detail(deps.store, deps.starter, run_id)  # 404 for an unknown run
        if detail["status"] not in ("starting", "running"):
            raise ApiError(409, f"run {run_id} already ended ({detail['status']})", "run_id")
        try:
            deps.starter.cancel(run_id, detail["spec"] or {})
        except LookupError as exc:
            raise ApiError(409, str(exc), "run_id") from None
        observability.logger.info("run cancelled", extra={"run_id": run_id})
        return Cancelling(run_id=run_id, status="cancelling")

    @runs.get("/runs/<run_id>/events", summary="A run's events, in order, a page at a time",
              responses=answers(EventPage, 404, 422), tags=["runs"])
    def run_events(run_id: RunId, limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                   next: Annotated[str | None, Query(max_length=2048)] = None,
                   histograms: Annotated[bool, Query(description="include the per-interval histograms")] = False,
                   ) -> EventPage:
        return EventPage(**views.events_page(deps.store, run_id, limit=limit, token=next, histograms=histograms))

    @runs.get("/runs/<run_id>/cells/<cell_id>", summary="A cell's figures and its per-second series",
              responses=answers(CellDetail, 404, 422), tags=["runs"])
    def get_cell(run_id: RunId, cell_id: Annotated[str, Path(pattern=CELL_ID, max_length=200)]) -> CellDetail:
        return CellDetail(**views.cell_detail(deps.store, run_id, cell_id))

    @runs.get("/runs/<run_id>/report", summary="A run's comparison report (html, md or json)",
              responses={**answers(dict, 404, 422), 200: {"description": "the report", "content": {
                  t: {"schema": {"type": "object" if k == "json" else "string"}} for k, t in REPORT_TYPES.items()}}},
              tags=["runs"])
    def get_report(run_id: RunId, format: Annotated[Literal["html", "md", "json"], Query()] = "html"):
        return Response(200, REPORT_TYPES[format], report_body(deps, run_id, format))

    return runs


def report_body(deps: Deps, run_id: str, fmt: str) -> str:
    """The report the workflow published when the run has ended; otherwise built now from its events."""
    ended = any(e["type"] in RUN_EVENTS for e in deps.store.read(run_id, prefix="90#"))
    if ended:
        published = deps.reports.read(run_id, REPORT_FILES[fmt])
        if published is not None:
            return published
    events = read_report_events(deps.store, run_id)
    if not events:
        raise ApiError(404, f"no run {run_id}", "run_id")
    report = build_report(events)
    if fmt == "json":
        return json.dumps(report, default=str)
    return markdown.render(report) if fmt == "md" else html.render(report)


def _utc(since: str | None) -> str | None:
    """An ISO time as the store writes them (UTC, +00:00), so string order is time order."""
    if since is None:
        return None
    from datetime import datetime, timezone

    try:
        moment = datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(422, f"since: not an ISO 8601 time: {since}", "since") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds")


def _idempotent(deps: Deps, start):
    """`start` made idempotent on {key, body}: the same key returns the first run; the same key with another body
    is refused (422), and a duplicate that arrives while the first is still starting gets 409."""
    if deps.idempotency is None:
        def refuse(submission: dict, context) -> dict:
            raise ApiError(422, "this server keeps no idempotency records", "Idempotency-Key")
        return refuse
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function

    config = IdempotencyConfig(event_key_jmespath="key", payload_validation_jmespath="body",
                               raise_on_no_idempotency_key=True, expires_after_seconds=24 * 3600,
                               response_hook=lambda response, record: {**response, "replayed": True})

    @idempotent_function(data_keyword_argument="submission", persistence_store=deps.idempotency, config=config)
    def start_run(submission: dict) -> dict:
        return start(submission["body"])

    def guarded(submission: dict, context) -> dict:
        from aws_lambda_powertools.utilities.idempotency.exceptions import (IdempotencyAlreadyInProgressError,
                                                                            IdempotencyValidationError)
        config.register_lambda_context(context)  # records in progress expire with the invocation
        try:
            return start_run(submission=submission)
        except IdempotencyValidationError:
            raise ApiError(422, "this Idempotency-Key was used with another body", "Idempotency-Key") from None
        except IdempotencyAlreadyInProgressError:
            raise ApiError(409, "a request with this Idempotency-Key is still being handled", "Idempotency-Key") from None
    return guarded
