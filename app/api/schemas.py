"""Wire models: what the API returns, and request bodies that are not domain specs."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter
from typing import Annotated, Any, Generic, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.config import JsonDict
from typing_extensions import TypedDict

from app.domain.filters import DeadLetterFilter
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
from app.domain.target import EndpointTarget, JsonScalar, Target, TopicTarget, WebhookTarget
from app.domain.tenants import DEFAULT_TENANT
from app.domain.trigger import Trigger

T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    """One page of a list."""

    items: list[T] = Field(description="This page's items, in the list's order")
    next_cursor: str | None = Field(
        description="Pass as cursor for the next page; null: this is the last page"
    )


class WebhookTargetOut(BaseModel):
    """A webhook target as responses show it. Secrets are redacted: the password of the
    URL's userinfo, the values of the URL's query parameters and of the headers whose names
    contain auth, token, secret, key, pass, credential, signature, session or cookie (any
    case) show as ***. Sent back in a PATCH, a redacted form keeps the stored value while the
    URL stays the same up to its query (scheme, host, port and path); the signing secret's
    while its scheme, host and port stay."""

    type: Literal["webhook"] = Field(description="The target's kind")
    url: str = Field(description="The URL called, its password and secret query values as ***")
    method: Literal["POST", "PUT", "PATCH"] = Field(description="The HTTP method of each delivery")
    headers: dict[str, str] = Field(
        description="Extra request headers, the values of secret ones as ***"
    )
    timeout_seconds: float = Field(description="Seconds an attempt may take")
    signing_secret: str | None = Field(
        description="The target's own signing secret, redacted to whsec_… and its last 4 "
        "characters; null when the service's secrets sign its deliveries"
    )


class RabbitMQTargetOut(BaseModel):
    """A RabbitMQ target as responses show it: secret headers redacted as on webhooks (***,
    kept by a PATCH that sends it back)."""

    type: Literal["rabbitmq"] = Field(description="The target's kind")
    exchange: str = Field(description='The exchange published to; "" is the default exchange')
    routing_key: str = Field(description="The routing key")
    headers: dict[str, JsonScalar] = Field(
        description="Message headers, the values of secret ones as ***"
    )


class EndpointTargetOut(BaseModel):
    """An endpoint target: the endpoint holds the URL, headers and secrets."""

    type: Literal["endpoint"] = Field(description="The target's kind")
    endpoint_id: uuid.UUID = Field(description="The endpoint's id")


class TopicTargetOut(BaseModel):
    """A topic target: each occurrence fans out to the topic's matching subscriptions."""

    type: Literal["topic"] = Field(description="The target's kind")
    topic: str = Field(description="The topic's name")


TargetOut = Annotated[
    WebhookTargetOut | RabbitMQTargetOut | EndpointTargetOut | TopicTargetOut,
    Field(discriminator="type"),
]
AnyTargetOut = WebhookTargetOut | RabbitMQTargetOut | EndpointTargetOut | TopicTargetOut


def target_out(t: Target) -> AnyTargetOut:
    """What a response shows of a target; the stored target keeps the real values."""
    if isinstance(t, EndpointTarget):
        return EndpointTargetOut(type=t.type, endpoint_id=t.endpoint_id)
    if isinstance(t, TopicTarget):
        return TopicTargetOut(type=t.type, topic=t.topic)
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


class DeliveryOut(BaseModel):
    """One delivery of a topic's occurrence: to one subscription's endpoint, with attempts,
    retries and a dead letter of its own."""

    delivery_id: uuid.UUID = Field(description="Its id, sent as webhook-id and Idempotency-Key")
    subscription_id: uuid.UUID | None = Field(description="The subscription it matched")
    endpoint_id: uuid.UUID | None = Field(description="The endpoint it goes to")
    status: OccurrenceStatus = Field(description="pending, delivered, dead_lettered, cancelled")
    attempts: int = Field(description="Attempts made to deliver it")
    last_error: str | None = Field(description="Why its latest attempt failed; null: none did")
    delivered_at: datetime | None = Field(description="When it was delivered; null: not yet")
    dead_lettered_at: datetime | None = Field(description="When it was dead-lettered")

    @classmethod
    def of(cls, o: Occurrence) -> DeliveryOut:
        return cls(
            delivery_id=o.occurrence_id,
            subscription_id=o.subscription_id,
            endpoint_id=o.endpoint_id,
            status=o.status,
            attempts=o.attempts,
            last_error=o.last_error,
            delivered_at=o.delivered_at,
            dead_lettered_at=o.dead_lettered_at,
        )


class OccurrenceOut(BaseModel):
    """One firing of a schedule, and where its delivery stands."""

    occurrence_id: uuid.UUID = Field(
        description="Its id, the same for every attempt and replay (the Idempotency-Key sent)"
    )
    schedule_id: uuid.UUID = Field(description="The schedule that fired it")
    fire_at: datetime = Field(description="The tick it stands for")
    status: OccurrenceStatus = Field(
        description="pending, delivered, dead_lettered, cancelled or skipped; completed: a "
        "topic's occurrence that fanned out to its deliveries"
    )
    origin: Origin = Field(
        description="What made it: the trigger's tick, a manual trigger, a backfill or a "
        "failure callback"
    )
    attempts: int = Field(description="Attempts made to deliver it")
    available_at: datetime | None = Field(
        description="When its next attempt may start; null once it is settled"
    )
    last_error: str | None = Field(description="Why its latest attempt failed; null: none did")
    delivered_at: datetime | None = Field(description="When it was delivered; null: not yet")
    dead_lettered_at: datetime | None = Field(
        description="When it was dead-lettered; null: it was not"
    )
    skip_reason: SkipReason | None = Field(description="Why a skipped tick did not fire")
    skipped_count: int = Field(
        description="Ticks a skipped entry stands for: 1, or the rest of a long gap"
    )
    callback_of: uuid.UUID | None = Field(
        description="A failure callback's (origin callback): the occurrence whose "
        "dead-lettering it reports to the schedule's on_failure target",
        examples=["7d3f921f-fb95-5f69-85f9-81c248738a1d"],
    )
    created_at: datetime = Field(description="When it was made")
    parent_id: uuid.UUID | None = Field(
        default=None,
        description="A delivery of a topic's occurrence (origin fanout): that occurrence's "
        "id (its X-Occurrence-Id); its own id is the delivery's (webhook-id, Idempotency-Key)",
    )
    delivery_id: uuid.UUID | None = Field(
        default=None, description="A delivery's id (its occurrence_id); null otherwise"
    )
    subscription_id: uuid.UUID | None = Field(
        default=None, description="A delivery's subscription; null otherwise"
    )
    endpoint_id: uuid.UUID | None = Field(
        default=None, description="A delivery's endpoint; null otherwise"
    )
    deliveries: list[DeliveryOut] | None = Field(
        default=None,
        description="A topic's occurrence, read alone (GET /v1/occurrences/{id}): one delivery "
        "per subscription it matched as it fired (none: it matched none, and is completed); "
        "null otherwise",
    )

    @classmethod
    def of(cls, o: Occurrence) -> OccurrenceOut:
        return cls(
            parent_id=o.parent_id,
            delivery_id=o.occurrence_id if o.parent_id is not None else None,
            subscription_id=o.subscription_id,
            endpoint_id=o.endpoint_id,
            deliveries=None if o.deliveries is None else [DeliveryOut.of(d) for d in o.deliveries],
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
    """A dead-lettered occurrence, with what it would deliver on a replay."""

    event_type: str = Field(description="Its schedule's event type")
    schedule_name: str | None = Field(description="Its schedule's name; null: it has none")
    payload: Any = Field(description="The JSON value it delivers")
    target: TargetOut = Field(description="Where a replay delivers it (its schedule's target)")

    @classmethod
    def of_dead_letter(cls, d: DeadLetter) -> DeadLetterOut:
        return cls(
            **OccurrenceOut.of(d.occurrence).model_dump(),
            event_type=d.event_type,
            schedule_name=d.schedule_name,
            payload=shown_payload(d.payload),
            target=target_out(d.target),
        )


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


MAX_REPLAY = 1000


# Ids, or at least one filter: an empty request would replay everything. Said as "not all
# of them null or absent", which generators of clients leave to the server.
_IDS_OR_A_FILTER: JsonDict = {
    "not": {
        "properties": {
            "occurrence_ids": {"type": "null"},
            "schedule_id": {"type": "null"},
            "event_type": {"type": "null"},
            "subscription_id": {"type": "null"},
            "endpoint_id": {"type": "null"},
            "dead_lettered_after": {"type": "null"},
        }
    }
}


class ReplayRequest(InputModel):
    """Dead letters to replay: by ids, or every one matching the filters (at least one)."""

    model_config = ConfigDict(json_schema_extra=_IDS_OR_A_FILTER)

    occurrence_ids: Annotated[list[Id], at_most_items(MAX_REPLAY, "occurrence ids")] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_REPLAY,
        description="The dead letters to replay (1-1000 occurrence ids); the filters then "
        "narrow them",
    )
    schedule_id: Id | None = Field(default=None, description="Replay the schedule's dead letters")
    event_type: EventType | None = Field(
        default=None, description="Replay the dead letters of this event type"
    )
    subscription_id: Id | None = Field(
        default=None, description="Replay the deliveries to this subscription (a topic's)"
    )
    endpoint_id: Id | None = Field(
        default=None,
        description="Replay what went to this endpoint: the deliveries to it, and the "
        "occurrences of the schedules that target it",
    )
    dead_lettered_after: Instant | None = Field(
        default=None,
        description="Replay only what was dead-lettered after this instant",
        examples=["2026-12-07T09:00:00Z"],
    )

    def filter(self) -> DeadLetterFilter:
        """The filters the request names (its tenant is the caller's)."""
        return DeadLetterFilter(
            schedule_id=self.schedule_id,
            event_type=self.event_type,
            subscription_id=self.subscription_id,
            endpoint_id=self.endpoint_id,
            dead_lettered_after=self.dead_lettered_after,
        )


class Replayed(BaseModel):
    """What a replay of many made due."""

    replayed: int = Field(description="How many dead letters are due again")
    occurrence_ids: list[uuid.UUID] = Field(
        description="Their ids: all of them for a replay by ids; for a replay by filters, "
        f"the first {MAX_REPLAY} replayed (fewer than `replayed` when it replayed more)"
    )


class ReplayAccepted(BaseModel):
    """A dead letter made due again, its attempts reset."""

    occurrence_id: uuid.UUID = Field(description="Its id, unchanged")
    status: OccurrenceStatus = Field(description="pending")


class Health(BaseModel):
    """Liveness or readiness."""

    status: str = Field(description="ok, or what is wrong")
    checks: dict[str, str] = Field(
        default_factory=dict, description="Each dependency checked, and how it answered"
    )


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


class AttemptOut(BaseModel):
    """One attempt to deliver an occurrence."""

    attempt: int = Field(description="1-based; a replay starts again at 1")
    started_at: datetime = Field(description="When it started")
    duration_ms: int = Field(
        description="How long it took; for lease_expired, how long its lease held the "
        "occurrence with no result"
    )
    outcome: AttemptOutcome = Field(
        description="lease_expired: its replica stopped or stalled before settling it"
    )
    status_code: int | None = Field(description="The reply's HTTP status (webhooks)")
    error: str | None = Field(description="Why it failed; null: it succeeded")
    response_excerpt: str | None = Field(
        description="At most the first 1 KiB of the reply's body, as text"
    )
    replica: str | None = Field(description="The replica that made the attempt")
    trace_id: str | None = Field(
        default=None,
        description="The W3C trace id (32 hex digits) of the trace the attempt belongs to: "
        "its schedule's create request's, or with tracing on the attempt span's; null: none",
    )

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
            trace_id=a.trace_id,
        )


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
