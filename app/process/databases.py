"""The pools of a replica, built from its settings (DESIGN section 12).

Invariant: every `Database` a process opens for an installation goes through `open_database`,
so each is sized by its setting and knows whether a pooler stands between it and the server.
"""

from __future__ import annotations

from typing import Literal

from app.domain.errors import StoreUnavailableError
from app.settings import Settings
from app.store.engine.database import Database, is_unavailable

# What a pool is for: the API's requests; the delivery loop's claims and settles; its start
# marks (two connections, so a mark never waits for the loop's own); one command's work.
Purpose = Literal["api", "worker", "starts", "command"]
STARTS_CONNECTIONS = 2
COMMAND_CONNECTIONS = 2


def connections_for(settings: Settings, purpose: Purpose) -> int:
    """The most connections a pool for `purpose` opens."""
    if purpose == "api":
        return settings.db_pool_size
    if purpose == "worker":
        return settings.worker_db_pool_size
    return STARTS_CONNECTIONS if purpose == "starts" else COMMAND_CONNECTIONS


def open_database(settings: Settings, purpose: Purpose, *, url: str | None = None) -> Database:
    """A pool of the installation's database for `purpose`. The loop's pools skip the ping
    at checkout: each of their transactions is safe to fail and run again, and a dead pooled
    connection is dropped on its first error. A replica's transactions are bounded in time
    (CHRONOQ_DB_TRANSACTION_TIMEOUT); a command's are not (a migration may take long)."""
    return Database(
        url or settings.database_url,
        schema=settings.db_schema,
        connections=connections_for(settings, purpose),
        pre_ping=purpose not in ("worker", "starts"),
        pooled=settings.db_pooler == "transaction",
        direct_url=settings.database_direct_url,
        timeout=None if purpose == "command" else settings.db_transaction_timeout,
    )


async def check_direct_url(settings: Settings) -> str | None:
    """Why CHRONOQ_DATABASE_DIRECT_URL cannot serve this installation (it reaches another
    database or server than DATABASE_URL), None when it can or either cannot be reached
    now (the replica then retries both as it runs)."""
    if settings.database_direct_url is None:
        return None
    pooled = open_database(settings, "command")
    direct = open_database(settings, "command", url=settings.database_direct_url)
    try:
        through_pooler, directly = await pooled.identity(), await direct.identity()
    except StoreUnavailableError:
        return None
    except Exception as exc:
        if is_unavailable(exc, pooled.dialect):
            return None
        raise
    finally:
        await pooled.close()
        await direct.close()
    if through_pooler == directly:
        return None
    return (
        f"CHRONOQ_DATABASE_DIRECT_URL reaches database {directly[0]!r} of a server started "
        f"{directly[1]}, DATABASE_URL database {through_pooler[0]!r} of a server started "
        f"{through_pooler[1]}: the direct URL must reach the same database"
    )
