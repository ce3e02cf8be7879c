"""Wire models of /v1/triggers: a trigger to preview, and when it would fire."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from app.domain.limits import MAX_COUNT, InputModel, Instant
from app.domain.trigger import Trigger


class PreviewRequest(InputModel):
    """A trigger to preview, and from when."""

    trigger: Trigger = Field(description="The trigger, as a schedule would give it")
    after: Instant | None = Field(
        default=None, description="List fire instants strictly after this one; default: now"
    )
    count: int = Field(default=10, ge=1, le=100, description="How many fire instants to list")
    max_occurrences: int | None = Field(
        default=None,
        ge=1,
        le=MAX_COUNT,
        description="The schedule's cap on fired ticks, if it has one",
    )


class Preview(BaseModel):
    """When a trigger would fire."""

    fire_times: list[datetime] = Field(description="The next fire instants, in UTC, in order")
