"""SQLite (aiosqlite): the embedded store of a single replica, a file on its host.

One writer: a single pooled connection serialises the process, and BEGIN IMMEDIATE takes
the write lock up front, so the claim's sub-select and update cannot interleave with another
claim and another process (the operator CLI) waits on busy_timeout instead of failing a lock
upgrade mid-transaction. The host's clock is the database clock (the file belongs to one
host); there is no other replica to lock out or to wake.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Dialect as SqlDialect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from app.settings import backends
from app.store.dialects.stepwise import Stepwise
from app.store.dialects.toolkit import OnConflictInserts, PolledWakeups, RowInserts, dumps
from app.store.engine.clock import moved_statement
from app.store.schema.tables import PRUNABLE, occurrences
from app.store.schema.types import UTCDateTime

# Primary result codes that say the file cannot be used now: busy or locked past
# busy_timeout and the retries, an I/O error, a full disk, a file that cannot be opened, a
# lock protocol error. SQLITE_ERROR ("no such table", a syntax error) and constraint
# failures are not among them.
_UNAVAILABLE_CODES = frozenset({5, 6, 10, 13, 14, 15})
# What SQLite says (as SQLITE_ERROR, its code for any statement it refuses) of a table or
# column that does not exist.
_MISSING_SCHEMA = ("no such table:", "no such column:")

_PRUNE = occurrences.delete().where(
    occurrences.c.occurrence_id.in_(
        sa.select(occurrences.c.occurrence_id)
        # The index predicate as text, so that the partial index is usable.
        .where(
            sa.text(PRUNABLE),
            occurrences.c.updated_at < sa.bindparam("cutoff", type_=UTCDateTime()),
        )
        .order_by(occurrences.c.updated_at)
        .limit(sa.bindparam("limit", type_=sa.Integer()))
        .scalar_subquery()
    )
)


class SQLite(OnConflictInserts, RowInserts, PolledWakeups, Stepwise):
    insert = staticmethod(sqlite.insert)
    backend = backends.named("sqlite")
    batch_migrations = True
    marks_alone = False

    def normalize_url(self, url: str) -> str:
        if url.startswith("sqlite:///"):
            return "sqlite+aiosqlite:///" + url[len("sqlite:///") :]
        return url

    def engine(
        self, url: str, *, schema: str | None, connections: int, pre_ping: bool, pooled: bool
    ) -> AsyncEngine:
        path = make_url(url).database
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(
            url, pool_size=1, max_overflow=0, pool_timeout=60, json_serializer=dumps
        )

        @event.listens_for(engine.sync_engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=10000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine.sync_engine, "begin")
        def _on_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine

    def sql_dialect(self) -> SqlDialect:
        return sqlite.dialect()

    def is_transient(self, error: BaseException) -> bool:
        return isinstance(error, OperationalError) and "database is locked" in str(error)

    def is_unavailable(self, error: BaseException) -> bool:
        code = getattr(error, "sqlite_errorcode", None)
        return isinstance(code, int) and code & 0xFF in _UNAVAILABLE_CODES

    def is_full(self, error: BaseException) -> bool:
        return False  # a file has no connection limit

    def is_missing_schema(self, error: BaseException) -> bool:
        # The driver's own error, under SQLAlchemy's wrapper (`database._driver_errors`).
        return isinstance(error, sqlite3.OperationalError) and str(error).startswith(
            _MISSING_SCHEMA
        )

    def missing_database(self, url: str) -> str | None:
        path = make_url(url).database
        if path and path != ":memory:" and not Path(path).exists():
            return f"no database file at {Path(path)}"
        return None

    async def identity(self, conn: AsyncConnection) -> tuple[Any, ...]:
        return ()

    async def transaction_now(self, conn: AsyncConnection) -> datetime:
        return self.clock.host_now()

    async def bound_now(self, conn: AsyncConnection) -> datetime:
        return self.clock.host_now()

    def moved_statement(self, statement: str) -> str:
        # Statements take the host's clock bound: none reads a clock of its own.
        return moved_statement(statement, None, "")

    async def prune(self, conn: AsyncConnection, *, cutoff: datetime, limit: int) -> int:
        result = await conn.execute(_PRUNE, {"cutoff": cutoff, "limit": limit})
        return int(result.rowcount)

    @asynccontextmanager
    async def migrating(
        self, conn: AsyncConnection, schema: str | None, *, session: bool = True
    ) -> AsyncIterator[None]:
        """One replica: nothing to take turns with. A migration that alters a table rebuilds
        it (copy, drop, rename), and dropping `schedules` with foreign keys on would delete
        every occurrence through the cascade: they are off for the migrations' session. The
        pragma holds only outside a transaction, so it goes to the driver's connection
        before the first statement begins one, and back on after the last has ended."""
        driver = (await conn.get_raw_connection()).driver_connection
        assert driver is not None, "a pooled connection has its driver's"
        await driver.execute("PRAGMA foreign_keys=OFF")
        try:
            yield
        finally:
            if conn.in_transaction():
                await conn.rollback()
            await driver.execute("PRAGMA foreign_keys=ON")

    def seconds_between(
        self, later: sa.ColumnElement[Any], earlier: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[float]:
        # Instants are stored as ISO text; julianday reads their fractions of a second.
        return (sa.func.julianday(later) - sa.func.julianday(earlier)) * 86400.0

    def minute_of(self, instant: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return sa.type_coerce(sa.func.strftime("%Y-%m-%d %H:%M:00.000000", instant), UTCDateTime())

    @asynccontextmanager
    async def exclusive(self, conn: AsyncConnection, purpose: str) -> AsyncIterator[bool]:
        yield True  # one replica


DIALECT = SQLite()
