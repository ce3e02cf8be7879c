"""Alembic environment: async engines, URL from the caller or from the settings."""

from __future__ import annotations

import asyncio

from sqlalchemy.engine import Connection

from alembic import context
from app.store.database import Database
from app.store.tables import metadata

config = context.config


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
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
    database = Database(_url())
    try:
        async with database.engine.connect() as connection:
            await connection.run_sync(_configure)
            await connection.commit()
    finally:
        await database.close()


def _run_offline() -> None:
    from app.store.database import normalize_url

    context.configure(url=normalize_url(_url()), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    _run_offline()
elif (connection := config.attributes.get("connection")) is not None:
    _configure(connection)
else:
    asyncio.run(_run_online())
