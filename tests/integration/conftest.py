"""The API harness: the app in-process (worker off) plus a dispatcher the test steps by hand."""

from __future__ import annotations

import asyncio
import random
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings
from app.sinks import open_sinks
from app.sinks.registry import Sinks
from app.store.engine.database import Database
from app.store.engine.wakeups import Wakeups
from app.worker.dispatcher import Dispatcher
from tests.conftest import SERVED, delete_every_row, make_settings
from tests.dns import FakeDNS
from tests.receiver import Receiver, Reply

# How long an app's lifespan may take to shut down (its sinks' connections closing).
SHUTDOWN_TIMEOUT = 30.0


@dataclass
class Harness:
    client: httpx.AsyncClient
    dispatcher: Dispatcher
    database: Database
    settings: Settings
    receiver: Receiver
    sinks: Sinks
    wakeups: Wakeups
    dns: FakeDNS
    transport: httpx.AsyncBaseTransport  # the app's, for other clients of it (app.client)

    def webhook(self, path: str = "/hook", **extra: Any) -> dict[str, Any]:
        return {"type": "webhook", "url": self.receiver.url(path), **extra}

    async def create(self, expect: int = 201, **spec: Any) -> dict[str, Any]:
        body = {"event_type": "test.event", "payload": {"n": 1}, **spec}
        body.setdefault("target", self.webhook())
        body.setdefault("trigger", {"type": "immediate"})
        response = await self.client.post("/v1/schedules", json=body)
        assert response.status_code == expect, response.text
        result: dict[str, Any] = response.json()
        return result

    async def failing(self, reply: Reply | None = None, **spec: Any) -> dict[str, Any]:
        """A recurring schedule whose first occurrence was dead-lettered, `reply` (503) its
        target's answer: still pending, and what the failing filter finds."""
        self.receiver.always("/broken", reply or Reply(503))
        spec = {
            "target": self.webhook("/broken"),
            "trigger": {"type": "interval", "every_seconds": 3600},
            "max_attempts": 1,
            **spec,
        }
        created = await self.create(**spec)
        assert await self.step() == 1
        return created

    async def get(self, path: str) -> dict[str, Any]:
        response = await self.client.get(path)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    async def step(self) -> int:
        """Run the loop until what is due now is delivered and settled (a retry it makes
        waits for the next step); how many deliveries it started."""
        return await self.dispatcher.run_until_idle()

    async def step_until(self, done: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
        """Step the loop until `done()` holds; waits for retries to come due in between."""
        deadline = time.monotonic() + timeout
        while not await done():
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached in time")
            if await self.step() == 0:
                await asyncio.sleep(0.02)

    async def schedule_status(self, schedule_id: str) -> str:
        return str((await self.get(f"/v1/schedules/{schedule_id}"))["status"])

    async def occurrences(self, schedule_id: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = (
            await self.get(f"/v1/schedules/{schedule_id}/occurrences?limit=500")
        )["items"]
        return items


# Apps a harness is done with, whose routes are built. FastAPI builds an app's routes (the
# parameters and models of each) as requests first reach them: a quarter of a second, most of
# what a case that makes an app cost. Every app create_app makes is the same but for its
# lifespan, which holds the settings, wakeups and resolver it was given (the middleware and
# the routes read them from the lifespan's state), so a harness runs its own app's lifespan
# in one of these: what it serves is its own app's.
_IDLE_APPS: list[FastAPI] = []


def _shape(app: FastAPI) -> list[Any]:
    """What create_app put in `app` besides its lifespan: two apps of the same shape serve
    alike."""
    routes = [
        (type(route), getattr(route, "path", None), getattr(route, "original_router", None))
        for route in app.router.routes
    ]
    middleware = [(m.cls, m.args, m.kwargs) for m in app.user_middleware]
    handlers = sorted(map(repr, app.exception_handlers))
    return [type(app), routes, middleware, handlers, app.router.dependencies]


@contextmanager
def _served_by_a_built_app(app: FastAPI) -> Iterator[FastAPI]:
    """`app`, or an idle app of the same shape whose routes are built, made to run `app`'s
    lifespan; used by one harness at a time."""
    if _IDLE_APPS:
        built = _IDLE_APPS.pop()
        assert _shape(built) == _shape(app), "create_app made an app of another shape"
        built.router.lifespan_context = app.router.lifespan_context
        app = built
    try:
        yield app
    finally:
        _IDLE_APPS.append(app)


@asynccontextmanager
async def running_harness(
    database_url: str, receiver: Receiver, dns: FakeDNS | None = None, **overrides: Any
) -> AsyncIterator[Harness]:
    """`dns` answers the app's and the sinks' lookups (default: no name resolves)."""
    settings = make_settings(database_url, **overrides)
    wakeups = Wakeups()
    dns = dns or FakeDNS()
    database = Database(settings.database_url)
    try:
        with _served_by_a_built_app(create_app(settings, wakeups, resolver=dns)) as app:
            async with (
                open_sinks(settings, resolver=dns) as sinks,
                # The app's shutdown closes its broker connection, which a loaded machine
                # can take longer than the manager's 5 s default to finish.
                LifespanManager(app, shutdown_timeout=SHUTDOWN_TIMEOUT) as manager,
            ):
                dispatcher = Dispatcher(
                    database, sinks, settings, rng=random.Random(7), owner="test"
                )
                transport = httpx.ASGITransport(app=manager.app)
                async with httpx.AsyncClient(
                    transport=transport, base_url="http://localhost"
                ) as client:
                    yield Harness(
                        client,
                        dispatcher,
                        database,
                        settings,
                        receiver,
                        sinks,
                        wakeups,
                        dns,
                        transport,
                    )
    finally:
        database.clock.reset()  # a case that moved it (tests.store.ports.move_clock)
        await database.close()


@pytest.fixture
async def harness(database_url: str, receiver: Receiver) -> AsyncIterator[Harness]:
    async with running_harness(database_url, receiver) as running:
        yield running


@pytest.fixture
def make_harness(database_url: str, receiver: Receiver) -> Callable[..., Any]:
    """For tests that need other settings: `async with make_harness(max_attempts=2) as h:`
    (and `dns=FakeDNS({...})` for names that resolve)."""

    def build(dns: FakeDNS | None = None, **overrides: Any) -> Any:
        return running_harness(database_url, receiver, dns, **overrides)

    return build


def shared_harness(**overrides: Any) -> Any:
    """A module-scoped fixture: one harness per store (SERVED) that a module's cases share,
    for cases that need nothing of a harness of their own: they neither step the loop nor
    script the receiver nor look up names, and what they store is deleted before the next
    one (`fresh`). Starting a harness and its first connections is most of what such a case
    costs. Its cases run on the module's loop, where the harness lives:
    `@pytest.mark.asyncio(loop_scope="module")`."""

    @pytest_asyncio.fixture(scope="module", loop_scope="module", params=SERVED)
    async def shared(
        request: pytest.FixtureRequest,
        tmp_path_factory: pytest.TempPathFactory,
        sqlite_template: Path,
    ) -> AsyncIterator[Harness]:
        if request.param == "sqlite":
            path = tmp_path_factory.mktemp("shared") / "chronoq.db"
            shutil.copy(sqlite_template, path)
            url = f"sqlite:///{path}"
        else:
            url = request.getfixturevalue("postgres_url")
        async with Receiver() as receiver, running_harness(url, receiver, **overrides) as harness:
            yield harness

    return shared


async def fresh(harness: Harness) -> Harness:
    """A shared harness whose store is empty: whatever an earlier case (of this module, or
    of another on the same server database) left is deleted."""
    await delete_every_row(harness.database)
    return harness


# The harness a module's cases share when they need nothing else of one (`shared_harness`,
# per module and store), and `shared`: that harness with its store emptied for the case.
shared_default = shared_harness()


@pytest_asyncio.fixture(loop_scope="module")
async def shared(shared_default: Harness) -> Harness:
    return await fresh(shared_default)


# The mark of a case that uses a `shared_harness`.
ON_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")
