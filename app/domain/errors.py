"""The error tree shared by the API, the worker and the CLI; HTTP statuses live in the API."""

from __future__ import annotations


class ChronoqError(Exception):
    """Chronoq could not do what was asked."""

    def __init__(self, detail: str | None = None) -> None:
        self.detail = detail or (self.__doc__ or "").strip()
        super().__init__(self.detail)


class NotFoundError(ChronoqError):
    """The resource does not exist."""


class ConflictError(ChronoqError):
    """The request conflicts with the current state of the resource."""


class InvalidInputError(ChronoqError):
    """The request is not valid."""

    def __init__(self, detail: str, pointer: str = "#") -> None:
        super().__init__(detail)
        self.pointer = pointer


class PayloadTooLargeError(ChronoqError):
    """The payload is larger than the configured limit."""

    def __init__(self, detail: str, pointer: str = "#/payload") -> None:
        super().__init__(detail)
        self.pointer = pointer
