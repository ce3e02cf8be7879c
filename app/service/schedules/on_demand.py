"""Occurrences an operator asks for beside the cadence: one due now (trigger), and one per
past tick of a range (backfill), each recorded as an audit event."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice

from app.domain.endpoints import delivery_key
from app.domain.errors import ConflictError, InvalidInputError
from app.domain.ids import format_instant, occurrence_id
from app.domain.occurrence import Occurrence, OccurrenceStatus, Origin
from app.domain.schedule import EventKind, ScheduleStatus, check_trigger, check_version
from app.domain.tenants import Caller
from app.domain.trigger import is_recurring, ticks_between
from app.service.schedules.steps import ScheduleSteps
from app.store.dialects import announce, transaction_now
from app.store.engine.database import Connection, Database
from app.store.engine.wakeups import Wakeups
from app.store.schema.rows import new_occurrence

MAX_BACKFILL = 1000


@dataclass(frozen=True, slots=True)
class Backfill:
    """Every tick in the range with its occurrence id, and the ids this call made due."""

    ticks: list[tuple[datetime, uuid.UUID]]
    created: list[uuid.UUID]


class OnDemand:
    def __init__(self, database: Database, steps: ScheduleSteps, wakeups: Wakeups) -> None:
        self._db = database
        self._steps = steps
        self._wakeups = wakeups

    async def trigger(
        self,
        schedule_id: uuid.UUID,
        if_match: frozenset[int] | None,
        caller: Caller,
    ) -> Occurrence:
        """An extra occurrence due now; the regular cadence is left alone."""
        steps = self._steps

        async def work(conn: Connection) -> Occurrence:
            current = await steps.require(conn, schedule_id, caller.tenant, for_update=True)
            check_version(current.version, if_match)
            check_trigger(current.status)
            now = await transaction_now(conn)
            row = new_occurrence(
                schedule_id,
                now,
                now,
                Origin.TRIGGER,
                flow_key=delivery_key(current.tenant, current.flow_key, current.target),
            )
            await steps.occurrences.insert(conn, [row])
            await steps.schedules.bump_version(conn, schedule_id, now)
            await steps.record(conn, current, EventKind.TRIGGERED, now, caller.actor)
            await announce(conn, self._wakeups, now)
            return Occurrence(
                occurrence_id=row["occurrence_id"],
                schedule_id=schedule_id,
                fire_at=now,
                available_at=now,
                status=OccurrenceStatus.PENDING,
                origin=Origin.TRIGGER,
                attempts=0,
                last_error=None,
                delivered_at=None,
                dead_lettered_at=None,
                created_at=now,
                updated_at=now,
            )

        return await self._db.run(work)

    async def backfill(
        self,
        schedule_id: uuid.UUID,
        start: datetime,
        end: datetime,
        if_match: frozenset[int] | None,
        caller: Caller,
    ) -> Backfill:
        """One occurrence per tick of the trigger in [start, end], each with its usual id:
        a second call creates nothing new. Only past ticks: the future is the cadence's."""
        if end < start:
            raise InvalidInputError("'to' is before 'from'", pointer="#/to")
        steps = self._steps

        async def work(conn: Connection) -> Backfill:
            current = await steps.locked(conn, schedule_id, caller.tenant, if_match)
            if current.status is ScheduleStatus.CANCELLED:
                raise ConflictError("a cancelled schedule cannot be backfilled")
            if not is_recurring(current.trigger):
                raise ConflictError("a one-shot schedule has no ticks to backfill")
            now = await transaction_now(conn)
            if end > now:
                raise InvalidInputError(
                    "'to' is in the future: a backfill covers past ticks only", pointer="#/to"
                )
            ticks = list(
                islice(
                    ticks_between(current.trigger, start - timedelta(microseconds=1), end),
                    MAX_BACKFILL + 1,
                )
            )
            if len(ticks) > MAX_BACKFILL:
                raise InvalidInputError(
                    f"the range holds more than {MAX_BACKFILL} ticks; the last one a call "
                    f"may cover is {format_instant(ticks[MAX_BACKFILL - 1])}",
                    pointer="#/to",
                )
            made = await steps.occurrences.backfill(
                conn,
                schedule_id,
                ticks,
                now,
                held=current.status is ScheduleStatus.PAUSED,
                flow_key=delivery_key(current.tenant, current.flow_key, current.target),
            )
            if made:  # a backfill that creates nothing changes nothing
                await steps.schedules.bump_version(conn, schedule_id, now)
                await steps.record(conn, current, EventKind.BACKFILLED, now, caller.actor)
                if current.status is not ScheduleStatus.PAUSED:
                    await announce(conn, self._wakeups, now)
            return Backfill(
                ticks=[(tick, occurrence_id(schedule_id, tick)) for tick in ticks],
                created=made,
            )

        return await self._db.run(work)
