"""The dialect registry: a database URL's scheme names its dialect, whose module is loaded
by name when a `Database` for it is built, so a database's driver is imported only where
that database is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.settings import backends, db_urls

if TYPE_CHECKING:
    from app.store.dialects.base import Dialect

# The names and URL forms of app.settings.backends, the table every reader of a URL shares.
NAMES = backends.NAMES
DESCRIPTION = backends.URL_FORMS

# The engine-wide execution option that carries the dialect to code holding a connection.
OPTION = "chronoq_dialect"


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
