"""The databases Chronoq stores in, as facts: one table that the settings, the logs and the
store's dialect registry all read.

It imports nothing of SQLAlchemy or a driver, so the settings check a DATABASE_URL and the
logs quiet a driver without loading either; each store dialect (app/store/dialects/) serves
exactly one entry, and takes what the entry says about it from here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backend:
    """One database family."""

    # The dialect that serves it (app/store/dialects/<name>.py), as settings name it.
    name: str
    # How people call it in messages.
    label: str
    # URL schemes (before any "+driver") that name it.
    schemes: tuple[str, ...]
    # Whether several replicas may share one database.
    multi_replica: bool
    # Whether CHRONOQ_DB_SCHEMA (an installation per schema) is supported.
    schemas: bool
    # Whether a write wakes the loops of other processes at once (LISTEN/NOTIFY); where it
    # does not, they find the write at their next poll.
    notifies: bool = False
    # Loggers of its drivers that print each statement with its parameters at DEBUG (so
    # targets' secrets too): kept at WARNING whatever the log level.
    statement_loggers: tuple[str, ...] = ()


BACKENDS: tuple[Backend, ...] = (
    Backend(
        "postgresql",
        "PostgreSQL",
        ("postgresql", "postgres"),
        multi_replica=True,
        schemas=True,
        notifies=True,
    ),
    Backend(
        "sqlite",
        "SQLite",
        ("sqlite",),
        multi_replica=False,
        schemas=False,
        statement_loggers=("aiosqlite",),
    ),
    Backend("mysql", "MySQL/MariaDB", ("mysql", "mariadb"), multi_replica=True, schemas=False),
)

# Dialect names, as `chronoq schema --dialect` takes them.
NAMES = tuple(backend.name for backend in BACKENDS)
# The URL forms a DATABASE_URL may take, for messages.
URL_FORMS = "postgresql://, mysql://, mariadb:// or sqlite:///"

_BY_SCHEME = {scheme: backend for backend in BACKENDS for scheme in backend.schemes}
_BY_NAME = {backend.name: backend for backend in BACKENDS}


def named(name: str) -> Backend:
    """The backend called `name` (one of NAMES)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown dialect {name!r}; expected one of {', '.join(NAMES)}") from None


def backend_of(url: str) -> Backend | None:
    """The backend a DATABASE_URL names (None: none Chronoq has). Only the scheme is read:
    `scheme://...` or `scheme:...`, with any `+driver` after the scheme ignored."""
    scheme, separator, _ = url.partition("://")
    if not separator:
        scheme, separator, _ = url.partition(":")
    return _BY_SCHEME.get(scheme.partition("+")[0].lower()) if separator else None


def statement_loggers() -> tuple[str, ...]:
    """Every backend's `statement_loggers`."""
    return tuple(name for backend in BACKENDS for name in backend.statement_loggers)
