"""Helpers the dialects share, outside their interface (`Dialect`): pool sizes, JSON as
every dialect stores it, grouping by lease, inserts for a database with ON CONFLICT ... DO
NOTHING RETURNING, and a lock held by a session across its transactions."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.occurrence import Delivery
from app.store.schema.codec import JsonText


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
