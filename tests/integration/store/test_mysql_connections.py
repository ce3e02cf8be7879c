"""MySQL/MariaDB connections at the server's limit: a transaction the server has no room for
(a user's `MAX_USER_CONNECTIONS`, 1203, or the server's `max_connections`, 1040) waits for
one of the pool's connections to come back, as on PostgreSQL, rather than failing: the
server is up, and busy."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app.process.readiness import ReplicaReadiness
from app.store.engine.database import Database
from tests.conftest import MYSQL_ADMIN_URL, run_sync

pytestmark = pytest.mark.mysql


def admin(statement: str) -> None:
    async def run() -> None:
        database = Database(MYSQL_ADMIN_URL)
        try:
            await database.run(lambda conn: conn.execute(sa.text(statement)))
        finally:
            await database.close()

    run_sync(run)


@pytest.fixture
def limited_user(mysql_url: str) -> Iterator[str]:
    """`mysql_url` as a user of its own that may hold at most two connections: the server
    refuses a third."""
    user = f"chronoq_limited_{uuid.uuid4().hex[:8]}"
    database = make_url(mysql_url).database
    admin(f"CREATE USER '{user}'@'127.0.0.1' WITH MAX_USER_CONNECTIONS 2")
    admin(f"GRANT SELECT ON `{database}`.* TO '{user}'@'127.0.0.1'")
    try:
        yield (
            make_url(mysql_url)
            .set(username=user, password=None)
            .render_as_string(hide_password=False)
        )
    finally:
        admin(f"DROP USER '{user}'@'127.0.0.1'")


async def test_a_read_while_the_server_is_at_its_connection_limit_waits_for_a_connection(
    limited_user: str,
) -> None:
    database = Database(limited_user, connections=6)  # more than the server allows

    async def read(n: int) -> int:
        async def work(conn: Any) -> int:
            await conn.execute(sa.text("SELECT SLEEP(0.2)"))
            await conn.execute(sa.text("SELECT id FROM schedules LIMIT 1"))
            return n

        return await database.run(work)

    try:
        answers = await asyncio.wait_for(asyncio.gather(*(read(n) for n in range(6))), 30)
        assert sorted(answers) == list(range(6))
    finally:
        await database.close()


async def test_readiness_while_the_server_is_at_its_connection_limit_waits_for_a_connection(
    limited_user: str,
) -> None:
    """The server has no room for one more connection of this replica's for a moment: the
    readiness check waits for one rather than reporting the database unreachable."""
    database = Database(limited_user, connections=2)
    holder = Database(limited_user, connections=2)
    held = [await holder.engine.connect().start() for _ in range(2)]

    async def release() -> None:
        await asyncio.sleep(0.5)
        for conn in held:
            await conn.close()

    releasing = asyncio.create_task(release())
    try:
        checks = await asyncio.wait_for(ReplicaReadiness(database, None, None).checks(), 30)
        assert checks == {"database": "ok"}
    finally:
        await releasing
        await holder.close()
        await database.close()
