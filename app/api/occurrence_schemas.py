"""Wire models of /v1/occurrences and /v1/dead-letters: an occurrence and the deliveries
of a topic's, its attempts, a dead letter with what a replay delivers, and replays."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, cast

from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import JsonDict

from app.api.target_schemas import TargetOut, target_out
from app.domain.filters import DeadLetterFilter
from app.domain.limits import EventType, Id, InputModel, Instant, at_most_items, shown_payload
from app.domain.misfire import SkipReason
from app.domain.occurrence import (
    Attempt,
    AttemptOutcome,
    DeadLetter,
    Occurrence,
    OccurrenceStatus,
    Origin,
)


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
