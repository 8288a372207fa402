"""The HTTP API: one Powertools resolver, one Router per resource; the same app serves Lambda and `brokerbench serve`."""

from __future__ import annotations

import json

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from .. import __version__, observability
from . import compare, meta, runs, schedules, suites
from .deps import Deps
from .errors import ApiError, from_validation

TITLE = "brokerbench"
DESCRIPTION = ("Start benchmark runs of message brokers and wire formats, follow them, and read their reports and "
               "regression checks. In AWS every route is behind IAM (SigV4) auth.")


def _error(error: ApiError) -> Response:
    return Response(error.status, "application/json", json.dumps(error.body()))


def build_app(deps: Deps) -> APIGatewayRestResolver:
    app = APIGatewayRestResolver(enable_validation=True)
    app.include_router(runs.router(deps))
    app.include_router(suites.router())
    app.include_router(schedules.router(deps))
    app.include_router(compare.router(deps))
    app.include_router(meta.router(deps, lambda: openapi_json(app)))

    @app.exception_handler(ApiError)
    def api_error(error: ApiError) -> Response:
        return _error(error)

    @app.exception_handler(RequestValidationError)
    def invalid_request(error: RequestValidationError) -> Response:
        return _error(from_validation(error.errors()))

    @app.not_found
    def not_found(error) -> Response:
        event = app.current_event
        return _error(ApiError(404, f"no route {event.http_method} {event.path}", None))

    return app


def openapi_json(app: APIGatewayRestResolver) -> str:
    """The OpenAPI document Powertools generates from the routes (checked in as schemas/openapi.json)."""
    return app.get_openapi_json_schema(title=TITLE, version=__version__, description=DESCRIPTION)


__all__ = ["Deps", "build_app", "openapi_json", "observability"]
