"""Wire models of /v1/flow-keys: a key's limits as put, and as read with live figures."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.domain.flow import (
    MAX_PARALLELISM,
    MAX_PERIOD_SECONDS,
    MAX_RATE,
    FlowKey,
    FlowLimits,
    Ordering,
)
from app.domain.limits import InputModel

_RATE = "At most this many attempts start per period_seconds, on average; null: no rate limit"
_PERIOD = "The period of rate, in seconds (default 1)"
_BURST = (
    "How many may start at once after a quiet spell: the token bucket's capacity; "
    "null: rate. Needs a rate"
)
_PARALLELISM = (
    "At most this many attempts of the key in flight at any instant, fleet-wide; null: no limit"
)
_ORDERING = (
    "fifo: attempts start in due order (fire instant, then occurrence id), each only once "
    "the one before is delivered or dead-lettered (retries of the head hold the key); "
    "means parallelism 1"
)
_PAUSED = "true: nothing of the key starts until it is false again (nothing is skipped)"


class FlowLimitsIn(InputModel):
    """Flow limits, whole: what is left out is at its default (no limit)."""

    rate: int | None = Field(default=None, ge=1, le=MAX_RATE, description=_RATE, examples=[50])
    period_seconds: float = Field(
        default=1.0, gt=0, le=MAX_PERIOD_SECONDS, description=_PERIOD, examples=[1.0]
    )
    burst: int | None = Field(default=None, ge=1, le=MAX_RATE, description=_BURST, examples=[100])
    parallelism: int | None = Field(
        default=None, ge=1, le=MAX_PARALLELISM, description=_PARALLELISM, examples=[10]
    )
    ordering: Literal["none", "fifo"] = Field(
        default="none", description=_ORDERING, examples=["none"]
    )

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"rate": 50, "period_seconds": 1, "burst": 100, "parallelism": 10}],
            # The coherence rules of `FlowLimits`: a burst needs a rate, and fifo means
            # parallelism 1 (or none given).
            "if": {"required": ["burst"], "properties": {"burst": {"type": "integer"}}},
            "then": {"required": ["rate"], "properties": {"rate": {"type": "integer"}}},
            "not": {
                "required": ["ordering", "parallelism"],
                "properties": {
                    "ordering": {"const": "fifo"},
                    "parallelism": {"type": "integer", "minimum": 2},
                },
            },
        }
    )

    def limits(self) -> FlowLimits:
        """The limits; incoherent ones are a 422 naming the field."""
        return FlowLimits(
            rate=self.rate,
            period_seconds=self.period_seconds,
            burst=self.burst,
            parallelism=self.parallelism,
            ordering=Ordering(self.ordering),
        )


class FlowKeyIn(FlowLimitsIn):
    """A key's limits, whole: what a PUT leaves out is at its default (no limit)."""

    paused: bool = Field(default=False, description=_PAUSED, examples=[False])

    def limits(self) -> FlowLimits:
        return replace(super().limits(), paused=self.paused)


class FlowKeyOut(BaseModel):
    """A key's limits (all null for a key never put: it has none) and its live figures."""

    key: str = Field(description="The flow key", examples=["customer-42"])
    rate: int | None = Field(description=_RATE, examples=[50])
    period_seconds: float | None = Field(description=_PERIOD, examples=[1.0])
    burst: int | None = Field(description=_BURST, examples=[100])
    parallelism: int | None = Field(description=_PARALLELISM, examples=[10])
    ordering: Literal["none", "fifo"] = Field(description=_ORDERING, examples=["none"])
    paused: bool = Field(description=_PAUSED, examples=[False])
    version: int | None = Field(
        description="Grows with every PUT; the ETag of the key's limits, for If-Match. "
        "null: the key has no limits",
        examples=[3],
    )
    in_flight: int = Field(
        description="Attempts of the key in flight now, fleet-wide", examples=[4]
    )
    waiting: int = Field(
        description="Occurrences due now and not started: held back by the key", examples=[120]
    )
    backoff_until: datetime | None = Field(
        description="A destination answered 429 or 503 with Retry-After: nothing of the key "
        "starts before this instant; null: no back-off",
        examples=["2026-12-03T09:00:30Z"],
    )
    created_at: datetime | None = Field(
        description="When its limits were first put; null: never",
        examples=["2026-12-01T08:00:00Z"],
    )
    updated_at: datetime | None = Field(
        description="When its limits last changed; null: never put",
        examples=["2026-12-02T17:30:00Z"],
    )

    @classmethod
    def of(cls, found: FlowKey) -> FlowKeyOut:
        limits = found.limits
        shown: dict[str, object] = {
            "rate": None,
            "period_seconds": None,
            "burst": None,
            "parallelism": None,
            "ordering": "none",
            "paused": False,
        }
        if limits is not None:
            shown = {
                "rate": limits.rate,
                "period_seconds": limits.period_seconds,
                "burst": limits.burst,
                "parallelism": limits.parallelism,
                "ordering": limits.ordering.value,
                "paused": limits.paused,
            }
        return cls.model_validate(
            {
                "key": found.key,
                **shown,
                "version": found.version,
                "in_flight": found.in_flight,
                "waiting": found.waiting,
                "backoff_until": found.backoff_until,
                "created_at": found.created_at,
                "updated_at": found.updated_at,
            }
        )
