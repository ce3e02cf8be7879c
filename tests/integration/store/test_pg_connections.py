"""PostgreSQL connections across a failover: a pooled connection to a server that stopped
answering is dropped at checkout within a bound, never waited on; a host of a multi-host URL
that never answers costs each new connection one host's timeout, and the host behind it is
reached; a connection whose server turned read-only is not handed out again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app.domain.errors import StoreUnavailableError
from app.store.dialects import pg_connections, postgresql
from app.store.engine.database import Database
from tests.tcp_proxy import TcpProxy

pytestmark = pytest.mark.postgres

# Short, so a case takes seconds; the bounds below are generous multiples.
PING_TIMEOUT = 0.5
CONNECT_TIMEOUT = 1.0


@pytest.fixture(autouse=True)
def short_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pg_connections, "PING_TIMEOUT", PING_TIMEOUT)
    monkeypatch.setattr(postgresql, "CONNECT_TIMEOUT", CONNECT_TIMEOUT)


@pytest.fixture
async def proxy(postgres_url: str) -> AsyncIterator[TcpProxy]:
    url = make_url(postgres_url)
    started = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    await started.start()
    try:
        yield started
    finally:
        await started.close()


def through(postgres_url: str, *ports: int) -> str:
    """`postgres_url` reaching its server through `ports` of 127.0.0.1 (several: libpq's
    multi-host form, writes wanted)."""
    url = make_url(postgres_url)
    if len(ports) == 1:
        return url.set(port=ports[0]).render_as_string(hide_password=False)
    hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
    auth = url.username or "postgres"
    if url.password:
        auth += f":{url.password}"
    return f"postgresql://{auth}@{hosts}/{url.database}?target_session_attrs=read-write"


async def select_one(database: Database) -> int:
    return int(await database.run(lambda conn: conn.scalar(sa.text("SELECT 1"))))


async def backend(database: Database) -> int:
    return int(await database.run(lambda conn: conn.scalar(sa.text("SELECT pg_backend_pid()"))))


async def test_a_pooled_connection_that_stops_answering_is_dropped_not_waited_on(
    postgres_url: str, proxy: TcpProxy
) -> None:
    database = Database(through(postgres_url, proxy.port), connections=1)
    try:
        # A connection that answers its ping is kept.
        assert await backend(database) == await backend(database)
        proxy.stall()  # its server is gone without closing it
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            # Its ping, a drop (SQLAlchemy's close of a silent connection takes up to 2 s)
            # and a new connection that gets no answer either.
            await asyncio.wait_for(select_one(database), PING_TIMEOUT + CONNECT_TIMEOUT + 10)
        assert time.monotonic() - started < PING_TIMEOUT + CONNECT_TIMEOUT + 5

        proxy.flow()
        assert await asyncio.wait_for(select_one(database), 10) == 1
    finally:
        proxy.flow()
        await database.close()


@pytest.mark.parametrize("pre_ping", [True, False], ids=["api-pool", "loop-pool"])
async def test_a_server_that_goes_silent_mid_transaction_costs_at_most_the_pools_timeout(
    postgres_url: str, proxy: TcpProxy, pre_ping: bool
) -> None:
    """The ping at checkout cannot see a server vanish after it: the statement sent next is
    never answered (no reset, no reply). The transaction is given up at the pool's bound,
    as unavailable, and its connection is not handed out again."""
    timeout = 1.0
    database = Database(
        through(postgres_url, proxy.port), connections=1, pre_ping=pre_ping, timeout=timeout
    )

    async def vanishing(conn: Any) -> int:
        await conn.execute(sa.text("SELECT 1"))
        proxy.stall()
        return int(await conn.scalar(sa.text("SELECT 2")))

    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="no answer"):
            await asyncio.wait_for(database.run(vanishing), timeout + 20)
        # The bound, and the drop of the silent connection (up to 2 s).
        assert time.monotonic() - started < timeout + 4
        assert database.engine.pool.checkedout() == 0  # type: ignore[attr-defined]

        proxy.flow()
        assert await asyncio.wait_for(select_one(database), 10) == 1
    finally:
        proxy.flow()
        await database.close()


async def test_a_host_that_never_answers_leaves_the_next_host_its_own_timeout(
    postgres_url: str, proxy: TcpProxy
) -> None:
    real_port = make_url(postgres_url).port or 5432
    proxy.stall()  # the first host accepts and never answers, like a machine gone
    # The URL's own timeout, if it names one, is each host's too. The bound on a transaction
    # starts once it has its connection: shorter than a host's timeout, it cuts no host short.
    database = Database(
        through(postgres_url, proxy.port, real_port) + "&timeout=1", timeout=CONNECT_TIMEOUT / 4
    )
    try:
        started = time.monotonic()
        assert await asyncio.wait_for(select_one(database), CONNECT_TIMEOUT + 10) == 1
        assert time.monotonic() - started < CONNECT_TIMEOUT + 5

        # The host that answered is tried first from now on: a new connection is prompt.
        await database.engine.dispose()
        started = time.monotonic()
        assert await select_one(database) == 1
        assert time.monotonic() - started < CONNECT_TIMEOUT
    finally:
        proxy.flow()
        await database.close()


@pytest.mark.parametrize("pre_ping", [True, False], ids=["api-pool", "loop-pool"])
async def test_a_connection_whose_server_turned_read_only_is_not_used_again(
    postgres_url: str, pre_ping: bool
) -> None:
    # One connection, so the next transaction would get the same one back.
    database = Database(postgres_url, connections=1, pre_ping=pre_ping)
    write = sa.text("UPDATE schedules SET name = name WHERE false")
    try:
        # The session goes read-only, as a demoted or fenced server's sessions do.
        await database.run(
            lambda conn: conn.execute(sa.text("SET SESSION default_transaction_read_only = on"))
        )
        with pytest.raises(StoreUnavailableError, match="read-only"):
            await database.run(lambda conn: conn.execute(write))

        await database.run(lambda conn: conn.execute(write))
    finally:
        await database.close()
