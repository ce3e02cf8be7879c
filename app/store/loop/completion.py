"""Schedule completion: a schedule with nothing left pending is done, once what finished
its last occurrence commits (a settle, a claim, a cancel, a replay).

Invariant: a one-shot schedule ends completed, or failed if its firing was dead-lettered
(a replay that later delivers it turns failed into completed); a recurring one ends
completed once its bounds are spent and nothing is pending. Each change has its event, in
the same transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.occurrence import OccurrenceStatus, Origin
from app.domain.schedule import SYSTEM_ACTOR, ScheduleStatus
from app.store.dialects import dialect_of
from app.store.dialects.base import Dialect
from app.store.schema.tables import occurrences, schedules


@dataclass(frozen=True, slots=True)
class _Finishing:
    """The schedules a finish changes, read and locked under the finish's guard, with the
    status each takes. `Dialect.finish_schedules` then changes them by key: every database
    then knows which rows changed, so each gets its event, MySQL too (no UPDATE ...
    RETURNING there). Under READ COMMITTED the update by key applies what the locked read
    decided, rather than a second look at the guard that could see another transaction's
    commit and disagree with the events."""

    one_shots: sa.Select[Any]
    recurring: sa.Select[Any]


_o = occurrences.alias("o")


def _each(dialect: Dialect, status: OccurrenceStatus, origin: sa.ColumnElement[bool]) -> sa.Exists:
    """EXISTS of an occurrence of the schedule at hand in `status` whose origin passes
    `origin`, looked up for each schedule through the index on `schedule_id`.

    PostgreSQL would otherwise turn it into a join with every occurrence in that status:
    the pending ones, or every dead letter ever kept. Planned from statistics taken before
    a burst (a table of finished rows, then ten thousand due at once), that join read all of
    them for each settle, and W1 fell from about 4,000 to 300 deliveries/s. `per_row` keeps
    the subquery a lookup per schedule, which is what a settle of a few hundred wants.
    """
    return sa.exists(
        dialect.per_row(
            sa.select(sa.literal(1)).where(
                _o.c.schedule_id == schedules.c.id, _o.c.status == status, origin
            )
        )
    )


@cache
def _finishing(dialect: Dialect) -> _Finishing:
    # A failure callback still pending keeps no schedule from being done.
    nothing_pending = ~_each(dialect, OccurrenceStatus.PENDING, _o.c.origin != Origin.CALLBACK)
    dead_lettered = _each(dialect, OccurrenceStatus.DEAD_LETTERED, _o.c.origin == Origin.SCHEDULE)
    return _Finishing(
        one_shots=sa.select(
            schedules.c.id,
            schedules.c.version,
            sa.case((dead_lettered, ScheduleStatus.FAILED), else_=ScheduleStatus.COMPLETED).label(
                "status"
            ),
        )
        .where(
            dialect.among(schedules.c.id, "schedule_ids"),
            schedules.c.status.in_([ScheduleStatus.PENDING, ScheduleStatus.FAILED]),
            nothing_pending,
            # A failed one that stays failed is no change.
            (schedules.c.status == ScheduleStatus.PENDING) | ~dead_lettered,
        )
        .with_for_update(of=schedules),
        # A recurring schedule has a pending cadence occurrence until its bounds are spent;
        # with nothing left pending it is complete (a dead letter does not fail it).
        recurring=sa.select(
            schedules.c.id,
            schedules.c.version,
            sa.literal(ScheduleStatus.COMPLETED.value, sa.String()).label("status"),
        )
        .where(
            dialect.among(schedules.c.id, "schedule_ids"),
            schedules.c.status == ScheduleStatus.PENDING,
            nothing_pending,
        )
        .with_for_update(of=schedules),
    )


async def finish_one_shots(
    conn: AsyncConnection,
    schedule_ids: Iterable[uuid.UUID],
    now: datetime,
    actor: str | None = SYSTEM_ACTOR,
) -> None:
    """A one-shot schedule with nothing left pending is completed, or failed if its firing
    was dead-lettered. A replay that later delivers it turns failed into completed. Each
    schedule that changes gets its `completed` or `failed` event, by `actor`."""
    ids = list(schedule_ids)
    if ids:
        dialect = dialect_of(conn)
        await dialect.finish_schedules(conn, _finishing(dialect).one_shots, ids, now, actor)


async def finish_recurring(
    conn: AsyncConnection,
    schedule_ids: Iterable[uuid.UUID],
    now: datetime,
    actor: str | None = SYSTEM_ACTOR,
) -> None:
    """A recurring schedule whose bounds are spent and that has nothing left pending is
    completed (with its `completed` event, by `actor`)."""
    ids = list(schedule_ids)
    if ids:
        dialect = dialect_of(conn)
        await dialect.finish_schedules(conn, _finishing(dialect).recurring, ids, now, actor)
