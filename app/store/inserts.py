"""INSERT ... ON CONFLICT DO NOTHING for both dialects."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection


async def insert_ignoring_conflicts(
    conn: AsyncConnection, table: sa.Table, rows: list[dict[str, Any]], key: str
) -> None:
    """Insert `rows`, skipping any whose `key` already exists (idempotent materialization)."""
    if not rows:
        return
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(table).on_conflict_do_nothing(index_elements=[key])
    await conn.execute(statement, rows)


async def insert_new(
    conn: AsyncConnection, table: sa.Table, rows: list[dict[str, Any]], key: str
) -> set[Any]:
    """Like insert_ignoring_conflicts, and returns the keys of the rows actually inserted."""
    if not rows:
        return set()
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    statement = (
        dialect.insert(table).on_conflict_do_nothing(index_elements=[key]).returning(table.c[key])
    )
    result = await conn.execute(statement, rows)
    return {row[0] for row in result}
