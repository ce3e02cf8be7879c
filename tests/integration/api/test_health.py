"""Liveness and readiness as a load balancer sees them."""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import Callable

import httpx
import pytest
from asgi_lifespan import LifespanManager
from sqlalchemy.engine import make_url

from app.main import create_app
from tests.conftest import make_settings
from tests.integration.conftest import Harness
from tests.tcp_proxy import TcpProxy


async def test_healthz_answers_while_the_process_is_up(harness: Harness) -> None:
    response = await harness.client.get("/healthz")

    assert response.status_code == 200
    assert response.json()["status"] == "ok"


async def test_readyz_reports_a_reachable_migrated_database(harness: Harness) -> None:
    response = await harness.client.get("/readyz")

    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok"}


async def test_readyz_is_503_on_a_database_not_migrated_to_head(
    tmp_path: pathlib.Path,
) -> None:
    app = create_app(make_settings(f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"))
    async with LifespanManager(app) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            response = await client.get("/readyz")

    assert response.status_code == 503
    assert response.json() == {
        "status": "not ready",
        "checks": {"database": "not migrated to head"},
    }


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_readyz_is_503_while_the_database_is_unreachable_and_200_after(
    database_url: str,
) -> None:
    url = make_url(database_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    await proxy.start()
    proxied = url.set(port=proxy.port).render_as_string(hide_password=False)
    app = create_app(make_settings(proxied, worker_enabled=True))
    try:
        async with LifespanManager(app) as manager:
            transport = httpx.ASGITransport(app=manager.app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://localhost"
            ) as client:
                ready = await client.get("/readyz")
                assert ready.status_code == 200
                assert ready.json()["checks"] == {"database": "ok", "worker": "ok"}

                await proxy.cut()
                down = await client.get("/readyz")
                assert down.status_code == 503
                assert down.json()["checks"]["database"].startswith("unreachable")
                assert "127.0.0.1" not in down.text
                # Once its claims have failed for a few poll intervals, the loop says so.
                worker = await _worker_check(client, lambda w: w.startswith("claims failing"))
                assert worker.endswith("StoreUnavailableError")

                await proxy.restore()
                # It recovers by itself: the next claim that works makes it ready again.
                await _worker_check(client, lambda w: w == "ok")
                assert (await client.get("/readyz")).status_code == 200
    finally:
        await proxy.close()


async def _worker_check(client: httpx.AsyncClient, wanted: Callable[[str], bool]) -> str:
    """The readiness check of the delivery loop, once `wanted` holds (20 s at most)."""
    deadline = time.monotonic() + 20
    while True:
        worker = str((await client.get("/readyz")).json()["checks"].get("worker"))
        if wanted(worker):
            return worker
        assert time.monotonic() < deadline, f"the worker check stayed {worker!r}"
        await asyncio.sleep(0.05)


async def test_healthz_answers_head_with_its_status_and_no_body(harness: Harness) -> None:
    response = await harness.client.head("/healthz")

    assert response.status_code == 200
    assert response.content == b""


async def test_metrics_report_each_readiness_check(harness: Harness) -> None:
    text = (await harness.client.get("/metrics")).text

    assert 'chronoq_ready{check="database"} 1.0' in text


async def test_metrics_report_a_failing_readiness_check_as_zero(
    tmp_path: pathlib.Path,
) -> None:
    app = create_app(make_settings(f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"))
    async with LifespanManager(app) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            text = (await client.get("/metrics")).text

    assert 'chronoq_ready{check="database"} 0.0' in text
