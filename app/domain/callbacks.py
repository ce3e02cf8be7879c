"""Failure callbacks (DESIGN 11): the message a schedule's `on_failure` target gets when one
of its occurrences is dead-lettered.

A callback is an occurrence of its own (origin `callback`), written in the transaction that
dead-letters the occurrence it reports, so no crash can fall between the two: it is claimed,
leased, retried and dead-lettered like any delivery, with an id of its own, stable for that
dead-lettering, which receivers dedupe on. A callback that fails for good is a dead letter
that calls no callback.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime

from app.domain.ids import OCCURRENCE_NAMESPACE, format_instant

# The event type of every callback: `X-Event-Type` on webhooks, the message type on AMQP.
CALLBACK_EVENT_TYPE = "chronoq.dead_lettered"
# The body's `type`.
CALLBACK_TYPE = "occurrence.dead_lettered"


def callback_id(occurrence_id: uuid.UUID, dead_lettered_at: datetime) -> uuid.UUID:
    """The id of the callback of `occurrence_id`'s dead-lettering at `dead_lettered_at`: the
    same dead-lettering always names the same callback, and a replay that dead-letters the
    occurrence again makes another."""
    return uuid.uuid5(
        OCCURRENCE_NAMESPACE, f"{occurrence_id}/dead_lettered/{format_instant(dead_lettered_at)}"
    )


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """What a callback reports of one dead letter. `payload` is the schedule's payload as
    stored (JSON text, sent as it is; None: no payload)."""

    occurrence_id: uuid.UUID
    schedule_id: uuid.UUID
    event_type: str
    fire_at: datetime
    attempts: int
    last_error: str | None
    payload: str | None


def callback_body(dead: DeadLettered) -> str:
    """The callback's JSON body; the payload goes in as its stored text, byte for byte."""
    head = json.dumps(
        {
            "type": CALLBACK_TYPE,
            "occurrence_id": str(dead.occurrence_id),
            "schedule_id": str(dead.schedule_id),
            "event_type": dead.event_type,
            "fire_at": format_instant(dead.fire_at),
            "attempts": dead.attempts,
            "last_error": dead.last_error,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )
    payload = dead.payload if dead.payload is not None else "null"
    return f'{head[:-1]},"payload":{payload}}}'
