"""Start marks: an attempt leased unstarted is marked started as it is about to start,
unless something stopped it since the claim. Leased unstarted: claimed ahead of its instant
(see app/worker/ahead.py for why the loop claims ahead), or by a claim that found more due
than the loop had free slots (app/worker/start_marks.py).

Invariant: an attempt marked started is charged if its lease is lost; one never marked is
not (it never ran). A pause or a cancel committed before the mark stops the attempt.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.occurrence import Delivery, OccurrenceStatus, Origin
from app.store.dialects import dialect_of
from app.store.dialects.toolkit import by_lease_token
from app.store.schema.tables import by_key, occurrences, schedules
from app.store.schema.types import UUID


def _start_ahead_statement() -> tuple[sa.Update, sa.Select[Any]]:
    """Mark claimed-ahead attempts as started, where their lease still holds and nothing
    stopped them since the claim (a cancel, a pause); and read back which were marked."""
    # A pause holds no failure callback.
    paused = sa.exists().where(
        schedules.c.id == occurrences.c.schedule_id,
        schedules.c.status == "paused",
        occurrences.c.origin != Origin.CALLBACK,
    )
    ours = (
        occurrences.c.occurrence_id.in_(sa.bindparam("ids", expanding=True, type_=UUID)),
        occurrences.c.lease_token == sa.bindparam("token", type_=UUID),
        by_key(occurrences.c.status) == OccurrenceStatus.PENDING,
    )
    start = (
        occurrences.update()
        .where(*ours, occurrences.c.available_at.is_not(None), ~paused)
        .values(lease_ahead=False)
    )
    started = sa.select(occurrences.c.occurrence_id).where(*ours, ~occurrences.c.lease_ahead)
    return start, started


_START_AHEAD, _STARTED_AHEAD = _start_ahead_statement()


class StartStore:
    """The start marks of unstarted attempts; run inside the caller's transaction."""

    async def start_ahead(
        self, conn: AsyncConnection, deliveries: Sequence[Delivery]
    ) -> set[uuid.UUID]:
        """Unstarted deliveries about to start: those that may start, marked started. A
        cancel or a pause committed since the claim stops one (it is not returned); so
        does a lease that another claim took over. An attempt marked started is charged if
        its lease is lost; one never marked is not (it never ran)."""
        by_token = by_lease_token(deliveries)
        # A mark lost with a crash of the database reads as never started (uncharged, and
        # the attempt is made again): harmless, and the flush is most of a mark's time.
        await dialect_of(conn).commit_without_waiting(conn)
        may_start: set[uuid.UUID] = set()
        for token, ids in by_token.items():
            params = {"ids": ids, "token": token}
            result = await conn.execute(_START_AHEAD, params)
            if result.rowcount == len(ids):
                may_start.update(ids)
            else:  # some were stopped: which were marked
                may_start.update(
                    row.occurrence_id for row in await conn.execute(_STARTED_AHEAD, params)
                )
        return may_start
