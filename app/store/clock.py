"""The database clock: every replica reads time from the one database, never its own."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.dialects import dialect_of


async def transaction_now(conn: AsyncConnection) -> datetime:
    """The instant this transaction's writes are stamped with, from the database's clock
    (an embedded SQLite file belongs to one host, whose clock is the database's)."""
    return await dialect_of(conn).transaction_now(conn)
