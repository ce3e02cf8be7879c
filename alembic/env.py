"""Alembic environment: async engines, URL and schema from the caller or from the settings.

With a schema (CHRONOQ_DB_SCHEMA), the schema is created when missing, the migrations run
with it as the connection's search_path, and `alembic_version` lives in it too, so each
installation in a shared database has its own migration history.
"""

from __future__ import annotations

import asyncio
import logging
import re
import warnings

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from alembic import context
from app.store import dialects
from app.store.dialects.base import Dialect
from app.store.dialects.postgresql import quote_schema
from app.store.engine.database import Database, normalize_url
from app.store.schema.tables import metadata

config = context.config

# MySQL names no primary key; the constraint names the tables give are for the others.
# The server says so as a warning, which SQLAlchemy repeats and the drivers log.
_UNNAMED_KEY = r"Name '.*' ignored for PRIMARY key"
warnings.filterwarnings("ignore", _UNNAMED_KEY, sa.exc.SAWarning)


class _UnnamedPrimaryKeys(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return re.search(_UNNAMED_KEY, record.getMessage()) is None


for _driver in ("asyncmy", "aiomysql"):
    if not any(isinstance(f, _UnnamedPrimaryKeys) for f in logging.getLogger(_driver).filters):
        logging.getLogger(_driver).addFilter(_UnnamedPrimaryKeys())


def _schema() -> str | None:
    if "schema" in config.attributes:
        schema = config.attributes["schema"]
        return None if schema is None else str(schema)
    from app.settings import load_settings

    return load_settings().db_schema


def _ensure_schema(connection: Connection, schema: str) -> None:
    # Looked up first: CREATE SCHEMA IF NOT EXISTS needs the CREATE privilege on the
    # database even when the schema exists, which a role given only its schema lacks.
    exists = connection.scalar(
        sa.text("SELECT 1 FROM pg_namespace WHERE nspname = :schema"), {"schema": schema}
    )
    if not exists:
        connection.execute(sa.text(f"CREATE SCHEMA IF NOT EXISTS {quote_schema(schema)}"))


def _dialect(url: object) -> Dialect:
    return dialects.for_url(str(url))


def _configure(connection: Connection) -> None:
    dialect = _dialect(connection.engine.url)
    schema = _schema() if dialect.backend.schemas else None
    if schema is not None:
        _ensure_schema(connection, schema)
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite alters a table by rebuilding it.
        render_as_batch=dialect.batch_migrations,
        compare_type=True,
        version_table_schema=schema,
    )
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        from app.settings import load_settings

        url = load_settings().database_url
    return str(url)


async def _run_online() -> None:
    url = _url()
    schema = _schema() if _dialect(url).backend.schemas else None
    database = Database(url, schema=schema)
    try:
        async with (
            database.engine.connect() as connection,
            database.dialect.migrating(connection, schema, session=not database.pooled),
        ):
            await connection.run_sync(_configure)
            await connection.commit()
    finally:
        await database.close()


def _run_offline() -> None:
    url = normalize_url(_url())
    schema = _schema() if _dialect(url).backend.schemas else None
    context.configure(
        url=url, target_metadata=metadata, literal_binds=True, version_table_schema=schema
    )
    with context.begin_transaction():
        if schema is not None:
            # A session-wide SET, not SET LOCAL: it holds whether the script is run as one
            # transaction or statement by statement.
            context.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_schema(schema)}")
            context.execute(f"SET search_path TO {quote_schema(schema)}")
        context.run_migrations()


if context.is_offline_mode():
    _run_offline()
elif (connection := config.attributes.get("connection")) is not None:
    _configure(connection)
else:
    asyncio.run(_run_online())
