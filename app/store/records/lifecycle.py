"""A schedule's occurrences as its lifecycle changes them: inserted, held, given back,
cancelled, skipped, backfilled, and listed; and what a pause writes, whoever makes it.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain import misfire
from app.domain.ids import occurrence_id
from app.domain.occurrence import (
    NOT_FIRINGS,
    Occurrence,
    OccurrenceStatus,
    Origin,
)
from app.domain.schedule import PauseReason, ScheduleStatus
from app.store.dialects import dialect_of
from app.store.loop.sql import query
from app.store.records.schedules import ScheduleStore
from app.store.schema.rows import (
    OCCURRENCE_COLUMNS,
    new_occurrence,
    skipped_occurrence,
    to_occurrence,
)
from app.store.schema.tables import occurrences, schedules
from app.store.schema.types import UUID, UTCDateTime


class LifecycleStore:
    """Statements on a schedule's occurrences; every method runs inside the caller's transaction."""

    async def record_skips(
        self,
        conn: AsyncConnection,
        schedule_id: uuid.UUID,
        skips: Sequence[misfire.Skip],
        now: datetime,
    ) -> None:
        """Record ticks that did not fire, and count them on the schedule."""
        rows = [skipped_occurrence(schedule_id, skip, now) for skip in skips]
        recorded = await dialect_of(conn).insert_new(conn, occurrences, rows, "occurrence_id")
        fresh = [row for row in rows if row["occurrence_id"] in recorded]
        if not fresh:
            return
        await conn.execute(
            schedules.update()
            .where(schedules.c.id == schedule_id)
            .values(
                skipped_count=schedules.c.skipped_count + sum(r["skipped_count"] for r in fresh),
                last_skip_reason=fresh[-1]["skip_reason"],
            )
        )

    async def skip_due_cadence(
        self, conn: AsyncConnection, schedule_id: uuid.UUID, now: datetime, reason: str
    ) -> int:
        """The schedule's own unfired occurrences already due (the loop had not reached
        them) are recorded as skipped; returns how many."""
        result = await conn.execute(
            occurrences.update()
            .where(
                occurrences.c.schedule_id == schedule_id,
                occurrences.c.status == OccurrenceStatus.PENDING,
                occurrences.c.origin == Origin.SCHEDULE,
                occurrences.c.attempts == 0,
                occurrences.c.fire_at <= now,
            )
            .values(
                status=OccurrenceStatus.SKIPPED,
                skip_reason=reason,
                skipped_count=1,
                available_at=None,
                updated_at=now,
            )
        )
        skipped = int(result.rowcount)
        if skipped:
            await conn.execute(
                schedules.update()
                .where(schedules.c.id == schedule_id)
                .values(skipped_count=schedules.c.skipped_count + skipped, last_skip_reason=reason)
            )
        return skipped

    async def backfill(
        self,
        conn: AsyncConnection,
        schedule_id: uuid.UUID,
        ticks: Sequence[datetime],
        now: datetime,
        *,
        held: bool,
        flow_key: str | None = None,
    ) -> list[uuid.UUID]:
        """One occurrence per tick, with its usual id; ticks that already have one are left
        as they are, except skipped ones, which become due. Returns the ids made due."""
        if not ticks:
            return []
        ids = [occurrence_id(schedule_id, tick) for tick in ticks]
        existing = {
            row.occurrence_id: row.status
            for row in await conn.execute(
                sa.select(occurrences.c.occurrence_id, occurrences.c.status).where(
                    occurrences.c.occurrence_id.in_(ids)
                )
            )
        }
        rows = []
        for tick, id_ in zip(ticks, ids, strict=True):
            if id_ not in existing:
                row = new_occurrence(schedule_id, tick, now, Origin.BACKFILL, flow_key=flow_key)
                if held:
                    row["available_at"] = None
                rows.append(row)
        revived = [id_ for id_, status in existing.items() if status == OccurrenceStatus.SKIPPED]
        await dialect_of(conn).insert_ignoring(conn, occurrences, rows, "occurrence_id")
        if revived:
            await conn.execute(
                occurrences.update()
                .where(
                    occurrences.c.occurrence_id.in_(revived),
                    occurrences.c.status == OccurrenceStatus.SKIPPED,
                )
                .values(
                    status=OccurrenceStatus.PENDING,
                    origin=Origin.BACKFILL,
                    skip_reason=None,
                    skipped_count=0,
                    available_at=None if held else occurrences.c.fire_at,
                    flow_key=flow_key,
                    shelved=False,  # its key's claim holds it again if it must
                    updated_at=now,
                )
            )
        made = {row["occurrence_id"] for row in rows} | set(revived)
        return [id_ for id_ in ids if id_ in made]

    # -- schedule lifecycle -----------------------------------------------------------

    async def insert(self, conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
        await dialect_of(conn).insert_ignoring(conn, occurrences, rows, "occurrence_id")

    async def lock_pending(self, conn: AsyncConnection, schedule_id: uuid.UUID) -> None:
        """Lock a schedule's pending occurrences before its row, in fire order (the order
        of the index every database reads them by): the claim locks occurrences before
        schedules too, and a settle that may pause a schedule locks them in this same
        order (`lock_before_pausing`), so none of them can deadlock with another."""
        await conn.execute(
            sa.select(occurrences.c.occurrence_id)
            .where(
                occurrences.c.schedule_id == schedule_id,
                occurrences.c.status == OccurrenceStatus.PENDING,
            )
            .order_by(occurrences.c.fire_at, occurrences.c.occurrence_id)
            .with_for_update()
        )

    async def move_to_key(
        self, conn: AsyncConnection, schedule_id: uuid.UUID, flow_key: str | None
    ) -> None:
        """Give the schedule's occurrences that may still be attempted (pending ones, and
        dead letters a replay may send again) the schedule's new flow key; its failure
        callbacks go to another destination, and have none. Each is open to the new key's
        claim, which holds it again if that key is paused or backing off."""
        await conn.execute(
            occurrences.update()
            .where(
                occurrences.c.schedule_id == schedule_id,
                occurrences.c.status.in_(
                    [OccurrenceStatus.PENDING, OccurrenceStatus.DEAD_LETTERED]
                ),
                # A topic's deliveries stay under their endpoints' keys.
                *(occurrences.c.origin != origin.value for origin in sorted(NOT_FIRINGS)),
            )
            .values(flow_key=flow_key, shelved=False)
        )

    async def drop_unfired_cadence(self, conn: AsyncConnection, schedule_id: uuid.UUID) -> None:
        """Remove the schedule's own future occurrences that no attempt has touched yet."""
        await conn.execute(
            occurrences.delete().where(
                occurrences.c.schedule_id == schedule_id,
                occurrences.c.status == OccurrenceStatus.PENDING,
                occurrences.c.origin == Origin.SCHEDULE,
                occurrences.c.attempts == 0,
            )
        )

    async def hold(self, conn: AsyncConnection, schedule_id: uuid.UUID, now: datetime) -> None:
        """Make the schedule's pending occurrences unclaimable (paused), but for its failure
        callbacks (named SQL `hold`)."""
        statement = _named("hold", dialect_of(conn).name)
        await conn.execute(statement, {"schedule_id": schedule_id, "now": now})

    async def unhold(self, conn: AsyncConnection, schedule_id: uuid.UUID, now: datetime) -> None:
        """Give each held occurrence back its own instant (named SQL `unhold`)."""
        statement = _named("unhold", dialect_of(conn).name)
        await conn.execute(statement, {"schedule_id": schedule_id, "now": now})

    async def cancel_pending(
        self, conn: AsyncConnection, schedule_id: uuid.UUID, now: datetime
    ) -> None:
        """Cancel the schedule's pending occurrences (named SQL `cancel_pending`). An
        attempt in flight keeps its lease token: its settle changes nothing, but its attempt
        is still recorded in the log."""
        statement = _named("cancel_pending", dialect_of(conn).name)
        await conn.execute(statement, {"schedule_id": schedule_id, "now": now})

    async def cancel_callbacks(
        self, conn: AsyncConnection, schedule_id: uuid.UUID, now: datetime
    ) -> None:
        """Cancel the schedule's failure callbacks not yet delivered: its `on_failure`
        target is gone (named SQL `cancel_callbacks`). One in flight settles nothing, as
        with `cancel_pending`."""
        statement = _named("cancel_callbacks", dialect_of(conn).name)
        await conn.execute(statement, {"schedule_id": schedule_id, "now": now})

    async def history(
        self,
        conn: AsyncConnection,
        schedule_id: uuid.UUID,
        *,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None,
        status: OccurrenceStatus | None = None,
    ) -> list[Occurrence]:
        """A schedule's occurrences, latest fire instant first (a topic occurrence's
        deliveries are its occurrence's, `OccurrenceStore.deliveries`)."""
        statement = sa.select(*OCCURRENCE_COLUMNS).where(
            occurrences.c.schedule_id == schedule_id, occurrences.c.origin != Origin.FANOUT
        )
        if status is not None:
            statement = statement.where(occurrences.c.status == status)
        if after is not None:
            statement = statement.where(
                sa.tuple_(occurrences.c.fire_at, occurrences.c.occurrence_id)
                < sa.tuple_(sa.literal(after[0], UTCDateTime()), sa.literal(after[1], UUID))
            )
        statement = statement.order_by(
            occurrences.c.fire_at.desc(), occurrences.c.occurrence_id.desc()
        ).limit(limit)
        return [to_occurrence(row) for row in await conn.execute(statement)]


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
    cadence = LifecycleStore()
    if recurring:
        await cadence.skip_due_cadence(conn, schedule_id, now, "paused")
        await cadence.drop_unfired_cadence(conn, schedule_id)
    await cadence.hold(conn, schedule_id, now)


@functools.cache
def _named(name: str, dialect: str) -> sa.TextClause:
    """A named statement about one schedule's occurrences at `now`, typed."""
    return query(name, dialect).bindparams(
        sa.bindparam("schedule_id", type_=UUID), sa.bindparam("now", type_=UTCDateTime())
    )
