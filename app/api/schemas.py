"""Wire models of no one resource: the page every list answers with, and the health
probes' answer."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel, Field

T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    """One page of a list."""

    items: list[T] = Field(description="This page's items, in the list's order")
    next_cursor: str | None = Field(
        description="Pass as cursor for the next page; null: this is the last page"
    )


class Health(BaseModel):
    """Liveness or readiness."""

    status: str = Field(description="ok, or what is wrong")
    checks: dict[str, str] = Field(
        default_factory=dict, description="Each dependency checked, and how it answered"
    )
