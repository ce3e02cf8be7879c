"""History in day partitions (PostgreSQL): making the days ahead, dropping the expired ones,
and sweeping the default partition (`app.store.schema.partitions` has the layout).

Invariants:
- Only the replica holding the pruning lock changes partitions, each change in a short
  transaction of its own that waits at most `LOCK_WAIT` for the table's lock: a change that
  would queue claims and settles behind it longer gives way and is tried next round.
- A day is dropped only once it ended before the cutoff, and what in it still belongs to an
  occurrence or schedule that is there (a dead letter, a retry in flight, a schedule kept
  longer) moves to the default partition first, in the transaction that drops the day.
  Those rows are read before the table is locked, so the lock is held for the move of
  what is kept, not for a read of the whole day; a row cannot join a day that old meanwhile
  (attempts are logged when they settle, events when they happen).
- The default partition is swept a slice a round for rows whose owner is gone, so what
  was kept goes once its occurrence or schedule does, a row at a time as before.
"""

from __future__ import annotations

import logging
import uuid
from datetime import date, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.dialects import dialect_of
from app.store.schema.partitions import History, midnight

log = logging.getLogger(__name__)

# Partitions are made for the current UTC day and this many after it.
DAYS_AHEAD = 2
# How long a change of partitions waits for the table's lock before giving way.
LOCK_WAIT = "100ms"
# SQLSTATEs: a lock not had within LOCK_WAIT; a default partition holding rows of the day.
_LOCK_NOT_AVAILABLE = "55P03"
_CHECK_VIOLATION = "23514"

_PARTITIONS = sa.text(
    "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
    " WHERE i.inhparent = CAST(:parent AS regclass)"
)


def _sqlstate(error: DBAPIError) -> str | None:
    orig = error.orig
    return getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)


async def _held(conn: AsyncConnection) -> bool:
    """Take the pruning lock for the transaction (False: another replica has it), and bound
    how long its DDL waits for a table's lock."""
    async with dialect_of(conn).exclusive(conn, "prune") as held:
        if held:
            await conn.execute(sa.text(f"SET LOCAL lock_timeout = '{LOCK_WAIT}'"))
        return held


async def partitions(conn: AsyncConnection, history: History) -> dict[str, datetime | None]:
    """`history`'s partitions by name, each with the instant it ends at (None: the default
    one, or one the service did not make)."""
    names = (await conn.execute(_PARTITIONS, {"parent": history.name})).scalars()
    return {str(name): history.ends(str(name)) for name in names}


async def make_ahead(conn: AsyncConnection, history: History, today: date) -> list[str]:
    """Make the partitions of `today` and the `DAYS_AHEAD` days after it that are missing;
    the names of those made. A day the default partition holds rows of is left to it (it
    cannot be made without moving them), as is a day the migration's partition covers."""
    if not await _held(conn):
        return []
    existing = await partitions(conn, history)
    covered = max(
        (end for name, end in existing.items() if end is not None and not history.is_day(name)),
        default=None,
    )
    made = []
    for offset in range(DAYS_AHEAD + 1):
        day = today + timedelta(days=offset)
        name = history.day(day)
        if name in existing or (covered is not None and midnight(day) < covered):
            continue
        statement = (
            f'CREATE TABLE "{name}" PARTITION OF "{history.name}" FOR VALUES'
            f" FROM ('{midnight(day).isoformat()}') TO"
            f" ('{midnight(day + timedelta(days=1)).isoformat()}')"
        )
        try:
            async with conn.begin_nested():
                await conn.execute(sa.text(statement))
        except DBAPIError as exc:
            if _sqlstate(exc) == _LOCK_NOT_AVAILABLE:
                log.info("%s: %s not made this round, its table was busy", history.name, name)
                break
            if _sqlstate(exc) == _CHECK_VIOLATION:
                log.warning(
                    "%s: rows of %s are in %s already; that day stays there",
                    history.name,
                    day,
                    history.kept,
                )
                continue
            raise
        made.append(name)
    return made


async def drop_expired(conn: AsyncConnection, history: History, cutoff: datetime) -> str | None:
    """Drop the oldest of `history`'s partitions that ended at or before `cutoff`, its rows
    of an occurrence or schedule still there moved to the default partition first; its
    name (None: none is that old, or another replica holds the pruning lock)."""
    if not await _held(conn):
        return None
    existing = await partitions(conn, history)
    expired = sorted((end, name) for name, end in existing.items() if end and end <= cutoff)
    if not expired:
        return None
    _, name = expired[0]
    owner = history.owner.name
    await conn.execute(
        sa.text(
            f'CREATE TEMPORARY TABLE kept_rows ON COMMIT DROP AS SELECT h.* FROM "{name}" AS h'
            f" WHERE EXISTS (SELECT 1 FROM {owner} AS o"
            f" WHERE o.{history.owner_column} = h.{history.owner_key})"
        )
    )
    try:
        async with conn.begin_nested():
            await conn.execute(sa.text(f'ALTER TABLE "{history.name}" DETACH PARTITION "{name}"'))
            # Its instants are no partition's now: they go to the default one.
            await conn.execute(sa.text(f'INSERT INTO "{history.name}" SELECT * FROM kept_rows'))
            await conn.execute(sa.text(f'DROP TABLE "{name}"'))
    except DBAPIError as exc:
        if _sqlstate(exc) != _LOCK_NOT_AVAILABLE:
            raise
        log.info("%s: %s not dropped this round, its table was busy", history.name, name)
        return None
    return name


async def sweep_kept(
    conn: AsyncConnection,
    history: History,
    after: tuple[uuid.UUID, datetime] | None,
    limit: int,
) -> tuple[int, tuple[uuid.UUID, datetime] | None]:
    """Delete the rows of the next `limit` of the default partition (in key order, after
    `after`) whose occurrence or schedule is gone; how many, and where the next slice
    starts (None: from the beginning again)."""
    if not await _held(conn):
        return 0, after
    instant = history.instant
    kept = sa.table(history.kept, sa.column("id"), sa.column(instant))
    start = sa.true() if after is None else sa.tuple_(kept.c.id, kept.c[instant]) > after
    rows = (
        await conn.execute(
            sa.select(kept.c.id, kept.c[instant])
            .where(start)
            .order_by(kept.c.id, kept.c[instant])
            .limit(limit)
        )
    ).all()
    if not rows:
        return 0, None
    owner = history.owner.name
    deleted = await conn.execute(
        sa.text(
            f'DELETE FROM "{history.kept}" AS h USING unnest(CAST(:ids AS uuid[]),'
            f" CAST(:ats AS timestamptz[])) AS s(id, at)"
            f" WHERE h.id = s.id AND h.{instant} = s.at AND NOT EXISTS"
            f" (SELECT 1 FROM {owner} AS o WHERE o.{history.owner_column} = h.{history.owner_key})"
        ),
        {"ids": [row[0] for row in rows], "ats": [row[1] for row in rows]},
    )
    last = rows[-1]
    return int(deleted.rowcount), (None if len(rows) < limit else (last[0], last[1]))
