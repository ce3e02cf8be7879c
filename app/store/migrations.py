"""Schema migrations at start: upgrade to head under the migration lock; readiness check.

Invariant: one installation (one schema) is migrated by one replica at a time; another
installation in the same database takes a lock of its own and migrates alongside.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from alembic import command
from app.store.database import Database


def _root() -> Path:
    """Where alembic.ini and alembic/ live: the source checkout when running from one
    (editable installs, tests), else the working directory (an installed package, as in
    the container image, which copies them there)."""
    checkout = Path(__file__).resolve().parent.parent.parent
    return checkout if (checkout / "alembic.ini").is_file() else Path.cwd()


def alembic_config() -> Config:
    root = _root()
    config = Config(str(root / "alembic.ini"))
    config.set_main_option("script_location", str(root / "alembic"))
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
    return set(ScriptDirectory.from_config(alembic_config()).get_heads())


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
        database.engine.connect() as conn,
        database.dialect.migrating(conn, database.schema, session=not database.pooled),
    ):
        await conn.run_sync(_upgrade, database.schema)
        await conn.commit()


async def is_at_head(database: Database) -> bool:
    async with database.engine.connect() as conn:
        current = await conn.run_sync(_current_heads, database.schema)
    return current == head_revisions()
