"""Occurrence rows: what the store writes for a new, a skipped or a failed occurrence, and
what it reads back."""

from __future__ import annotations

import random
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Row

from app.domain import misfire
from app.domain.claim_plan import PendingOccurrence, SkipEntry, pending_occurrence, skip_entry
from app.domain.ids import uuid7
from app.domain.occurrence import (
    Occurrence,
    OccurrenceStatus,
    Origin,
)
from app.domain.schedule import rules_of
from app.domain.tenants import endpoint_in_key
from app.store.schema.tables import occurrences

MAX_ERROR_LENGTH = 2000


def attempt_id(started_at: datetime) -> uuid.UUID:
    """An attempt's id: UUIDv7 of its start, so ids sort in the order attempts started."""
    return uuid7(started_at, random.getrandbits(74))


def truncate_error(error: str | None) -> str | None:
    """An error as the store can hold it on every dialect: valid UTF-8 without NUL (a
    target's reply or an exception message may carry either), at most MAX_ERROR_LENGTH."""
    if error is None:
        return None
    if "\x00" in error or not error.isascii():
        error = error.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")
    if len(error) <= MAX_ERROR_LENGTH:
        return error
    return error[: MAX_ERROR_LENGTH - 1] + "…"


# An occurrence's columns as reads show it: all but a callback's body, which may weigh as
# much as a payload and is read only to deliver it (or to show a dead letter).
OCCURRENCE_COLUMNS = tuple(column for column in occurrences.c if column.name != "body")


def to_occurrence(row: Row[Any]) -> Occurrence:
    return Occurrence(
        occurrence_id=row.occurrence_id,
        schedule_id=row.schedule_id,
        fire_at=row.fire_at,
        available_at=row.available_at,
        status=OccurrenceStatus(row.status),
        origin=Origin(row.origin),
        attempts=row.attempts,
        last_error=row.last_error,
        delivered_at=row.delivered_at,
        dead_lettered_at=row.dead_lettered_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
        skip_reason=row.skip_reason,
        skipped_count=row.skipped_count,
        callback_of=row.callback_of,
        parent_id=row.parent_id,
        subscription_id=row.subscription_id,
        endpoint_id=endpoint_in_key(row.flow_key) if row.parent_id is not None else None,
    )


def rules_of_row(row: Any) -> misfire.Rules:
    """The rules a schedule's row holds: its flat rule columns and its tick count."""
    return rules_of(row, fired=row.tick_count)


def skip_row(entry: SkipEntry, now: datetime) -> dict[str, Any]:
    """The row that records a tick that did not fire."""
    return {
        "occurrence_id": entry.occurrence_id,
        "schedule_id": entry.schedule_id,
        "fire_at": entry.fire_at,
        "available_at": None,
        "status": OccurrenceStatus.SKIPPED,
        "origin": Origin.SCHEDULE,
        "attempts": 0,
        "skip_reason": entry.reason,
        "skipped_count": entry.count,
        "created_at": now,
        "updated_at": now,
    }


def pending_row(occurrence: PendingOccurrence, now: datetime) -> dict[str, Any]:
    """The row of a not-yet-fired occurrence."""
    return {
        "occurrence_id": occurrence.occurrence_id,
        "schedule_id": occurrence.schedule_id,
        "fire_at": occurrence.fire_at,
        "available_at": occurrence.available_at,
        "status": OccurrenceStatus.PENDING,
        "origin": occurrence.origin,
        "attempts": 0,
        "created_at": now,
        "updated_at": now,
        "flow_key": occurrence.flow_key,
    }


def skipped_occurrence(schedule_id: uuid.UUID, skip: misfire.Skip, now: datetime) -> dict[str, Any]:
    """The row that records `skip` (its id as `skip_entry` gives it)."""
    return skip_row(skip_entry(schedule_id, skip), now)


def new_occurrence(
    schedule_id: uuid.UUID,
    fire_at: datetime,
    now: datetime,
    origin: Origin,
    *,
    delay: float = 0.0,
    flow_key: str | None = None,
) -> dict[str, Any]:
    """The row of a not-yet-fired occurrence; its id is derived, so inserting twice is a no-op.
    `delay` is its jitter: it becomes claimable that much after its nominal instant."""
    firing = pending_occurrence(schedule_id, fire_at, origin, delay=delay, flow_key=flow_key)
    return pending_row(firing, now)
