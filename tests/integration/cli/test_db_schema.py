"""CHRONOQ_DB_SCHEMA: two installations, `alpha` and `beta`, side by side in one PostgreSQL
database, each migrated by `chronoq migrate`, each seeing, delivering and being woken by
its own schedules only, and nothing of either in `public`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import httpx
import pytest
from asgi_lifespan import LifespanManager
from sqlalchemy.ext.asyncio import AsyncConnection

from app.main import create_app
from app.store.dialects import dialect_of
from app.store.dialects.postgresql import migration_lock_key
from app.store.engine.database import Database
from app.store.engine.migrations import is_at_head
from app.store.engine.wakeups import Wakeups
from tests.conftest import make_settings
from tests.integration.cli.commands import describe, in_process_async, start
from tests.receiver import Receiver

pytestmark = pytest.mark.postgres

CHRONOQ_TABLES = {
    ("schedules",),
    ("occurrences",),
    ("attempts",),
    ("attempts_kept",),
    ("schedule_events",),
    ("schedule_events_kept",),
    ("flow_keys",),
    ("flow_key_sleeps",),
    ("tenants",),
    ("tenant_keys",),
    ("tenant_events",),
    ("endpoints",),
    ("endpoint_secrets",),
    ("endpoint_events",),
    ("topics",),
    ("subscriptions",),
    ("operator_events",),
    ("activity_minutes",),
    ("alembic_version",),
}


def _migrate_side_by_side(url: str, *schemas: str) -> None:
    """`chronoq migrate` of each schema at once, each a process of its own."""
    running = {
        schema: start("migrate", DATABASE_URL=url, CHRONOQ_DB_SCHEMA=schema) for schema in schemas
    }
    for schema, process in running.items():
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, f"{schema}: {stderr}"


class Heard:
    """What one installation's loop hears announced (seconds until due), as it arrives."""

    def __init__(self, wakeups: Wakeups) -> None:
        self.announcements: list[float] = []
        self._arrived = asyncio.Event()
        wakeups.subscribe(self._record)

    def _record(self, seconds: float) -> None:
        self.announcements.append(seconds)
        self._arrived.set()

    async def next(self, timeout: float = 10.0) -> None:
        await asyncio.wait_for(self._arrived.wait(), timeout)

    def clear(self) -> None:
        self.announcements.clear()
        self._arrived.clear()


@asynccontextmanager
async def installation(
    url: str, schema: str, *, worker: bool, wakeups: Wakeups | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """The service of one installation in-process; its loop polls only every 30 s, so a
    prompt delivery shows that the installation's own announcements reached it."""
    settings = make_settings(url, db_schema=schema, worker_enabled=worker, poll_interval=30.0)
    app = create_app(settings, wakeups)
    async with LifespanManager(app) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client


async def _create(client: httpx.AsyncClient, receiver: Receiver, path: str) -> dict[str, Any]:
    response = await client.post(
        "/v1/schedules",
        json={
            "event_type": f"{path.strip('/')}.event",
            "payload": {"for": path},
            "target": {"type": "webhook", "url": receiver.url(path)},
            "trigger": {"type": "immediate"},
        },
    )
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def _ids(client: httpx.AsyncClient) -> set[str]:
    response = await client.get("/v1/schedules")
    assert response.status_code == 200, response.text
    return {item["id"] for item in response.json()["items"]}


async def _status_becomes(client: httpx.AsyncClient, schedule_id: str, status: str) -> None:
    deadline = time.monotonic() + 10
    while (await client.get(f"/v1/schedules/{schedule_id}")).json()["status"] != status:
        assert time.monotonic() < deadline, f"{schedule_id} never became {status}"
        await asyncio.sleep(0.05)


async def test_two_installations_share_a_database_without_seeing_each_other(
    empty_postgres: Callable[[], str], receiver: Receiver
) -> None:
    url = empty_postgres()
    _migrate_side_by_side(url, "alpha", "beta")
    assert (await describe(url, "public"))["tables"] == set()
    assert (await describe(url, "alpha"))["tables"] == CHRONOQ_TABLES
    assert (await describe(url, "beta"))["tables"] == CHRONOQ_TABLES

    alpha_wakeups = Wakeups()
    heard_by_alpha = Heard(alpha_wakeups)
    async with (
        installation(url, "alpha", worker=True, wakeups=alpha_wakeups) as alpha,
        installation(url, "beta", worker=False) as beta,
    ):
        await heard_by_alpha.next()  # its LISTEN connection is up
        heard_by_alpha.clear()

        in_beta = await _create(beta, receiver, "/beta")
        await asyncio.sleep(1.0)
        assert heard_by_alpha.announcements == [], "beta's write woke alpha's loop"
        assert receiver.on("/beta") == [], "alpha's loop delivered beta's occurrence"

        in_alpha = await _create(alpha, receiver, "/alpha")
        (delivered,) = await receiver.wait_for(1, "/alpha", timeout=10)
        assert delivered.occurrence_id == in_alpha["next_occurrence_id"]
        assert heard_by_alpha.announcements, "alpha's loop did not hear alpha's write"

        assert await _ids(alpha) == {in_alpha["id"]}
        assert await _ids(beta) == {in_beta["id"]}
        assert (await alpha.get(f"/v1/schedules/{in_beta['id']}")).status_code == 404
        assert (await beta.get(f"/v1/schedules/{in_alpha['id']}")).status_code == 404
        await _status_becomes(alpha, in_alpha["id"], "completed")
        (waiting,) = (await beta.get(f"/v1/schedules/{in_beta['id']}/occurrences")).json()["items"]
        assert (waiting["status"], waiting["attempts"]) == ("pending", 0)

        # Beta's own loop, started now, delivers beta's occurrence and nothing of alpha's.
        async with installation(url, "beta", worker=True):
            (delivered,) = await receiver.wait_for(1, "/beta", timeout=10)
            assert delivered.occurrence_id == in_beta["next_occurrence_id"]
            await _status_becomes(beta, in_beta["id"], "completed")
        assert len(receiver.on("/alpha")) == 1

    assert (await describe(url, "public"))["tables"] == set()


async def test_one_installation_migrates_while_another_waits_for_its_own_lock(
    empty_postgres: Callable[[], str],
) -> None:
    url = empty_postgres()
    holder = await asyncpg.connect(url)
    await holder.execute("SELECT pg_advisory_lock($1)", migration_lock_key("alpha"))
    try:
        alpha = start("migrate", DATABASE_URL=url, CHRONOQ_DB_SCHEMA="alpha")
        beta = await in_process_async("migrate", DATABASE_URL=url, CHRONOQ_DB_SCHEMA="beta")

        assert beta.returncode == 0, beta.stderr
        assert alpha.poll() is None, "alpha migrated without its lock"
    finally:
        await holder.execute("SELECT pg_advisory_unlock($1)", migration_lock_key("alpha"))
        await holder.close()
    _, stderr = await asyncio.to_thread(alpha.communicate, timeout=120)
    assert alpha.returncode == 0, stderr
    assert (await describe(url, "alpha"))["tables"] == CHRONOQ_TABLES


async def _holds_pruning_lock(conn: AsyncConnection) -> bool:
    """Takes the pruning lock for the rest of `conn`'s transaction, if it is free."""
    async with dialect_of(conn).exclusive(conn, "prune") as held:
        return held


async def test_each_installation_prunes_under_its_own_lock(
    empty_postgres: Callable[[], str],
) -> None:
    url = empty_postgres()
    for schema in ("alpha", "beta"):
        migrated = await in_process_async("migrate", DATABASE_URL=url, CHRONOQ_DB_SCHEMA=schema)
        assert migrated.returncode == 0, f"{schema}: {migrated.stderr}"
    databases = {
        "alpha": Database(url, schema="alpha"),
        "alpha again": Database(url, schema="alpha"),
        "beta": Database(url, schema="beta"),
    }
    try:
        async with databases["alpha"].engine.begin() as pruning_alpha:
            assert await _holds_pruning_lock(pruning_alpha)
            async with databases["alpha again"].engine.begin() as other_alpha:
                assert not await _holds_pruning_lock(other_alpha)
            async with databases["beta"].engine.begin() as beta:
                assert await _holds_pruning_lock(beta)
    finally:
        for database in databases.values():
            await database.close()


async def test_readiness_looks_for_the_migrations_in_the_installations_schema_only(
    postgres_url: str,
) -> None:
    default, elsewhere = Database(postgres_url), Database(postgres_url, schema="not_migrated")
    try:
        assert await is_at_head(default)
        assert not await is_at_head(elsewhere)
    finally:
        await default.close()
        await elsewhere.close()
