"""The database handle: one engine and its dialect, short transactions, retries on conflicts.

Invariant: a transaction that fails because the database cannot be reached leaves `run` as
`StoreUnavailableError` (the caller may retry), and one that fails because a table, column or
schema it names does not exist as `SchemaNotMigratedError`, one of them (the caller may retry
once `chronoq migrate` has run); every other failure leaves it unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, InterfaceError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.errors import SchemaNotMigratedError, StoreUnavailableError
from app.settings import db_urls
from app.store import dialects
from app.store.dialects.base import Dialect
from app.store.engine.clock import DatabaseClock
from app.store.engine.commits import AFTER_COMMIT

log = logging.getLogger(__name__)

T = TypeVar("T")

# What services type their transaction handle as, without importing SQLAlchemy.
Connection = AsyncConnection


def normalize_url(url: str) -> str:
    """Map the conventional URL forms onto the async drivers Chronoq uses (a URL of no
    supported database is returned as it is)."""
    try:
        return dialects.for_url(url).normalize_url(url)
    except ValueError:
        return url


def missing_database(url: str) -> str | None:
    """Why connecting to `url` would not reach an existing database, when the dialect can
    tell without connecting (a SQLite file that does not exist); None otherwise."""
    try:
        dialect = dialects.for_url(url)
    except ValueError:
        return None
    return dialect.missing_database(dialect.normalize_url(url))


def redact_url(url: str) -> str:
    """The URL with its password replaced, for logs and error messages."""
    if db_urls.is_multi_host(url):
        return db_urls.redact(url) or "<unparseable database URL>"
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


def is_unavailable(exc: BaseException, dialect: Dialect | None = None) -> bool:
    """Whether `exc` means the database cannot be reached or used right now (connection
    refused, reset or lost, pool exhausted, server shutting down, SQLite file busy or
    unreadable), as opposed to a statement it refused (constraint, syntax, missing table)."""
    if isinstance(exc, OSError | PoolTimeoutError | InterfaceError):
        return True  # OSError covers ConnectionError and the built-in TimeoutError
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if not isinstance(exc, DBAPIError) and dialect is None:
        return False
    # A driver's own error reaches here unwrapped when it is raised while connecting (no
    # host of a multi-host URL accepting writes, a server still starting up).
    for error in _driver_errors(exc):
        if isinstance(error, OSError):
            return True
        if dialect is not None and dialect.is_unavailable(error):
            return True
    return False


def is_missing_schema(exc: BaseException, dialect: Dialect) -> bool:
    """Whether `exc` says a table, column or schema the statement names does not exist:
    the database is not migrated to this version's revision."""
    return any(dialect.is_missing_schema(error) for error in _driver_errors(exc))


def _is_transient(exc: BaseException, dialect: Dialect) -> bool:
    return any(dialect.is_transient(error) for error in _driver_errors(exc))


def _is_full(exc: BaseException, dialect: Dialect) -> bool:
    return any(dialect.is_full(error) for error in _driver_errors(exc))


# How long a transaction waits for a connection while the server refuses new ones because it
# has as many as it allows (it is up, and busy): the pool's own connections come back within
# a transaction's time. Then the database counts as unavailable (503, Retry-After).
FULL_SERVER_WAIT = 10.0
_FULL_SERVER_PAUSES = (0.02, 0.05, 0.1, 0.2, 0.5)


async def _wait_for_room(since: float) -> bool:
    """Pause before trying again to get a connection from a server that has as many as it
    allows; False once `FULL_SERVER_WAIT` has passed since `since`."""
    waited = time.monotonic() - since
    if waited >= FULL_SERVER_WAIT:
        return False
    step = min(int(waited / 0.1), len(_FULL_SERVER_PAUSES) - 1)
    await asyncio.sleep(min(_FULL_SERVER_PAUSES[step], FULL_SERVER_WAIT - waited))
    return True


class Database:
    """One engine and the dialect it speaks; all writes go through `run`.

    The dialect is chosen here, once, from the URL; a URL of any other database is
    refused. With a `schema` (PostgreSQL only), every connection's `search_path` is that
    schema alone, so the statements, which name tables unqualified, reach this
    installation's tables and no other's. The engine opens at most `connections`.

    `pooled` (PostgreSQL): `url` reaches the server through a transaction-mode pooler, so
    no connection keeps session state; what needs a session (LISTEN, the migration lock)
    uses `direct_url`, the same database without the pooler, when there is one.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        connections: int = 20,
        pre_ping: bool = True,
        pooled: bool = False,
        direct_url: str | None = None,
        timeout: float | None = None,
    ) -> None:
        try:
            self.dialect: Dialect = dialects.for_url(url)
        except ValueError:
            raise ValueError(f"unsupported database {redact_url(url)}") from None
        if schema is not None and not self.dialect.backend.schemas:
            raise ValueError("CHRONOQ_DB_SCHEMA is for PostgreSQL only")
        self.url = self.dialect.normalize_url(url)
        # As the operator wrote it, password hidden: what an unavailable store reports.
        self._where = redact_url(url) + (f" (schema {schema})" if schema is not None else "")
        self.schema = schema
        self.pooled = pooled
        self.timeout = timeout
        self.direct_url = None if direct_url is None else self.dialect.normalize_url(direct_url)
        # Where a session of its own is kept: none through the pooler without a direct URL.
        self.session_url: str | None = self.url if not pooled else self.direct_url
        self.engine = self.dialect.engine(
            self.url, schema=schema, connections=connections, pre_ping=pre_ping, pooled=pooled
        )
        # Code holding only a connection asks it for its dialect (`dialects.dialect_of`).
        self.engine.sync_engine.update_execution_options(**{dialects.OPTION: self.dialect})

    @property
    def clock(self) -> DatabaseClock:
        """The database clock as this process reads it, the same for every `Database` of
        this dialect; tests move it forward instead of waiting (`DatabaseClock.move`)."""
        return self.dialect.clock

    def pool_in_use(self) -> int:
        """Connections checked out of the pool now (a metric)."""
        return int(self.engine.pool.checkedout())  # type: ignore[attr-defined]

    def pool_size(self) -> int:
        return int(self.engine.pool.size())  # type: ignore[attr-defined]

    async def run(self, work: Callable[[AsyncConnection], Awaitable[T]], *, attempts: int = 5) -> T:
        """Run `work` in one transaction; retry it whole on a deadlock or lock timeout, and
        while the server refuses a new connection because it has as many as it allows (up
        to `FULL_SERVER_WAIT`). Callbacks `work` left with `dialects.base.after_commit` run
        once it commits.

        Raises StoreUnavailableError when the database cannot be reached, or has not
        answered within the pool's `timeout` once the transaction had its connection (the
        transaction did not commit, or its outcome is unknown if the connection was lost
        during COMMIT); any other failure propagates as it is.
        """
        attempt = 0
        full_since: float | None = None
        while True:
            attempt += 1
            callbacks: list[Callable[[], None]] = []
            token = AFTER_COMMIT.set(callbacks)
            # From the moment the transaction has its connection: the checkout's ping and
            # each host's connect have bounds of their own, and a multi-host URL's hosts are
            # tried one after another.
            bound = asyncio.timeout(None)
            try:
                async with bound, self.engine.begin() as conn:
                    if self.timeout is not None:
                        bound.reschedule(asyncio.get_running_loop().time() + self.timeout)
                    result = await work(conn)
            except TimeoutError as exc:
                if not bound.expired():
                    raise self._unavailable(exc) from exc
                # A server that vanished (no reset, no answer) would hold the caller until
                # the kernel gave up on the connection: cancelled, the pool drops it.
                raise StoreUnavailableError(
                    f"no answer from {self._where} within {self.timeout:g} s"
                ) from exc
            except DBAPIError as exc:
                if attempt < attempts and _is_transient(exc, self.dialect):
                    log.info("transaction conflict, retrying (attempt %d): %s", attempt, exc.orig)
                    await asyncio.sleep(0.01 * attempt)
                    continue
                if _is_full(exc, self.dialect):
                    # Refused at connect: nothing of the transaction was sent.
                    full_since = full_since or time.monotonic()
                    if await _wait_for_room(full_since):
                        attempt -= 1  # not a conflict: it does not count as one
                        continue
                if is_unavailable(exc, self.dialect):
                    raise self._unavailable(exc) from exc
                if is_missing_schema(exc, self.dialect):
                    raise self._not_migrated(exc) from exc
                raise
            except (OSError, PoolTimeoutError) as exc:
                raise self._unavailable(exc) from exc
            except Exception as exc:
                if is_unavailable(exc, self.dialect):
                    raise self._unavailable(exc) from exc
                raise
            finally:
                AFTER_COMMIT.reset(token)
            # Committed: what was waiting for it (wake-ups of this process) runs now.
            for callback in callbacks:
                callback()
            return result

    def _unavailable(self, exc: BaseException) -> StoreUnavailableError:
        # The detail is for operators (the CLI prints it, the API logs it); the API answers
        # with its own words and never shows where the database lives.
        return StoreUnavailableError(
            f"cannot reach {self._where}: {describe_failure(exc, self.url)}"
        )

    def _not_migrated(self, exc: BaseException) -> SchemaNotMigratedError:
        return SchemaNotMigratedError(
            f"{self._where} is not migrated to this version's schema "
            f"({describe_failure(exc, self.url)}): run `chronoq migrate`"
        )

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[AsyncConnection]:
        """A connection of the pool outside `run`'s transactions (reads of the schema's
        revision, locks held across transactions), got as `run` gets one: waiting while
        the server refuses new connections because it has as many as it allows."""
        full_since: float | None = None
        while True:
            try:
                conn = await self.engine.connect().start()
            except DBAPIError as exc:
                if _is_full(exc, self.dialect):
                    full_since = full_since or time.monotonic()
                    if await _wait_for_room(full_since):
                        continue
                raise
            break
        try:
            yield conn
        finally:
            await conn.close()

    async def identity(self) -> tuple[object, ...]:
        """Which database on which server this reaches (`Dialect.identity`)."""
        async with self.connect() as conn:
            return await self.dialect.identity(conn)

    async def ping(self) -> None:
        async with self.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    async def close(self) -> None:
        await self.engine.dispose()
