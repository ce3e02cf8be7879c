"""Where errors become HTTP statuses, and the only place: the exception handlers that answer
with problem details (`app.api.problem_details`), and the OpenAPI declarations of the
problems each route can answer with."""

from __future__ import annotations

import logging
import re
import weakref
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute, iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from app.api.problem_details import MEDIA_TYPE, Problem, field_errors, problem_response
from app.domain.errors import (
    ChronoqError,
    ConflictError,
    ForbiddenError,
    InvalidInputError,
    NotFoundError,
    PayloadTooLargeError,
    PreconditionFailedError,
    QuotaExceededError,
    SchemaNotMigratedError,
    StoreUnavailableError,
)
from app.telemetry import logs

log = logging.getLogger(__name__)

# How long a client should wait before retrying a request the database could not serve: a
# restart or failover takes a few seconds, and the pool reconnects on the next checkout.
RETRY_AFTER_SECONDS = 2

# class -> (status, type slug, title)
_TABLE: dict[type[ChronoqError], tuple[int, str, str]] = {
    NotFoundError: (404, "not-found", "Not found"),
    ConflictError: (409, "conflict", "Conflict"),
    ForbiddenError: (403, "forbidden", "Forbidden"),
    InvalidInputError: (422, "invalid-input", "Invalid input"),
    PayloadTooLargeError: (413, "payload-too-large", "Payload too large"),
    PreconditionFailedError: (412, "precondition-failed", "Precondition failed"),
    # Before its base class: the first class an error is an instance of decides.
    SchemaNotMigratedError: (503, "schema-not-migrated", "Service unavailable"),
    StoreUnavailableError: (503, "unavailable", "Service unavailable"),
}

# What a client is told of each kind of unavailable store; the log says where and why.
_NOT_MIGRATED = (
    "the database is not migrated to this version of the service: an operator runs "
    "`chronoq migrate`"
)
_UNREACHABLE = "the database cannot be reached"

# What each problem status means, for the OpenAPI document.
_DESCRIPTIONS = {
    400: "The body is not JSON text (malformed, or not UTF-8)",
    404: "Not found",
    409: "Conflict with the resource's current state",
    412: "If-Match names a version the schedule is no longer at; nothing changed",
    413: "Payload too large",
    415: "The body is not application/json",
    422: "Invalid input; `errors` names each offending field or parameter",
    429: "This client already has CHRONOQ_MAX_BODIES_PER_CLIENT request bodies arriving; or "
    "(a create) a tenant's quota refuses it (`quota`, `limit`, `used`); retry after "
    "`Retry-After` seconds where it says",
    503: "The database cannot be reached, or is not migrated to this version (`chronoq "
    "migrate`); retry after `Retry-After` seconds",
}

_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")

# How many unknown query parameters a 422 names, and how much of each name it repeats.
_UNKNOWN_SHOWN = 20
_NAME_ECHO = 100


class UnknownParametersError(Exception):
    """Query parameters the operation does not declare (app.api.query)."""

    def __init__(self, unknown: list[str], declared: list[str]) -> None:
        self.unknown = [name[:_NAME_ECHO] for name in unknown[:_UNKNOWN_SHOWN]]
        self.declared = declared
        super().__init__(", ".join(self.unknown))


# What a body must be sent as, said the way a client writes it.
_JSON_CONTENT_TYPE = "Content-Type: application/json"
# How much of a refused Content-Type a 415 repeats.
_CONTENT_TYPE_ECHO = 100


def _unsupported_media_type(request: Request) -> JSONResponse:
    sent = request.headers.get("content-type", "").split(";", 1)[0].strip()
    got = f"it was sent as {sent[:_CONTENT_TYPE_ECHO]!r}" if sent else "it had no Content-Type"
    return problem_response(
        415,
        "Unsupported Media Type",
        f"the request body must be JSON sent with `{_JSON_CONTENT_TYPE}`; {got}",
        slug="unsupported-media-type",
        headers={
            ("Accept-Patch" if request.method == "PATCH" else "Accept-Post"): "application/json"
        },
    )


def _template_pattern(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$")


def documented_paths(routes: Sequence[BaseRoute]) -> dict[str, set[str]]:
    """The methods of each path the OpenAPI document lists, found as FastAPI's get_openapi
    finds them (every API route in the schema, under its path template) without building
    the document, which takes a third of a second on the event loop."""
    paths: dict[str, set[str]] = {}
    for route in iter_route_contexts(routes):
        if not isinstance(route.original_route, APIRoute) or not route.include_in_schema:
            continue
        # An API route always has both (get_openapi asserts as much).
        if route.path_format is not None and route.methods is not None:
            paths.setdefault(route.path_format, set()).update(route.methods)
    return paths


# Each app's documented templates (pattern, how many parameters, methods), read from its
# routes the first time it answers with a problem that needs them, as its document was.
_DOCUMENTED: weakref.WeakKeyDictionary[Any, list[tuple[re.Pattern[str], int, frozenset[str]]]]
_DOCUMENTED = weakref.WeakKeyDictionary()


def _documented(app: Any) -> list[tuple[re.Pattern[str], int, frozenset[str]]]:
    templates = _DOCUMENTED.get(app)
    if templates is None:
        templates = [
            (_template_pattern(template), template.count("{"), frozenset(methods))
            for template, methods in documented_paths(app.routes).items()
        ]
        _DOCUMENTED[app] = templates
    return templates


def _documented_methods(request: Request) -> tuple[frozenset[str], bool] | None:
    """The methods documented for the request's path, and whether its template is a literal
    path. A path matching several templates is the most literal one's: /v1/schedules/batch
    is the batch resource, never a schedule whose id is "batch"."""
    best: tuple[int, frozenset[str]] | None = None
    for pattern, parameters, methods in _documented(request.app):
        if not pattern.match(request.url.path):
            continue
        if best is None or parameters < best[0]:
            best = (parameters, methods)
    if best is None:
        return None
    return best[1], best[0] == 0


def _allowed_methods(request: Request) -> str:
    """Every method the resource at this path accepts (Starlette reports only the first
    route's): the documented ones, or for an undocumented path what its routes accept."""
    documented = _documented_methods(request)
    if documented is not None:
        return ", ".join(sorted(documented[0]))
    allowed = {
        method
        for method in _METHODS
        for route in request.app.router.routes
        if route.matches({**request.scope, "method": method})[0] is Match.FULL
    }
    return ", ".join(sorted(allowed))


def _method_not_allowed(request: Request) -> JSONResponse:
    return problem_response(
        405,
        "Method Not Allowed",
        "Method Not Allowed",
        headers={"Allow": _allowed_methods(request)},
    )


def _reached_a_sibling(request: Request) -> bool:
    """Whether a request for a literal path (/v1/schedules/batch) with a method that path
    does not accept was routed to its parameterised sibling (/v1/schedules/{schedule_id})."""
    documented = _documented_methods(request)
    return documented is not None and documented[1] and request.method not in documented[0]


def install(app: FastAPI) -> None:
    @app.exception_handler(ChronoqError)
    async def _chronoq(request: Request, exc: ChronoqError) -> JSONResponse:
        if _reached_a_sibling(request):
            # Refused by a dependency of the sibling (a tenant that does not exist) before
            # its parameters were read: the path's resource does not take the method.
            return _method_not_allowed(request)
        if isinstance(exc, QuotaExceededError):
            after = {} if exc.retry_after is None else {"Retry-After": str(exc.retry_after)}
            return problem_response(
                429,
                "Quota exceeded",
                exc.detail,
                slug="quota-exceeded",
                headers=after,
                members={"quota": exc.quota, "limit": exc.limit, "used": exc.used},
            )
        status, slug, title = next(
            (value for cls, value in _TABLE.items() if isinstance(exc, cls)),
            (400, "bad-request", "Bad request"),
        )
        if isinstance(exc, StoreUnavailableError):
            # The store's detail names the database for operators, on one line and with no
            # traceback; the client learns only that it may retry, and when.
            log.warning("%s %s: %s", request.method, request.url.path, exc.detail)
            why = _NOT_MIGRATED if isinstance(exc, SchemaNotMigratedError) else _UNREACHABLE
            return problem_response(
                status,
                title,
                f"{why}; retry in {RETRY_AFTER_SECONDS} seconds",
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
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        if _reached_a_sibling(request):
            return _method_not_allowed(request)
        if isinstance(exc.body, bytes) and exc.body:
            # FastAPI leaves a body it did not parse as bytes: its Content-Type was not JSON.
            return _unsupported_media_type(request)
        errors = field_errors(exc)
        in_all = len(exc.errors())
        if any(error.get("type") == "json_invalid" for error in exc.errors()):
            # Not a value that breaks a rule: text that is not JSON at all.
            return problem_response(
                400,
                "Bad Request",
                "the request body is not valid JSON",
                slug="malformed-json",
                errors=errors,
                errors_in_all=in_all,
            )
        fields = ", ".join(sorted({e["field"] for e in errors}))
        return problem_response(
            422,
            "Invalid input",
            f"invalid value for: {fields}",
            slug="invalid-input",
            errors=errors,
            errors_in_all=in_all,
        )

    @app.exception_handler(UnknownParametersError)
    async def _unknown_parameters(request: Request, exc: UnknownParametersError) -> JSONResponse:
        takes = ", ".join(exc.declared) if exc.declared else "none"
        detail = "not a query parameter of this operation"
        return problem_response(
            422,
            "Invalid input",
            f"unknown query parameter: {', '.join(exc.unknown)} (this operation takes: {takes})",
            slug="unknown-parameter",
            errors=[{"parameter": name, "field": name, "detail": detail} for name in exc.unknown],
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        titles = {
            400: "Bad Request",
            404: "Not Found",
            405: "Method Not Allowed",
            408: "Request Timeout",
            413: "Payload Too Large",
        }
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
        # Starlette hands it on to the server, which would log it again.
        logs.logged(exc)
        return problem_response(
            500, "Internal Server Error", "an unexpected error occurred; it has been logged"
        )


_PROBLEM_REF = "#/components/schemas/Problem"


def _declaration(status: int) -> dict[str, Any]:
    declaration: dict[str, Any] = {
        "description": _DESCRIPTIONS.get(status, "Problem"),
        "content": {MEDIA_TYPE: {"schema": {"$ref": _PROBLEM_REF}}},
    }
    if status in (429, 503):
        declaration["headers"] = {
            "Retry-After": {
                "description": "Seconds to wait before retrying",
                "required": True,
                "schema": {"type": "string", "pattern": "^[0-9]+$"},
            }
        }
    return declaration


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI declarations of the problems a route can answer with."""
    return {status: _declaration(status) for status in statuses}


def document(openapi: dict[str, Any]) -> dict[str, Any]:
    """Complete an OpenAPI document with the problems every operation can answer with
    whatever its route declares: 400 (body not JSON text), 415 (not application/json), 422
    (validation) and 429 (too many bodies of the client arriving) wherever there is a body,
    422 wherever there are parameters. Problems
    are application/problem+json, FastAPI's own 422 declaration included."""
    schemas = openapi.setdefault("components", {}).setdefault("schemas", {})
    problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(problem.pop("$defs", {}))
    schemas["Problem"] = problem
    for operations in openapi.get("paths", {}).values():
        for operation in operations.values():
            declared: dict[str, Any] = operation.setdefault("responses", {})
            statuses: list[int] = []
            if "requestBody" in operation:
                statuses += [400, 415, 422, 429]
            if operation.get("parameters"):
                statuses.append(422)
            for status in statuses:
                declared.setdefault(str(status), _declaration(status))
            default_422 = declared.get("422", {}).get("content", {}).get("application/json", {})
            if default_422.get("schema", {}).get("$ref", "").endswith("/HTTPValidationError"):
                declared["422"] = _declaration(422)
            operation["responses"] = dict(sorted(declared.items()))
    for unused in ("HTTPValidationError", "ValidationError"):
        if not _referenced(openapi, f"#/components/schemas/{unused}"):
            schemas.pop(unused, None)
    return openapi


def _referenced(node: Any, ref: str) -> bool:
    if isinstance(node, dict):
        return node.get("$ref") == ref or any(_referenced(value, ref) for value in node.values())
    if isinstance(node, list):
        return any(_referenced(value, ref) for value in node)
    return False
