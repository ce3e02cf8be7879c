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

if TYPE_CHECKING:
    from app.store.dialects.base import Dialect

# URL backend -> the dialect module that serves it.
BACKENDS = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "sqlite": "sqlite",
    "mysql": "mysql",
    "mariadb": "mysql",
}
# Dialect names, as `chronoq schema --dialect` takes them.
NAMES = ("postgresql", "sqlite", "mysql")
DESCRIPTION = "postgresql://, mysql://, mariadb:// or sqlite:///"

# The engine-wide execution option that carries the dialect to code holding a connection.
OPTION = "chronoq_dialect"


def backend_of(url: str) -> str | None:
    """The dialect name a URL asks for (None: not a database Chronoq supports)."""
    try:
        backend = make_url(url).get_backend_name()
    except (ArgumentError, ValueError):
        return None
    return BACKENDS.get(backend)


def named(name: str) -> Dialect:
    """The dialect called `name` (one of NAMES)."""
    if name not in NAMES:
        raise ValueError(f"unknown dialect {name!r}; expected one of {', '.join(NAMES)}")
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
