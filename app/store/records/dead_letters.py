"""Dead letters: occurrences whose attempt budget is spent, listed, replayed and discarded."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.callbacks import CALLBACK_EVENT_TYPE
from app.domain.filters import DeadLetterFilter
from app.domain.occurrence import DeadLetter, OccurrenceStatus, Origin
from app.domain.schedule import ScheduleStatus
from app.domain.tenants import endpoint_key
from app.store.schema import codec
from app.store.schema.rows import to_occurrence
from app.store.schema.tables import by_key, occurrences, schedules
from app.store.schema.types import UUID, UTCDateTime


class DeadLetterStore:
    """Statements on dead-lettered occurrences; run inside the caller's transaction."""

    def _dead_letters(self) -> sa.Select[Any]:
        return sa.select(
            occurrences,
            schedules.c.event_type,
            schedules.c.name.label("schedule_name"),
            # As text: the driver's JSON decoder fails on what it can store (very deep
            # nesting, very long numbers); the codec reads it back safely.
            sa.cast(schedules.c.payload, sa.Text).label("payload"),
            schedules.c.target,
            schedules.c.on_failure,
        ).join(schedules, schedules.c.id == occurrences.c.schedule_id)

    @staticmethod
    def _to_dead_letter(row: Row[Any]) -> DeadLetter:
        """A dead letter with what a replay delivers: a failure callback's own message, to
        its schedule's `on_failure` target (its schedule's target if a PATCH removed it)."""
        if row.origin == Origin.CALLBACK:
            return DeadLetter(
                occurrence=to_occurrence(row),
                event_type=CALLBACK_EVENT_TYPE,
                payload=codec.payload(row.body),
                target=codec.target(row.on_failure or row.target),
                schedule_name=row.schedule_name,
            )
        return DeadLetter(
            occurrence=to_occurrence(row),
            event_type=row.event_type,
            payload=codec.payload(row.payload),
            target=codec.target(row.target),
            schedule_name=row.schedule_name,
        )

    @staticmethod
    def _filtered(statement: Any, where: DeadLetterFilter) -> Any:
        # Of the filter's tenant only, whatever else it names (an alias: the statement may
        # join `schedules` already, and must not correlate this with it).
        owner = schedules.alias("owner")
        statement = statement.where(
            sa.exists().where(
                owner.c.id == occurrences.c.schedule_id, owner.c.tenant == where.tenant
            )
        )
        if where.schedule_id is not None:
            statement = statement.where(occurrences.c.schedule_id == where.schedule_id)
        if where.event_type is not None:
            statement = statement.where(
                occurrences.c.schedule_id.in_(
                    sa.select(schedules.c.id).where(schedules.c.event_type == where.event_type)
                )
            )
        if where.subscription_id is not None:
            statement = statement.where(occurrences.c.subscription_id == where.subscription_id)
        if where.endpoint_id is not None:
            # Its deliveries, and the dead letters of the schedules that target it.
            key = endpoint_key(where.tenant, where.endpoint_id)
            statement = statement.where(occurrences.c.flow_key == key)
        if where.dead_lettered_after is not None:
            statement = statement.where(
                occurrences.c.dead_lettered_at
                > sa.literal(where.dead_lettered_after, UTCDateTime())
            )
        return statement

    async def list_dead_letters(
        self,
        conn: AsyncConnection,
        where: DeadLetterFilter,
        *,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None,
    ) -> list[DeadLetter]:
        """Dead letters, most recently dead-lettered first."""
        statement = self._filtered(
            self._dead_letters().where(occurrences.c.status == OccurrenceStatus.DEAD_LETTERED),
            where,
        )
        if after is not None:
            statement = statement.where(
                sa.tuple_(occurrences.c.dead_lettered_at, occurrences.c.occurrence_id)
                < sa.tuple_(sa.literal(after[0], UTCDateTime()), sa.literal(after[1], UUID))
            )
        statement = statement.order_by(
            occurrences.c.dead_lettered_at.desc(), occurrences.c.occurrence_id.desc()
        ).limit(limit)
        return [self._to_dead_letter(row) for row in await conn.execute(statement)]

    async def get_with_definition(
        self, conn: AsyncConnection, id_: uuid.UUID, tenant: str, *, for_update: bool = False
    ) -> DeadLetter | None:
        """The occurrence `id_` of a schedule of `tenant` (None: none such)."""
        statement = self._dead_letters().where(
            occurrences.c.occurrence_id == id_, schedules.c.tenant == tenant
        )
        if for_update:
            statement = statement.with_for_update(of=occurrences)
        row = (await conn.execute(statement)).first()
        return None if row is None else self._to_dead_letter(row)

    async def replay(
        self,
        conn: AsyncConnection,
        now: datetime,
        ids: Sequence[uuid.UUID],
        where: DeadLetterFilter | None = None,
    ) -> list[uuid.UUID]:
        """The dead letters among `ids` (narrowed by `where`) back to pending, attempts reset,
        due now (held if the schedule is paused, but for failure callbacks, which no pause
        holds). The occurrence id stays, so consumers still dedupe on it."""
        chosen = self._dead_lettered().where(occurrences.c.occurrence_id.in_(list(ids)))
        if where is not None:
            chosen = self._filtered(chosen, where)
        return await self._replay_chosen(conn, now, chosen)

    async def replay_matching(
        self,
        conn: AsyncConnection,
        now: datetime,
        where: DeadLetterFilter,
        *,
        limit: int,
        dead_lettered_by: datetime,
    ) -> list[uuid.UUID]:
        """Up to `limit` of the dead letters matching `where`, dead-lettered at or before
        `dead_lettered_by`, replayed as `replay` does, the longest dead first: called again
        until it replays none, it replays them all in transactions of a bounded size. The
        bound on `dead_lettered_at` keeps a dead letter that fails again while the calls go
        on from being replayed twice."""
        chosen = (
            self._filtered(self._dead_lettered(), where)
            .where(occurrences.c.dead_lettered_at <= sa.literal(dead_lettered_by, UTCDateTime()))
            .order_by(occurrences.c.dead_lettered_at, occurrences.c.occurrence_id)
            .limit(limit)
        )
        return await self._replay_chosen(conn, now, chosen)

    @staticmethod
    def _dead_lettered() -> sa.Select[Any]:
        # Read and locked first, then changed by key: not every database returns the rows
        # an UPDATE changed.
        return (
            sa.select(occurrences.c.occurrence_id)
            .where(occurrences.c.status == OccurrenceStatus.DEAD_LETTERED)
            .with_for_update()
        )

    @staticmethod
    async def _replay_chosen(
        conn: AsyncConnection, now: datetime, chosen: sa.Select[Any]
    ) -> list[uuid.UUID]:
        paused = sa.exists().where(
            schedules.c.id == occurrences.c.schedule_id,
            schedules.c.status == ScheduleStatus.PAUSED,
            occurrences.c.origin != Origin.CALLBACK,
        )
        replayed = list((await conn.execute(chosen)).scalars())
        if replayed:
            await conn.execute(
                occurrences.update()
                .where(occurrences.c.occurrence_id.in_(replayed))
                .values(
                    status=OccurrenceStatus.PENDING,
                    attempts=0,
                    available_at=sa.case((paused, sa.null()), else_=sa.literal(now, UTCDateTime())),
                    dead_lettered_at=None,
                    lease_token=None,
                    shelved=False,  # its key's claim holds it again if it must
                    updated_at=now,
                )
            )
        return replayed

    async def held(self, conn: AsyncConnection, ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
        """Those of `ids` that are pending but held (their schedule is paused): a replay
        of them waits for the schedule's resume."""
        if not ids:
            return []
        result = await conn.execute(
            sa.select(occurrences.c.occurrence_id).where(
                occurrences.c.occurrence_id.in_(list(ids)),
                by_key(occurrences.c.status) == OccurrenceStatus.PENDING,
                occurrences.c.available_at.is_(None),
            )
        )
        return list(result.scalars())

    async def discard(self, conn: AsyncConnection, id_: uuid.UUID, now: datetime) -> bool:
        result = await conn.execute(
            occurrences.update()
            .where(
                occurrences.c.occurrence_id == id_,
                occurrences.c.status == OccurrenceStatus.DEAD_LETTERED,
            )
            .values(status=OccurrenceStatus.CANCELLED, updated_at=now)
        )
        return bool(result.rowcount)
