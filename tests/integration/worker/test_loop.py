"""The running loop: survives a database outage, stops gracefully, settles what it started."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from app.settings import Settings
from app.sinks import open_sinks
from app.store.engine.database import Database
from app.worker.dispatcher import Dispatcher
from tests.conftest import make_settings
from tests.integration.conftest import Harness
from tests.receiver import Reply
from tests.tcp_proxy import TcpProxy
from tests.waiting import eventually, suspended_in


@asynccontextmanager
async def _running(
    settings: Settings, database: Database, **loop: Any
) -> AsyncIterator[Dispatcher]:
    """A dispatcher running its loop with `settings` changed by `loop`, stopped on exit."""
    settings = settings.model_copy(update=loop)
    async with open_sinks(settings) as sinks:
        dispatcher = Dispatcher(database, sinks, settings, rng=random.Random(1))
        async with dispatcher.started():
            yield dispatcher


async def _batch(harness: Harness, count: int) -> list[str]:
    items = [{"event_type": "loop", "target": harness.webhook()} for _ in range(count)]
    for item in items:
        item["trigger"] = {"type": "immediate"}
    response = await harness.client.post("/v1/schedules/batch", json={"items": items})
    assert response.status_code == 201, response.text
    return [item["next_occurrence_id"] for item in response.json()["items"]]


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_the_loop_survives_a_database_outage_and_delivers_afterwards(
    harness: Harness,
) -> None:
    url = make_url(harness.settings.database_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    await proxy.start()
    proxied = url.set(port=proxy.port).render_as_string(hide_password=False)
    settings = make_settings(proxied, poll_interval=0.05)
    database = Database(settings.database_url)
    try:
        async with _running(settings, database, concurrency=8) as dispatcher:
            first = await _batch(harness, 10)
            await harness.receiver.wait_for(10)

            await proxy.cut()
            during = await _batch(harness, 10)
            await eventually(lambda: dispatcher.errors >= 2, within=20.0, every=0.05)
            assert dispatcher.running
            assert len(harness.receiver.requests) == 10

            await proxy.restore()
            await harness.receiver.wait_for(20, timeout=30)
        received = {r.occurrence_id for r in harness.receiver.requests}
        assert received == set(first) | set(during)
    finally:
        await database.close()
        await proxy.close()


async def test_stopping_lets_in_flight_deliveries_finish_and_settles_them(
    harness: Harness,
) -> None:
    harness.receiver.always("/hook", Reply(delay=0.5))
    async with _running(harness.settings, harness.database, concurrency=8) as dispatcher:
        ids = await _batch(harness, 5)
        await eventually(
            lambda: dispatcher.cycles > 0 and not _idle(dispatcher), within=20.0, every=0.05
        )
        started = time.monotonic()
    stopped_in = time.monotonic() - started

    assert stopped_in < harness.settings.dispatch_timeout + 1
    assert {r.occurrence_id for r in harness.receiver.requests} == set(ids)
    listed = (await harness.get("/v1/schedules?status=completed"))["items"]
    assert len(listed) == 5


def _idle(dispatcher: Dispatcher) -> bool:
    return not dispatcher.in_flight


async def _true(value: bool) -> bool:
    return value


async def test_the_running_loop_delivers_a_concurrent_stream_exactly_once(
    harness: Harness,
) -> None:
    harness.receiver.always("/hook", Reply(delay=0.05))
    async with _running(harness.settings, harness.database, concurrency=16, batch_size=10):
        ids = await _batch(harness, 120)
        await harness.receiver.wait_for(120, timeout=30)
        await eventually(lambda: _all_completed(harness, 120), within=20.0, every=0.05)

    received = [r.occurrence_id for r in harness.receiver.requests]
    assert sorted(received) == sorted(ids)
    assert {r.headers["X-Attempt"] for r in harness.receiver.requests} == {"1"}


async def _all_completed(harness: Harness, count: int) -> bool:
    page = await harness.get("/v1/schedules?status=completed&limit=500")
    return len(page["items"]) == count


async def test_stopping_hands_back_claimed_but_unstarted_occurrences_at_once(
    harness: Harness,
) -> None:
    harness.receiver.always("/hook", Reply(delay=0.3))
    loop = {"concurrency": 1, "batch_size": 10}
    async with _running(harness.settings, harness.database, **loop) as dispatcher:
        ids = await _batch(harness, 6)
        await eventually(lambda: not _idle(dispatcher), within=20.0, every=0.05)

    # One was in flight and finished; the rest come back due now, their attempt uncounted,
    # without waiting for the 5 s lease.
    harness.receiver.always("/hook", Reply())
    assert len(harness.receiver.requests) == 1
    assert await harness.step() == 5
    assert {r.occurrence_id for r in harness.receiver.requests} == set(ids)
    assert {r.headers["X-Attempt"] for r in harness.receiver.requests} == {"1"}


async def test_a_missed_room_signal_costs_at_most_a_poll_interval(harness: Harness) -> None:
    """The loop waits for room while two claims are counted; if they leave without a signal
    (a lost wake-up), the poll interval still brings it back."""
    settings = harness.settings.model_copy(update={"poll_interval": 0.5})
    dispatcher = Dispatcher(harness.database, harness.sinks, settings)
    stale = [asyncio.ensure_future(asyncio.sleep(0)) for _ in range(2)]
    await asyncio.wait(stale)
    dispatcher._claims.extend(stale)  # counted as running, though finished
    async with dispatcher.started():
        # The loop has looked for room, found none, and waits for it: it claimed nothing.
        await eventually(lambda: suspended_in(dispatcher._task, "Pacing.wait_for_room"))
        assert dispatcher.cycles == 0
        dispatcher._claims.clear()  # gone, and no one signals
        await eventually(lambda: dispatcher.cycles > 0, within=3.0, every=0.05)


async def test_a_delivery_never_starts_on_a_lease_too_short_to_finish(harness: Harness) -> None:
    """One delivery at a time, half a second each, under a 4 s lease: ten claimed at once
    take 5 s, so the later ones would start with their lease nearly gone or spent (another
    claim could take them meanwhile). They are handed back instead and claimed afresh:
    each is delivered once, as attempt 1. (The dispatch timeout is 4x a delivery, so a slow
    machine does not turn one into a timed-out retry.)"""
    harness.receiver.always("/hook", Reply(delay=0.5))
    loop = {"concurrency": 1, "batch_size": 10, "lease": 4.0, "dispatch_timeout": 2.0}
    async with _running(harness.settings, harness.database, **loop):
        ids = await _batch(harness, 10)
        await eventually(lambda: _all_completed(harness, 10), within=60, every=0.05)

    received = [r.occurrence_id for r in harness.receiver.requests]
    assert sorted(received) == sorted(ids)
    assert {r.headers["X-Attempt"] for r in harness.receiver.requests} == {"1"}


async def test_a_pause_or_cancel_stops_what_waits_in_the_lanes_of_a_saturated_replica(
    harness: Harness,
) -> None:
    # Two slots, replies that take 0.3 s, thirty due at once and claimed at once (one
    # batch): all but two wait in the lanes, for seconds. Half of those are paused and a
    # few cancelled while they wait: none of them is sent once its pause or cancel has
    # answered (but those already marked started), and a paused one is delivered after the
    # resume, its attempt not spent.
    harness.receiver.always("/hook", Reply(delay=0.3))
    loop = {"concurrency": 2, "batch_size": 30}
    async with _running(harness.settings, harness.database, **loop):
        response = await harness.client.post(
            "/v1/schedules/batch",
            json={
                "items": [
                    {"event_type": "loop", "target": harness.webhook(), "max_attempts": 1}
                    | {"trigger": {"type": "immediate"}}
                    for _ in range(30)
                ]
            },
        )
        assert response.status_code == 201, response.text
        created = response.json()["items"]
        await harness.receiver.wait_for(2, timeout=30)  # claimed: the rest wait in the lanes
        arrived = {r.occurrence_id for r in harness.receiver.requests}
        waiting = [s for s in created if s["next_occurrence_id"] not in arrived]
        stopped_at: dict[str, float] = {}
        paused = []
        for schedule in waiting[:15]:
            answer = await harness.client.post(f"/v1/schedules/{schedule['id']}/pause")
            if answer.status_code == 409:  # it was in flight, and is delivered by now
                continue
            assert answer.status_code == 200, answer.text
            stopped_at[schedule["next_occurrence_id"]] = time.time()
            paused.append(schedule)
        for schedule in waiting[15:18]:
            answer = await harness.client.delete(f"/v1/schedules/{schedule['id']}")
            if answer.status_code == 409:
                continue
            assert answer.status_code in (200, 204), answer.text
            stopped_at[schedule["next_occurrence_id"]] = time.time()
        assert len(paused) >= 10, "most of those paused were still waiting"
        others = {s["next_occurrence_id"] for s in created} - set(stopped_at)
        await eventually(
            lambda: others <= {r.occurrence_id for r in harness.receiver.requests},
            within=30.0,
            every=0.05,
        )

        late = [
            r.occurrence_id
            for r in harness.receiver.requests
            if r.occurrence_id in stopped_at and r.at > stopped_at[r.occurrence_id]
        ]
        # What is marked started is an attempt begun, which a pause or cancel lets finish:
        # the loop marks up to as many starts ahead of a free slot as deliveries finished
        # while its last mark was on its way (`StartMarks.spare`, at most the window), and
        # one whose pause answered between its mark and its slot is still sent. The others
        # were all stopped.
        assert len(late) <= loop["concurrency"], f"{len(late)} were sent after their pause"

        harness.receiver.always("/hook", Reply())
        for schedule in paused:
            answer = await harness.client.post(f"/v1/schedules/{schedule['id']}/resume")
            assert answer.status_code == 200, answer.text
        resumed = {s["next_occurrence_id"] for s in paused}
        await eventually(
            lambda: resumed <= {r.occurrence_id for r in harness.receiver.requests},
            within=30.0,
            every=0.05,
        )
    attempts = {r.headers["X-Attempt"] for r in harness.receiver.requests}
    assert attempts == {"1"}, "a paused delivery that waited was charged an attempt"
