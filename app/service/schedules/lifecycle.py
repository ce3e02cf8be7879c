"""A schedule's lifecycle: pause, resume and cancel, each idempotent (asking for the state a
schedule is already in changes nothing) and each recorded as an audit event."""

from __future__ import annotations

import uuid

from app.domain.endpoints import delivery_key
from app.domain.misfire import skipped_range
from app.domain.occurrence import Origin
from app.domain.schedule import (
    MANUAL_PAUSE,
    TERMINAL,
    EventKind,
    Schedule,
    ScheduleStatus,
    check_pause,
    check_resume,
)
from app.domain.tenants import Caller
from app.domain.trigger import is_recurring, next_fire_after
from app.service.schedules.steps import ScheduleSteps
from app.store.dialects import announce, transaction_now
from app.store.engine.database import Connection, Database
from app.store.engine.wakeups import Wakeups
from app.store.loop import completion
from app.store.records import lifecycle
from app.store.schema.rows import new_occurrence


class ScheduleLifecycle:
    def __init__(self, database: Database, steps: ScheduleSteps, wakeups: Wakeups) -> None:
        self._db = database
        self._steps = steps
        self._wakeups = wakeups

    async def pause(
        self,
        schedule_id: uuid.UUID,
        if_match: frozenset[int] | None,
        caller: Caller,
    ) -> Schedule:
        """Nothing fires while paused; the schedule's ticks in the pause are recorded as
        skipped (reason `paused`) when it resumes."""

        async def work(conn: Connection) -> Schedule:
            current = await self._steps.locked(conn, schedule_id, caller.tenant, if_match)
            check_pause(current.status)
            if current.status is ScheduleStatus.PAUSED:
                return current
            now = await transaction_now(conn)
            recurring = is_recurring(current.trigger)
            await lifecycle.pause(conn, schedule_id, now, recurring=recurring, reason=MANUAL_PAUSE)
            await self._steps.record(conn, current, EventKind.PAUSED, now, caller.actor)
            return await self._steps.require(conn, schedule_id, caller.tenant)

        return await self._db.run(work)

    async def resume(
        self,
        schedule_id: uuid.UUID,
        if_match: frozenset[int] | None,
        caller: Caller,
    ) -> Schedule:
        """Pause is not a misfire: the ticks that fell inside the pause are recorded as
        skipped and the schedule realigns to its next strictly future tick."""
        steps = self._steps

        async def work(conn: Connection) -> Schedule:
            current = await steps.locked(conn, schedule_id, caller.tenant, if_match)
            check_resume(current.status)
            if current.status is ScheduleStatus.PENDING:
                return current
            now = await transaction_now(conn)
            paused_at = await steps.schedules.paused_at(conn, schedule_id)
            # The count of dead letters in a row starts again: a resumed schedule gets
            # its full `pause_after_failures` before it pauses itself again.
            await steps.schedules.update(
                conn,
                schedule_id,
                now,
                status=ScheduleStatus.PENDING,
                paused_at=None,
                pause_reason=None,
                consecutive_failures=0,
            )
            await steps.record(conn, current, EventKind.RESUMED, now, caller.actor)
            await steps.occurrences.unhold(conn, schedule_id, now)
            await announce(conn, self._wakeups, now)
            trigger = current.trigger
            if is_recurring(trigger):
                if paused_at is not None:
                    skips = skipped_range(
                        trigger, paused_at, now, "paused", current.rules.max_catchup
                    )
                    await steps.occurrences.record_skips(conn, schedule_id, skips, now)
                upcoming = next_fire_after(trigger, now)
                if upcoming is not None and current.rules.budget != 0:
                    row = new_occurrence(
                        schedule_id,
                        upcoming,
                        now,
                        Origin.SCHEDULE,
                        delay=steps.jitter(current.jitter_seconds),
                        flow_key=delivery_key(current.tenant, current.flow_key, current.target),
                    )
                    await steps.occurrences.insert(conn, [row])
                    await announce(conn, self._wakeups, row["available_at"])
                await completion.finish_recurring(conn, [schedule_id], now, caller.actor)
            else:
                await completion.finish_one_shots(conn, [schedule_id], now, caller.actor)
            return await steps.require(conn, schedule_id, caller.tenant)

        return await self._db.run(work)

    async def cancel(
        self,
        schedule_id: uuid.UUID,
        if_match: frozenset[int] | None,
        caller: Caller,
    ) -> Schedule:
        """Idempotent; a terminal schedule stays as it is."""

        async def work(conn: Connection) -> Schedule:
            current = await self._steps.locked(conn, schedule_id, caller.tenant, if_match)
            if current.status in TERMINAL:
                return current
            now = await transaction_now(conn)
            await self._steps.schedules.update(
                conn, schedule_id, now, status=ScheduleStatus.CANCELLED, pause_reason=None
            )
            await self._steps.record(conn, current, EventKind.CANCELLED, now, caller.actor)
            await self._steps.occurrences.cancel_pending(conn, schedule_id, now)
            return await self._steps.require(conn, schedule_id, caller.tenant)

        return await self._db.run(work)
