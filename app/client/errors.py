"""What the client raises: a problem+json answer as a typed exception, and an unreachable
service."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from app.domain.secrets import scrub_credentials


@dataclass(frozen=True, slots=True)
class FieldError:
    """One offending field or parameter of a refused request."""

    field: str
    detail: str
    pointer: str | None = None  # JSON pointer into the body ("#/trigger/cron")
    parameter: str | None = None  # a query, path or header parameter


class ChronoqClientError(Exception):
    """Anything the client raises."""


class UnreachableError(ChronoqClientError):
    """The service could not be reached (refused, timed out, name unknown)."""


class UnexpectedAnswerError(ChronoqClientError):
    """The service answered what the Chronoq API never answers: a redirect, or a success
    whose body is not the JSON the call expects (a proxy's page, another service)."""

    status: int

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ProblemError(ChronoqClientError):
    """The service refused the request with a problem+json answer (RFC 9457)."""

    status: int
    title: str
    detail: str
    type: str
    errors: tuple[FieldError, ...]
    retry_after: float | None

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        *,
        type: str = "about:blank",
        errors: tuple[FieldError, ...] = (),
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {title}: {detail}")
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type
        self.errors = errors
        self.retry_after = retry_after


class BadRequestError(ProblemError):
    """400: the body is not JSON, or the request is malformed."""


class UnauthorizedError(ProblemError):
    """401: no API key, or one the service does not know."""


class ForbiddenError(ProblemError):
    """403: the key's role may not do this, or a target's address is denied."""


class NotFoundError(ProblemError):
    """404: no such schedule, occurrence, dead letter, flow key, tenant or endpoint (in the
    tenant the call acts in)."""


class ConflictError(ProblemError):
    """409: the resource is not in a state that allows this (a terminal schedule, a
    replay of what is not dead-lettered, an idempotency key reused with another body, an
    endpoint a live schedule targets, a name already taken)."""


class PreconditionFailedError(ProblemError):
    """412: If-Match named a version the resource is no longer at."""


class PayloadTooLargeError(ProblemError):
    """413: the body is over the service's limit."""


class ValidationError(ProblemError):
    """422: a field or parameter is invalid; `errors` names each."""


class UnavailableError(ProblemError):
    """503: the database cannot be reached; `retry_after` says when to try again."""


_BY_STATUS: dict[int, type[ProblemError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    412: PreconditionFailedError,
    413: PayloadTooLargeError,
    422: ValidationError,
    503: UnavailableError,
}


def retry_after(response: httpx.Response) -> float | None:
    """The Retry-After header in seconds, when it is a number of them."""
    value = response.headers.get("Retry-After", "").strip()
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 <= seconds < 86_400 else None


def problem_of(response: httpx.Response) -> ProblemError:
    """The exception for an answer of status 400 or more."""
    body: Any = None
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    if not isinstance(body, dict):
        body = {}
    errors = tuple(
        FieldError(
            field=str(e.get("field", "")),
            detail=str(e.get("detail", "")),
            pointer=e.get("pointer") if isinstance(e.get("pointer"), str) else None,
            parameter=e.get("parameter") if isinstance(e.get("parameter"), str) else None,
        )
        for e in body.get("errors") or ()
        if isinstance(e, dict)
    )
    kind = _BY_STATUS.get(response.status_code, ProblemError)
    return kind(
        response.status_code,
        str(body.get("title") or response.reason_phrase or "error"),
        str(body.get("detail") or response.text[:500]),
        type=str(body.get("type") or "about:blank"),
        errors=errors,
        retry_after=retry_after(response),
    )


def unexpected_answer(response: httpx.Response, what: str) -> UnexpectedAnswerError:
    """The error for an answer of the Chronoq API's statuses that is not its answer."""
    request = response.request
    message = f"{request.method} {request.url.copy_with(query=None)} answered"
    message += f" {response.status_code} {response.reason_phrase}".rstrip()
    location = response.headers.get("Location")
    if location and 300 <= response.status_code < 400:
        message += f" to {location}"
    message += f": {what}; is this the address of the Chronoq API?"
    return UnexpectedAnswerError(scrub_credentials(message), response.status_code)
