"""/health, /metrics (every metric the project shows: brokerbench.metrics), /openapi.json and the console's files
(/ and /console/<name>)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path as PathParam

from .. import __version__, metrics
from .deps import Deps
from .errors import ApiError
from .models import Health, Metrics

CONSOLE_DIR = Path(__file__).resolve().parent / "console"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".json": "application/json"}


def console_file(name: str):
    """A file of the console folder, by exact name: nothing outside the folder can be named."""
    files = {p.name: p for p in CONSOLE_DIR.iterdir() if p.is_file()} if CONSOLE_DIR.is_dir() else {}
    path = files.get(name)
    if path is None or path.suffix not in CONTENT_TYPES:
        raise ApiError(404, f"no console file {name}", "name")
    return Response(200, CONTENT_TYPES[path.suffix], path.read_text(), headers={"Cache-Control": "no-cache"})


def router(deps: Deps, openapi) -> Router:
    meta = Router()

    @meta.get("/health", summary="The API answers", tags=["meta"])
    def health() -> Health:
        return Health(status="ok", version=__version__, mode=deps.mode)

    @meta.get("/metrics", summary="Every metric the reports, checks and studies show, as declared", tags=["meta"])
    def metric_list() -> Metrics:
        return Metrics(metrics=[metrics.describe(m) for m in metrics.ALL])

    @meta.get("/openapi.json", summary="This API's OpenAPI document", tags=["meta"])
    def openapi_document():
        return Response(200, "application/json", openapi())

    @meta.get("/", include_in_schema=False)
    def console_index():
        return console_file("index.html")

    @meta.get("/console/<name>", include_in_schema=False)
    def console_asset(name: Annotated[str, PathParam(pattern=r"^[A-Za-z0-9_-]+\.[a-z]+$")]):
        return console_file(name)

    return meta
