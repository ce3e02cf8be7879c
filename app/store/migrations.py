"""Schema migrations at start: upgrade to head under an advisory lock; readiness check."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from alembic import command
from app.store.database import Database

# Any constant works; it only has to be the same in every replica.
_MIGRATION_LOCK = 0x43_48_52_4F_4E_51  # "CHRONQ"


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


def _upgrade(connection: Connection) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def _current_heads(connection: Connection) -> set[str]:
    return set(MigrationContext.configure(connection).get_current_heads())


def head_revisions() -> set[str]:
    return set(ScriptDirectory.from_config(alembic_config()).get_heads())


async def upgrade_to_head(database: Database) -> None:
    """Upgrade the schema; replicas starting together wait on one advisory lock."""
    async with database.engine.connect() as conn:
        if database.is_postgresql:
            await conn.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": _MIGRATION_LOCK})
        try:
            await conn.run_sync(_upgrade)
            await conn.commit()
        finally:
            if database.is_postgresql:
                await conn.execute(
                    sa.text("SELECT pg_advisory_unlock(:key)"), {"key": _MIGRATION_LOCK}
                )
                await conn.commit()


async def is_at_head(database: Database) -> bool:
    async with database.engine.connect() as conn:
        current = await conn.run_sync(_current_heads)
    return current == head_revisions()
