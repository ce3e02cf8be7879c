"""The database clock: every replica reads time from the one database, never its own."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.tables import UTCDateTime

_NOW = sa.select(sa.func.now(type_=UTCDateTime()))


async def transaction_now(conn: AsyncConnection) -> datetime:
    """The current transaction's instant: PostgreSQL's now(), or the host clock for SQLite.

    An embedded SQLite file belongs to one host, so that host's clock is the database clock.
    """
    if conn.dialect.name == "postgresql":
        value = (await conn.execute(_NOW)).scalar_one()
        assert isinstance(value, datetime)
        return value
    return datetime.now(UTC)
