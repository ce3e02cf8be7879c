"""MySQL 8.0+ and MariaDB 10.6+ (asyncmy, or aiomysql when named): a store for several
replicas, like PostgreSQL, without LISTEN/NOTIFY.

- The claim locks due rows with `FOR UPDATE SKIP LOCKED` on the database clock, then leases
  and reads them: the steps of `Stepwise` in one transaction (there is no UPDATE ...
  RETURNING).
- READ COMMITTED: a locking read takes no gap locks, so claims and inserts do not block
  each other on ranges; each session runs in UTC.
- The clock is read once per transaction (`UTC_TIMESTAMP(6)`) and bound into statements:
  NOW() would be each statement's own instant.
- Locks are named locks (`GET_LOCK`), server-wide, named after the database.
- Wake-ups reach this process's loop after the write commits; other replicas find new
  work by polling, at most CHRONOQ_POLL_INTERVAL later.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect as SqlDialect
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from app.settings import backends
from app.store.dialects.stepwise import Stepwise
from app.store.dialects.toolkit import PolledWakeups, RowInserts, dumps, pool_sizes, session_lock
from app.store.engine.clock import moved_statement
from app.store.schema.tables import PRUNABLE, occurrences
from app.store.schema.types import UTCDateTime

_DRIVERS = ("asyncmy", "aiomysql")
_DEADLOCK, _LOCK_WAIT_TIMEOUT = 1213, 1205
# The server has as many connections as it allows: all of them (1040), or a user's
# (`max_user_connections`, 1203; `WITH MAX_USER_CONNECTIONS`, a user resource, 1226). It is up,
# and busy: a transaction waits for room a while (`is_full`), then counts it unavailable.
_FULL_CODES = frozenset({1040, 1203, 1226})
# Server and client codes that say the server cannot be used now: full, shutting down,
# cannot connect, server gone away, connection lost, connection killed, disconnected for
# inactivity.
_UNAVAILABLE_CODES = _FULL_CODES | {1053, 1927, 2002, 2003, 2006, 2013, 2055, 4031}
# ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR (an unknown column)
_MISSING_SCHEMA_CODES = frozenset({1146, 1054})

# Every session: UTC, and strict (a value that does not fit is an error, never truncated),
# whatever the server's defaults.
_SESSION = "SET time_zone = '+00:00', sql_mode = 'TRADITIONAL'"

# The one read of the server's clock, `_NOW`'s (`transaction_now`).
SERVER_CLOCK = "UTC_TIMESTAMP(6)"
_NOW = sa.text("SELECT UTC_TIMESTAMP(6)").columns(sa.column("now", UTCDateTime()))
_LOCK_NAME_LIMIT = 64

# Rows another transaction holds are skipped, as on PostgreSQL: pruning never waits
# behind a claim. MySQL cannot delete from a table its own sub-select reads with a
# LIMIT, so the keys are read first.
_EXPIRED = (
    sa.select(occurrences.c.occurrence_id)
    .where(
        sa.text(PRUNABLE),
        occurrences.c.updated_at < sa.bindparam("cutoff", type_=UTCDateTime()),
    )
    .order_by(occurrences.c.updated_at)
    .limit(sa.bindparam("limit", type_=sa.Integer()))
    .with_for_update(skip_locked=True)
)


def lock_name(purpose: str, database: str | None) -> str:
    """The named lock of `purpose` for the installation in `database` (locks are
    server-wide, so the database is part of the name)."""
    name = f"chronoq:{purpose}:{database or ''}"
    return name[:_LOCK_NAME_LIMIT]


def _database_of(conn: AsyncConnection) -> str | None:
    return conn.sync_engine.url.database


def _code(error: BaseException) -> int | None:
    args = getattr(error, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


class MySQL(RowInserts, PolledWakeups, Stepwise):
    backend = backends.named("mysql")
    batch_migrations = False
    marks_alone = False

    def normalize_url(self, url: str) -> str:
        parsed = make_url(url)
        driver = parsed.get_driver_name()
        # mariadb:// is the same server family; SQLAlchemy's mysql dialect detects it.
        if parsed.get_backend_name() == "mariadb" or driver not in _DRIVERS:
            driver = driver if driver in _DRIVERS else "asyncmy"
            parsed = parsed.set(drivername=f"mysql+{driver}")
        return parsed.render_as_string(hide_password=False)

    def engine(
        self, url: str, *, schema: str | None, connections: int, pre_ping: bool, pooled: bool
    ) -> AsyncEngine:
        if schema is not None:
            raise ValueError("CHRONOQ_DB_SCHEMA is for PostgreSQL only")
        if pooled:
            raise ValueError("CHRONOQ_DB_POOLER is for PostgreSQL only")
        kept = pool_sizes(connections)
        return create_async_engine(
            url,
            pool_size=kept,
            max_overflow=connections - kept,
            pool_pre_ping=pre_ping,
            # Below the server's default wait_timeout (8 h) and any proxy's idle cut.
            pool_recycle=1800,
            isolation_level="READ COMMITTED",
            json_serializer=dumps,
            connect_args={"charset": "utf8mb4", "init_command": _SESSION},
        )

    def sql_dialect(self) -> SqlDialect:
        return mysql.dialect()

    def is_transient(self, error: BaseException) -> bool:
        return _code(error) in (_DEADLOCK, _LOCK_WAIT_TIMEOUT)

    def is_unavailable(self, error: BaseException) -> bool:
        return _code(error) in _UNAVAILABLE_CODES

    def is_missing_schema(self, error: BaseException) -> bool:
        return _code(error) in _MISSING_SCHEMA_CODES

    def is_full(self, error: BaseException) -> bool:
        return _code(error) in _FULL_CODES

    def missing_database(self, url: str) -> str | None:
        return None  # the server says, once connected

    async def identity(self, conn: AsyncConnection) -> tuple[Any, ...]:
        return ()

    async def transaction_now(self, conn: AsyncConnection) -> datetime:
        value = (await conn.execute(_NOW)).scalar_one()
        assert isinstance(value, datetime)
        return value

    async def bound_now(self, conn: AsyncConnection) -> datetime:
        return await self.transaction_now(conn)

    def moved_statement(self, statement: str) -> str:
        by = self.clock.shift // timedelta(microseconds=1)
        moved = f"(UTC_TIMESTAMP(6) + INTERVAL {by} MICROSECOND)"
        if (frozen := self.clock.frozen_at) is not None:
            # UTC_TIMESTAMP(6) is a DATETIME in UTC, with no zone.
            at = frozen.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
            moved = f"LEAST({moved}, CAST('{at}' AS DATETIME(6)))"
        return moved_statement(statement, SERVER_CLOCK, moved)

    async def insert_ignoring(
        self, conn: AsyncConnection, table: sa.Table, rows: list[dict[str, Any]], key: str
    ) -> None:
        if rows:
            # A no-op update of the key on a duplicate: unlike INSERT IGNORE, every other
            # error (a foreign key, a CHECK) still fails the statement.
            column = table.c[key]
            statement = mysql.insert(table).on_duplicate_key_update({column.name: column})
            await conn.execute(statement, rows)

    async def insert_new(
        self, conn: AsyncConnection, table: sa.Table, rows: list[dict[str, Any]], key: str
    ) -> set[Any]:
        if not rows:
            return set()
        column = table.c[key]
        wanted = [row[key] for row in rows]
        existing = set((await conn.execute(sa.select(column).where(column.in_(wanted)))).scalars())
        fresh = [row for row in rows if row[key] not in existing]
        await self.insert_ignoring(conn, table, fresh, key)
        return {row[key] for row in fresh}

    async def prune(self, conn: AsyncConnection, *, cutoff: datetime, limit: int) -> int:
        keys = list((await conn.execute(_EXPIRED, {"cutoff": cutoff, "limit": limit})).scalars())
        if not keys:
            return 0
        result = await conn.execute(
            occurrences.delete().where(occurrences.c.occurrence_id.in_(keys))
        )
        return int(result.rowcount)

    def migrating(
        self, conn: AsyncConnection, schema: str | None, *, session: bool = True
    ) -> AbstractAsyncContextManager[None]:
        # DDL commits at once on MySQL: the named lock spans the migrations' commits.
        return session_lock(
            conn,
            sa.text("SELECT GET_LOCK(:name, 600)"),
            sa.text("SELECT RELEASE_LOCK(:name)"),
            {"name": lock_name("migrate", _database_of(conn))},
        )

    def seconds_between(
        self, later: sa.ColumnElement[Any], earlier: sa.ColumnElement[Any]
    ) -> sa.ColumnElement[float]:
        micros = sa.func.timestampdiff(sa.text("MICROSECOND"), earlier, later)
        return sa.type_coerce(micros / 1e6, sa.Float())

    def minute_of(self, instant: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return sa.type_coerce(
            sa.func.str_to_date(
                sa.func.date_format(instant, "%Y-%m-%d %H:%i:00"), "%Y-%m-%d %H:%i:%s"
            ),
            UTCDateTime(),
        )

    @asynccontextmanager
    async def exclusive(self, conn: AsyncConnection, purpose: str) -> AsyncIterator[bool]:
        name = lock_name(purpose, _database_of(conn))
        held = (await conn.execute(sa.text("SELECT GET_LOCK(:name, 0)"), {"name": name})).scalar()
        if held != 1:
            yield False
            return
        try:
            yield True
        finally:
            # A named lock outlives transactions: given back before the connection
            # returns to the pool.
            await conn.execute(sa.text("SELECT RELEASE_LOCK(:name)"), {"name": name})


DIALECT = MySQL()
