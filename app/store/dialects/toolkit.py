"""Helpers the dialects share, outside their interface (`Dialect`): pool sizes, JSON as
every dialect stores it, grouping by lease, inserts for a database with ON CONFLICT ... DO
NOTHING RETURNING and for one that takes rows as SQLAlchemy sends them, wake-ups for a
database that carries none between replicas, and a lock held by a session across its
transactions."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.occurrence import Delivery
from app.store.dialects.claim_rows import earliest_later
from app.store.engine.commits import after_commit
from app.store.schema.codec import JsonText
from app.store.schema.tables import CLAIM_SETS
from app.store.schema.types import UTCDateTime

if TYPE_CHECKING:
    from app.store.engine.clock import DatabaseClock
    from app.store.engine.wakeups import Wakeups


def pool_sizes(connections: int) -> int:
    """Of a pool of at most `connections`, how many it keeps open while idle (the rest are
    opened when a burst needs them, and closed after)."""
    return max(1, (connections + 1) // 2)


def dumps(value: Any) -> str:
    """JSON as every dialect stores it: compact, UTF-8 kept as it is. A `JsonText` is JSON
    written already, and goes as it is."""
    if isinstance(value, JsonText):
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def by_lease_token(deliveries: Iterable[Delivery]) -> dict[Any, list[Any]]:
    """The occurrence ids of `deliveries`, by the lease token that holds them."""
    found: dict[Any, list[Any]] = defaultdict(list)
    for delivery in deliveries:
        found[delivery.lease_token].append(delivery.occurrence_id)
    return found


class OnConflictInserts:
    """`insert_ignoring` and `insert_new` for a database with INSERT ... ON CONFLICT DO
    NOTHING ... RETURNING (PostgreSQL, SQLite): `insert` is its dialect's insert construct."""

    insert: Callable[[sa.Table], Any]

    async def insert_ignoring(
        self, conn: AsyncConnection, table: sa.Table, rows: list[dict[str, Any]], key: str
    ) -> None:
        if rows:
            statement = self.insert(table).on_conflict_do_nothing(index_elements=[key])
            await conn.execute(statement, rows)

    async def insert_new(
        self, conn: AsyncConnection, table: sa.Table, rows: list[dict[str, Any]], key: str
    ) -> set[Any]:
        if not rows:
            return set()
        statement = (
            self.insert(table).on_conflict_do_nothing(index_elements=[key]).returning(table.c[key])
        )
        return {row[0] for row in await conn.execute(statement, rows)}


class RowInserts:
    """`insert_rows` for a database that takes rows as SQLAlchemy sends them, one execution
    of one INSERT (SQLite, MySQL); `now_columns` take the instant bound as `now`."""

    if TYPE_CHECKING:

        async def insert_ignoring(
            self, conn: AsyncConnection, table: sa.Table, rows: list[dict[str, Any]], key: str
        ) -> None: ...

    async def insert_rows(
        self,
        conn: AsyncConnection,
        table: sa.Table,
        rows: Sequence[dict[str, Any]],
        *,
        ignoring: str | None = None,
        now_columns: tuple[str, ...] = (),
    ) -> None:
        if not rows:
            return
        if ignoring is not None:
            await self.insert_ignoring(conn, table, list(rows), ignoring)
            return
        statement = table.insert()
        if now_columns:
            now = sa.bindparam("now", type_=UTCDateTime())
            statement = statement.values({name: now for name in now_columns})
        await conn.execute(statement, list(rows))


class PolledWakeups:
    """Wake-ups for a database that carries no news between replicas (SQLite, MySQL): an
    announcement reaches this process's loop once the write commits, and other replicas
    find new work by polling."""

    if TYPE_CHECKING:
        clock: DatabaseClock

        async def bound_now(self, conn: AsyncConnection) -> datetime: ...

    async def announce(self, conn: AsyncConnection, wakeups: Wakeups, at: datetime) -> None:
        after_commit(lambda: wakeups.due_in((at - self.clock.host_now()).total_seconds()))

    async def next_due_in(self, conn: AsyncConnection) -> float | None:
        now = await self.bound_now(conn)
        bound = sa.literal(now, UTCDateTime())
        # One round trip: the first entry past `now` of each claim index.
        firsts = (
            await conn.execute(
                sa.select(*(earliest_later(w, bound).scalar_subquery() for w in CLAIM_SETS))
            )
        ).one()
        found = []
        for at in firsts:
            if at is not None:
                when = at if isinstance(at, datetime) else datetime.fromisoformat(str(at))
                found.append(when.replace(tzinfo=UTC) if when.tzinfo is None else when)
        return (min(found) - now).total_seconds() if found else None

    def listening(
        self, url: str, schema: str | None, wakeups: Wakeups
    ) -> AbstractAsyncContextManager[None]:
        return nullcontext()


@asynccontextmanager
async def session_lock(
    conn: AsyncConnection, take: sa.TextClause, give_back: sa.TextClause, params: dict[str, Any]
) -> AsyncIterator[None]:
    """A lock held by the connection's session across its transactions (migrations commit
    as they go), given back whatever happens."""
    await conn.execute(take, params)
    try:
        yield
    finally:
        # After a failed upgrade the transaction is aborted: end it first, so the unlock
        # runs and the upgrade's own error is the one raised.
        await conn.rollback()
        await conn.execute(give_back, params)
        await conn.commit()
