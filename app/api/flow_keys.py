"""Routes under /v1/flow-keys: a key's limits, put, read with live figures, removed."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Response, status
from pydantic import BaseModel, ConfigDict, Field

from app.api import pagination
from app.api.deps import CursorQuery, FlowKeysDep, LimitQuery
from app.api.problems import responses
from app.api.schemas import Page
from app.api.versions import if_match_header, versions
from app.domain.flow import (
    MAX_PARALLELISM,
    MAX_PERIOD_SECONDS,
    MAX_RATE,
    FlowKey,
    FlowLimits,
    Ordering,
)
from app.domain.limits import InputModel

router = APIRouter(prefix="/v1/flow-keys", tags=["flow-keys"])

KeyPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9._:-]+$",
        description="The flow key (1-128 of A-Z a-z 0-9 . _ : -), as schedules name it",
        examples=["customer-42"],
    ),
]
IfMatch = Annotated[str | None, if_match_header("the flow key")]

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


class FlowKeyIn(InputModel):
    """A key's limits, whole: what a PUT leaves out is at its default (no limit)."""

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
    paused: bool = Field(default=False, description=_PAUSED, examples=[False])

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"rate": 50, "period_seconds": 1, "burst": 100, "parallelism": 10}]
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
            paused=self.paused,
        )


class FlowKeyOut(BaseModel):
    """A key's limits (all null for a key never put: it has none) and its live figures."""

    key: str = Field(examples=["customer-42"])
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
    created_at: datetime | None = Field(examples=["2026-12-01T08:00:00Z"])
    updated_at: datetime | None = Field(examples=["2026-12-02T17:30:00Z"])

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


def _one(response: Response, found: FlowKey) -> FlowKeyOut:
    if found.version is not None:
        response.headers["ETag"] = f'"{found.version}"'
    return FlowKeyOut.of(found)


@router.get("", responses=responses(422))
async def list_flow_keys(
    service: FlowKeysDep, limit: LimitQuery = 50, cursor: CursorQuery = None
) -> Page[FlowKeyOut]:
    """Keys in name order: those with limits and those only schedules name."""
    found = await service.list(after=pagination.decode_key(cursor), limit=limit + 1)
    page = found[:limit]
    next_cursor = pagination.encode(page[-1].key) if len(found) > limit else None
    return Page(items=[FlowKeyOut.of(k) for k in page], next_cursor=next_cursor)


@router.get("/{key}", responses=responses(422))
async def get_flow_key(key: KeyPath, service: FlowKeysDep, response: Response) -> FlowKeyOut:
    """Any key: one never put answers with no limits, and its live figures."""
    return _one(response, await service.get(key))


@router.put("/{key}", responses={201: {"model": FlowKeyOut}, **responses(412, 422)})
async def put_flow_key(
    key: KeyPath,
    body: FlowKeyIn,
    service: FlowKeysDep,
    response: Response,
    if_match: IfMatch = None,
) -> FlowKeyOut:
    """Create or replace the key's limits: 201 when it had none."""
    found, created = await service.put(key, body.limits(), versions(if_match))
    if created:
        response.status_code = status.HTTP_201_CREATED
    return _one(response, found)


@router.delete("/{key}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(404, 412, 422))
async def delete_flow_key(key: KeyPath, service: FlowKeysDep, if_match: IfMatch = None) -> None:
    """Remove the key's limits and back-off: its schedules keep the name and run unlimited."""
    await service.delete(key, versions(if_match))
