"""/suites: the built-in suites (the studies too, with their runs), what each measures and about how long it takes;
and a suite's history: its newest completed runs (reports.history.SERIES_RUNS) as one series per configuration of
the metric asked for, with change points marked (searched from MIN_SERIES runs on, the newest runs tested from
NEWEST_MIN: reports.changes)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from ..reports.history import history, suite_runs as stored_runs
from ..reports.regression import METRICS
from ..spec import SpecError, all_suite_names, expand, load_suite_file, suite_runs, validate
from .deps import Deps
from .errors import ApiError
from .models import SUITE, History, Suite, SuiteDetail, SuiteList, answers

# Per cell beyond warm-up and measurement: readiness probe, drain, the worker's start (measured locally:
# bench/results/run_overhead.json), and once per run: provisioning and reports.
CELL_OVERHEAD_S = 4.0
RUN_OVERHEAD_S = 20.0


def estimate_s(spec: dict, cells: list[dict]) -> float:
    """A rough wall-clock estimate, labelled as such wherever it is shown (a rate search takes longer)."""
    per_cell = spec.get("warmup_s", 0) + (spec.get("duration_s") or 0) + CELL_OVERHEAD_S
    return round(RUN_OVERHEAD_S + per_cell * len(cells), 1)


def describe(name: str) -> dict:
    """A suite's figures; a study's are its runs' added up."""
    doc = load_suite_file(name)
    cells, estimated = 0, 0.0
    for request in suite_runs(name):
        spec = validate(request)
        planned = expand(spec)
        cells, estimated = cells + len(planned), estimated + estimate_s(spec, planned)
    runs = [run["name"] for run in suite_runs(name)] if "runs" in doc else []
    return {"name": name, "description": doc.get("description", ""), "cells": cells, "estimated_s": round(estimated, 1),
            "runs": runs}


def router(deps: Deps) -> Router:
    suites = Router()

    @suites.get("/suites", summary="The built-in suites", tags=["suites"])
    def list_suites() -> SuiteList:
        return SuiteList(suites=[Suite(**describe(name)) for name in all_suite_names()])

    @suites.get("/suites/<name>", summary="A built-in suite and its run request", responses=answers(SuiteDetail, 404, 422),
                tags=["suites"])
    def get_suite(name: Annotated[str, Path(pattern=SUITE)]) -> SuiteDetail:
        if name not in all_suite_names():
            raise ApiError(404, f"no suite named {name!r} (known: {', '.join(all_suite_names())})", "name")
        try:
            summary = describe(name)
            requests = dict(zip(summary["runs"] or [name], suite_runs(name)))
            return SuiteDetail(**summary, request=None if summary["runs"] else requests[name], requests=requests)
        except SpecError as exc:  # a broken built-in suite is the project's bug, said plainly
            raise RuntimeError(f"built-in suite {name} is invalid: {exc}") from None

    @suites.get("/suites/<name>/history", summary="A suite's runs as series, with their change points",
                responses=answers(History, 400, 404, 422), tags=["suites"])
    def get_history(name: Annotated[str, Path(pattern=SUITE, description="a suite, or an inline spec's name: what "
                                                                          "its runs are listed under")],
                    metric: Annotated[str | None, Query(description="one of " + ", ".join(METRICS))] = None,
                    ) -> History:
        if metric not in METRICS:
            said = "is required" if metric is None else f"{metric!r} is not a metric"
            raise ApiError(400, f"metric {said}: one of {', '.join(METRICS)}", "metric")
        run_ids = stored_runs(deps.store, name)
        if not run_ids:
            raise ApiError(404, f"no completed runs of suite {name!r}", "name")
        shown = history(deps.store, run_ids, metrics=[metric])
        return History(suite=name, metric=metric, **shown)

    return suites
