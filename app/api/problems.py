"""RFC 9457 problem details: the one place where errors become HTTP statuses."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.domain.errors import (
    ChronoqError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PayloadTooLargeError,
    StoreUnavailableError,
)

log = logging.getLogger(__name__)

MEDIA_TYPE = "application/problem+json"

# How long a client should wait before retrying a request the database could not serve: a
# restart or failover takes a few seconds, and the pool reconnects on the next checkout.
RETRY_AFTER_SECONDS = 2

# class -> (status, type slug, title)
_TABLE: dict[type[ChronoqError], tuple[int, str, str]] = {
    NotFoundError: (404, "not-found", "Not found"),
    ConflictError: (409, "conflict", "Conflict"),
    InvalidInputError: (422, "invalid-input", "Invalid input"),
    PayloadTooLargeError: (413, "payload-too-large", "Payload too large"),
    StoreUnavailableError: (503, "unavailable", "Service unavailable"),
}

_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")

# Discriminator values that pydantic puts into an error's location; they are not fields.
_UNION_TAGS = frozenset({"once", "immediate", "cron", "interval", "webhook", "rabbitmq"})
_UNION_FIELDS = frozenset({"trigger", "target"})


class FieldError(BaseModel):
    pointer: str | None = None
    parameter: str | None = None
    field: str
    detail: str


class Problem(BaseModel):
    type: str
    title: str
    status: int
    detail: str
    errors: list[FieldError] | None = None


def problem_type(slug: str) -> str:
    return f"urn:chronoq:problem:{slug}"


def problem_response(
    status: int,
    title: str,
    detail: str,
    *,
    slug: str | None = None,
    errors: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": problem_type(slug) if slug else "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
    }
    if errors is not None:
        body["errors"] = errors
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def _path(loc: tuple[Any, ...], error_type: str) -> list[str]:
    parts: list[str] = []
    for index, item in enumerate(loc):
        text = str(item)
        previous = str(loc[index - 1]) if index else ""
        if text in _UNION_TAGS and previous in _UNION_FIELDS:
            continue
        if text.startswith("function-after[") or text.startswith("function-wrap["):
            continue
        parts.append(text)
    if error_type in ("union_tag_invalid", "union_tag_not_found"):
        parts.append("type")
    return parts


def field_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = []
    for error in exc.errors():
        loc = tuple(error.get("loc", ()))
        source, rest = (str(loc[0]), loc[1:]) if loc else ("body", ())
        parts = _path(rest, str(error.get("type", "")))
        message = str(error.get("msg", "invalid"))
        if error.get("type") == "json_invalid":
            parts = []
        entry: dict[str, Any] = {"field": ".".join(parts) or source, "detail": message}
        if source == "body":
            entry["pointer"] = "#" + "".join(f"/{part}" for part in parts)
        else:
            entry["parameter"] = ".".join(parts)
        result.append(entry)
    return result


def _allowed_methods(request: Request) -> str:
    """Every method some route accepts on this path (Starlette reports only the first route)."""
    allowed = {
        method
        for method in _METHODS
        for route in request.app.router.routes
        if route.matches({**request.scope, "method": method})[0] is Match.FULL
    }
    return ", ".join(sorted(allowed))


def install(app: FastAPI) -> None:
    @app.exception_handler(ChronoqError)
    async def _chronoq(request: Request, exc: ChronoqError) -> JSONResponse:
        status, slug, title = next(
            (value for cls, value in _TABLE.items() if isinstance(exc, cls)),
            (400, "bad-request", "Bad request"),
        )
        if isinstance(exc, StoreUnavailableError):
            # The store's detail names the database for operators; the client learns only
            # that it may retry, and when.
            log.warning("%s %s: %s", request.method, request.url.path, exc.detail)
            return problem_response(
                status,
                title,
                f"the database cannot be reached; retry in {RETRY_AFTER_SECONDS} seconds",
                slug=slug,
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        errors = None
        if exc.pointer is not None:
            field = ".".join(exc.pointer.lstrip("#/").split("/")) if exc.pointer != "#" else "body"
            errors = [{"pointer": exc.pointer, "field": field, "detail": exc.detail}]
        elif exc.parameter is not None:
            errors = [{"parameter": exc.parameter, "field": exc.parameter, "detail": exc.detail}]
        return problem_response(status, title, exc.detail, slug=slug, errors=errors)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = field_errors(exc)
        fields = ", ".join(sorted({e["field"] for e in errors}))
        return problem_response(
            422,
            "Invalid input",
            f"invalid value for: {fields}",
            slug="invalid-input",
            errors=errors,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        titles = {404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large"}
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = _allowed_methods(request)
        return problem_response(
            exc.status_code,
            titles.get(exc.status_code, "Error"),
            str(exc.detail),
            headers=headers,
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return problem_response(
            500, "Internal Server Error", "an unexpected error occurred; it has been logged"
        )


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI declarations of the problems a route can answer with."""
    return {
        status: {"model": Problem, "content": {MEDIA_TYPE: {}}, "description": "Problem"}
        for status in statuses
    }
