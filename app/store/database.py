"""The database handle: engine per dialect, short transactions, retries on lock conflicts."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

log = logging.getLogger(__name__)

T = TypeVar("T")

# What services type their transaction handle as, without importing SQLAlchemy.
Connection = AsyncConnection

_TRANSIENT_SQLSTATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock


def normalize_url(url: str) -> str:
    """Map the conventional URL forms onto the async drivers Chronoq uses."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        return "postgresql+asyncpg://" + url[len("postgresql://") :]
    if url.startswith("sqlite:///"):
        return "sqlite+aiosqlite:///" + url[len("sqlite:///") :]
    return url


def redact_url(url: str) -> str:
    """The URL with its password replaced, for logs and error messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable database URL>"


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, OperationalError) and "database is locked" in str(exc):
        return True
    if isinstance(exc, DBAPIError):
        code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
        return code in _TRANSIENT_SQLSTATES
    return False


class Database:
    """One engine and the dialect it speaks; all writes go through `run`."""

    def __init__(self, url: str, *, pool_size: int = 10, pre_ping: bool = True) -> None:
        self.url = normalize_url(url)
        parsed = make_url(self.url)
        self.dialect = parsed.get_backend_name()
        if self.dialect == "sqlite":
            self.engine = self._sqlite_engine(parsed.database)
        elif self.dialect == "postgresql":
            self.engine = create_async_engine(
                self.url,
                pool_size=pool_size,
                max_overflow=pool_size,
                # A ping per checkout costs a round trip; the delivery loop turns it off
                # because each of its transactions is safe to fail and run again, and a
                # dead pooled connection is dropped on its first error.
                pool_pre_ping=pre_ping,
                json_serializer=_dumps,
            )
        else:
            raise ValueError(f"unsupported database {redact_url(url)}")

    def pool_in_use(self) -> int:
        """Connections checked out of the pool now (a metric)."""
        return int(self.engine.pool.checkedout())  # type: ignore[attr-defined]

    def pool_size(self) -> int:
        return int(self.engine.pool.size())  # type: ignore[attr-defined]

    def _sqlite_engine(self, path: str | None) -> AsyncEngine:
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # SQLite has one writer: a single pooled connection serializes the process, and
        # BEGIN IMMEDIATE takes the write lock up front so that another process (the CLI)
        # waits on busy_timeout instead of failing a lock upgrade mid-transaction.
        engine = create_async_engine(
            self.url, pool_size=1, max_overflow=0, pool_timeout=60, json_serializer=_dumps
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

    @property
    def is_postgresql(self) -> bool:
        return self.dialect == "postgresql"

    async def run(self, work: Callable[[AsyncConnection], Awaitable[T]], *, attempts: int = 5) -> T:
        """Run `work` in one transaction; retry it whole on a deadlock or lock timeout."""
        for attempt in range(1, attempts + 1):
            try:
                async with self.engine.begin() as conn:
                    return await work(conn)
            except DBAPIError as exc:
                if attempt == attempts or not _is_transient(exc):
                    raise
                log.info("transaction conflict, retrying (attempt %d): %s", attempt, exc.orig)
                await asyncio.sleep(0.01 * attempt)
        raise AssertionError("unreachable")

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    async def close(self) -> None:
        await self.engine.dispose()
