"""Replicas through PgBouncer in transaction mode (`CHRONOQ_DB_POOLER=transaction`): several
start at once and migrate once, deliver a stream exactly once, answer the API with no 5xx, keep
the server's connections within the pooler's pool, and wake on LISTEN through
`CHRONOQ_DATABASE_DIRECT_URL`; without a direct URL they migrate under a transaction's lock
and find due work by polling."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.pg_servers import PgBouncer, PgServer, Workspace, server
from tests.e2e.processes import CHRONOQ, Service, Services, free_port, service_environment
from tests.receiver import Receiver

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

DATABASE = "chronoq"
POOL = 5  # server connections PgBouncer may open for the installation
STREAM = 200
TIMEOUT = 90.0
WAKE_POLL = 30.0  # a prompt delivery under this poll interval was woken by a NOTIFY


@pytest.fixture(scope="module")
def pg_server() -> Iterator[PgServer]:
    """The module's server: started once, its cases each on a database made afresh."""
    workspace = Workspace()
    started: PgServer | None = None
    try:
        started = server(workspace)
        yield started
    finally:
        if started is not None:
            started.stop()
        workspace.remove()


@pytest.fixture
def pooled(pg_server: PgServer) -> Iterator[tuple[PgServer, PgBouncer]]:
    """A new, empty database (nothing migrated, no connection from an earlier case) behind
    a PgBouncer of the case's own."""
    pg_server.sql(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    pg_server.sql(f"CREATE DATABASE {DATABASE}")
    bouncer: PgBouncer | None = None
    try:
        bouncer = PgBouncer(pg_server.workspace, pg_server.port, DATABASE, POOL)
        bouncer.wait_listening()
        yield pg_server, bouncer
    finally:
        if bouncer is not None:
            bouncer.stop()


def settings(bouncer: PgBouncer, direct: PgServer | None, poll: float) -> dict[str, str]:
    values = {
        "DATABASE_URL": bouncer.url(DATABASE),
        "CHRONOQ_DB_POOLER": "transaction",
        "CHRONOQ_POLL_INTERVAL": str(poll),
        "CHRONOQ_LOG_LEVEL": "INFO",
    }
    if direct is not None:
        values["CHRONOQ_DATABASE_DIRECT_URL"] = f"postgresql://postgres@{direct.address}/{DATABASE}"
    return values


def immediate(receiver: Receiver, n: int) -> dict[str, Any]:
    return {
        "event_type": "e2e.pooled",
        "payload": {"n": n},
        "target": {"type": "webhook", "url": receiver.url(f"/s/{n}")},
        "trigger": {"type": "immediate"},
    }


async def start_together(services: Services, count: int, values: dict[str, str]) -> list[Service]:
    started = list(
        await asyncio.gather(
            *(services.start(f"pooled-{i}", values, timeout=60) for i in range(count))
        )
    )
    # Ready: the delivery processes have migrated too (over the direct URL, when there is
    # one) and hold only their LISTEN connections outside the pooler.
    await asyncio.gather(*(replica.wait_ready(60) for replica in started))
    return started


def migrations_run(services: Services) -> dict[str, int]:
    """How many times each revision's upgrade ran, over every replica's log."""
    counts: dict[str, int] = {}
    for service in services.started:
        text = service.log_path.read_text(encoding="utf-8", errors="replace")
        for revision in re.findall(r"Running upgrade \S* -> (\S+),", text):
            counts[revision] = counts.get(revision, 0) + 1
    return counts


def server_connections(direct: PgServer) -> int:
    """Connections to the installation's database the server has now, LISTEN's apart (those
    come over the direct URL)."""
    return int(
        direct.sql(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = 'chronoq' "
            "AND backend_type = 'client backend' AND application_name <> 'chronoq-listen'"
        )
    )


async def deliver_stream(
    replicas: list[Service], receiver: Receiver, direct: PgServer
) -> tuple[list[int], list[int]]:
    """Create the stream through every replica, with reads beside it; returns each API
    answer's status and the server connections seen while it ran."""
    statuses: list[int] = []
    seen: list[int] = []
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:

        async def create(n: int) -> None:
            replica = replicas[n % len(replicas)]
            answer = await client.post(
                f"{replica.base_url}/v1/schedules", json=immediate(receiver, n)
            )
            statuses.append(answer.status_code)
            listing = await client.get(f"{replica.base_url}/v1/schedules", params={"limit": 20})
            statuses.append(listing.status_code)

        async def sample() -> None:
            while len(receiver.requests) < STREAM:
                seen.append(await asyncio.to_thread(server_connections, direct))
                await asyncio.sleep(0.2)

        sampler = asyncio.create_task(sample())
        for first in range(0, STREAM, 20):
            await asyncio.gather(*(create(n) for n in range(first, first + 20)))
        await receiver.wait_for(STREAM, timeout=TIMEOUT)
        await asyncio.wait_for(sampler, TIMEOUT)
    return statuses, seen


async def test_replicas_through_the_pooler_migrate_once_deliver_once_and_wake_on_listen(
    pooled: tuple[PgServer, PgBouncer], receiver: Receiver, services: Services
) -> None:
    direct, bouncer = pooled
    replicas = await start_together(services, 3, settings(bouncer, direct, WAKE_POLL))

    runs = migrations_run(services)
    assert runs, "no migration ran"
    assert set(runs.values()) == {1}, runs

    statuses, seen = await deliver_stream(replicas, receiver, direct)
    assert [s for s in statuses if s >= 500] == []
    arrived = [r.headers["X-Occurrence-Id"] for r in receiver.requests]
    assert len(arrived) == len(set(arrived)) == STREAM
    assert seen, "no connection count was sampled"
    assert max(seen) <= POOL, seen

    # A write through one replica's API wakes the delivery processes over their LISTEN
    # connections (direct URL), well before the 30 s poll would.
    async with httpx.AsyncClient(base_url=replicas[0].base_url, trust_env=False) as client:
        created = time.monotonic()
        response = await client.post(
            "/v1/schedules",
            json={
                **immediate(receiver, STREAM),
                "target": {"type": "webhook", "url": receiver.url("/woken")},
                "trigger": {"type": "once", "delay_seconds": 0.5},
            },
        )
        assert response.status_code == 201, response.text
    await receiver.wait_for(1, path="/woken", timeout=WAKE_POLL - 10)
    assert time.monotonic() - created < WAKE_POLL - 10


async def test_without_a_direct_url_replicas_migrate_under_a_transaction_lock_and_poll(
    pooled: tuple[PgServer, PgBouncer], receiver: Receiver, services: Services
) -> None:
    direct, bouncer = pooled
    replicas = await start_together(services, 2, settings(bouncer, None, 0.2))

    runs = migrations_run(services)
    assert runs, "no migration ran"
    assert set(runs.values()) == {1}, runs
    assert "chronoq-listen" not in direct.sql(
        "SELECT string_agg(application_name, ',') FROM pg_stat_activity"
    )

    statuses, seen = await deliver_stream(replicas, receiver, direct)
    assert [s for s in statuses if s >= 500] == []
    arrived = [r.headers["X-Occurrence-Id"] for r in receiver.requests]
    assert len(arrived) == len(set(arrived)) == STREAM
    assert seen, "no connection count was sampled"
    assert max(seen) <= POOL, seen


def test_a_direct_url_reaching_another_database_is_refused_at_start(
    pooled: tuple[PgServer, PgBouncer], tmp_path: Path
) -> None:
    direct, bouncer = pooled
    values = settings(bouncer, direct, 1.0)
    values["CHRONOQ_DATABASE_DIRECT_URL"] = f"postgresql://postgres@{direct.address}/postgres"

    finished = subprocess.run(
        [str(CHRONOQ), "serve", "--host", "127.0.0.1", "--port", str(free_port())],
        env=service_environment(values),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert finished.returncode == 2, finished.stderr
    assert "CHRONOQ_DATABASE_DIRECT_URL" in finished.stderr
    assert "'postgres'" in finished.stderr
    assert "'chronoq'" in finished.stderr
    assert "Uvicorn running" not in finished.stderr
