"""Failure callbacks written: one pending occurrence of origin `callback` for each dead
letter of a schedule with an `on_failure` target (app.domain.callbacks).

Invariant: a callback is written in the transaction that dead-letters what it reports, so
the dead letter and its callback commit together or not at all; the claim then delivers it
at least once, like any occurrence. A callback's own dead letter writes none.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.callbacks import DeadLettered, callback_body, callback_id
from app.domain.occurrence import OccurrenceStatus, Origin
from app.store.dialects import dialect_of
from app.store.loop.sql import listed, query, typed
from app.store.schema.tables import occurrences, schedules
from app.store.schema.types import UUID, UTCDateTime


@cache
def _reported(dialect: str) -> sa.TextualSelect:
    """The dead letters among `dead_ids` that this transaction made, but for callbacks,
    with their schedules' `on_failure` (named SQL `reported_dead_letters`)."""
    statement = typed(
        query("reported_dead_letters", dialect),
        listed("dead_ids", dialect, UUID),
        sa.bindparam("now", type_=UTCDateTime()),
    )
    return statement.columns(
        occurrence_id=UUID,
        schedule_id=UUID,
        fire_at=UTCDateTime(),
        attempts=sa.Integer(),
        last_error=sa.Text(),
        dead_lettered_at=UTCDateTime(),
        event_type=sa.String(),
        payload=sa.Text(),
        # Decoded: a schedule without one may hold SQL NULL or JSON null.
        on_failure=schedules.c.on_failure.type,
    )


def _callback_row(dead: DeadLettered, now: datetime) -> dict[str, Any]:
    """The callback of `dead`, dead-lettered at `now` (as its row records it), due then."""
    return {
        "occurrence_id": callback_id(dead.occurrence_id, now),
        "schedule_id": dead.schedule_id,
        "fire_at": now,
        "available_at": now,
        "status": OccurrenceStatus.PENDING,
        "origin": Origin.CALLBACK,
        "attempts": 0,
        "created_at": now,
        "updated_at": now,
        "flow_key": None,
        "callback_of": dead.occurrence_id,
        "body": callback_body(dead),
    }


async def call_back(conn: AsyncConnection, dead_ids: Sequence[uuid.UUID], now: datetime) -> None:
    """Write the callbacks of the occurrences among `dead_ids` dead-lettered at `now` in this
    transaction, each due at once. Costs one read when there are dead letters, and an
    insert when their schedules have an `on_failure` target."""
    if not dead_ids:
        return
    dialect = dialect_of(conn)
    found = await conn.execute(_reported(dialect.name), {"dead_ids": list(dead_ids), "now": now})
    rows = [
        _callback_row(
            DeadLettered(
                occurrence_id=row.occurrence_id,
                schedule_id=row.schedule_id,
                event_type=row.event_type,
                fire_at=row.fire_at,
                attempts=row.attempts,
                last_error=row.last_error,
                payload=row.payload,
            ),
            row.dead_lettered_at,
        )
        for row in found
        if row.on_failure is not None
    ]
    await dialect.insert_ignoring(conn, occurrences, rows, "occurrence_id")
