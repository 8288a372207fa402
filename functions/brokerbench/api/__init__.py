"""The HTTP API: one Powertools resolver, one Router per resource; the same app serves Lambda and `brokerbench serve`."""

from __future__ import annotations

import base64
import json
import os

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, CORSConfig, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import (RequestUnsupportedContentType,
                                                                   RequestValidationError)

from .. import __version__, observability
from . import compare, meta, runs, schedules, suites
from .deps import Deps
from .errors import ApiError, from_validation

TITLE = "brokerbench"
DESCRIPTION = ("Start benchmark runs of message brokers and wire formats, follow them, and read their reports and "
               "regression checks. In AWS every route is behind IAM (SigV4) auth.")


def _error(error: ApiError) -> Response:
    return Response(error.status, "application/json", json.dumps(error.body()))


class Resolver(APIGatewayRestResolver):
    """Powertools' resolver, with the body checked before anything parses it: a body that is not JSON (or not
    UTF-8) is refused plainly, where the validation would otherwise fail on it with an unhandled error."""

    def resolve(self, event, context):
        refused = _refuse_body(event)
        if refused is not None:
            return {"statusCode": refused.status, "headers": {"Content-Type": "application/json"},
                    "multiValueHeaders": {}, "body": json.dumps(refused.body()), "isBase64Encoded": False}
        return super().resolve(event, context)


def _refuse_body(event) -> ApiError | None:
    body = event.get("body")
    if not body or event.get("httpMethod") not in ("POST", "PUT", "PATCH"):
        return None
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    content_type = headers.get("content-type") or ""
    if content_type.split(";")[0].strip().lower() != "application/json":
        return ApiError(415, "the body must be JSON sent as Content-Type: application/json "
                             f"(got {content_type or 'no Content-Type'})", "Content-Type")
    if event.get("isBase64Encoded"):
        try:
            base64.b64decode(body).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return ApiError(422, "the body is not UTF-8 JSON", "body")
    return None


def build_app(deps: Deps) -> APIGatewayRestResolver:
    # CORS only where the console is served from another origin (S3 in AWS: the CDK app sets the origin);
    # the local server serves the console itself, and an unauthenticated local API answers no other origin.
    origin = os.environ.get("BROKERBENCH_CONSOLE_ORIGIN")
    cors = CORSConfig(allow_origin=origin, allow_headers=["Content-Type", "Idempotency-Key", "Authorization",
                                                          "X-Amz-Date", "X-Amz-Security-Token"]) if origin else None
    app = Resolver(enable_validation=True, cors=cors)
    app.include_router(runs.router(deps))
    app.include_router(suites.router(deps))
    app.include_router(schedules.router(deps))
    app.include_router(compare.router(deps))
    app.include_router(meta.router(deps, lambda: openapi_json(app)))

    @app.exception_handler(ApiError)
    def api_error(error: ApiError) -> Response:
        return _error(error)

    @app.exception_handler(RequestValidationError)
    def invalid_request(error: RequestValidationError) -> Response:
        return _error(from_validation(error.errors()))

    @app.exception_handler(RequestUnsupportedContentType)
    def not_json(error: RequestUnsupportedContentType) -> Response:
        return _error(ApiError(415, "the body must be JSON sent as Content-Type: application/json", "Content-Type"))

    @app.not_found
    def not_found(error) -> Response:
        event = app.current_event
        return _error(ApiError(404, f"no route {event.http_method} {event.path}", None))

    return app


def openapi_json(app: APIGatewayRestResolver) -> str:
    """The OpenAPI document Powertools generates from the routes (checked in as schemas/openapi.json)."""
    return app.get_openapi_json_schema(title=TITLE, version=__version__, description=DESCRIPTION)


__all__ = ["Deps", "build_app", "openapi_json", "observability"]
