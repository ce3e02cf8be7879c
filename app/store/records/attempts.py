"""Reads of the attempt log: an occurrence's attempts, oldest first.

The log is written by the settle (`app.store.loop.settlements`) and, for an attempt whose
replica died before settling it, by the claim that takes the occurrence again
(`app.store.loop.claims`). Rows go with their occurrence (foreign key, on delete cascade),
or, on PostgreSQL, with their day (`app.store.schema.partitions`).
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.occurrence import Attempt, AttemptOutcome, Occurrence
from app.store.schema.rows import OCCURRENCE_COLUMNS, to_occurrence
from app.store.schema.tables import attempts, occurrences, schedules
from app.store.schema.types import UTCDateTime


def _attempt(row: Row[Any]) -> Attempt:
    return Attempt(
        attempt=row.attempt,
        started_at=row.started_at,
        duration_ms=row.duration_ms,
        outcome=AttemptOutcome(row.outcome),
        status_code=row.status_code,
        error=row.error,
        response_excerpt=row.response_excerpt,
        replica=row.replica,
        trace_id=row.trace_id,
        id=row.id,
    )


class AttemptStore:
    async def of_endpoint(
        self,
        conn: AsyncConnection,
        endpoint_id: uuid.UUID,
        *,
        limit: int,
        before: tuple[datetime, uuid.UUID] | None = None,
    ) -> list[tuple[uuid.UUID, Attempt]]:
        """The attempts that went to the endpoint, newest first, each with its occurrence
        (a range of `ix_attempts_endpoint`); `before` is the (started_at, id) of the last
        one already read."""
        statement = (
            sa.select(attempts)
            .where(
                attempts.c.endpoint_id == endpoint_id,
                # Not those of occurrences gone, whose day is yet to be dropped (PostgreSQL).
                sa.exists().where(occurrences.c.occurrence_id == attempts.c.occurrence_id),
            )
            .order_by(attempts.c.started_at.desc(), attempts.c.id.desc())
            .limit(limit)
        )
        if before is not None:
            at, id_ = before
            statement = statement.where(
                (attempts.c.started_at < at)
                | ((attempts.c.started_at == at) & (attempts.c.id < id_))
            )
        return [(row.occurrence_id, _attempt(row)) for row in await conn.execute(statement)]

    async def get_occurrence(
        self, conn: AsyncConnection, occurrence_id: uuid.UUID, tenant: str
    ) -> Occurrence | None:
        """The occurrence `occurrence_id` of a schedule of `tenant` (None: none such)."""
        row = (
            await conn.execute(
                sa.select(*OCCURRENCE_COLUMNS)
                .join(schedules, schedules.c.id == occurrences.c.schedule_id)
                .where(occurrences.c.occurrence_id == occurrence_id, schedules.c.tenant == tenant)
            )
        ).one_or_none()
        if row is None:
            return None
        found = to_occurrence(row)
        if row.status != "completed":
            return found
        # A topic occurrence's deliveries are its schedule's at its instant, found by the
        # index of those (`fan_out` writes them so).
        deliveries = await conn.execute(
            sa.select(*OCCURRENCE_COLUMNS)
            .where(
                occurrences.c.schedule_id == row.schedule_id,
                occurrences.c.fire_at == sa.literal(row.fire_at, UTCDateTime()),
                occurrences.c.parent_id == occurrence_id,
            )
            .order_by(occurrences.c.occurrence_id)
        )
        return replace(found, deliveries=tuple(to_occurrence(d) for d in deliveries))

    async def list_attempts(
        self,
        conn: AsyncConnection,
        occurrence_id: uuid.UUID,
        *,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None = None,
    ) -> list[Attempt]:
        """The occurrence's attempts in the order they started (a replay's after those of
        the life before it); `after` is the (started_at, id) of the last one already read."""
        statement = (
            sa.select(attempts)
            .where(attempts.c.occurrence_id == occurrence_id)
            .order_by(attempts.c.started_at, attempts.c.id)
            .limit(limit)
        )
        if after is not None:
            at, id_ = after
            statement = statement.where(
                (attempts.c.started_at > at)
                | ((attempts.c.started_at == at) & (attempts.c.id > id_))
            )
        return [_attempt(row) for row in await conn.execute(statement)]
