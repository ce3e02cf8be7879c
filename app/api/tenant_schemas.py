"""Wire models of /v1/tenants: a tenant as put, and as read."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field

from app.domain.limits import MAX_SHORT_STRING_BYTES, InputModel, one_line
from app.domain.tenants import MAX_DISPLAY_NAME, Tenant

_DISPLAY_NAME = "Free text, on one line: how people name the tenant; null: none"


class TenantIn(InputModel):
    """A tenant, whole: what a PUT leaves out is at its default."""

    display_name: Annotated[
        str | None,
        Field(max_length=MAX_DISPLAY_NAME, description=_DISPLAY_NAME, examples=["Billing team"]),
        one_line(max_bytes=MAX_SHORT_STRING_BYTES),
    ] = None


class TenantOut(BaseModel):
    """A tenant: the unit of isolation that schedules, their occurrences, dead letters and
    flow keys belong to."""

    id: str = Field(
        description="The tenant's id, as `Chronoq-Tenant` names it", examples=["billing"]
    )
    display_name: str | None = Field(description=_DISPLAY_NAME, examples=["Billing team"])
    version: int = Field(
        description="Grows with every PUT; the tenant's ETag, for If-Match", examples=[1]
    )
    created_at: datetime = Field(description="When it was made", examples=["2026-12-06T09:00:00Z"])
    updated_at: datetime = Field(
        description="When it last changed", examples=["2026-12-06T09:00:00Z"]
    )

    @classmethod
    def of(cls, tenant: Tenant) -> TenantOut:
        return cls(
            id=tenant.id,
            display_name=tenant.display_name,
            version=tenant.version,
            created_at=tenant.created_at,
            updated_at=tenant.updated_at,
        )
