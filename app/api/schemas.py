"""Wire models: what the API returns, and request bodies that are not domain specs."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter
from typing import Annotated, Any, Generic, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from typing_extensions import TypedDict

from app.domain.limits import (
    MAX_BATCH,
    MAX_COUNT,
    EventType,
    Id,
    InputModel,
    Instant,
    at_most_items,
    shown_payload,
)
from app.domain.misfire import MisfirePolicy, SkipReason
from app.domain.occurrence import (
    Attempt,
    AttemptOutcome,
    DeadLetter,
    Occurrence,
    OccurrenceStatus,
    Origin,
)
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
from app.domain.secrets import redacted_headers, redacted_secret, redacted_url
from app.domain.target import JsonScalar, Target, WebhookTarget
from app.domain.trigger import Trigger

T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None


class WebhookTargetOut(BaseModel):
    """A webhook target as responses show it. Secrets are redacted: the password of the
    URL's userinfo, the values of the URL's query parameters and of the headers whose names
    contain auth, token, secret, key, pass, credential, signature, session or cookie (any
    case) show as ***. Sent back in a PATCH, a redacted form keeps the stored value while the
    URL stays the same up to its query (scheme, host, port and path); the signing secret's
    while its scheme, host and port stay."""

    type: Literal["webhook"]
    url: str
    method: Literal["POST", "PUT", "PATCH"]
    headers: dict[str, str]
    timeout_seconds: float
    signing_secret: str | None = Field(
        description="The target's own signing secret, redacted to whsec_… and its last 4 "
        "characters; null when the service's secrets sign its deliveries"
    )


class RabbitMQTargetOut(BaseModel):
    """A RabbitMQ target as responses show it: secret headers redacted as on webhooks (***,
    kept by a PATCH that sends it back)."""

    type: Literal["rabbitmq"]
    exchange: str
    routing_key: str
    headers: dict[str, JsonScalar]


TargetOut = Annotated[WebhookTargetOut | RabbitMQTargetOut, Field(discriminator="type")]


def target_out(t: Target) -> WebhookTargetOut | RabbitMQTargetOut:
    """What a response shows of a target; the stored target keeps the real values."""
    if isinstance(t, WebhookTarget):
        return WebhookTargetOut(
            type=t.type,
            url=redacted_url(t.url),
            method=t.method,
            headers=redacted_headers(t.headers),
            timeout_seconds=t.timeout_seconds,
            signing_secret=redacted_secret(t.signing_secret) if t.signing_secret else None,
        )
    return RabbitMQTargetOut(
        type=t.type,
        exchange=t.exchange,
        routing_key=t.routing_key,
        headers=redacted_headers(t.headers),
    )


# Schedule fields a response leaves out: internal to the idempotent create.
NOT_SHOWN = frozenset({"request_hash"})


class ScheduleOut(BaseModel):
    id: uuid.UUID
    name: str | None
    event_type: str
    payload: Any
    target: TargetOut
    trigger: Trigger
    max_attempts: int
    labels: dict[str, str]
    jitter_seconds: float
    misfire_policy: MisfirePolicy
    misfire_grace_seconds: float
    max_catchup: int
    max_occurrences: int | None
    status: ScheduleStatus
    next_fire_at: datetime | None = Field(description="Earliest pending occurrence's fire instant")
    next_occurrence_id: uuid.UUID | None
    attempts: int = Field(description="Attempts made on the most recently fired occurrence")
    last_error: str | None = Field(description="Error of the most recently fired occurrence")
    fire_count: int
    last_fired_at: datetime | None
    skipped_count: int = Field(description="Ticks that did not fire (misfire, pause, DST gap)")
    last_skip_reason: SkipReason | None
    created_at: datetime
    updated_at: datetime
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
        examples=[{"type": "webhook", "url": "https://alerts.example.com/chronoq"}],
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


class OccurrenceOut(BaseModel):
    occurrence_id: uuid.UUID
    schedule_id: uuid.UUID
    fire_at: datetime
    status: OccurrenceStatus
    origin: Origin
    attempts: int
    available_at: datetime | None
    last_error: str | None
    delivered_at: datetime | None
    dead_lettered_at: datetime | None
    skip_reason: SkipReason | None = Field(description="Why a skipped tick did not fire")
    skipped_count: int = Field(
        description="Ticks a skipped entry stands for: 1, or the rest of a long gap"
    )
    callback_of: uuid.UUID | None = Field(
        description="A failure callback's (origin callback): the occurrence whose "
        "dead-lettering it reports to the schedule's on_failure target",
        examples=["7d3f921f-fb95-5f69-85f9-81c248738a1d"],
    )
    created_at: datetime

    @classmethod
    def of(cls, o: Occurrence) -> OccurrenceOut:
        return cls(
            occurrence_id=o.occurrence_id,
            schedule_id=o.schedule_id,
            fire_at=o.fire_at,
            status=o.status,
            origin=o.origin,
            attempts=o.attempts,
            available_at=o.available_at,
            last_error=o.last_error,
            delivered_at=o.delivered_at,
            dead_lettered_at=o.dead_lettered_at,
            skip_reason=cast(SkipReason | None, o.skip_reason),
            skipped_count=o.skipped_count,
            callback_of=o.callback_of,
            created_at=o.created_at,
        )


class DeadLetterOut(OccurrenceOut):
    event_type: str
    payload: Any
    target: TargetOut

    @classmethod
    def of_dead_letter(cls, d: DeadLetter) -> DeadLetterOut:
        return cls(
            **OccurrenceOut.of(d.occurrence).model_dump(),
            event_type=d.event_type,
            payload=shown_payload(d.payload),
            target=target_out(d.target),
        )


class BatchCreate(InputModel):
    _text_checked = frozenset({"items"})  # each item checks its own

    items: Annotated[list[ScheduleSpec], at_most_items(MAX_BATCH, "items")] = Field(
        min_length=1, max_length=MAX_BATCH
    )


class BatchCreated(BaseModel):
    items: list[ScheduleOut]


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


MAX_REPLAY = 1000


class ReplayRequest(InputModel):
    occurrence_ids: Annotated[list[Id], at_most_items(MAX_REPLAY, "occurrence ids")] | None = Field(
        default=None, min_length=1, max_length=MAX_REPLAY
    )
    schedule_id: Id | None = None
    event_type: EventType | None = None


class Replayed(BaseModel):
    replayed: int
    occurrence_ids: list[uuid.UUID]


class ReplayAccepted(BaseModel):
    occurrence_id: uuid.UUID
    status: OccurrenceStatus


class Health(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)


class BackfillRequest(InputModel):
    model_config = ConfigDict(populate_by_name=True)

    from_: Instant = Field(alias="from", description="First instant of the range")
    to: Instant = Field(description="Last instant of the range (inclusive, not future)")


class BackfillTick(BaseModel):
    fire_at: datetime
    occurrence_id: uuid.UUID
    created: bool = Field(description="False when the tick already had an occurrence")


class BackfillResult(BaseModel):
    created: int = Field(description="Occurrences this call made due")
    ticks: list[BackfillTick]

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

    id: uuid.UUID
    kind: EventKind
    at: datetime
    version: int = Field(description="The schedule's version once the change was made")
    actor: str | None = Field(
        description="The API key's name, 'cli' (operator CLI), 'system' (the delivery loop), "
        "or null when no keys are set"
    )
    fields: list[str] | None = Field(description="For updated: the names of what changed")

    @classmethod
    def of(cls, e: ScheduleEvent) -> ScheduleEventOut:
        return cls(id=e.id, kind=e.kind, at=e.at, version=e.version, actor=e.actor, fields=e.fields)


class AttemptOut(BaseModel):
    """One attempt to deliver an occurrence."""

    attempt: int = Field(description="1-based; a replay starts again at 1")
    started_at: datetime
    duration_ms: int = Field(
        description="How long it took; for lease_expired, how long its lease held the "
        "occurrence with no result"
    )
    outcome: AttemptOutcome = Field(
        description="lease_expired: its replica stopped or stalled before settling it"
    )
    status_code: int | None = Field(description="The reply's HTTP status (webhooks)")
    error: str | None
    response_excerpt: str | None = Field(
        description="At most the first 1 KiB of the reply's body, as text"
    )
    replica: str | None = Field(description="The replica that made the attempt")

    @classmethod
    def of(cls, a: Attempt) -> AttemptOut:
        return cls(
            attempt=a.attempt,
            started_at=a.started_at,
            duration_ms=a.duration_ms,
            outcome=a.outcome,
            status_code=a.status_code,
            error=a.error,
            response_excerpt=a.response_excerpt,
            replica=a.replica,
        )


class PreviewRequest(InputModel):
    trigger: Trigger
    after: Instant | None = Field(default=None, description="Default: now")
    count: int = Field(default=10, ge=1, le=100)
    max_occurrences: int | None = Field(
        default=None,
        ge=1,
        le=MAX_COUNT,
        description="The schedule's cap on fired ticks, if it has one",
    )


class Preview(BaseModel):
    fire_times: list[datetime]
