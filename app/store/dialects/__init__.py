"""The dialect registry: a database URL's scheme names its dialect, whose module is loaded
by name when a `Database` for it is built, so a database's driver is imported only where
that database is used. And what code holding a connection asks of its dialect: the
database clock, wake-ups.
"""

from __future__ import annotations

import importlib
from datetime import datetime

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.settings import backends, db_urls
from app.store.dialects.base import OPTION, Dialect
from app.store.engine.wakeups import Wakeups

# The names and URL forms of app.settings.backends, the table every reader of a URL shares.
NAMES = backends.NAMES
DESCRIPTION = backends.URL_FORMS

__all__ = ["OPTION", "Dialect", "announce", "dialect_of", "next_due_in", "transaction_now"]


def backend_of(url: str) -> str | None:
    """The dialect name a URL asks for (None: not a database Chronoq supports)."""
    try:
        make_url(db_urls.for_sqlalchemy(url))  # libpq's multi-host form as SQLAlchemy reads it
    except (ArgumentError, ValueError):
        return None
    backend = backends.backend_of(url)
    return None if backend is None else backend.name


def named(name: str) -> Dialect:
    """The dialect called `name` (one of NAMES)."""
    backends.named(name)  # refuses an unknown name
    module = importlib.import_module(f"{__name__}.{name}")
    dialect: Dialect = module.DIALECT
    return dialect


def for_url(url: str) -> Dialect:
    """The dialect serving `url`; a URL of any other database is refused."""
    name = backend_of(url)
    if name is None:
        raise ValueError(f"unsupported database URL: expected {DESCRIPTION}")
    return named(name)


def dialect_of(conn: AsyncConnection) -> Dialect:
    """The dialect of the `Database` this connection came from."""
    dialect: Dialect = conn.sync_engine.get_execution_options()[OPTION]
    return dialect


async def transaction_now(conn: AsyncConnection) -> datetime:
    """The instant this transaction's writes are stamped with, from the database's clock
    (an embedded SQLite file belongs to one host, whose clock is the database's)."""
    return await dialect_of(conn).transaction_now(conn)


async def announce(conn: AsyncConnection, wakeups: Wakeups, at: datetime | None) -> None:
    """Inside a write's transaction: an occurrence is due at `at` (None: nothing new), news
    for `wakeups` and, where the database carries it, for the other replicas."""
    if at is not None:
        await dialect_of(conn).announce(conn, wakeups, at)


async def next_due_in(conn: AsyncConnection) -> float | None:
    """Seconds until the earliest pending occurrence that is not yet due (None: none).

    Rows already due but not claimed belong to paused schedules; they wait for a resume,
    which announces itself. Reads the claim indexes only.
    """
    return await dialect_of(conn).next_due_in(conn)
