"""Recurring ticks claimed ahead: the loop leases ticks shortly before they are due and
holds them until their instant, so none arrives early, each arrives once, and a stop hands
back the ticks it still held, unattempted."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

from app.worker.dispatcher import CLAIM_AHEAD, Dispatcher
from tests.integration.conftest import Harness

BOUND = 10.0  # generous: the machine is shared


def _iso(instant: datetime) -> str:
    return instant.isoformat().replace("+00:00", "Z")


async def _within(seconds: float, condition: Callable[[], Awaitable[bool]]) -> None:
    deadline = time.monotonic() + seconds
    while not await condition():
        assert time.monotonic() < deadline, f"not within {seconds}s"
        await asyncio.sleep(0.01)


async def _true(value: bool) -> bool:
    return value


@asynccontextmanager
async def _loop(harness: Harness) -> AsyncIterator[Dispatcher]:
    dispatcher = Dispatcher(
        harness.database,
        harness.sinks,
        harness.settings,
        rng=random.Random(3),
        wakeups=harness.wakeups,
    )
    async with dispatcher.started():
        yield dispatcher


async def test_interval_ticks_arrive_once_each_and_none_before_its_instant(
    harness: Harness,
) -> None:
    first = datetime.now(UTC) + timedelta(seconds=1)
    ids = []
    async with _loop(harness):
        for n in range(6):
            start = first + timedelta(milliseconds=40 * n)
            trigger = {"type": "interval", "every_seconds": 1, "start_at": _iso(start)}
            ids.append((await harness.create(trigger=trigger))["id"])
        await harness.receiver.wait_for(12, timeout=BOUND + 2)
    requests = harness.receiver.requests
    for request in requests:
        due = datetime.fromisoformat(request.headers["X-Scheduled-For"]).timestamp()
        assert request.at >= due, "a tick was delivered before its instant"
    ticks = Counter(
        (request.headers["X-Schedule-Id"], request.headers["X-Scheduled-For"])
        for request in requests
    )
    assert max(ticks.values()) == 1, "a tick arrived twice"
    firsts = {schedule: min(at for s, at in ticks if s == schedule) for schedule, _ in ticks}
    assert set(firsts) == set(ids)
    for schedule, at in firsts.items():
        start = first + timedelta(milliseconds=40 * ids.index(schedule))
        assert datetime.fromisoformat(at) == start, "the first tick is the start instant"


async def test_a_stop_hands_back_the_ticks_it_held_unattempted(harness: Harness) -> None:
    due = datetime.now(UTC) + timedelta(seconds=CLAIM_AHEAD + 1.5)
    trigger = {"type": "interval", "every_seconds": 3600, "start_at": _iso(due)}
    async with _loop(harness) as dispatcher:
        schedule = await harness.create(trigger=trigger)
        # Claimed ahead of its instant, and held.
        await _within(BOUND, lambda: _true(dispatcher.waiting == 1))
        assert datetime.now(UTC) < due, "the machine was too slow for this test"
    assert harness.receiver.requests == []
    occurrences = await harness.occurrences(schedule["id"])
    (tick,) = [o for o in occurrences if datetime.fromisoformat(o["fire_at"]) == due]
    assert (tick["status"], tick["attempts"]) == ("pending", 0)
    # The next claim delivers it, once, and not before its instant.
    await harness.step_until(lambda: _true(len(harness.receiver.requests) == 1))
    (request,) = harness.receiver.requests
    assert request.headers["X-Occurrence-Id"] == tick["occurrence_id"]
    assert request.at >= due.timestamp(), "a tick handed back was delivered before its instant"
