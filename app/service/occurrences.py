"""Occurrence use cases: one occurrence, and the attempts made to deliver it."""

from __future__ import annotations

import uuid
from datetime import datetime

from app.domain.errors import NotFoundError
from app.domain.occurrence import Attempt, Occurrence
from app.store.engine.database import Connection, Database
from app.store.records.attempts import AttemptStore


def _missing(occurrence_id: uuid.UUID) -> NotFoundError:
    return NotFoundError(f"occurrence {occurrence_id} does not exist")


class OccurrenceService:
    def __init__(self, database: Database) -> None:
        self._db = database
        self._attempts = AttemptStore()

    async def get(self, occurrence_id: uuid.UUID, *, tenant: str) -> Occurrence:
        """The occurrence of a schedule of `tenant`: another tenant's is not found."""

        async def work(conn: Connection) -> Occurrence:
            found = await self._attempts.get_occurrence(conn, occurrence_id, tenant)
            if found is None:
                raise _missing(occurrence_id)
            return found

        return await self._db.run(work)

    async def attempts(
        self,
        occurrence_id: uuid.UUID,
        *,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None = None,
        tenant: str,
    ) -> list[Attempt]:
        """Oldest first; an occurrence that does not exist (or was pruned) is not found."""

        async def work(conn: Connection) -> list[Attempt]:
            if await self._attempts.get_occurrence(conn, occurrence_id, tenant) is None:
                raise _missing(occurrence_id)
            return await self._attempts.list_attempts(conn, occurrence_id, limit=limit, after=after)

        return await self._db.run(work)
