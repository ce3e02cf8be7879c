"""A PostgreSQL failover under two replicas (one API-only) with a multi-host DATABASE_URL: the
primary is killed mid-stream and its synchronous standby promoted, while clients keep writing
to both replicas. Every write is answered within a bound, 201 or a 503 problem with
Retry-After, never left hanging; /readyz is 503 while no primary is up; within 30 s of the
promotion writes succeed on both replicas again; afterwards every acknowledged schedule is
there, every occurrence is delivered, and wake-ups reach the loop again within seconds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from app.store.dialects import pg_listen
from app.store.dialects.pg_listen import PgListener
from app.store.dialects.postgresql import DIALECT
from app.store.engine.wakeups import Wakeups
from tests.e2e.pg_servers import PgServer, Workspace, primary_with_standby, server
from tests.e2e.processes import Service, Services
from tests.receiver import Receiver
from tests.tcp_proxy import TcpProxy
from tests.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

DATABASE = "chronoq"
STREAM = 40
GAP = 0.1
# Long enough that only a wake-up (NOTIFY heard on the new primary) explains a prompt delivery.
POLL_INTERVAL = 30.0
TIMEOUT = 90.0
# The longest a write may go unanswered, outage or not: a pooled connection's checkout ping
# (5 s) and its drop (up to 2 s), then a new connection's timeout on a host that never
# answers (10 s), with room to spare; a connection that goes silent mid-transaction is given
# up at the replica's bound on a transaction (15 s) and dropped. A killed server
# refuses at once; a vanished one is that slow.
ANSWER_WITHIN = 25.0
# Writes succeed again on every replica this soon after the promotion (the contract's bound).
RECOVERED_WITHIN = 30.0
OUTAGE = 5.0  # seconds with no primary at all, writes flowing
WRITE_GAP = 0.2


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


def one_shot(receiver: Receiver, name: str, delay: float) -> dict[str, Any]:
    return {
        "name": f"stream-{name}",
        "event_type": "e2e.failover",
        "payload": {"name": name},
        "target": {"type": "webhook", "url": receiver.url(f"/s/{name}")},
        "trigger": {"type": "once", "delay_seconds": delay},
    }


@dataclass
class Answer:
    sent: float  # monotonic
    took: float
    status: int | None  # None: no answer within ANSWER_WITHIN, or the connection failed
    error: str = ""
    schedule_id: str | None = None


@dataclass
class Writer:
    """Creates sent one after the other to one replica, each with a client timeout of
    ANSWER_WITHIN, every answer recorded."""

    service: Service
    receiver: Receiver
    answers: list[Answer] = field(default_factory=list)

    def acknowledged(self) -> list[Answer]:
        return [answer for answer in self.answers if answer.status == 201]

    async def run(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(
            base_url=self.service.base_url, timeout=ANSWER_WITHIN, trust_env=False
        ) as client:
            n = 0
            while not stop.is_set():
                name = f"{self.service.name}-{n}"
                n += 1
                sent = time.monotonic()
                try:
                    response = await client.post(
                        "/v1/schedules", json=one_shot(self.receiver, name, 0.5)
                    )
                except httpx.TransportError as exc:
                    took = time.monotonic() - sent
                    self.answers.append(Answer(sent, took, None, f"{type(exc).__name__}"))
                else:
                    answer = Answer(sent, time.monotonic() - sent, response.status_code)
                    if response.status_code == 201:
                        answer.schedule_id = response.json()["id"]
                    elif response.status_code == 503:
                        assert response.headers["content-type"].startswith(
                            "application/problem+json"
                        ), response.text
                        assert int(response.headers["Retry-After"]) > 0
                    else:
                        answer.error = response.text
                    self.answers.append(answer)
                await asyncio.sleep(WRITE_GAP)


def summary(writers: list[Writer], origin: float) -> str:
    lines = []
    for writer in writers:
        for answer in writer.answers:
            lines.append(
                f"{writer.service.name} t={answer.sent - origin:+.1f}s took={answer.took:.2f}s"
                f" status={answer.status} {answer.error[:200]}"
            )
    return "\n".join(lines)


@pytest.fixture
async def vanishing(cluster: tuple[PgServer, PgServer]) -> AsyncIterator[TcpProxy]:
    """The way to the primary from the API-only replica, which can go silent."""
    primary, _ = cluster
    proxy = TcpProxy("127.0.0.1", primary.port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


def multi_host(primary: str, standby: str) -> str:
    return f"postgresql://postgres@{primary},{standby}/{DATABASE}?target_session_attrs=read-write"


# How the primary is lost: killed (its machine answers with resets, as here), or vanished
# as well from where the API-only replica stands (the machine gone or cut off: no reset,
# no answer at all, to open connections and to new ones).
@pytest.mark.parametrize("loss", ["killed", "vanished"])
async def test_a_failover_answers_every_write_and_loses_nothing_acknowledged_or_due(
    cluster: tuple[PgServer, PgServer],
    vanishing: TcpProxy,
    receiver: Receiver,
    services: Services,
    loss: str,
) -> None:
    primary, standby = cluster
    url = multi_host(primary.address, standby.address)
    api_url = url
    if loss == "vanished":
        api_url = multi_host(f"127.0.0.1:{vanishing.port}", standby.address)
    common = {
        "DATABASE_URL": url,
        "CHRONOQ_POLL_INTERVAL": str(POLL_INTERVAL),
        "CHRONOQ_LEASE": "6",
        "CHRONOQ_DISPATCH_TIMEOUT": "2",
        "CHRONOQ_RETRY_BASE_DELAY": "0.2",
        "CHRONOQ_RETRY_MAX_DELAY": "1",
        "CHRONOQ_LOG_LEVEL": "INFO",
    }
    # Side by side: each start is mostly the process's imports (the migration of the new
    # database runs once, under its lock, whichever comes first).
    worker, api = await asyncio.gather(
        services.start("failover-worker", common),
        services.start(
            "failover-api",
            {**common, "DATABASE_URL": api_url, "CHRONOQ_WORKER_ENABLED": "false"},
        ),
    )
    async with httpx.AsyncClient(base_url=api.base_url, timeout=10, trust_env=False) as client:
        acknowledged: list[str] = []
        for n in range(STREAM):
            response = await client.post(
                "/v1/schedules", json=one_shot(receiver, str(n), 1 + n * GAP)
            )
            assert response.status_code == 201, response.text
            acknowledged.append(response.json()["id"])
        await receiver.wait_for(5, timeout=TIMEOUT)  # the stream is flowing

        writers = [Writer(api, receiver), Writer(worker, receiver)]
        stop = asyncio.Event()
        writing = [asyncio.create_task(writer.run(stop)) for writer in writers]
        try:
            await asyncio.sleep(1.0)
            killed = time.monotonic()
            if loss == "vanished":
                vanishing.vanish()
            primary.kill()
            await asyncio.sleep(OUTAGE)
            readiness = await client.get("/readyz", timeout=ANSWER_WITHIN)
            assert readiness.status_code == 503, readiness.text
            standby.promote()
            promoted = time.monotonic()

            def recovered() -> bool:
                return all(
                    any(answer.sent > promoted for answer in writer.acknowledged())
                    for writer in writers
                )

            for _ in range(int(RECOVERED_WITHIN / 0.1)):
                if recovered() or time.monotonic() - promoted > RECOVERED_WITHIN:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(2.0)  # and they keep succeeding
        finally:
            stop.set()
            # A writer still waiting is itself bounded by ANSWER_WITHIN.
            await asyncio.wait_for(asyncio.gather(*writing), ANSWER_WITHIN + 5)
        log = summary(writers, killed) + "\n" + services.logs()
        outage_answers = 0

        for writer in writers:
            unanswered = [answer for answer in writer.answers if answer.status is None]
            assert not unanswered, f"{writer.service.name}: writes left unanswered\n{log}"
            assert all(answer.status in (201, 503) for answer in writer.answers), log
            # Sent and answered while no primary was up: refused, to be sent again.
            refused = [
                answer
                for answer in writer.answers
                if killed + 2 < answer.sent and answer.sent + answer.took < promoted
            ]
            assert all(answer.status == 503 for answer in refused), log
            outage_answers += len(refused)
            first = min(
                (answer.sent + answer.took for answer in writer.acknowledged()
                 if answer.sent > promoted),
                default=None,
            )  # fmt: skip
            assert first is not None, log
            assert first - promoted < RECOVERED_WITHIN, log
            # Once writes succeed again they go on succeeding.
            later = [answer for answer in writer.answers if answer.sent > first]
            assert later, log
            assert all(answer.status == 201 for answer in later), log
            acknowledged += [str(answer.schedule_id) for answer in writer.acknowledged()]
        assert outage_answers, log

        for service in (api, worker):
            await service.wait_ready(TIMEOUT)
        for schedule_id in acknowledged:
            response = await client.get(f"/v1/schedules/{schedule_id}")
            assert response.status_code == 200, response.text
        for n in range(STREAM):
            await receiver.wait_for(1, path=f"/s/{n}", timeout=TIMEOUT)
        for writer in writers:
            for n, answer in enumerate(writer.answers):
                if answer.status == 201:
                    path = f"/s/{writer.service.name}-{n}"
                    await receiver.wait_for(1, path=path, timeout=TIMEOUT)

        # Wake-ups: the API-only replica's write reaches the worker's loop over its LISTEN
        # connection, which found the new primary by itself.
        created = time.monotonic()
        response = await client.post(
            "/v1/schedules",
            json={
                **one_shot(receiver, "woken", 0.5),
                "target": {"type": "webhook", "url": receiver.url("/woken")},
            },
        )
        assert response.status_code == 201, response.text
        await receiver.wait_for(1, path="/woken", timeout=POLL_INTERVAL - 5)
        assert time.monotonic() - created < POLL_INTERVAL - 5


@pytest.fixture
def two_servers() -> Iterator[tuple[PgServer, PgServer]]:
    """Two primaries of the test's own (not replicas of each other)."""
    workspace = Workspace()
    servers: list[PgServer] = []
    try:
        servers.append(server(workspace, "first"))
        servers.append(server(workspace, "second"))
        yield servers[0], servers[1]
    finally:
        for each in servers:
            each.stop()
        workspace.remove()


async def test_the_listen_connection_leaves_a_server_that_stopped_taking_writes(
    two_servers: tuple[PgServer, PgServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server fenced read-only (or demoted) keeps its sessions: the LISTEN connection's
    keep-alive notices and reconnects to the host that takes writes, where the NOTIFYs of
    the writes are sent."""
    monkeypatch.setattr(pg_listen, "PING_INTERVAL", 0.2)
    first, second = two_servers
    url = DIALECT.normalize_url(
        f"postgresql://postgres@{first.address},{second.address}/postgres"
        "?target_session_attrs=read-write"
    )
    wakeups = Wakeups()
    heard: list[float] = []
    wakeups.subscribe(heard.append)
    listener = PgListener(url, wakeups)
    listener.start()
    try:
        await asyncio.wait_for(listener.connected.wait(), 30)
        assert "chronoq-listen" in first.sql("SELECT application_name FROM pg_stat_activity")

        first.sql("ALTER SYSTEM SET default_transaction_read_only = on")
        first.sql("SELECT pg_reload_conf()")
        await eventually(
            lambda: "chronoq-listen" in second.sql("SELECT application_name FROM pg_stat_activity"),
            within=30,
            every=0.1,
            what="the LISTEN connection on the host that takes writes",
        )
        await asyncio.wait_for(listener.connected.wait(), 30)

        second.sql(f"SELECT pg_notify('{pg_listen.CHANNEL}', '42.5')")
        await eventually(lambda: 42.5 in heard, what="the NOTIFY of the second server heard")
    finally:
        await listener.stop()
