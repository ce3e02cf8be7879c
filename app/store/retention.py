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

A batch reads the retention index (`ix_occurrences_retention`) oldest first. On the
multi-replica servers it skips rows another transaction holds (SKIP LOCKED), so it never
waits behind a claim or a settle, and it runs only in the replica holding the pruning lock
(an advisory lock on PostgreSQL, per installation; a named lock on MySQL). SQLite has a
single process and a single writer, so it needs neither.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.dialects import dialect_of


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
