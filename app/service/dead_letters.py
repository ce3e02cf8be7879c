"""Dead-letter use cases: list, inspect, replay (one or many), discard.

Replays and discards are audit events of the schedules they touch: one event per schedule
and call, however many of its dead letters the call replays (the occurrences themselves
show which ones). `caller` is who asks and in which tenant, as in `app.service.schedules`: a
dead letter of another tenant is one that does not exist, and a filter reaches the caller's
tenant only.

A replay by filter has no upper bound: it goes in transactions of `REPLAY_BATCH` dead
letters each, so that no statement outgrows a database's limit on bound parameters and no
transaction holds its locks for long. A failure part way leaves the batches done replayed
(each is a replay of its own) and the rest dead-lettered; asking again replays the rest."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial

from app.domain.errors import ConflictError, InvalidInputError, NotFoundError
from app.domain.filters import DeadLetterFilter
from app.domain.occurrence import DeadLetter, OccurrenceStatus
from app.domain.schedule import EventKind
from app.domain.tenants import Caller
from app.store.dialects import announce, transaction_now
from app.store.engine.database import Connection, Database
from app.store.engine.wakeups import Wakeups
from app.store.records.dead_letters import DeadLetterStore
from app.store.records.events import EventStore

MAX_REPLAY_IDS = 1000
REPLAY_BATCH = 1000


@dataclass(frozen=True, slots=True)
class ReplayedDeadLetters:
    """What a replay of many made due: how many, and the ids of the first `MAX_REPLAY_IDS`
    of them (all of them when the call named ids)."""

    count: int
    occurrence_ids: list[uuid.UUID]


@dataclass(frozen=True, slots=True)
class _Batch:
    replayed: list[uuid.UUID]
    now: datetime
    recorded: set[uuid.UUID]


class DeadLetterService:
    def __init__(
        self, database: Database, wakeups: Wakeups | None = None, *, batch: int = REPLAY_BATCH
    ) -> None:
        self._db = database
        self._batch = batch
        self._dead_letters = DeadLetterStore()
        self._wakeups = wakeups or Wakeups()
        self._events = EventStore()

    async def list_dead_letters(
        self, where: DeadLetterFilter, *, limit: int, after: tuple[datetime, uuid.UUID] | None
    ) -> list[DeadLetter]:
        return await self._db.run(
            lambda conn: self._dead_letters.list_dead_letters(conn, where, limit=limit, after=after)
        )

    async def _require(
        self, conn: Connection, occurrence_id: uuid.UUID, tenant: str, *, for_update: bool = False
    ) -> DeadLetter:
        found = await self._dead_letters.get_with_definition(
            conn, occurrence_id, tenant, for_update=for_update
        )
        if found is None:
            raise NotFoundError(f"occurrence {occurrence_id} does not exist")
        status = found.occurrence.status
        if status is not OccurrenceStatus.DEAD_LETTERED:
            raise ConflictError(f"occurrence {occurrence_id} is {status}, not dead-lettered")
        return found

    async def get(self, occurrence_id: uuid.UUID, *, caller: Caller) -> DeadLetter:
        async def work(conn: Connection) -> DeadLetter:
            found = await self._dead_letters.get_with_definition(conn, occurrence_id, caller.tenant)
            if found is None or found.occurrence.status is not OccurrenceStatus.DEAD_LETTERED:
                raise NotFoundError(f"no dead letter with occurrence id {occurrence_id}")
            return found

        return await self._db.run(work)

    async def replay(self, occurrence_id: uuid.UUID, *, caller: Caller) -> uuid.UUID:
        """Attempts reset, due now, same occurrence id."""
        actor = caller.actor

        async def work(conn: Connection) -> uuid.UUID:
            await self._require(conn, occurrence_id, caller.tenant, for_update=True)
            now = await transaction_now(conn)
            await self._dead_letters.replay(conn, now, [occurrence_id])
            await self._events.record_for_occurrences(
                conn, EventKind.DEAD_LETTER_REPLAYED, [occurrence_id], now, actor
            )
            await announce(conn, self._wakeups, now)
            return occurrence_id

        return await self._db.run(work)

    async def replay_many(
        self,
        ids: Sequence[uuid.UUID] | None,
        where: DeadLetterFilter,
        *,
        caller: Caller,
    ) -> ReplayedDeadLetters:
        """Replay by ids, or every dead letter matching the filters, of the caller's tenant
        only (whatever tenant `where` names); an empty request is refused so that a typo
        cannot replay everything."""
        actor = caller.actor
        where = replace(where, tenant=caller.tenant)
        if ids is not None and len(ids) > MAX_REPLAY_IDS:
            raise InvalidInputError(
                f"at most {MAX_REPLAY_IDS} occurrence ids per request", pointer="#/occurrence_ids"
            )
        if ids is not None:
            batch = await self._db.run(
                partial(self._replay_batch, actor=actor, recorded=frozenset(), where=where, ids=ids)
            )
            return ReplayedDeadLetters(len(batch.replayed), batch.replayed)
        if not where.narrows:
            raise InvalidInputError(
                "give occurrence_ids, or at least one of schedule_id, event_type, "
                "subscription_id, endpoint_id and dead_lettered_after",
                pointer="#",
            )
        return await self._replay_matching(where, actor)

    async def _replay_matching(
        self, where: DeadLetterFilter, actor: str | None
    ) -> ReplayedDeadLetters:
        recorded: set[uuid.UUID] = set()
        sample: list[uuid.UUID] = []
        count = 0
        # Only those dead-lettered by the first batch's instant: one that fails again while
        # the batches go on is not replayed twice by the same call.
        started: datetime | None = None
        while True:
            batch = await self._db.run(
                partial(
                    self._replay_batch,
                    actor=actor,
                    recorded=frozenset(recorded),
                    where=where,
                    dead_lettered_by=started,
                )
            )
            if not batch.replayed:
                return ReplayedDeadLetters(count, sample)
            started = started or batch.now
            recorded |= batch.recorded
            count += len(batch.replayed)
            sample.extend(batch.replayed[: MAX_REPLAY_IDS - len(sample)])

    async def _replay_batch(
        self,
        conn: Connection,
        *,
        actor: str | None,
        recorded: frozenset[uuid.UUID],
        where: DeadLetterFilter,
        ids: Sequence[uuid.UUID] | None = None,
        dead_lettered_by: datetime | None = None,
    ) -> _Batch:
        """One transaction of a replay: the dead letters named by `ids`, or the next batch of
        those matching `where`; no event for the schedules in `recorded`."""
        now = await transaction_now(conn)
        if ids is not None:
            replayed = await self._dead_letters.replay(conn, now, ids, where)
        else:
            replayed = await self._dead_letters.replay_matching(
                conn, now, where, limit=self._batch, dead_lettered_by=dead_lettered_by or now
            )
        written = await self._events.record_for_occurrences(
            conn, EventKind.DEAD_LETTER_REPLAYED, replayed, now, actor, recorded=recorded
        )
        await announce(conn, self._wakeups, now if replayed else None)
        return _Batch(replayed, now, written)

    async def held(self, ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
        """Those of `ids` (replayed) that wait for their paused schedule's resume."""
        return await self._db.run(lambda conn: self._dead_letters.held(conn, ids[:MAX_REPLAY_IDS]))

    async def discard(self, occurrence_id: uuid.UUID, *, caller: Caller) -> None:
        actor = caller.actor

        async def work(conn: Connection) -> None:
            await self._require(conn, occurrence_id, caller.tenant, for_update=True)
            now = await transaction_now(conn)
            await self._dead_letters.discard(conn, occurrence_id, now)
            await self._events.record_for_occurrences(
                conn, EventKind.DEAD_LETTER_DISCARDED, [occurrence_id], now, actor
            )

        await self._db.run(work)
