"""A server at its connection limit, on each store that has one: a transaction the server has
no room for waits for one of the pool's connections to come back rather than answering that
the database cannot be reached (it is up, and busy). PostgreSQL refuses with SQLSTATE 53300
(a role's CONNECTION LIMIT here, as at max_connections); MySQL/MariaDB with 1226 (a user's
MAX_USER_CONNECTIONS here), 1203 or 1040."""

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

# What makes a login that may hold at most two connections, and what removes it again, on
# the database the URL names.
_LIMITED: dict[str, tuple[list[str], list[str]]] = {
    "postgresql": (
        [
            "CREATE ROLE {user} LOGIN CONNECTION LIMIT 2",
            "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {user}",
        ],
        [
            "REASSIGN OWNED BY {user} TO postgres",
            "DROP OWNED BY {user}",
            'REVOKE ALL ON DATABASE "{database}" FROM {user}',
            "DROP ROLE {user}",
        ],
    ),
    "mysql": (
        [
            "CREATE USER '{user}'@'127.0.0.1' WITH MAX_USER_CONNECTIONS 2",
            "GRANT SELECT ON `{database}`.* TO '{user}'@'127.0.0.1'",
        ],
        ["DROP USER '{user}'@'127.0.0.1'"],
    ),
}


def admin(url: str, statement: str) -> None:
    async def run() -> None:
        database = Database(url)
        try:
            await database.run(lambda conn: conn.execute(sa.text(statement)))
        finally:
            await database.close()

    run_sync(run)


@pytest.fixture(
    params=[
        pytest.param("postgresql", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ]
)
def limited_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The store's test database as a login of its own that may hold at most two
    connections: the server refuses a third."""
    store = request.param
    url = request.getfixturevalue("postgres_url" if store == "postgresql" else "mysql_url")
    # Made and removed by the server's administrator: on PostgreSQL through the test
    # database itself, whose schema the grant names.
    admin_url = url if store == "postgresql" else MYSQL_ADMIN_URL
    user = f"chronoq_limited_{uuid.uuid4().hex[:8]}"
    names = {"user": user, "database": make_url(url).database}
    create, remove = _LIMITED[store]
    for statement in create:
        admin(admin_url, statement.format(**names))
    try:
        yield make_url(url).set(username=user, password=None).render_as_string(hide_password=False)
    finally:
        for statement in remove:
            admin(admin_url, statement.format(**names))


async def test_a_read_while_the_server_is_at_its_connection_limit_waits_for_a_connection(
    limited_url: str,
) -> None:
    """A pool that would open more connections than the server allows: a read waits for one
    of the pool's connections to come back."""
    database = Database(limited_url, connections=6)  # keeps 3, more than the server allows

    async def read(n: int) -> int:
        async def work(conn: Any) -> int:
            await conn.execute(sa.text("SELECT 1"))
            await asyncio.sleep(0.2)
            await conn.execute(sa.text("SELECT id FROM schedules LIMIT 1"))
            return n

        return await database.run(work)

    try:
        answers = await asyncio.wait_for(asyncio.gather(*(read(n) for n in range(6))), 30)
        assert sorted(answers) == list(range(6))
    finally:
        await database.close()


async def test_readiness_while_the_server_is_at_its_connection_limit_waits_for_a_connection(
    limited_url: str,
) -> None:
    """The server has no room for one more connection of this replica's for a moment: the
    readiness check waits for one rather than reporting the database unreachable."""
    database = Database(limited_url, connections=2)
    holder = Database(limited_url, connections=2)
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
