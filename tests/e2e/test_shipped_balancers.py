"""The shipped nginx configurations on this machine's nginx, in front of a served replica.

deploy/nginx-local.conf, the balancer for an nginx outside compose, serves the API as it is
(only its ports and paths rendered, tests/nginx.py). Both plain balancers keep answering
/healthz while thousands of clients hold connections open by sending `Content-Length:
1000000` and then a byte every 2 s, from one address (the per-address limit answers its
excess 429) and from many addresses each under that limit (the workers' connections hold
them all). Each flood client reconnects half a second after nginx drops it, as a flooding
tool does, so the flood stays at its size for as long as it is held.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import resource
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.e2e.processes import Service, shared_services
from tests.nginx import NGINX_CONF, NGINX_LOCAL_CONF, Nginx, find_nginx, start_nginx

pytestmark = pytest.mark.e2e

FLOOD = 3000  # connections held at once: beyond what 1024 worker_connections in 2 workers hold
HOLD_SECONDS = 5.0  # probing while the flood is at full size
RAMP_TIMEOUT = 30.0  # for the flood to open its connections
TRICKLE_EVERY = 2.0  # seconds between two bytes of a flood body
RECONNECT_AFTER = 0.5
PROBE_EVERY = 0.2
PROBE_TIMEOUT = 3.0
# The probes come from an address of their own: a client other than the flooding one.
PROBE_ADDRESS = "127.0.0.2"
HEAD = (
    b"POST /v1/schedules HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000000\r\n\r\n"
)
# Descriptors this process needs: the flood, the probes and what pytest has open.
DESCRIPTORS = FLOOD + 1024


@pytest.fixture
def nginx_binary() -> str:
    return find_nginx()


@pytest.fixture(scope="module", autouse=True)
def enough_descriptors() -> None:
    """The flood's sockets in this process (nginx, its child, inherits the limit too)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < DESCRIPTORS:
        if hard != resource.RLIM_INFINITY and hard < DESCRIPTORS:
            pytest.fail(f"RLIMIT_NOFILE hard limit {hard} is below the {DESCRIPTORS} needed")
        resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, hard))


@pytest.fixture(scope="module")
def module_replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One replica behind every balancer of the module: each case starts an nginx of its own
    in front of it, and floods only that nginx (nginx holds the slow bodies, never passing
    them on), so the cases leave the replica as they found it."""
    directory = tmp_path_factory.mktemp("replica")
    settings = {
        "DATABASE_URL": f"sqlite:///{directory / 'chronoq.db'}",
        "CHRONOQ_POLL_INTERVAL": "0.5",
    }
    with shared_services(directory, {"replica": settings}) as [service]:
        yield service


@pytest.fixture
def served(module_replica: Service) -> Service:
    """The module's replica, still serving when a case begins."""
    assert module_replica.alive, module_replica.log_tail()
    return module_replica


@contextlib.asynccontextmanager
async def balancer(
    binary: str, source: Path, upstream: Service, prefix: Path
) -> AsyncIterator[Nginx]:
    nginx = start_nginx(binary, [upstream.port], prefix, source)
    try:
        await nginx.wait_serving(timeout=20)
        yield nginx
    finally:
        nginx.stop()


async def test_the_local_balancer_serves_the_api_on_this_machines_nginx(
    served: Service, nginx_binary: str, tmp_path: Path
) -> None:
    # Nothing that needs a newer nginx than this machine's than its ports and paths, which
    # the rendering replaces: no `resolve` (1.27.3), nor a resolver to use it with.
    directives = re.sub(r"#[^\n]*", "", NGINX_LOCAL_CONF.read_text(encoding="utf-8"))
    assert not re.search(r"\bresolver?\b", directives)
    async with (
        balancer(nginx_binary, NGINX_LOCAL_CONF, served, tmp_path / "nginx") as nginx,
        httpx.AsyncClient(base_url=nginx.base_url, trust_env=False) as client,
    ):
        created = await client.post(
            "/v1/schedules",
            json={
                "event_type": "through.nginx",
                "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"},
                "trigger": {"type": "once", "delay_seconds": 3600},
            },
            headers={"X-Request-Id": "through-the-local-balancer"},
        )
        assert created.status_code == 201, created.text
        assert created.headers["X-Request-Id"] == "through-the-local-balancer"
        read = await client.get(f"/v1/schedules/{created.json()['id']}")
        assert read.status_code == 200
        assert read.json()["event_type"] == "through.nginx"
        assert (await client.get("/metrics")).status_code == 403
    assert f"upstream=127.0.0.1:{served.port}" in (nginx.prefix / "access.log").read_text()


@dataclass
class Flood:
    """`size` clients trickling bodies from `sources` (taken in turn), reconnecting when
    dropped; what they saw."""

    port: int
    sources: Sequence[str]
    size: int
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    all_connected: asyncio.Event = field(default_factory=asyncio.Event)  # `size` opened
    holding: int = 0  # connections open right now
    opened: int = 0
    dropped: int = 0
    answers: Counter[str] = field(default_factory=Counter)  # status lines nginx sent them

    async def client(self, source: str) -> None:
        while not self.stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", self.port, local_addr=(source, 0)
                )
            except OSError:
                await self.pause(RECONNECT_AFTER)
                continue
            self.opened += 1
            self.holding += 1
            if self.opened >= self.size:
                self.all_connected.set()
            answer = asyncio.create_task(reader.readline())
            try:
                writer.write(HEAD)
                while not self.stop.is_set():
                    writer.write(b"x")
                    await writer.drain()
                    await self.pause(TRICKLE_EVERY)
            except OSError:
                self.dropped += 1
            finally:
                self.holding -= 1
                writer.close()
                if answer.done() and not answer.exception() and answer.result():
                    self.answers[answer.result().decode(errors="replace").strip()] += 1
                answer.cancel()
            await self.pause(RECONNECT_AFTER)

    async def pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[Flood]:
        """The flood, once every client has connected (or failed, if nginx cannot keep up)."""
        tasks = [
            asyncio.create_task(self.client(self.sources[i % len(self.sources)]))
            for i in range(self.size)
        ]
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.all_connected.wait(), RAMP_TIMEOUT)
            assert self.opened >= self.size, f"{self.opened} of {self.size} connected"
            yield self
        finally:
            self.stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)


async def probe(nginx: Nginx, seconds: float) -> tuple[Counter[str], float]:
    """GET /healthz from PROBE_ADDRESS every PROBE_EVERY for `seconds`: each answer's status
    (or failure) and the slowest answer's time."""
    seen: Counter[str] = Counter()
    slowest = 0.0
    transport = httpx.AsyncHTTPTransport(local_address=PROBE_ADDRESS)
    async with httpx.AsyncClient(
        base_url=nginx.base_url, transport=transport, trust_env=False
    ) as client:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.monotonic()
            try:
                response = await client.get("/healthz", timeout=PROBE_TIMEOUT)
                seen[str(response.status_code)] += 1
            except httpx.TransportError as exc:
                seen[type(exc).__name__] += 1
            slowest = max(slowest, time.monotonic() - started)
            await asyncio.sleep(PROBE_EVERY)
    return seen, slowest


# One flooding address, and 60 addresses holding 50 connections each (under the limit).
SHAPES = {"one-address": ["127.0.0.1"], "many-addresses": [f"127.0.1.{i}" for i in range(1, 61)]}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("source", [NGINX_CONF, NGINX_LOCAL_CONF], ids=lambda path: path.name)
async def test_healthz_answers_through_a_flood_of_slow_bodies(
    served: Service, nginx_binary: str, tmp_path: Path, source: Path, shape: str
) -> None:
    async with (
        balancer(nginx_binary, source, served, tmp_path / "nginx") as nginx,
        Flood(nginx.port, SHAPES[shape], FLOOD).held() as flood,
    ):
        seen, slowest = await probe(nginx, HOLD_SECONDS)
        held = flood.holding
    print(  # noqa: T201 (the figures, with -s)
        f"{source.name} {shape}: {FLOOD} slow clients, {flood.opened} connections opened, "
        f"{flood.dropped} dropped, {held} held at the end; nginx answered them "
        f"{dict(flood.answers)}; probes {dict(seen)}, slowest {slowest * 1000:.0f} ms"
    )
    assert set(seen) == {"200"}, f"{dict(seen)}\n{nginx.errors()}"
    assert seen["200"] >= HOLD_SECONDS / (PROBE_EVERY + PROBE_TIMEOUT)
    if shape == "one-address":
        # Its excess is refused at once, not left to hold connections.
        assert any(" 429 " in f"{line} " for line in flood.answers), dict(flood.answers)
    else:
        # Under the limit, every one was held: the workers have the connections for them.
        assert held == FLOOD, f"{held} of {FLOOD} held"
