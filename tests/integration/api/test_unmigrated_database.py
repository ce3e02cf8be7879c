"""A database not migrated to this version, with CHRONOQ_AUTO_MIGRATE off: the app says so
at start on one line, every request that reaches the database is a 503 problem naming
`chronoq migrate`, the loop waits without a traceback, and once `chronoq migrate` has run the
same calls succeed and the loop delivers, with no restart."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from asgi_lifespan import LifespanManager
from prometheus_client import REGISTRY

from app.main import create_app
from app.store.engine.migrations import head_revisions
from tests.conftest import make_settings
from tests.integration.cli.commands import chronoq
from tests.receiver import Receiver
from tests.waiting import eventually

PROBLEM = "application/problem+json"


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgresql", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ]
)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database of each store with no Chronoq tables at all."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    fixture = {"postgresql": "empty_postgres", "mysql": "empty_mysql"}[request.param]
    make: Callable[[], str] = request.getfixturevalue(fixture)
    return make()


def _spec(receiver: Receiver) -> dict[str, object]:
    return {
        "event_type": "test.event",
        "target": {"type": "webhook", "url": receiver.url("/hook")},
        "trigger": {"type": "immediate"},
    }


def _loop_errors() -> float:
    return REGISTRY.get_sample_value("chronoq_loop_errors_total") or 0.0


async def test_an_unmigrated_database_is_said_at_start_and_answered_with_503_until_migrated(
    empty_url: str,
    receiver: Receiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    errors_before = _loop_errors()
    app = create_app(make_settings(empty_url, worker_enabled=True, auto_migrate=False))
    with caplog.at_level(logging.INFO):
        async with LifespanManager(app) as manager:
            transport = httpx.ASGITransport(app=manager.app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://localhost"
            ) as client:
                listed = await client.get("/v1/schedules")
                created = await client.post("/v1/schedules", json=_spec(receiver))
                ready = await client.get("/readyz")
                # The loop has tried and failed more than once meanwhile.
                await eventually(lambda: _loop_errors() >= errors_before + 2, within=15)
                waits = [r for r in caplog.records if r.getMessage().startswith("claims wait")]

                migrate = await asyncio.to_thread(chronoq, "migrate", DATABASE_URL=empty_url)
                assert migrate.returncode == 0, migrate.stderr

                listed_after = await client.get("/v1/schedules")
                created_after = await client.post("/v1/schedules", json=_spec(receiver))
                await receiver.wait_for(1, "/hook", timeout=15)

    start = [r for r in caplog.records if "schema revision" in r.getMessage()]
    assert len(start) == 1
    line = start[0].getMessage()
    assert start[0].levelno == logging.WARNING
    assert "`chronoq migrate`" in line
    assert "at schema revision none" in line
    assert all(revision in line for revision in head_revisions())

    for answer in (listed, created):
        assert answer.status_code == 503
        assert answer.headers["content-type"] == PROBLEM
        assert answer.headers["retry-after"] == "2"
        problem = answer.json()
        assert problem["type"] == "urn:chronoq:problem:schema-not-migrated"
        assert "`chronoq migrate`" in problem["detail"]
        assert empty_url not in answer.text
    assert ready.status_code == 503
    assert ready.json()["checks"]["database"] == "not migrated to head"

    assert listed_after.status_code == 200
    assert created_after.status_code == 201

    # Each refused request is one line, the loop's wait one line however often it retried
    # (a migration under way may change the reason: MySQL's DDL is not transactional), and
    # no line anywhere carries a traceback.
    refused = [r for r in caplog.records if r.name == "app.api.problems"]
    assert [r.getMessage().split(":")[0] for r in refused] == [
        "GET /v1/schedules",
        "POST /v1/schedules",
    ]
    assert len(waits) == 1
    assert "chronoq migrate" in waits[0].getMessage()
    assert any(r.getMessage() == "claims work again" for r in caplog.records)
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
