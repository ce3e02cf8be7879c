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

A batch is one statement on the partial index `ix_occurrences_retention`. On PostgreSQL
it skips rows another transaction holds (SKIP LOCKED), so it never waits behind a claim
or a settle, and it runs only in the replica holding a transaction-scoped advisory lock
(one per installation: with CHRONOQ_DB_SCHEMA the key derives from the schema).
SQLite has a single process and a single writer, so it needs neither.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.database import advisory_key, schema_of
from app.store.tables import PRUNABLE, UTCDateTime, occurrences

# Any constant works; it only has to be the same in every replica and differ from the
# migration lock.
PRUNING_LOCK = 0x43_48_52_4F_4E_51_52_54  # "CHRONQRT"

_TRY_LOCK = sa.text("SELECT pg_try_advisory_xact_lock(:key)")


def pruning_lock_key(schema: str | None) -> int:
    """The pruning lock of the installation in `schema` (None: the default one)."""
    return advisory_key("prune", schema, PRUNING_LOCK)


def _prune_statement(dialect: str) -> sa.Delete:
    expired = (
        sa.select(occurrences.c.occurrence_id)
        # The index predicate as text: a bound list would hide it from the planner.
        .where(
            sa.text(PRUNABLE),
            occurrences.c.updated_at < sa.bindparam("cutoff", type_=UTCDateTime()),
        )
        # Oldest first, read in index order: the scan stops after `limit` entries.
        .order_by(occurrences.c.updated_at)
        .limit(sa.bindparam("limit", type_=sa.Integer()))
    )
    if dialect != "postgresql":
        return occurrences.delete().where(
            occurrences.c.occurrence_id.in_(expired.scalar_subquery())
        )
    # `= ANY(ARRAY(...))` rather than `IN (...)`: the generic plan of a cached prepared
    # statement (asyncpg) does not know the limit and turns IN into a hash join over a
    # scan of the whole table; an array of keys is always deleted through the primary key.
    locked = expired.with_for_update(skip_locked=True).scalar_subquery()
    keys = sa.func.array(locked, type_=postgresql.ARRAY(sa.Uuid()))
    return occurrences.delete().where(occurrences.c.occurrence_id == sa.any_(keys))


_STATEMENTS = {dialect: _prune_statement(dialect) for dialect in ("postgresql", "sqlite")}


async def try_lock_pruning(conn: AsyncConnection) -> bool:
    """Take the pruning lock until the end of this transaction, if no other replica holds it.
    Always true on SQLite."""
    if conn.dialect.name != "postgresql":
        return True
    key = pruning_lock_key(schema_of(conn))
    return bool((await conn.execute(_TRY_LOCK, {"key": key})).scalar_one())


async def prune(conn: AsyncConnection, *, older_than: datetime, limit: int) -> int:
    """Delete at most `limit` finished occurrences last changed before `older_than`; returns
    how many. Deletes nothing while another replica holds the pruning lock."""
    if limit < 1 or not await try_lock_pruning(conn):
        return 0
    result = await conn.execute(
        _STATEMENTS[conn.dialect.name], {"cutoff": older_than, "limit": limit}
    )
    return result.rowcount
