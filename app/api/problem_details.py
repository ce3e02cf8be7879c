"""RFC 9457 problem details: the body every refusal of this service is answered with,
bounded whatever the input (DESIGN section 8)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

MEDIA_TYPE = "application/problem+json"

# Every problem is bounded whatever the input (DESIGN section 8): at most MAX_ERRORS `errors`
# (`detail` says how many there were in all), and short texts, for a message may repeat the
# value it refuses (pydantic's union tags, a validator's "label key '...'") and a location
# holds the keys the client chose. A body of many thousand bad entries is answered in a few KiB.
MAX_ERRORS = 50
DETAIL_CHARS = 500
ERROR_DETAIL_CHARS = 200
LOCATION_CHARS = 200
_LOCATIONS = ("pointer", "parameter", "field")


def excerpt(text: str, limit: int) -> str:
    """`text`, or when it is longer than `limit` characters its start and "..." in as many."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bounded_error(error: dict[str, Any]) -> dict[str, Any]:
    bounded = dict(error)
    for name in _LOCATIONS:
        if isinstance(bounded.get(name), str):
            bounded[name] = excerpt(bounded[name], LOCATION_CHARS)
    if isinstance(bounded.get("detail"), str):
        bounded["detail"] = excerpt(bounded["detail"], ERROR_DETAIL_CHARS)
    return bounded


class FieldError(BaseModel):
    """One offending field of the body, or query parameter."""

    pointer: str | None = Field(
        default=None,
        max_length=LOCATION_CHARS,
        description="A body field, as a JSON Pointer in URI fragment form (#/trigger/at)",
    )
    parameter: str | None = Field(
        default=None, max_length=LOCATION_CHARS, description="A query parameter's name"
    )
    field: str = Field(
        max_length=LOCATION_CHARS,
        description="The field's path with dots (trigger.at), or the parameter's name",
    )
    detail: str = Field(max_length=ERROR_DETAIL_CHARS, description="What is wrong with it")


class Problem(BaseModel):
    """An RFC 9457 problem: why a request was refused or failed."""

    type: str = Field(description="A URI naming the kind of problem (urn:chronoq:problem:...)")
    title: str = Field(description="A short summary of the kind")
    status: int = Field(description="The HTTP status")
    detail: str = Field(max_length=DETAIL_CHARS, description="What went wrong this time")
    errors: list[FieldError] | None = Field(
        default=None,
        max_length=MAX_ERRORS,
        description=f"The first {MAX_ERRORS} offending fields or parameters; `detail` says "
        "how many there were in all when there were more",
    )
    quota: str | None = Field(
        default=None,
        description="quota-exceeded: the tenant's quota refused (max_schedules, "
        "max_creates_per_minute)",
    )
    limit: int | None = Field(default=None, description="quota-exceeded: the quota's value")
    used: int | None = Field(
        default=None, description="quota-exceeded: how much of it is used (before this request)"
    )


def problem_type(slug: str) -> str:
    return f"urn:chronoq:problem:{slug}"


def problem_response(
    status: int,
    title: str,
    detail: str,
    *,
    slug: str | None = None,
    errors: list[dict[str, Any]] | None = None,
    errors_in_all: int | None = None,
    headers: dict[str, str] | None = None,
    members: dict[str, Any] | None = None,
) -> JSONResponse:
    """A problem answer, bounded: its first MAX_ERRORS `errors` (of `errors_in_all`, by
    default as many as are given), each text cut to an excerpt; `members` are the problem
    type's own (a quota's name, limit and use)."""
    listed = None
    if errors is not None:
        total = max(len(errors), errors_in_all or 0)
        listed = [_bounded_error(error) for error in errors[:MAX_ERRORS]]
        if total > len(listed):
            more = f" ({total} errors in all; the first {len(listed)} are listed)"
            detail = excerpt(detail, DETAIL_CHARS - len(more)) + more
    body: dict[str, Any] = {
        "type": problem_type(slug) if slug else "about:blank",
        "title": title,
        "status": status,
        "detail": excerpt(detail, DETAIL_CHARS),
    }
    if listed is not None:
        body["errors"] = listed
    body.update(members or {})
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


# Discriminator values that pydantic puts into an error's location; they are not fields.
_UNION_TAGS = frozenset({"once", "immediate", "cron", "interval", "webhook", "rabbitmq"})
_UNION_FIELDS = frozenset({"trigger", "target", "on_failure"})


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


# What pydantic writes before the text of an error a validator raised: the client reads the
# reason, not which Python exception carried it.
_RAISED_PREFIXES = {"value_error": "Value error, ", "assertion_error": "Assertion failed, "}


def validation_message(error: Mapping[str, Any]) -> str:
    """An error of a pydantic validation as a client reads it: the validator's own words."""
    message = str(error.get("msg", "invalid"))
    prefix = _RAISED_PREFIXES.get(str(error.get("type", "")))
    return message.removeprefix(prefix) if prefix else message


def field_errors(exc: RequestValidationError, limit: int = MAX_ERRORS) -> list[dict[str, Any]]:
    """The first `limit` of the validation's errors, as problem `errors` entries."""
    result: list[dict[str, Any]] = []
    for error in exc.errors()[:limit]:
        loc = tuple(error.get("loc", ()))
        source, rest = (str(loc[0]), loc[1:]) if loc else ("body", ())
        parts = _path(rest, str(error.get("type", "")))
        message = validation_message(error)
        if error.get("type") == "json_invalid":
            parts = []
        entry: dict[str, Any] = {"field": ".".join(parts) or source, "detail": message}
        if source == "body":
            entry["pointer"] = "#" + "".join(f"/{part}" for part in parts)
        else:
            entry["parameter"] = ".".join(parts)
        result.append(entry)
    return result
