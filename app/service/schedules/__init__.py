"""Schedule use cases, one transaction each: `ScheduleService` is what the API, the console
and the operator CLI call, and each of its parts keeps one promise in a module of its own:

- `checks`: what a body must satisfy beyond its schema, before any transaction;
- `creation`: create (idempotent under an Idempotency-Key) and batch (all or nothing);
- `reads`: one schedule, a filtered list, a schedule's occurrences and audit events;
- `changes`: PATCH, and the next occurrence planned again;
- `lifecycle`: pause, resume, cancel;
- `on_demand`: trigger (an extra occurrence now) and backfill (past ticks);
- `steps`: what they share inside a transaction (find, lock at a version, record an event).

`caller` is who asks and in which tenant (`app.domain.tenants.Caller`): a use case reaches
the caller's tenant only, and another tenant's schedule is one that does not exist."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from datetime import datetime

from app.domain.filters import ScheduleAfter, ScheduleFilter
from app.domain.occurrence import Occurrence, OccurrenceStatus
from app.domain.schedule import Schedule, ScheduleEvent, SchedulePatch, ScheduleSpec
from app.domain.tenants import Caller
from app.service.addresses import HostResolver
from app.service.schedules.changes import ScheduleChanges
from app.service.schedules.checks import BodyChecks
from app.service.schedules.creation import Created, ScheduleCreation
from app.service.schedules.lifecycle import ScheduleLifecycle
from app.service.schedules.on_demand import Backfill, OnDemand
from app.service.schedules.reads import ScheduleReads
from app.service.schedules.steps import ScheduleSteps
from app.settings import Settings
from app.store.engine.database import Database
from app.store.engine.wakeups import Wakeups

__all__ = ["Backfill", "Created", "ScheduleService"]


class ScheduleService:
    def __init__(
        self,
        database: Database,
        settings: Settings,
        *,
        rng: random.Random | None = None,
        wakeups: Wakeups | None = None,
        resolver: HostResolver | None = None,
    ) -> None:
        hub = wakeups or Wakeups()
        draws = rng or random.SystemRandom()
        # One random source for ids and jitter alike: a seeded one makes both repeatable.
        steps = ScheduleSteps(draws)
        checks = BodyChecks(settings, resolver)
        self._creation = ScheduleCreation(database, settings, steps, checks, hub, draws)
        self._reads = ScheduleReads(database, steps)
        self._changes = ScheduleChanges(database, steps, checks, hub)
        self._lifecycle = ScheduleLifecycle(database, steps, hub)
        self._on_demand = OnDemand(database, steps, hub)

    # -- creation --------------------------------------------------------------------

    async def create(
        self,
        spec: ScheduleSpec,
        idempotency_key: str | None = None,
        *,
        caller: Caller,
        traceparent: str | None = None,
    ) -> Created:
        """One schedule and its first occurrence; a repeated key with the same body
        returns the original (see `ScheduleCreation.create`)."""
        return await self._creation.create(spec, idempotency_key, caller, traceparent)

    async def create_many(
        self,
        specs: Sequence[ScheduleSpec],
        *,
        caller: Caller,
        traceparent: str | None = None,
    ) -> list[Schedule]:
        """All or nothing, in one transaction; each schedule stores `traceparent`."""
        return await self._creation.create_many(specs, caller, traceparent)

    # -- reads -----------------------------------------------------------------------

    async def get(self, schedule_id: uuid.UUID, *, caller: Caller) -> Schedule:
        return await self._reads.get(schedule_id, caller.tenant)

    async def list_schedules(
        self, where: ScheduleFilter, *, limit: int, after: ScheduleAfter | None
    ) -> list[Schedule]:
        return await self._reads.list_schedules(where, limit=limit, after=after)

    async def history(
        self,
        schedule_id: uuid.UUID,
        *,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None,
        status: OccurrenceStatus | None = None,
        caller: Caller,
    ) -> list[Occurrence]:
        return await self._reads.history(
            schedule_id, caller.tenant, limit=limit, after=after, status=status
        )

    async def events(
        self, schedule_id: uuid.UUID, *, limit: int, after: uuid.UUID | None, caller: Caller
    ) -> list[ScheduleEvent]:
        """The schedule's audit events, oldest first."""
        return await self._reads.events(schedule_id, caller.tenant, limit=limit, after=after)

    # -- changes ---------------------------------------------------------------------

    async def patch(
        self,
        schedule_id: uuid.UUID,
        patch: SchedulePatch,
        if_match: frozenset[int] | None = None,
        *,
        caller: Caller,
    ) -> Schedule:
        return await self._changes.patch(schedule_id, patch, if_match, caller)

    async def pause(
        self,
        schedule_id: uuid.UUID,
        if_match: frozenset[int] | None = None,
        *,
        caller: Caller,
    ) -> Schedule:
        return await self._lifecycle.pause(schedule_id, if_match, caller)

    async def resume(
        self,
        schedule_id: uuid.UUID,
        if_match: frozenset[int] | None = None,
        *,
        caller: Caller,
    ) -> Schedule:
        return await self._lifecycle.resume(schedule_id, if_match, caller)

    async def cancel(
        self,
        schedule_id: uuid.UUID,
        if_match: frozenset[int] | None = None,
        *,
        caller: Caller,
    ) -> Schedule:
        return await self._lifecycle.cancel(schedule_id, if_match, caller)

    async def trigger(
        self,
        schedule_id: uuid.UUID,
        if_match: frozenset[int] | None = None,
        *,
        caller: Caller,
    ) -> Occurrence:
        return await self._on_demand.trigger(schedule_id, if_match, caller)

    async def backfill(
        self,
        schedule_id: uuid.UUID,
        start: datetime,
        end: datetime,
        if_match: frozenset[int] | None = None,
        *,
        caller: Caller,
    ) -> Backfill:
        return await self._on_demand.backfill(schedule_id, start, end, if_match, caller)
