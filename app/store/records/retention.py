"""Retention: delete finished occurrences whose last change is older than the retention period.

Invariant: only delivered, cancelled and skipped occurrences are ever deleted, and only
once their `updated_at` (their last change: delivery, cancellation, the skip, or the
discard of a dead letter) is older than the cutoff. Pending occurrences are the work
still to do and dead letters wait for an operator, so neither is touched, however old.

What the rule gives up, knowingly: a schedule's snapshot derives `attempts` and
`last_error` from its most recently fired occurrence that made an attempt; once that
row is pruned they come from the latest one still kept (possibly an older dead letter),
or read 0 and null when none is. Keeping each schedule's latest row forever would leave
one row per finished one-shot schedule, so a job queue's history would grow without
bound. The schedule's own counters (`fire_count`, `skipped_count`, `last_fired_at`) and
its status live on the schedule row and are unaffected. A backfill over ticks older
than the retention period materializes those ticks again, with the same occurrence ids.

Ended schedules (completed, cancelled, failed) go too, with their occurrences, attempts and
events (the foreign keys cascade), once neither the schedule nor any of its occurrences has
changed for the schedule retention period, and none is pending: a replayed dead letter of a
failed schedule keeps it. A schedule's name and idempotency key are free again afterwards.

A batch reads the retention index (`ix_occurrences_retention`) oldest first. On the
multi-replica servers it skips rows another transaction holds (SKIP LOCKED), so it never
waits behind a claim or a settle, and it runs only in the replica holding the pruning lock
(an advisory lock on PostgreSQL, per installation; a named lock on MySQL). SQLite has a
single process and a single writer, so it needs neither.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.dialects import dialect_of
from app.store.loop.sql import query
from app.store.schema.tables import occurrences, schedules, tenants
from app.store.schema.types import UUID, UTCDateTime


@functools.cache
def _ended(dialect: str) -> sa.TextualSelect:
    """Ended schedules to delete, oldest change first (named SQL `ended_schedules`)."""
    return (
        query("ended_schedules", dialect)
        .bindparams(
            sa.bindparam("cutoff", type_=UTCDateTime()),
            sa.bindparam("limit", type_=sa.Integer()),
            sa.bindparam("every", type_=sa.Boolean()),
            sa.bindparam("kept", expanding=True, type_=sa.String()),
            sa.bindparam("only", expanding=True, type_=sa.String()),
        )
        .columns(id=UUID)
    )


async def prune(conn: AsyncConnection, *, older_than: datetime, limit: int) -> int:
    """Delete at most `limit` finished occurrences last changed before `older_than`; returns
    how many. Deletes nothing while another replica holds the pruning lock."""
    if limit < 1:
        return 0
    dialect = dialect_of(conn)
    async with dialect.exclusive(conn, "prune") as held:
        if not held:
            return 0
        return await dialect.prune(conn, cutoff=older_than, limit=limit)


async def prune_schedules(
    conn: AsyncConnection,
    *,
    older_than: datetime,
    limit: int,
    kept: Sequence[str] = (),
    only: Sequence[str] | None = None,
) -> int:
    """Delete at most `limit` ended schedules, with everything they hold, that nothing has
    changed since `older_than`; returns how many. Of every tenant but those `kept` (which
    have a retention of their own), or of the tenants of `only`. Deletes nothing while
    another replica holds the pruning lock."""
    if limit < 1:
        return 0
    dialect = dialect_of(conn)
    async with dialect.exclusive(conn, "prune") as held:
        if not held:
            return 0
        statement = _ended(dialect.name)
        params = {
            "cutoff": older_than,
            "limit": limit,
            "every": only is None,
            "kept": list(kept),
            "only": list(only or ()),
        }
        ids = list((await conn.execute(statement, params)).scalars())
        if not ids:
            return 0
        # Their occurrences locked and read again as they are now: a replay that changed
        # one since the read above keeps its schedule, and one that comes after waits for
        # this transaction and finds nothing to replay.
        rows = await conn.execute(
            sa.select(occurrences.c.schedule_id, occurrences.c.status, occurrences.c.updated_at)
            .where(occurrences.c.schedule_id.in_(ids))
            .with_for_update()
        )
        stays = {row[0] for row in rows if row[1] == "pending" or row[2] >= older_than}
        doomed = [id_ for id_ in ids if id_ not in stays]
        if not doomed:
            return 0
        result = await conn.execute(schedules.delete().where(schedules.c.id.in_(doomed)))
        return int(result.rowcount)


async def tenant_retentions(conn: AsyncConnection) -> dict[str, int]:
    """The tenants that keep their ended schedules for a retention of their own (seconds;
    0: forever), `tenants.retention_seconds`."""
    found = await conn.execute(
        sa.select(tenants.c.id, tenants.c.retention_seconds).where(
            tenants.c.retention_seconds.is_not(None)
        )
    )
    return {row.id: int(row.retention_seconds) for row in found}
