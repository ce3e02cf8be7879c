"""Pausing: what a pause writes, whoever makes it, and the count of dead letters in a row
that makes a schedule pause itself.

Invariant: an auto-pause is a manual pause's statements (`pause`) with reason "failures",
in the transaction of the dead letter that reached the threshold.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.occurrence import OccurrenceStatus, Settlement
from app.domain.schedule import (
    FAILURES_PAUSE,
    SYSTEM_ACTOR,
    EventKind,
    PauseReason,
    ScheduleStatus,
)
from app.domain.trigger import is_recurring
from app.store import codec
from app.store.cadence import CadenceStore
from app.store.clock import transaction_now
from app.store.dialects import dialect_of
from app.store.dialects.base import Dialect
from app.store.events import EventStore, NewEvent
from app.store.schedules import ScheduleStore
from app.store.tables import occurrences, schedules


async def pause(
    conn: AsyncConnection,
    schedule_id: uuid.UUID,
    now: datetime,
    *,
    recurring: bool,
    reason: PauseReason,
) -> None:
    """Pause a schedule: nothing of it is claimed until it resumes. A recurring one's due
    ticks are recorded as skipped and its unfired ones dropped; every pending occurrence is
    held with its own instant, which resume gives back. Its version grows by one."""
    await ScheduleStore().update(
        conn, schedule_id, now, status=ScheduleStatus.PAUSED, paused_at=now, pause_reason=reason
    )
    cadence = CadenceStore()
    if recurring:
        await cadence.skip_due_cadence(conn, schedule_id, now, "paused")
        await cadence.drop_unfired_cadence(conn, schedule_id)
    await cadence.hold(conn, schedule_id, now)


@dataclass(frozen=True)
class _Statements:
    count_failures: sa.Update
    paused_by_failures: sa.Select[Any]
    lock_before_pausing: sa.Select[Any]


@cache
def _statements(dialect: Dialect) -> _Statements:
    now = dialect.now()
    o = occurrences.alias("o")
    return _Statements(
        # One statement for a batch's deliveries and dead letters: a schedule with a
        # delivery this transaction made starts from 0, one with dead letters adds those
        # this transaction made (a late settle whose lease was taken over delivers and
        # dead-letters nothing, and counts nothing). A batch's deliveries count as earlier
        # than its dead letters.
        count_failures=schedules.update()
        .where(
            dialect.among(schedules.c.id, "touched"),
            dialect.among(schedules.c.id, "failing") | (schedules.c.consecutive_failures > 0),
        )
        .values(
            consecutive_failures=sa.case(
                (
                    dialect.among(schedules.c.id, "delivering")
                    & sa.exists().where(
                        o.c.schedule_id == schedules.c.id,
                        dialect.among(o.c.occurrence_id, "delivered_ids"),
                        o.c.status == OccurrenceStatus.DELIVERED,
                        o.c.delivered_at == now,
                    ),
                    0,
                ),
                else_=schedules.c.consecutive_failures,
            )
            + sa.select(sa.func.count())
            .select_from(o)
            .where(
                o.c.schedule_id == schedules.c.id,
                dialect.among(o.c.occurrence_id, "dead_ids"),
                o.c.status == OccurrenceStatus.DEAD_LETTERED,
                o.c.dead_lettered_at == now,
            )
            .scalar_subquery()
        ),
        paused_by_failures=sa.select(schedules.c.id, schedules.c.version, schedules.c.trigger)
        .where(
            dialect.among(schedules.c.id, "failing"),
            schedules.c.status == ScheduleStatus.PENDING,
            schedules.c.pause_after_failures.is_not(None),
            schedules.c.consecutive_failures >= schedules.c.pause_after_failures,
        )
        .with_for_update(of=schedules),
        lock_before_pausing=sa.select(occurrences.c.occurrence_id)
        .where(
            dialect.among(occurrences.c.schedule_id, "failing"),
            occurrences.c.status == OccurrenceStatus.PENDING,
            sa.exists().where(
                schedules.c.id == occurrences.c.schedule_id,
                schedules.c.pause_after_failures.is_not(None),
                schedules.c.status == ScheduleStatus.PENDING,
            ),
        )
        .order_by(occurrences.c.schedule_id, occurrences.c.fire_at, occurrences.c.occurrence_id)
        .with_for_update(of=occurrences),
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
        if item.status is OccurrenceStatus.DEAD_LETTERED
    }
    if failing:
        await conn.execute(
            _statements(dialect_of(conn)).lock_before_pausing, {"failing": list(failing)}
        )


async def count_failures(
    conn: AsyncConnection,
    settled: Sequence[Settlement],
    now: datetime,
    *,
    deliveries_counted: bool = False,
) -> None:
    """Keep each schedule's count of dead letters in a row, and pause those that reach their
    `pause_after_failures` as a manual pause would, with reason "failures". A batch with
    neither deliveries nor dead letters costs nothing; one with deliveries only, one
    UPDATE (none when `deliveries_counted`: the statement that delivered them restarted
    their counts); one with dead letters, that UPDATE and a read of the schedules at
    threshold."""
    delivering: set[uuid.UUID] = set()
    delivered_ids: list[uuid.UUID] = []
    dead: list[tuple[uuid.UUID, uuid.UUID]] = []
    for item in settled:
        if item.status is OccurrenceStatus.DELIVERED:
            if not deliveries_counted:
                delivering.add(item.delivery.schedule_id)
                delivered_ids.append(item.delivery.occurrence_id)
        elif item.status is OccurrenceStatus.DEAD_LETTERED:
            dead.append((item.delivery.schedule_id, item.delivery.occurrence_id))
    await count_outcomes(conn, delivering, dead, now, delivered_ids=delivered_ids)


async def count_outcomes(
    conn: AsyncConnection,
    delivering: set[uuid.UUID],
    dead: Sequence[tuple[uuid.UUID, uuid.UUID]],
    now: datetime,
    *,
    delivered_ids: Sequence[uuid.UUID] = (),
) -> None:
    """`count_failures` for schedules with deliveries (`delivered_ids`, the occurrences
    they delivered: only those delivered at `now` count) and (schedule id, occurrence id)
    pairs dead-lettered at `now` in this transaction: the claim counts its own dead letters
    (a lease spent on the last attempt, a definition that cannot be planned) this way."""
    failing = {schedule_id for schedule_id, _ in dead}
    dead_ids = [occurrence_id for _, occurrence_id in dead]
    if not delivering and not failing:
        return
    statements = _statements(dialect_of(conn))
    await conn.execute(
        statements.count_failures,
        {
            "touched": list(delivering | failing),
            "failing": list(failing),
            "delivering": list(delivering),
            "delivered_ids": list(delivered_ids),
            "dead_ids": dead_ids,
            "now": now,
        },
    )
    if not failing:
        return
    reached = (await conn.execute(statements.paused_by_failures, {"failing": list(failing)})).all()
    if reached:
        await _pause_for_failures(conn, reached)


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
