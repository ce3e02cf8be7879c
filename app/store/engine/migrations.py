"""Schema migrations at start: upgrade to head under the migration lock; readiness check.

Invariant: one installation (one schema) is migrated by one replica at a time; another
installation in the same database takes a lock of its own and migrates alongside.
"""

from __future__ import annotations

import functools
import io
import logging
from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from alembic import command
from app.store.engine.database import Database

# The source checkout this module runs from (editable installs, tests), and the migrations as
# an installed package carries them: the top-level alembic/ folder, shipped as app.migrations.
_CHECKOUT = Path(__file__).resolve().parents[3]
_PACKAGED = Path(__file__).resolve().parents[2] / "migrations"


def _option(path: Path) -> str:
    return str(path).replace("%", "%%")  # the file's syntax: % starts an interpolation


def alembic_config() -> Config:
    """Alembic's configuration: the checkout's alembic.ini and alembic/ when running from one
    (so that `alembic revision` there and the service agree), else the installed package's
    migrations, from any working directory. The file sets nothing env.py reads (it takes the
    URL and the schema from `attributes` or the settings), so the two differ only where
    alembic looks for the scripts; an installed service also puts no directory on sys.path."""
    if (_CHECKOUT / "alembic.ini").is_file() and (_CHECKOUT / "alembic" / "env.py").is_file():
        config = Config(str(_CHECKOUT / "alembic.ini"))
        config.set_main_option("script_location", _option(_CHECKOUT / "alembic"))
        return config
    config = Config()
    config.set_main_option("script_location", _option(_PACKAGED))
    config.set_main_option("path_separator", "os")
    return config


def _upgrade(connection: Connection, schema: str | None) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    config.attributes["schema"] = schema
    command.upgrade(config, "head")


# Alembic announces its context ("Context impl ...", "Will assume transactional DDL") at
# INFO each time one is made: news in a migration, noise in a readiness probe.
_MIGRATION_LOG = logging.getLogger("alembic.runtime.migration")


def _current_heads(connection: Connection, schema: str | None) -> set[str]:
    # Quiet only while the context is made, which does no I/O: no other coroutine runs
    # meanwhile, so a migration elsewhere in the process keeps its log lines.
    level = _MIGRATION_LOG.level
    _MIGRATION_LOG.setLevel(logging.WARNING)
    try:
        context = MigrationContext.configure(connection, opts={"version_table_schema": schema})
    finally:
        _MIGRATION_LOG.setLevel(level)
    return set(context.get_current_heads())


def head_revisions() -> set[str]:
    """The revisions this version needs. Read from the scripts once a process: a readiness
    probe asks each time, and reading them parses every migration (tens of milliseconds)."""
    return set(_heads())


@functools.cache
def _heads() -> frozenset[str]:
    return frozenset(ScriptDirectory.from_config(alembic_config()).get_heads())


def upgrade_sql(url: str, schema: str | None) -> str:
    """The SQL that takes an empty database to head, in the dialect of `url`, without
    connecting to it (alembic's offline mode)."""
    output = io.StringIO()
    config = alembic_config()
    config.output_buffer = output
    config.attributes["url"] = url
    config.attributes["schema"] = schema
    command.upgrade(config, "head", sql=True)
    return output.getvalue()


async def upgrade_to_head(database: Database) -> None:
    """Upgrade the schema; replicas starting together take turns on the dialect's
    migration lock, and the later ones find it at head. Through a pooler the lock is the
    session's of a direct connection when there is a direct URL, else the transaction's
    that runs every migration (PostgreSQL's DDL is transactional)."""
    if database.pooled and database.direct_url is not None:
        direct = Database(database.direct_url, schema=database.schema, connections=1)
        try:
            await upgrade_to_head(direct)
        finally:
            await direct.close()
        return
    async with (
        database.connect() as conn,
        database.dialect.migrating(conn, database.schema, session=not database.pooled),
    ):
        await conn.run_sync(_upgrade, database.schema)
        await conn.commit()


async def revisions(database: Database) -> tuple[set[str], set[str]]:
    """The revisions the database's schema is at (none: an empty database) and those this
    version needs (the head)."""
    async with database.connect() as conn:
        current = await conn.run_sync(_current_heads, database.schema)
    return current, head_revisions()


async def is_at_head(database: Database) -> bool:
    current, head = await revisions(database)
    return current == head
