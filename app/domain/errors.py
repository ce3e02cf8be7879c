"""The error tree shared by the API, the worker and the CLI; HTTP statuses live in the API."""

from __future__ import annotations


class ChronoqError(Exception):
    """Chronoq could not do what was asked.

    `pointer` names the offending member of a request body (JSON pointer, "#/trigger/type");
    `parameter` names an offending query or path parameter instead.
    """

    def __init__(
        self, detail: str | None = None, *, pointer: str | None = None, parameter: str | None = None
    ) -> None:
        self.detail = detail or (self.__doc__ or "").strip().splitlines()[0]
        self.pointer = pointer
        self.parameter = parameter
        super().__init__(self.detail)


class NotFoundError(ChronoqError):
    """The resource does not exist."""


class ConflictError(ChronoqError):
    """The request conflicts with the current state of the resource."""


class ForbiddenError(ChronoqError):
    """The key that asks may not do this (a tenant key reaching beyond its tenant)."""


class QuotaExceededError(ChronoqError):
    """A tenant's quota refuses the request: nothing of it was stored."""

    def __init__(
        self, detail: str, *, quota: str, limit: int, used: int, retry_after: int | None = None
    ) -> None:
        super().__init__(detail)
        self.quota = quota
        self.limit = limit
        self.used = used
        self.retry_after = retry_after


class InvalidInputError(ChronoqError):
    """The request is not valid."""


class PreconditionFailedError(ChronoqError):
    """The resource has changed since the version the request names (If-Match)."""


class PayloadTooLargeError(ChronoqError):
    """The payload is larger than the configured limit."""


class StoreUnavailableError(ChronoqError):
    """The database cannot be reached right now; the request may be retried."""


class SchemaNotMigratedError(StoreUnavailableError):
    """The database schema is not at this version's revision: `chronoq migrate` brings it
    there, and the request may be retried then."""
