"""Dead letters as their schedules see them: each one's failure callback
(app.store.loop.callbacks), each schedule's count of consecutive dead letters, and the
auto-pause it triggers at `pause_after_failures`. A callback's own dead letter is none of
the schedule's failures.

Invariant: an auto-pause is a manual pause's statements (`lifecycle.pause`) with reason
"failures", in the transaction of the dead letter that reached the threshold. A delivery
restarts the count (`Dialect.mark_delivered`, in the same settle, before its dead letters).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.occurrence import NOT_FIRINGS, OccurrenceStatus, Settlement
from app.domain.schedule import (
    FAILURES_PAUSE,
    SYSTEM_ACTOR,
    AutoPause,
    EventKind,
)
from app.domain.trigger import is_recurring
from app.store.dialects import dialect_of, transaction_now
from app.store.loop.callbacks import call_back
from app.store.loop.sql import listed, query, typed
from app.store.records.events import EventStore, NewEvent
from app.store.records.lifecycle import pause
from app.store.schema import codec
from app.store.schema.tables import schedules
from app.store.schema.types import UUID, UTCDateTime


@cache
def _statements(dialect: str) -> tuple[sa.TextClause, sa.TextualSelect, sa.TextClause]:
    """A batch's dead letters counted (named SQL `count_failures`), the schedules that
    reach their threshold with them (`paused_by_failures`), and the occurrences locked
    before a pause (`lock_before_pausing`)."""
    params = (
        listed("failing", dialect, UUID),
        listed("dead_ids", dialect, UUID),
        sa.bindparam("now", type_=UTCDateTime()),
    )
    reached = typed(query("paused_by_failures", dialect), *params).columns(
        id=UUID,
        version=sa.Integer(),
        trigger=schedules.c.trigger.type,
        name=sa.String(),
        consecutive_failures=sa.Integer(),
        pause_after_failures=sa.Integer(),
    )
    return (
        typed(query("count_failures", dialect), *params),
        reached,
        typed(query("lock_before_pausing", dialect), *params),
    )


async def lock_before_pausing(conn: AsyncConnection, settled: Sequence[Settlement]) -> None:
    """First in a settle with dead letters: lock the pending occurrences of their schedules
    that may pause themselves, in the order a manual pause locks them (`lock_pending`:
    schedule by schedule, in fire order),
    before the settle locks any schedule. A pause then never holds some of them while
    waiting for the settle, which would wait for the rest: the two cannot deadlock."""
    failing = {
        item.delivery.schedule_id
        for item in settled
        if item.status is OccurrenceStatus.DEAD_LETTERED and item.delivery.origin not in NOT_FIRINGS
    }
    if failing:
        _, _, locking = _statements(dialect_of(conn).name)
        await conn.execute(locking, {"failing": list(failing)})


async def record_dead_letters(
    conn: AsyncConnection, dead: Sequence[tuple[uuid.UUID, uuid.UUID]], now: datetime
) -> list[AutoPause]:
    """What the (schedule id, occurrence id) pairs dead-lettered at `now` in this
    transaction (callbacks' own dead letters left out by the caller) mean for their
    schedules: each one's failure callback is written, each
    schedule's count of dead letters in a row grows, and those that reach their
    `pause_after_failures` pause as a manual pause would, with reason "failures". Nothing
    to add costs nothing; otherwise a read for the callbacks, one UPDATE and a read of the
    schedules at threshold. The settle and the claim (a lease spent on the last attempt, a
    definition that cannot be planned) both record theirs this way. Returns the schedules it
    paused."""
    if not dead:
        return []
    await call_back(conn, [occurrence_id for _, occurrence_id in dead], now)
    failing = list({schedule_id for schedule_id, _ in dead})
    counting, reaching, _ = _statements(dialect_of(conn).name)
    await conn.execute(
        counting,
        {"failing": failing, "dead_ids": [occurrence_id for _, occurrence_id in dead], "now": now},
    )
    reached = (await conn.execute(reaching, {"failing": failing})).all()
    if reached:
        await _pause_for_failures(conn, reached)
    return [
        AutoPause(row.id, row.name, row.consecutive_failures, row.pause_after_failures)
        for row in reached
    ]


async def _pause_for_failures(conn: AsyncConnection, reached: Sequence[Any]) -> None:
    """A manual pause's statements, by the loop, with reason "failures"."""
    # The transaction's own instant, as a manual pause records it (rare: only here).
    now = await transaction_now(conn)
    for row in reached:
        recurring = is_recurring(codec.trigger(row.trigger))
        await pause(conn, row.id, now, recurring=recurring, reason=FAILURES_PAUSE)
    await EventStore().record(
        conn,
        [
            NewEvent(row.id, EventKind.AUTO_PAUSED, version=row.version + 1, actor=SYSTEM_ACTOR)
            for row in reached
        ],
        now,
    )
