"""A PostgreSQL failover under two replicas (one API-only) with a multi-host DATABASE_URL: the
primary is killed mid-stream and its synchronous standby promoted. Meanwhile requests are 503
problems with Retry-After and /readyz is 503; afterwards every acknowledged schedule is there,
every occurrence is delivered, and wake-ups reach the loop again within seconds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.pg_servers import PgServer, Workspace, primary_with_standby
from tests.e2e.processes import Service, Services
from tests.receiver import Receiver

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

DATABASE = "chronoq"
STREAM = 40
GAP = 0.1
# Long enough that only a wake-up (NOTIFY heard on the new primary) explains a prompt delivery.
POLL_INTERVAL = 30.0
TIMEOUT = 90.0


@pytest.fixture
def cluster() -> Iterator[tuple[PgServer, PgServer]]:
    workspace = Workspace()
    servers: list[PgServer] = []
    try:
        primary, standby = primary_with_standby(workspace)
        servers = [primary, standby]
        primary.sql(f"CREATE DATABASE {DATABASE}")
        yield primary, standby
    finally:
        for server in servers:
            server.stop()
        workspace.remove()


def one_shot(receiver: Receiver, n: int, delay: float) -> dict[str, Any]:
    return {
        "name": f"stream-{n}",
        "event_type": "e2e.failover",
        "payload": {"n": n},
        "target": {"type": "webhook", "url": receiver.url(f"/s/{n}")},
        "trigger": {"type": "once", "delay_seconds": delay},
    }


async def until(check: Any, timeout: float, what: str, services: Services) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not seen within {timeout:g}s\n{services.logs()}")
        await asyncio.sleep(0.1)


async def test_a_failover_loses_nothing_acknowledged_or_due_and_wakeups_come_back(
    cluster: tuple[PgServer, PgServer], receiver: Receiver, services: Services
) -> None:
    primary, standby = cluster
    url = (
        f"postgresql://postgres@{primary.address},{standby.address}/{DATABASE}"
        "?target_session_attrs=read-write"
    )
    common = {
        "DATABASE_URL": url,
        "CHRONOQ_POLL_INTERVAL": str(POLL_INTERVAL),
        "CHRONOQ_LEASE": "6",
        "CHRONOQ_DISPATCH_TIMEOUT": "2",
        "CHRONOQ_RETRY_BASE_DELAY": "0.2",
        "CHRONOQ_RETRY_MAX_DELAY": "1",
        "CHRONOQ_LOG_LEVEL": "INFO",
    }
    worker: Service = await services.start("failover-worker", common)
    api: Service = await services.start(
        "failover-api", {**common, "CHRONOQ_WORKER_ENABLED": "false"}
    )
    async with httpx.AsyncClient(base_url=api.base_url, timeout=10, trust_env=False) as client:
        acknowledged: list[str] = []
        for n in range(STREAM):
            response = await client.post("/v1/schedules", json=one_shot(receiver, n, 1 + n * GAP))
            assert response.status_code == 201, response.text
            acknowledged.append(response.json()["id"])
        await receiver.wait_for(5, timeout=TIMEOUT)  # the stream is flowing

        primary.kill()

        async def refused() -> httpx.Response | None:
            answer = await client.post("/v1/schedules", json=one_shot(receiver, 999, 0.5))
            assert answer.status_code in (201, 503), answer.text
            return answer if answer.status_code == 503 else None

        outage = await until(refused, 30, "a 503 while no primary accepts writes", services)
        assert outage.headers["content-type"].startswith("application/problem+json")
        assert int(outage.headers["Retry-After"]) > 0
        readiness = await client.get("/readyz")
        assert readiness.status_code == 503

        standby.promote()

        for service in (api, worker):
            await service.wait_ready(TIMEOUT)
        for schedule_id in acknowledged:
            response = await client.get(f"/v1/schedules/{schedule_id}")
            assert response.status_code == 200, response.text
        for n in range(STREAM):
            await receiver.wait_for(1, path=f"/s/{n}", timeout=TIMEOUT)

        # Wake-ups: the API-only replica's write reaches the worker's loop over its LISTEN
        # connection, which found the new primary by itself.
        created = time.monotonic()
        response = await client.post(
            "/v1/schedules",
            json={
                **one_shot(receiver, STREAM, 0.5),
                "target": {"type": "webhook", "url": receiver.url("/woken")},
            },
        )
        assert response.status_code == 201, response.text
        await receiver.wait_for(1, path="/woken", timeout=POLL_INTERVAL - 5)
        assert time.monotonic() - created < POLL_INTERVAL - 5
