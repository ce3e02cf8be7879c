"""The steps schedule use cases share inside their transaction: find a schedule or refuse,
lock it at the version a client asked for, record the event of a change, draw jitter.

A change locks the schedule's pending occurrences before the schedule itself, in the order
the claim takes them, so that a change and a claim never wait on each other in a cycle."""

from __future__ import annotations

import random
import uuid
from datetime import datetime

from app.domain.errors import NotFoundError
from app.domain.schedule import EventKind, Schedule, check_version
from app.store.engine.database import Connection
from app.store.records.events import EventStore, NewEvent
from app.store.records.lifecycle import LifecycleStore
from app.store.records.schedules import ScheduleStore


class ScheduleSteps:
    """The stores the use cases write through, and the steps they take with them."""

    def __init__(self, rng: random.Random) -> None:
        self.schedules = ScheduleStore()
        self.occurrences = LifecycleStore()
        self.events = EventStore()
        self._rng = rng

    def jitter(self, seconds: float) -> float:
        """The delay of an occurrence with `seconds` of jitter, drawn uniformly."""
        return self._rng.uniform(0, seconds) if seconds else 0.0

    async def require(
        self, conn: Connection, schedule_id: uuid.UUID, tenant: str, *, for_update: bool = False
    ) -> Schedule:
        """The schedule of `tenant`: another tenant's is not found, as a missing one is."""
        schedule = await self.schedules.get(conn, schedule_id, for_update=for_update)
        if schedule is None or schedule.tenant != tenant:
            raise NotFoundError(f"schedule {schedule_id} does not exist")
        return schedule

    async def locked(
        self,
        conn: Connection,
        schedule_id: uuid.UUID,
        tenant: str,
        if_match: frozenset[int] | None,
    ) -> Schedule:
        """The schedule of `tenant`, locked for a change, at one of the versions
        `if_match` names."""
        # Occurrences first, then the schedule: the same order as the claim.
        await self.occurrences.lock_pending(conn, schedule_id)
        current = await self.require(conn, schedule_id, tenant, for_update=True)
        check_version(current.version, if_match)
        return current

    async def record(
        self,
        conn: Connection,
        current: Schedule,
        kind: EventKind,
        now: datetime,
        actor: str | None,
        fields: list[str] | None = None,
    ) -> None:
        """The event of a change that moved `current` on by one version."""
        event = NewEvent(current.id, kind, version=current.version + 1, actor=actor, fields=fields)
        await self.events.record(conn, [event], now)
