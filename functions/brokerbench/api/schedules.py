"""/schedules: the scheduled regression checks, when each is next due, and how its last trigger went."""

from __future__ import annotations

from datetime import datetime, timezone

from aws_lambda_powertools.event_handler.api_gateway import Router

from .. import schedules as schedule_file
from .deps import Deps
from .models import ScheduleList


def router(deps: Deps) -> Router:
    schedules = Router()

    @schedules.get("/schedules", summary="Scheduled regression checks and their last results", tags=["schedules"])
    def list_schedules() -> ScheduleList:
        now = datetime.now(timezone.utc)
        return ScheduleList(schedules=schedule_file.describe(deps.schedules(), deps.store, now))

    return schedules
