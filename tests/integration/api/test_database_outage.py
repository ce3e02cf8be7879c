"""A database that cannot be reached: every request is a 503 problem the client may retry,
nothing leaks about where the database lives, and nothing is half-stored."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from asgi_lifespan import LifespanManager
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from app.client import AsyncClient, UnavailableError
from app.domain.errors import SchemaNotMigratedError, StoreUnavailableError
from app.main import create_app
from app.store.engine.database import Database
from tests.conftest import ALL_STORES, make_settings
from tests.tcp_proxy import TcpProxy

PROBLEM = "application/problem+json"
HOOK = "http://127.0.0.1:9/hooks"


def spec(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "event_type": "report.due",
        "payload": {"n": 1},
        "target": {"type": "webhook", "url": HOOK},
        "trigger": {"type": "cron", "expression": "@daily"},
    }


@dataclass
class Outage:
    client: httpx.AsyncClient
    proxy: TcpProxy
    database_url: str
    existing: dict[str, Any]
    transport: httpx.AsyncBaseTransport


@pytest.fixture
async def outage(database_url: str) -> AsyncIterator[Outage]:
    """The app on PostgreSQL through a proxy the test can cut, with one schedule stored."""
    url = make_url(database_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    await proxy.start()
    proxied = url.set(port=proxy.port).render_as_string(hide_password=False)
    app = create_app(make_settings(proxied))
    try:
        async with LifespanManager(app) as manager:
            transport = httpx.ASGITransport(app=manager.app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://localhost"
            ) as client:
                created = await client.post("/v1/schedules", json=spec("before-the-outage"))
                assert created.status_code == 201, created.text
                yield Outage(client, proxy, database_url, created.json(), transport)
    finally:
        await proxy.close()


def requests_during(outage: Outage) -> dict[str, tuple[str, str, dict[str, Any] | None]]:
    path = f"/v1/schedules/{outage.existing['id']}"
    return {
        "create": ("POST", "/v1/schedules", spec("during-the-outage")),
        "patch": ("PATCH", path, {"max_attempts": 2, "labels": {"team": "ops"}}),
        "cancel": ("DELETE", path, None),
        "pause": ("POST", f"{path}/pause", None),
        "get": ("GET", path, None),
        "list": ("GET", "/v1/schedules", None),
    }


def assert_retryable_problem(response: httpx.Response, port: int) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    assert int(response.headers["retry-after"]) >= 1
    problem = response.json()
    assert problem["status"] == 503
    assert problem["type"] == "urn:chronoq:problem:unavailable"
    assert problem["title"]
    assert problem["detail"]
    for secret in ("127.0.0.1", str(port), "postgres", "asyncpg", "Traceback", "Error"):
        assert secret not in response.text, response.text


on_postgresql = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


@pytest.mark.postgres
@on_postgresql
@pytest.mark.parametrize("request_name", ["create", "patch", "cancel", "pause", "get", "list"])
async def test_a_request_while_the_database_is_unreachable_is_a_503_problem_to_retry(
    outage: Outage, request_name: str
) -> None:
    method, path, body = requests_during(outage)[request_name]
    await outage.proxy.cut()

    response = await outage.client.request(method, path, json=body)

    assert_retryable_problem(response, outage.proxy.port)


@pytest.mark.postgres
@on_postgresql
async def test_after_the_outage_a_create_succeeds_and_nothing_was_half_stored(
    outage: Outage,
) -> None:
    await outage.proxy.cut()
    for method, path, body in requests_during(outage).values():
        assert (await outage.client.request(method, path, json=body)).status_code == 503

    await outage.proxy.restore()
    created = await outage.client.post("/v1/schedules", json=spec("after-the-outage"))

    assert created.status_code == 201, created.text
    listed = (await outage.client.get("/v1/schedules")).json()["items"]
    assert sorted(item["name"] for item in listed) == ["after-the-outage", "before-the-outage"]
    existing = (await outage.client.get(f"/v1/schedules/{outage.existing['id']}")).json()
    assert existing == outage.existing
    assert await stored(outage.database_url) == sorted(
        [
            (outage.existing["id"], "pending", "pending"),
            (created.json()["id"], "pending", "pending"),
        ]
    )


@pytest.mark.postgres
@on_postgresql
async def test_the_client_waits_out_the_outage_and_its_create_is_stored_once(
    outage: Outage,
) -> None:
    """Each 503 says when to try again; the client does, under the create's one
    Idempotency-Key, until the database is back."""
    await outage.proxy.cut()
    async with AsyncClient("http://localhost", transport=outage.transport) as chronoq:
        create = asyncio.create_task(chronoq.create_schedule(spec("through-the-outage")))
        await asyncio.sleep(0.5)
        assert not create.done()
        await outage.proxy.restore()
        created = await asyncio.wait_for(create, timeout=30)

        names = sorted([s.name or "" async for s in chronoq.iter_schedules()])
    assert names == ["before-the-outage", "through-the-outage"]
    assert created.name == "through-the-outage"


@pytest.mark.postgres
@on_postgresql
async def test_the_client_raises_the_503_once_its_retries_are_spent(outage: Outage) -> None:
    await outage.proxy.cut()
    async with AsyncClient("http://localhost", transport=outage.transport, retries=0) as chronoq:
        with pytest.raises(UnavailableError) as refused:
            await chronoq.get_schedule(outage.existing["id"])
    assert refused.value.retry_after is not None
    assert refused.value.retry_after >= 1


async def stored(database_url: str) -> list[tuple[str, str, str]]:
    """Read past the proxy: every schedule with its status and its occurrences' statuses."""
    database = Database(database_url)
    try:
        async with database.engine.connect() as conn:
            rows = await conn.execute(
                sa.text(
                    "SELECT s.id, s.status, o.status FROM schedules s"
                    " LEFT JOIN occurrences o ON o.schedule_id = s.id"
                )
            )
            return sorted((str(id_), status, str(occurrence)) for id_, status, occurrence in rows)
    finally:
        await database.close()


# Each database has its own error codes for what it refuses.
@ALL_STORES
async def test_a_statement_the_database_refuses_is_not_an_outage(database_url: str) -> None:
    database = Database(database_url)
    try:
        with pytest.raises((ProgrammingError, OperationalError)):
            await database.run(lambda conn: conn.execute(sa.text("SELEC 1")))
        # A table that is not there says the schema is not this version's, not that the
        # database is down.
        with pytest.raises(SchemaNotMigratedError, match="`chronoq migrate`"):
            await database.run(lambda conn: conn.execute(sa.text("SELECT * FROM calendars")))
        with pytest.raises(SchemaNotMigratedError, match="`chronoq migrate`"):
            await database.run(lambda conn: conn.execute(sa.text("SELECT nope FROM schedules")))
        # A constraint (MySQL names the first column without a default instead).
        with pytest.raises((IntegrityError, OperationalError)):
            await database.run(
                lambda conn: conn.execute(sa.text("INSERT INTO schedules (id) VALUES (NULL)"))
            )
    finally:
        await database.close()


async def test_a_sqlite_file_that_cannot_be_opened_is_an_outage(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    database = Database(f"sqlite:///{tmp_path}")  # a directory, not a database file
    try:
        with pytest.raises(StoreUnavailableError, match="cannot reach"):
            await database.run(lambda conn: conn.execute(sa.text("SELECT 1")))
    finally:
        await database.close()
        # aiosqlite stops the thread of a connection that failed to open without waiting
        # for it; it must finish while this test's loop can still take its last callback.
        for thread in set(threading.enumerate()) - before:
            await asyncio.to_thread(thread.join, 5)


@pytest.mark.postgres
@on_postgresql
async def test_a_connection_lost_inside_a_transaction_is_an_outage(database_url: str) -> None:
    url = make_url(database_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    await proxy.start()
    database = Database(url.set(port=proxy.port).render_as_string(hide_password=False))

    async def work(conn: Any) -> None:
        await conn.execute(sa.text("SELECT 1"))
        await proxy.cut()
        await conn.execute(sa.text("SELECT 1"))

    try:
        with pytest.raises(StoreUnavailableError):
            await database.run(work)
    finally:
        await database.close()
        await proxy.close()
