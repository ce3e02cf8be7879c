"""Operator events (DESIGN section 15): what a tenant's `events_target` is told, at least
once, signed: a receiver's circuit opening, recovering or giving up, a schedule pausing
itself, an occurrence dead-lettered, a quota refusing a request.

Invariants:
- An event is stored in the transaction of the change it tells (an outbox), so a change
  that commits has its event and one rolled back has none; a replica that dies while
  sending one leaves it to be sent again once its lease runs out.
- An event that fails for good is logged and counted, never the subject of another.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from app.domain.endpoints import CircuitEvent
from app.domain.ids import format_instant
from app.domain.schedule import AutoPause

# Fixed forever: the ids of events that must be told once per window (quota.exceeded).
_EVENT_NAMESPACE = uuid.UUID("8f1d7a52-3c6b-4d8e-a1f0-6b2c9e4d7a31")
# Attempts to tell one event before it is given up, and the longest wait between two.
MAX_EVENT_ATTEMPTS = 12
MAX_EVENT_BACKOFF = 600.0


class OperatorEventKind(StrEnum):
    ENDPOINT_OPENED = "endpoint.opened"
    ENDPOINT_RECOVERED = "endpoint.recovered"
    ENDPOINT_DISABLED = "endpoint.disabled"
    SCHEDULE_AUTO_PAUSED = "schedule.auto_paused"
    OCCURRENCE_DEAD_LETTERED = "occurrence.dead_lettered"
    QUOTA_EXCEEDED = "quota.exceeded"


# The circuit's changes a tenant is told of (a reopening after a failed probe is not news).
CIRCUIT_KINDS = {
    CircuitEvent.OPENED: OperatorEventKind.ENDPOINT_OPENED,
    CircuitEvent.RECOVERED: OperatorEventKind.ENDPOINT_RECOVERED,
    CircuitEvent.DISABLED: OperatorEventKind.ENDPOINT_DISABLED,
}


@dataclass(frozen=True, slots=True)
class NewOperatorEvent:
    """An event about to be stored; `id` None: a new one (UUIDv7 at the change's instant)."""

    tenant: str
    kind: OperatorEventKind
    data: dict[str, object] = field(default_factory=dict)
    id: uuid.UUID | None = None


def quota_event_id(tenant: str, quota: str, at: datetime) -> uuid.UUID:
    """The one `quota.exceeded` of `tenant`'s `quota` in the minute of `at`: a flood of
    refused requests tells the tenant once a minute."""
    minute = at.replace(second=0, microsecond=0)
    return uuid.uuid5(_EVENT_NAMESPACE, f"{tenant}/{quota}/{format_instant(minute)}")


def event_body(event_id: uuid.UUID, kind: str, tenant: str, at: datetime, data: object) -> str:
    """The JSON an event's receiver gets: its stable id (also `webhook-id`), its type, its
    tenant, when it happened and what it is about."""
    return json.dumps(
        {
            "id": str(event_id),
            "type": kind,
            "tenant": tenant,
            "at": format_instant(at),
            "data": data,
        },
        separators=(",", ":"),
        sort_keys=False,
    )


def event_backoff(attempts: int) -> float:
    """Seconds before the next attempt at an event attempted `attempts` times."""
    return min(MAX_EVENT_BACKOFF, 2.0 ** min(attempts, 20))


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """An occurrence dead-lettered by an attempt (or by a claim), as its event tells it."""

    tenant: str
    occurrence_id: uuid.UUID
    schedule_id: uuid.UUID
    event_type: str
    attempts: int
    error: str | None


def failure_events(
    dead: Sequence[DeadLettered], paused: Sequence[AutoPause]
) -> list[NewOperatorEvent]:
    """The events of a settle's (or a claim's) dead letters and of the schedules they paused
    (each schedule's tenant is its dead letter's)."""
    events = [
        NewOperatorEvent(
            d.tenant,
            OperatorEventKind.OCCURRENCE_DEAD_LETTERED,
            {
                "occurrence_id": str(d.occurrence_id),
                "schedule_id": str(d.schedule_id),
                "event_type": d.event_type,
                "attempts": d.attempts,
                "error": d.error,
            },
        )
        for d in dead
    ]
    tenant_of = {d.schedule_id: d.tenant for d in dead}
    events += [
        NewOperatorEvent(
            tenant_of[pause.schedule_id],
            OperatorEventKind.SCHEDULE_AUTO_PAUSED,
            {
                "schedule_id": str(pause.schedule_id),
                "name": pause.name,
                "consecutive_failures": pause.consecutive_failures,
                "pause_after_failures": pause.threshold,
            },
        )
        for pause in paused
        if pause.schedule_id in tenant_of
    ]
    return events
