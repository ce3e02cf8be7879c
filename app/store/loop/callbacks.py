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
from app.store.dialects.base import Dialect
from app.store.schema.tables import occurrences, schedules


@cache
def _reported(dialect: Dialect) -> sa.Select[Any]:
    """The dead letters among `dead_ids` that this transaction made (a late settle whose
    lease was taken over dead-letters nothing), but for callbacks, with their schedules'
    `on_failure`."""
    o, s = occurrences.alias("o"), schedules.alias("s")
    return (
        sa.select(
            o.c.occurrence_id,
            o.c.schedule_id,
            o.c.fire_at,
            o.c.attempts,
            o.c.last_error,
            o.c.dead_lettered_at,
            s.c.event_type,
            # As text, sent as it is (and no decoder meets what it cannot read).
            sa.cast(s.c.payload, sa.Text).label("payload"),
            # Decoded: a schedule without one may hold SQL NULL or JSON null.
            s.c.on_failure,
        )
        .join(s, s.c.id == o.c.schedule_id)
        .where(
            dialect.among(o.c.occurrence_id, "dead_ids"),
            o.c.status == OccurrenceStatus.DEAD_LETTERED,
            o.c.dead_lettered_at == dialect.now(),
            o.c.origin != Origin.CALLBACK,
        )
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
    found = await conn.execute(_reported(dialect), {"dead_ids": list(dead_ids), "now": now})
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
