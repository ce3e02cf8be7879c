"""Wire models of /v1/schedules: a schedule as read, a batch of them created in one
transaction, a backfill of past ticks, and the events of a schedule's life."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from typing_extensions import TypedDict

from app.api.target_schemas import TargetOut, target_out
from app.domain.limits import MAX_BATCH, InputModel, Instant, at_most_items, shown_payload
from app.domain.misfire import MisfirePolicy, SkipReason
from app.domain.retry import RetrySpec
from app.domain.schedule import (
    RULE_FIELDS,
    EventKind,
    PauseReason,
    Schedule,
    ScheduleEvent,
    ScheduleSpec,
    ScheduleStatus,
)
from app.domain.tenants import DEFAULT_TENANT
from app.domain.trigger import Trigger

# Schedule fields a response leaves out: internal to the idempotent create.
NOT_SHOWN = frozenset({"request_hash"})


class ScheduleOut(BaseModel):
    """A schedule: its definition, where it stands, and what it has fired."""

    id: uuid.UUID = Field(description="The schedule's id")
    # A default: a client reads the answers of a service from before tenants too.
    tenant: str = Field(
        default=DEFAULT_TENANT,
        description="The tenant it belongs to, with its occurrences and dead letters",
        examples=["default"],
    )
    name: str | None = Field(description="Its name; null: none")
    event_type: str = Field(description="What its occurrences are about")
    payload: Any = Field(description="The JSON value each occurrence delivers")
    target: TargetOut = Field(description="Where its occurrences are delivered")
    trigger: Trigger = Field(description="When it fires (a delay_seconds given is shown as at)")
    max_attempts: int = Field(description="Attempts per occurrence before it is dead-lettered")
    labels: dict[str, str] = Field(description="Its labels, in key order")
    jitter_seconds: float = Field(
        description="Each firing is spread uniformly over [fire_at, fire_at + jitter_seconds)"
    )
    misfire_policy: MisfirePolicy = Field(description="What happens to missed ticks")
    misfire_grace_seconds: float = Field(description="How late a tick may fire under skip")
    max_catchup: int = Field(description="Missed ticks fired (fire_all) or listed, per gap")
    max_occurrences: int | None = Field(
        description="It completes after firing this many ticks; null: no cap"
    )
    status: ScheduleStatus = Field(description="pending, paused, completed, cancelled or failed")
    next_fire_at: datetime | None = Field(description="Earliest pending occurrence's fire instant")
    next_occurrence_id: uuid.UUID | None = Field(
        description="The id of that occurrence; null: none pending"
    )
    attempts: int = Field(description="Attempts made on the most recently fired occurrence")
    last_error: str | None = Field(description="Error of the most recently fired occurrence")
    fire_count: int = Field(description="Occurrences it has fired")
    last_fired_at: datetime | None = Field(description="When it last fired; null: never yet")
    skipped_count: int = Field(description="Ticks that did not fire (misfire, pause, DST gap)")
    last_skip_reason: SkipReason | None = Field(
        description="Why its latest skipped tick did not fire; null: none skipped"
    )
    created_at: datetime = Field(description="When it was created")
    updated_at: datetime = Field(description="When it last changed")
    version: int = Field(
        description="Grows with every change a client or operator makes; the ETag of this "
        "schedule, for If-Match"
    )
    created_by: str | None = Field(
        description="Name of the API key that created it ('cli' from the operator CLI)"
    )
    pause_after_failures: int | None = Field(
        description="Pauses itself after this many occurrences dead-lettered in a row; null: never"
    )
    pause_reason: PauseReason | None = Field(
        description="Why it is paused: manual (API, CLI) or failures (pause_after_failures); "
        "null when not paused"
    )
    consecutive_failures: int = Field(
        description="Occurrences dead-lettered in a row; a delivery sets it back to 0"
    )
    flow_key: str | None = Field(
        description="The flow key whose limits its deliveries share; null: none",
        examples=["customer-42"],
    )
    retry: RetrySpec | None = Field(
        description="Its own retry policy over the service's (what it leaves out is the "
        "service's setting); null: the service's"
    )
    on_failure: TargetOut | None = Field(
        description="The target told of each occurrence of it that is dead-lettered "
        "(secrets redacted as on `target`); null: none",
        examples=[{"type": "webhook", "url": "http://127.0.0.1:8080/alerts/chronoq"}],
    )

    @classmethod
    def of(cls, s: Schedule) -> ScheduleOut:
        """The schedule's fields as they are, but for what a response shows otherwise."""
        return cls.model_validate(_shown(s, shown_payload(s.payload)))


# A response's fields, in its order, each read from the schedule's field of that name, or
# from its rules (`RULE_FIELDS`); the payload and the target are then shown their own way.
_SHOWN_FIELDS = tuple(ScheduleOut.model_fields)
_READ_SHOWN = attrgetter(
    *(f"rules.{RULE_FIELDS[name]}" if name in RULE_FIELDS else name for name in _SHOWN_FIELDS)
)


def _shown(s: Schedule, payload: Any) -> dict[str, Any]:
    """What `ScheduleOut` holds of `s`, by field in the response's order, showing `payload`."""
    values = dict(zip(_SHOWN_FIELDS, _READ_SHOWN(s), strict=True))
    values["payload"] = payload
    values["target"] = target_out(s.target)
    values["on_failure"] = None if s.on_failure is None else target_out(s.on_failure)
    return values


class BatchCreate(InputModel):
    """Schedules created in one transaction: all of them, or none."""

    _text_checked = frozenset({"items"})  # each item checks its own

    items: Annotated[list[ScheduleSpec], at_most_items(MAX_BATCH, "items")] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description="1 to 1000 schedules; a refusal names the item's index",
    )


class BatchCreated(BaseModel):
    """The schedules a batch created."""

    items: list[ScheduleOut] = Field(description="The schedules, in the order of the batch")


# `BatchCreated` as values rather than models, for `batch_created_json`: the same fields
# with the same types, so each value is written by the same serializer.
_CreatedSchedule: Any = TypedDict(  # type: ignore[misc]
    "_CreatedSchedule", {name: field.annotation for name, field in ScheduleOut.model_fields.items()}
)
_BatchCreatedValues: Any = TypedDict("_BatchCreatedValues", {"items": list[_CreatedSchedule]})
_BATCH_CREATED: TypeAdapter[Any] = TypeAdapter(_BatchCreatedValues)


def batch_created_json(created: Sequence[Schedule]) -> bytes:
    """The JSON of `BatchCreated` of schedules just created, the very bytes FastAPI writes
    for `BatchCreated(items=[ScheduleOut.of(s) for s in created])`, without validating a
    thousand answers again: their values are what validation keeps (the spec's floats are
    floats, its models are models), and a payload that passed `JsonPayload` is shown as it is.

    Only for schedules made from validated specs at once; anything read back is shown
    through `ScheduleOut.of`."""
    return _BATCH_CREATED.dump_json({"items": [_shown(s, s.payload) for s in created]})


class BackfillRequest(InputModel):
    """A range of the trigger's past ticks to fire now."""

    model_config = ConfigDict(populate_by_name=True)

    from_: Instant = Field(alias="from", description="First instant of the range")
    to: Instant = Field(description="Last instant of the range (inclusive, not future)")


class BackfillTick(BaseModel):
    """One tick of a backfilled range."""

    fire_at: datetime = Field(description="The tick")
    occurrence_id: uuid.UUID = Field(description="Its occurrence's id")
    created: bool = Field(description="False when the tick already had an occurrence")


class BackfillResult(BaseModel):
    created: int = Field(description="Occurrences this call made due")
    ticks: list[BackfillTick] = Field(description="Every tick of the range, in order")

    @classmethod
    def of(
        cls, ticks: Sequence[tuple[datetime, uuid.UUID]], created: Sequence[uuid.UUID]
    ) -> BackfillResult:
        """The answer for a backfill's ticks (instant, occurrence id), `created` of them new."""
        made = set(created)
        return cls(
            created=len(made),
            ticks=[
                BackfillTick(fire_at=fire_at, occurrence_id=id_, created=id_ in made)
                for fire_at, id_ in ticks
            ],
        )


class ScheduleEventOut(BaseModel):
    """One change in a schedule's life."""

    id: uuid.UUID = Field(description="The event's id")
    kind: EventKind = Field(description="What happened")
    at: datetime = Field(description="When")
    version: int = Field(description="The schedule's version once the change was made")
    actor: str | None = Field(
        description="The API key's name, 'cli' (operator CLI), 'system' (the delivery loop), "
        "or null when no keys are set"
    )
    fields: list[str] | None = Field(description="For updated: the names of what changed")

    @classmethod
    def of(cls, e: ScheduleEvent) -> ScheduleEventOut:
        return cls(id=e.id, kind=e.kind, at=e.at, version=e.version, actor=e.actor, fields=e.fields)
