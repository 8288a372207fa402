"""Errors the API answers with: JSON with a message and the field at fault; bad input is a 4xx, never a 5xx."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, status: int, message: str, field: str | None = None,
                 problems: list[dict] | None = None, run_id: str | None = None,
                 run_ids: list[str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field, self.problems = status, message, field, problems
        self.run_id = run_id  # the run a conflict is with
        self.run_ids = run_ids  # with 429: the runs in flight

    def body(self) -> dict:
        body = {"message": self.message, "field": self.field}
        if self.problems:
            body["problems"] = self.problems
        if self.run_id:
            body["run_id"] = self.run_id
        if self.run_ids:
            body["run_ids"] = self.run_ids
        return body


def field_of(location) -> str:
    """A pydantic error location ('query', 'limit') as the field a client sent ('limit')."""
    parts = [str(p) for p in location]
    if parts and parts[0] in ("query", "path", "header", "body", "cookie"):
        parts = parts[1:] or parts
    return ".".join(parts)


def from_validation(errors) -> ApiError:
    """Powertools' RequestValidationError as one ApiError: every problem, the first one's field on top."""
    problems = [{"field": "body", "message": "the body is not valid JSON"} if e.get("type") == "json_invalid"
                else {"field": field_of(e.get("loc", ())), "message": e.get("msg", "invalid")} for e in errors]
    if not problems:
        return ApiError(422, "invalid request", None)
    first = problems[0]
    message = f"{first['field']}: {first['message']}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
    return ApiError(422, message, first["field"], problems)
