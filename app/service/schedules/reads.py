"""Reading schedules: one, a filtered list, and a schedule's occurrences and audit events.
Each read of one schedule's history first checks that the schedule exists."""

from __future__ import annotations

import uuid
from datetime import datetime

from app.domain.filters import ScheduleAfter, ScheduleFilter
from app.domain.occurrence import Occurrence, OccurrenceStatus
from app.domain.schedule import Schedule, ScheduleEvent
from app.service.schedules.steps import ScheduleSteps
from app.store.engine.database import Connection, Database


class ScheduleReads:
    def __init__(self, database: Database, steps: ScheduleSteps) -> None:
        self._db = database
        self._steps = steps

    async def get(self, schedule_id: uuid.UUID, tenant: str) -> Schedule:
        async def work(conn: Connection) -> Schedule:
            return await self._steps.require(conn, schedule_id, tenant)

        return await self._db.run(work)

    async def list_schedules(
        self, where: ScheduleFilter, *, limit: int, after: ScheduleAfter | None
    ) -> list[Schedule]:
        return await self._db.run(
            lambda conn: self._steps.schedules.search(conn, where, limit=limit, after=after)
        )

    async def history(
        self,
        schedule_id: uuid.UUID,
        tenant: str,
        *,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None,
        status: OccurrenceStatus | None = None,
    ) -> list[Occurrence]:
        async def work(conn: Connection) -> list[Occurrence]:
            await self._steps.require(conn, schedule_id, tenant)
            return await self._steps.occurrences.history(
                conn, schedule_id, limit=limit, after=after, status=status
            )

        return await self._db.run(work)

    async def events(
        self, schedule_id: uuid.UUID, tenant: str, *, limit: int, after: uuid.UUID | None
    ) -> list[ScheduleEvent]:
        """The schedule's audit events, oldest first."""

        async def work(conn: Connection) -> list[ScheduleEvent]:
            await self._steps.require(conn, schedule_id, tenant)
            return await self._steps.events.history(conn, schedule_id, limit=limit, after=after)

        return await self._db.run(work)
