"""The API harness: the app in-process (worker off) plus a dispatcher the test steps by hand."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
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
from tests.stepping import step

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
    app: FastAPI  # its own, made for it (the routes FastAPI builds are shared)

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
        return await step(self.dispatcher, self.database.clock)

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


# FastAPI builds the routes of each router an app includes (the parameters and models of
# each) as requests first reach them: some 50 ms of CPU an app, a quarter of a second on a
# loaded machine, most of what a case that makes an app would cost. What it builds depends
# only on the routers create_app includes, the same module-level routers for every app. So
# each harness serves an app of its own made by create_app (its own lifespan with the
# settings, wakeups and resolver it was given, its own middleware, built at its first
# request, its own app.state, exception handlers and OpenAPI document), whose included
# routers are swapped for those of one app made once per process, never served, which are
# built as the harnesses' requests first reach them. They hold no state: a request finds
# its settings and services in its own app's lifespan state. What they would read of an
# app, its dependency overrides, is refused on every app (`_NoOverrides`).


class _NoOverrides(dict[Callable[..., Any], Callable[..., Any]]):
    """A harness app's dependency overrides: none, and none can be set (its included
    routes read those of the app they were built for)."""

    def _refuse(self, *_: Any, **__: Any) -> None:
        raise TypeError(
            "a harness app's included routes are shared between harnesses and read no "
            "dependency overrides of its own: make an app with create_app to override"
        )

    __setitem__ = update = setdefault = __ior__ = _refuse  # type: ignore[assignment]


_ROUTES_OF: FastAPI | None = None


def _included(app: FastAPI) -> list[tuple[int, Any]]:
    """The routers `app` includes, each with its place among the app's routes."""
    return [
        (place, route)
        for place, route in enumerate(app.router.routes)
        if getattr(route, "original_router", None) is not None
    ]


def _inclusion(route: Any) -> tuple[Any, Any]:
    """What FastAPI builds an included router's routes from, less the app it was built for
    (which is where the dependency overrides are read)."""
    context = dataclasses.replace(route.include_context, dependency_overrides_provider=None)
    return route.original_router, context


def _with_built_routes(app: FastAPI) -> FastAPI:
    """`app` with the routers it includes swapped for those of the process's one app that
    lends them, which are built once for all (by the first request to reach each)."""
    global _ROUTES_OF
    if _ROUTES_OF is None:
        _ROUTES_OF = create_app()
        _ROUTES_OF.dependency_overrides = _NoOverrides()
    lender = _included(_ROUTES_OF)
    own = _included(app)
    assert [(place, _inclusion(route)) for place, route in own] == [
        (place, _inclusion(route)) for place, route in lender
    ], "create_app included other routers than it did for the first app"
    for place, route in lender:
        app.router.routes[place] = route
    app.dependency_overrides = _NoOverrides()
    return app


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
        app = _with_built_routes(create_app(settings, wakeups, resolver=dns))
        async with (
            open_sinks(settings, resolver=dns) as sinks,
            # The app's shutdown closes its broker connection, which a loaded machine
            # can take longer than the manager's 5 s default to finish.
            LifespanManager(app, shutdown_timeout=SHUTDOWN_TIMEOUT) as manager,
        ):
            dispatcher = Dispatcher(database, sinks, settings, rng=random.Random(7), owner="test")
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
                    app,
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
