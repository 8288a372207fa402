"""/compare: the regression check of one run against another and the baseline's history (the rule `brokerbench
compare` applies: with fewer than 3 runs, "cannot tell")."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from ..events import read_report_events
from ..reports.model import build_report
from ..reports.regression import HISTORY_RUNS, compare, find_history
from .deps import Deps
from .errors import ApiError
from .models import RUN_ID, Comparison, answers

VERDICTS = ("regression", "unstable", "improvement", "unchanged")


def router(deps: Deps) -> Router:
    comparisons = Router()

    @comparisons.get("/compare", summary="Compare a candidate run with a baseline run", responses=answers(Comparison, 404, 422),
                     tags=["compare"])
    def compare_runs(baseline: Annotated[str, Query(pattern=RUN_ID)],
                     candidate: Annotated[str, Query(pattern=RUN_ID)]) -> Comparison:
        found = []
        for field, run_id in (("baseline", baseline), ("candidate", candidate)):
            events = read_report_events(deps.store, run_id)
            if not events:
                raise ApiError(404, f"no run {run_id}", field)
            found.append(events)
        older = [h for h in find_history(deps.store, baseline, found[0]) if h != candidate][:HISTORY_RUNS - 1]
        history = [build_report(read_report_events(deps.store, h)) for h in older]
        verdicts = sorted(compare(*(build_report(e) for e in found), history),
                          key=lambda v: VERDICTS.index(v["verdict"]))
        summary = {name: sum(v["verdict"] == name for v in verdicts) for name in VERDICTS}
        return Comparison(baseline=baseline, candidate=candidate, verdicts=[_plain(v) for v in verdicts],
                          summary=summary)

    return comparisons


def _plain(verdict: dict) -> dict:
    """numpy numbers as plain floats, so the response is JSON."""
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in verdict.items()}
