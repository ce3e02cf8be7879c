"""The database handle: engine per dialect, short transactions, retries on lock conflicts.

Invariant: a transaction that fails because the database cannot be reached leaves `run` as
`StoreUnavailableError` (the caller may retry); every other failure leaves it unchanged.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from app.domain.errors import StoreUnavailableError

log = logging.getLogger(__name__)

T = TypeVar("T")

# What services type their transaction handle as, without importing SQLAlchemy.
Connection = AsyncConnection

_TRANSIENT_SQLSTATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock

# PostgreSQL states that say the server cannot be used now, not that the statement is wrong:
# too many connections, and an administrator or a crash shutting the server down.
_UNAVAILABLE_SQLSTATES = frozenset({"53300", "57P01", "57P02", "57P03"})
_CONNECTION_SQLSTATE_CLASS = "08"  # connection exception
# SQLite primary result codes of the same kind: busy or locked past busy_timeout and the
# retries, an I/O error, a full disk, a file that cannot be opened, a lock protocol error.
# SQLITE_ERROR ("no such table", a syntax error) and constraint failures are not among them.
_UNAVAILABLE_SQLITE_CODES = frozenset({5, 6, 10, 13, 14, 15})

# The engine-wide execution option that tells code holding only a connection which
# installation it works for (wake-up channel, advisory lock keys).
_SCHEMA_OPTION = "chronoq_schema"


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


def describe_failure(exc: BaseException, url: str) -> str:
    """One line for an operator: what failed, never the database password."""
    cause: BaseException = exc
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        # The driver's own exception names the problem (InvalidPasswordError, ...); the
        # DBAPI wrapper around it only says "Error".
        cause = exc.orig.__cause__ or exc.orig
    lines = str(cause).strip().splitlines()
    text = f"{type(cause).__name__}: {lines[0]}" if lines else type(cause).__name__
    for form in {url, normalize_url(url)}:
        text = text.replace(form, redact_url(form))
    try:
        password = make_url(normalize_url(url)).password
    except Exception:
        password = None
    # A password quoted on its own (a driver repeating its DSN's parts); too short a one
    # would blank out ordinary letters of the message instead.
    if password is not None and len(str(password)) >= 4:
        text = text.replace(str(password), "***")
    return text


def quote_schema(schema: str) -> str:
    """`schema` as a PostgreSQL identifier, quoted whatever it is (a keyword such as `user`
    is a valid schema name)."""
    return '"' + schema.replace('"', '""') + '"'


def advisory_key(purpose: str, schema: str | None, default: int) -> int:
    """A PostgreSQL advisory lock key (signed 64 bits) for `purpose` in `schema`; the
    installation without a schema keeps `default`, the key it has always used."""
    if schema is None:
        return default
    digest = hashlib.blake2b(f"chronoq:{purpose}:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def schema_of(conn: AsyncConnection) -> str | None:
    """The schema of the installation this connection belongs to (None: the default)."""
    schema = conn.sync_engine.get_execution_options().get(_SCHEMA_OPTION)
    return None if schema is None else str(schema)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, OperationalError) and "database is locked" in str(exc):
        return True
    if isinstance(exc, DBAPIError):
        code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
        return code in _TRANSIENT_SQLSTATES
    return False


def _driver_errors(exc: BaseException) -> list[BaseException]:
    """`exc`, the driver's own exception under SQLAlchemy's wrapper, and their causes."""
    found: list[BaseException] = []
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or any(current is seen for seen in found):
            continue
        found.append(current)
        pending.extend([getattr(current, "orig", None), current.__cause__])
    return found


def is_unavailable(exc: BaseException) -> bool:
    """Whether `exc` means the database cannot be reached or used right now (connection
    refused, reset or lost, pool exhausted, server shutting down, SQLite file busy or
    unreadable), as opposed to a statement it refused (constraint, syntax, missing table)."""
    if isinstance(exc, OSError | PoolTimeoutError | InterfaceError):
        return True  # OSError covers ConnectionError and the built-in TimeoutError
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if not isinstance(exc, DBAPIError):
        return False
    for error in _driver_errors(exc):
        if isinstance(error, OSError):
            return True
        sqlstate = getattr(error, "sqlstate", None)
        if isinstance(sqlstate, str) and (
            sqlstate in _UNAVAILABLE_SQLSTATES or sqlstate.startswith(_CONNECTION_SQLSTATE_CLASS)
        ):
            return True
        code = getattr(error, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF in _UNAVAILABLE_SQLITE_CODES:
            return True
    return False


class Database:
    """One engine and the dialect it speaks; all writes go through `run`.

    With a `schema` (PostgreSQL only), every connection's `search_path` is that schema
    alone, so the Core statements and the raw SQL files, which name tables unqualified,
    reach this installation's tables and no other's.
    """

    def __init__(
        self, url: str, *, schema: str | None = None, pool_size: int = 10, pre_ping: bool = True
    ) -> None:
        self.url = normalize_url(url)
        # As the operator wrote it, password hidden: what an unavailable store reports.
        self._where = redact_url(url) + (f" (schema {schema})" if schema is not None else "")
        self.schema = schema
        parsed = make_url(self.url)
        self.dialect = parsed.get_backend_name()
        if self.dialect == "sqlite":
            if schema is not None:
                raise ValueError("CHRONOQ_DB_SCHEMA is for PostgreSQL only")
            self.engine = self._sqlite_engine(parsed.database)
        elif self.dialect == "postgresql":
            connect_args: dict[str, Any] = {}
            options: dict[str, Any] = {}
            if schema is not None:
                options[_SCHEMA_OPTION] = schema
                # Sent in the startup packet: in force before the first statement, and kept
                # by every pooled connection. Only the schema: a table missing from it must
                # fail, not be found in `public` (another installation's, perhaps).
                connect_args["server_settings"] = {"search_path": quote_schema(schema)}
            self.engine = create_async_engine(
                self.url,
                pool_size=pool_size,
                max_overflow=pool_size,
                # A ping per checkout costs a round trip; the delivery loop turns it off
                # because each of its transactions is safe to fail and run again, and a
                # dead pooled connection is dropped on its first error.
                pool_pre_ping=pre_ping,
                json_serializer=_dumps,
                connect_args=connect_args,
                execution_options=options,
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
        """Run `work` in one transaction; retry it whole on a deadlock or lock timeout.

        Raises StoreUnavailableError when the database cannot be reached (the transaction
        did not commit, or its outcome is unknown if the connection dropped during COMMIT);
        any other failure propagates as it is.
        """
        for attempt in range(1, attempts + 1):
            try:
                async with self.engine.begin() as conn:
                    return await work(conn)
            except DBAPIError as exc:
                if attempt < attempts and _is_transient(exc):
                    log.info("transaction conflict, retrying (attempt %d): %s", attempt, exc.orig)
                    await asyncio.sleep(0.01 * attempt)
                    continue
                if is_unavailable(exc):
                    raise self._unavailable(exc) from exc
                raise
            except (OSError, PoolTimeoutError) as exc:
                raise self._unavailable(exc) from exc
        raise AssertionError("unreachable")

    def _unavailable(self, exc: BaseException) -> StoreUnavailableError:
        # The detail is for operators (the CLI prints it, the API logs it); the API answers
        # with its own words and never shows where the database lives.
        return StoreUnavailableError(
            f"cannot reach {self._where}: {describe_failure(exc, self.url)}"
        )

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    async def close(self) -> None:
        await self.engine.dispose()
