"""Audit events: a schedule's own history, written in the transaction of each change.

Invariant: an event is inserted by the statement sequence that makes its change, never
after the commit, so the history and the schedule cannot disagree. Ids are UUIDv7 whose
random part starts with a per-process counter: the events one transaction writes at one
instant still read back in the order they were written.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.ids import event_id
from app.domain.schedule import EventKind, ScheduleEvent
from app.store.dialects import dialect_of
from app.store.schema.tables import occurrences, schedule_events, schedules


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be written; its instant is the transaction's."""

    schedule_id: uuid.UUID
    kind: EventKind
    version: int
    actor: str | None
    fields: list[str] | None = None


class EventStore:
    """Statements on `schedule_events`; every method runs inside the caller's transaction."""

    async def record(
        self, conn: AsyncConnection, events: Sequence[NewEvent], now: datetime
    ) -> None:
        """Write `events`, in order, at the transaction's instant `now`. On a database whose
        statements read the clock themselves, `at` is that clock too."""
        if not events:
            return
        await dialect_of(conn).insert_rows(
            conn,
            schedule_events,
            [
                {
                    "id": event_id(now),
                    "schedule_id": e.schedule_id,
                    "kind": e.kind.value,
                    "version": e.version,
                    "actor": e.actor,
                    "fields": e.fields,
                    "now": now,
                }
                for e in events
            ],
            now_columns=("at",),
        )

    async def record_for_occurrences(
        self,
        conn: AsyncConnection,
        kind: EventKind,
        occurrence_ids: Sequence[uuid.UUID],
        now: datetime,
        actor: str | None,
        *,
        recorded: Collection[uuid.UUID] = (),
    ) -> set[uuid.UUID]:
        """One `kind` event for each schedule the occurrences belong to, at its version,
        but for the schedules in `recorded` (an earlier transaction of the same call wrote
        theirs). Returns the schedules it wrote one for."""
        if not occurrence_ids:
            return set()
        found = await conn.execute(
            sa.select(schedules.c.id, schedules.c.version)
            .where(
                schedules.c.id.in_(
                    sa.select(occurrences.c.schedule_id).where(
                        occurrences.c.occurrence_id.in_(list(occurrence_ids))
                    )
                )
            )
            .order_by(schedules.c.id)
        )
        events = [
            NewEvent(row.id, kind, version=row.version, actor=actor)
            for row in found
            if row.id not in recorded
        ]
        await self.record(conn, events, now)
        return {event.schedule_id for event in events}

    async def history(
        self,
        conn: AsyncConnection,
        schedule_id: uuid.UUID,
        *,
        limit: int,
        after: uuid.UUID | None,
    ) -> list[ScheduleEvent]:
        """A schedule's events, oldest first (ids sort by creation), after the id `after`."""
        statement = sa.select(schedule_events).where(schedule_events.c.schedule_id == schedule_id)
        if after is not None:
            statement = statement.where(schedule_events.c.id > after)
        statement = statement.order_by(schedule_events.c.id).limit(limit)
        return [
            ScheduleEvent(
                id=row.id,
                schedule_id=row.schedule_id,
                kind=EventKind(row.kind),
                at=row.at,
                version=row.version,
                actor=row.actor,
                fields=None if row.fields is None else [str(name) for name in row.fields],
            )
            for row in await conn.execute(statement)
        ]
