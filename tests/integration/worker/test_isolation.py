"""Isolation between destinations, in the running loop: a receiver that holds its requests
never takes every slot of a replica, and what goes elsewhere starts at once beside it."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from app.sinks import open_sinks
from app.worker.dispatcher import Dispatcher
from tests.integration.conftest import Harness
from tests.waiting import eventually

CONCURRENCY = 8
# A destination that has not answered yet leaves an eighth of the window (at least one).
HELD_AT_MOST = CONCURRENCY - 1
BACKLOG = 80


class Tarpit:
    """A receiver that holds every request until it is let go, or `hold` seconds."""

    def __init__(self, hold: float | None = None) -> None:
        self.held = 0
        self.answered = 0
        self.let_go = asyncio.Event()
        self._hold_for = hold

    async def _hold(self, request: web.Request) -> web.Response:
        self.held += 1
        if self._hold_for is None:
            await self.let_go.wait()
        else:
            await asyncio.sleep(self._hold_for)
        self.answered += 1
        return web.Response(status=200)

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        app = web.Application()
        app.router.add_post("/hold", self._hold)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            yield f"http://127.0.0.1:{port}/hold"
        finally:
            self.let_go.set()
            await runner.cleanup()


async def _one_shots(harness: Harness, url: str, count: int, in_seconds: float = 0.0) -> None:
    at = datetime.now(UTC) + timedelta(seconds=in_seconds)
    trigger = {"type": "once", "at": at.isoformat()} if in_seconds else {"type": "immediate"}
    items: list[dict[str, Any]] = [
        {"event_type": "isolation", "target": {"type": "webhook", "url": url}, "trigger": trigger}
        for _ in range(count)
    ]
    response = await harness.client.post("/v1/schedules/batch", json={"items": items})
    assert response.status_code == 201, response.text


async def test_a_receiver_that_holds_its_requests_leaves_room_for_another(
    harness: Harness,
) -> None:
    # Attempts may run 20 s: without isolation the tarpit's would hold every slot that long.
    # Its backlog, claimed ahead of its instant, is larger than the claims' window (the
    # slots and two batches): what waits on it must not keep the replica from claiming the
    # other receiver's rows.
    settings = harness.settings.model_copy(
        update={
            "concurrency": CONCURRENCY,
            "batch_size": 4,
            "dispatch_timeout": 20.0,
            "lease": 60.0,
            "poll_interval": 0.05,
            "claim_ahead": 0.5,
        }
    )
    tarpit = Tarpit()
    async with (
        tarpit.serving() as url,
        open_sinks(settings) as sinks,
    ):
        dispatcher = Dispatcher(harness.database, sinks, settings, rng=random.Random(1))
        async with dispatcher.started():
            await _one_shots(harness, url, BACKLOG, in_seconds=1.0)
            await eventually(lambda: tarpit.held >= HELD_AT_MOST, what="the tarpit's slots")

            await _one_shots(harness, harness.receiver.url("/hook"), 3)

            await harness.receiver.wait_for(3, timeout=10)
            assert tarpit.held == HELD_AT_MOST, "the tarpit took the slot kept for others"
            assert tarpit.answered == 0

            tarpit.let_go.set()
            await eventually(
                lambda: tarpit.answered == BACKLOG, within=30, what="the tarpit's rest"
            )


async def test_a_slot_freed_at_a_destination_the_claims_passed_over_claims_it_again_at_once(
    harness: Harness,
) -> None:
    # Two slots; a receiver that takes 1.1 s never gets both. While it holds its share the
    # claims pass over its rows as they fall due, and find nothing else: the loop would
    # sleep the whole poll interval, 120 s, were a freed slot not to wake it (a bound far
    # from both the 4.4 s the four take and a loaded machine's slowest run of them).
    settings = harness.settings.model_copy(
        update={"concurrency": 2, "dispatch_timeout": 5.0, "lease": 30.0, "poll_interval": 120.0}
    )
    tarpit = Tarpit(hold=1.1)
    async with tarpit.serving() as url, open_sinks(settings) as sinks:
        # It hears the creates as a replica's loop does: on a loaded machine its first claim
        # may come before them, and nothing else would end its sleep.
        dispatcher = Dispatcher(
            harness.database, sinks, settings, rng=random.Random(1), wakeups=harness.wakeups
        )
        async with dispatcher.started():
            started = time.monotonic()
            for n in range(4):
                await _one_shots(harness, url, 1, in_seconds=0.1 * n)

            await eventually(lambda: tarpit.answered == 4, within=90, what="all four answered")

            # One at a time, 1.1 s each: about 4.5 s; a poll in between would be over 120.
            assert time.monotonic() - started < 90
