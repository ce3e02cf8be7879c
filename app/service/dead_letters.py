"""Dead-letter use cases: list, inspect, replay (one or many), discard.

Replays and discards are audit events of the schedules they touch: one event per schedule
and call, however many of its dead letters the call replays (the occurrences themselves
show which ones). `actor` is who asks, as in `app.service.schedules`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from app.domain.errors import ConflictError, InvalidInputError, NotFoundError
from app.domain.filters import DeadLetterFilter
from app.domain.occurrence import DeadLetter, OccurrenceStatus
from app.domain.schedule import EventKind
from app.store.clock import transaction_now
from app.store.database import Connection, Database
from app.store.dead_letters import DeadLetterStore
from app.store.events import EventStore
from app.store.wakeups import Wakeups

MAX_REPLAY_IDS = 1000


class DeadLetterService:
    def __init__(self, database: Database, wakeups: Wakeups | None = None) -> None:
        self._db = database
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
        self, conn: Connection, occurrence_id: uuid.UUID, *, for_update: bool = False
    ) -> DeadLetter:
        found = await self._dead_letters.get_with_definition(
            conn, occurrence_id, for_update=for_update
        )
        if found is None:
            raise NotFoundError(f"occurrence {occurrence_id} does not exist")
        status = found.occurrence.status
        if status is not OccurrenceStatus.DEAD_LETTERED:
            raise ConflictError(f"occurrence {occurrence_id} is {status}, not dead-lettered")
        return found

    async def get(self, occurrence_id: uuid.UUID) -> DeadLetter:
        async def work(conn: Connection) -> DeadLetter:
            found = await self._dead_letters.get_with_definition(conn, occurrence_id)
            if found is None or found.occurrence.status is not OccurrenceStatus.DEAD_LETTERED:
                raise NotFoundError(f"no dead letter with occurrence id {occurrence_id}")
            return found

        return await self._db.run(work)

    async def replay(self, occurrence_id: uuid.UUID, actor: str | None = None) -> uuid.UUID:
        """Attempts reset, due now, same occurrence id."""

        async def work(conn: Connection) -> uuid.UUID:
            await self._require(conn, occurrence_id, for_update=True)
            now = await transaction_now(conn)
            await self._dead_letters.replay(conn, now, ids=[occurrence_id])
            await self._events.record_for_occurrences(
                conn, EventKind.DEAD_LETTER_REPLAYED, [occurrence_id], now, actor
            )
            await self._wakeups.announce(conn, now)
            return occurrence_id

        return await self._db.run(work)

    async def replay_many(
        self,
        ids: Sequence[uuid.UUID] | None,
        where: DeadLetterFilter,
        actor: str | None = None,
    ) -> list[uuid.UUID]:
        """Replay by ids, or every dead letter matching the filters; an empty request is refused
        so that a typo cannot replay everything."""
        if ids is not None and len(ids) > MAX_REPLAY_IDS:
            raise InvalidInputError(
                f"at most {MAX_REPLAY_IDS} occurrence ids per request", pointer="#/occurrence_ids"
            )
        if ids is None and where.schedule_id is None and where.event_type is None:
            raise InvalidInputError(
                "give occurrence_ids, or at least one of schedule_id and event_type", pointer="#"
            )

        async def work(conn: Connection) -> list[uuid.UUID]:
            now = await transaction_now(conn)
            replayed = await self._dead_letters.replay(conn, now, ids=ids, where=where)
            await self._events.record_for_occurrences(
                conn, EventKind.DEAD_LETTER_REPLAYED, replayed, now, actor
            )
            await self._wakeups.announce(conn, now if replayed else None)
            return replayed

        return await self._db.run(work)

    async def held(self, ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
        """Those of `ids` (replayed) that wait for their paused schedule's resume."""
        return await self._db.run(lambda conn: self._dead_letters.held(conn, ids[:MAX_REPLAY_IDS]))

    async def discard(self, occurrence_id: uuid.UUID, actor: str | None = None) -> None:
        async def work(conn: Connection) -> None:
            await self._require(conn, occurrence_id, for_update=True)
            now = await transaction_now(conn)
            await self._dead_letters.discard(conn, occurrence_id, now)
            await self._events.record_for_occurrences(
                conn, EventKind.DEAD_LETTER_DISCARDED, [occurrence_id], now, actor
            )

        await self._db.run(work)
