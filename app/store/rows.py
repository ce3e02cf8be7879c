"""Occurrence rows: what the store writes for a new, a skipped or a failed occurrence, and
what it reads back."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Row

from app.domain import misfire
from app.domain.ids import gap_entry_id, occurrence_id
from app.domain.occurrence import (
    Occurrence,
    OccurrenceStatus,
    Origin,
)

MAX_ERROR_LENGTH = 2000


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
    )


def rules_of_row(row: Any) -> misfire.Rules:
    return misfire.Rules(
        policy=row.misfire_policy,
        grace_seconds=row.misfire_grace_seconds,
        max_catchup=row.max_catchup,
        max_occurrences=row.max_occurrences,
        fired=row.tick_count,
    )


def skipped_occurrence(schedule_id: uuid.UUID, skip: misfire.Skip, now: datetime) -> dict[str, Any]:
    """The row that records a tick that did not fire. A skipped real tick keeps its usual
    id (a backfill can still fire it); a DST gap entry gets an id of its own, since the
    instant the clocks jump may also be a real tick."""
    id_ = (
        gap_entry_id(schedule_id, skip.fire_at)
        if skip.reason == "dst_gap"
        else occurrence_id(schedule_id, skip.fire_at)
    )
    return {
        "occurrence_id": id_,
        "schedule_id": schedule_id,
        "fire_at": skip.fire_at,
        "available_at": None,
        "status": OccurrenceStatus.SKIPPED,
        "origin": Origin.SCHEDULE,
        "attempts": 0,
        "skip_reason": skip.reason,
        "skipped_count": skip.count,
        "created_at": now,
        "updated_at": now,
    }


def new_occurrence(
    schedule_id: uuid.UUID,
    fire_at: datetime,
    now: datetime,
    origin: Origin,
    *,
    delay: float = 0.0,
) -> dict[str, Any]:
    """The row of a not-yet-fired occurrence; its id is derived, so inserting twice is a no-op.
    `delay` is its jitter: it becomes claimable that much after its nominal instant."""
    return {
        "occurrence_id": occurrence_id(schedule_id, fire_at),
        "schedule_id": schedule_id,
        "fire_at": fire_at,
        "available_at": fire_at + timedelta(seconds=delay) if delay else fire_at,
        "status": OccurrenceStatus.PENDING,
        "origin": origin,
        "attempts": 0,
        "created_at": now,
        "updated_at": now,
    }
