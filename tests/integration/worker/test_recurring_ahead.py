"""Recurring ticks claimed ahead: the loop leases ticks shortly before they are due and
holds them until their instant, so none arrives early, each arrives once, and a stop hands
back the ticks it still held, unattempted.

Instants are read on the database clock, which the cases move to just before a tick, or
past it, rather than wait for it (`tests.store.ports.move_clock_past`); a request's arrival
(`Received.at`, the host's clock) is compared with it moved as well (`_arrived`). Holding a
tick claimed ahead until its instant is the loop's own timer: that takes the real time.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from app.settings import Settings
from app.worker.dispatcher import Dispatcher
from tests.factories import iso
from tests.integration.conftest import Harness
from tests.receiver import Received, Reply
from tests.store import ports
from tests.waiting import eventually

BOUND = 10.0  # generous: the machine is shared
# How long before a tick the cases move the clock to: what the loop then holds it for.
LEAD = timedelta(seconds=0.3)


async def _true(value: bool) -> bool:
    return value


def _arrived(harness: Harness, request: Received) -> float:
    """When `request` arrived, on the database clock (moved as the case moved it)."""
    return request.at + harness.database.clock.shift.total_seconds()


# The window a replica claims ahead by, unless told otherwise.
CLAIM_AHEAD = Settings.model_fields["claim_ahead"].default


@asynccontextmanager
async def _loop(harness: Harness, claim_ahead: float = CLAIM_AHEAD) -> AsyncIterator[Dispatcher]:
    dispatcher = Dispatcher(
        harness.database,
        harness.sinks,
        harness.settings.model_copy(update={"claim_ahead": claim_ahead}),
        rng=random.Random(3),
        wakeups=harness.wakeups,
    )
    async with dispatcher.started():
        yield dispatcher


async def test_interval_ticks_arrive_once_each_and_none_before_its_instant(
    harness: Harness,
) -> None:
    # All six made well before their first ticks, then the clock moved to just before them.
    first = datetime.now(UTC) + timedelta(hours=1)
    ids = []
    async with _loop(harness):
        for n in range(6):
            start = first + timedelta(milliseconds=40 * n)
            trigger = {"type": "interval", "every_seconds": 1, "start_at": iso(start)}
            ids.append((await harness.create(trigger=trigger))["id"])
        await ports.move_clock_past(harness.database, first - LEAD)
        await harness.receiver.wait_for(12, timeout=BOUND + 2)
    requests = harness.receiver.requests
    for request in requests:
        due = datetime.fromisoformat(request.headers["X-Scheduled-For"]).timestamp()
        assert _arrived(harness, request) >= due, "a tick was delivered before its instant"
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


async def test_a_stop_hands_back_the_ticks_it_held_unattempted(
    harness: Harness,
) -> None:
    # A window of 3 s and the tick 2 s away (as `_stopped_while_waiting`): claimed ahead by
    # the first claim, with seconds to spare before its instant for the loop to be seen
    # holding it and stopped, not the default window's fraction of a second.
    due = datetime.now(UTC) + timedelta(seconds=2)
    trigger = {"type": "interval", "every_seconds": 3600, "start_at": iso(due)}
    async with _loop(harness, claim_ahead=3.0) as dispatcher:
        schedule = await harness.create(trigger=trigger)
        # Claimed ahead of its instant, and held.
        await eventually(lambda: dispatcher.waiting == 1, within=BOUND, every=0.01)
        assert datetime.now(UTC) < due, "the machine was too slow for this test"
    assert harness.receiver.requests == []
    occurrences = await harness.occurrences(schedule["id"])
    (tick,) = [o for o in occurrences if datetime.fromisoformat(o["fire_at"]) == due]
    assert (tick["status"], tick["attempts"]) == ("pending", 0)
    # Not due before its instant; at it, the next claim delivers it, once.
    assert await harness.step() == 0, "a tick handed back was due before its instant"
    await ports.move_clock_past(harness.database, due)
    assert await harness.step() == 1
    (request,) = harness.receiver.requests
    assert request.headers["X-Occurrence-Id"] == tick["occurrence_id"]
    assert _arrived(harness, request) >= due.timestamp()


async def _stopped_while_waiting(harness: Harness, stop: str) -> dict[str, Any]:
    """A one-shot claimed ahead (a window of 3 s, so that there is time to act), stopped by
    `stop` ("pause" or "cancel") while it waits for its instant; returns its occurrence
    once its instant has passed and the loop let go of it. (On real time: what lets go of
    it is the mark the loop's own timer makes at its instant, which no moved clock wakes.)"""
    due = datetime.now(UTC) + timedelta(seconds=2)
    async with _loop(harness, claim_ahead=3.0) as dispatcher:
        schedule = await harness.create(trigger={"type": "once", "at": iso(due)})
        await eventually(lambda: dispatcher.waiting == 1, within=BOUND, every=0.01)
        path = f"/v1/schedules/{schedule['id']}"
        if stop == "pause":
            response = await harness.client.post(f"{path}/pause")
        else:
            response = await harness.client.delete(path)
        assert response.status_code == 200, response.text
        assert datetime.now(UTC) < due, "the machine was too slow for this test"
        await eventually(
            lambda: (
                datetime.now(UTC) > due + timedelta(seconds=0.2)
                and dispatcher.waiting == 0
                and dispatcher.in_flight == 0
            ),
            within=BOUND,
            every=0.01,
        )
    assert harness.receiver.requests == [], "a stopped tick was delivered"
    (occurrence,) = await harness.occurrences(schedule["id"])
    return {**occurrence, "schedule_id": schedule["id"], "due": due}


async def test_a_pause_while_a_tick_waits_claimed_ahead_stops_it(
    harness: Harness,
) -> None:
    occurrence = await _stopped_while_waiting(harness, "pause")

    assert (occurrence["status"], occurrence["attempts"]) == ("pending", 0)
    response = await harness.client.post(f"/v1/schedules/{occurrence['schedule_id']}/resume")
    assert response.status_code == 200, response.text
    await harness.step_until(lambda: _true(len(harness.receiver.requests) == 1))
    (request,) = harness.receiver.requests
    assert request.headers["X-Attempt"] == "1"
    assert _arrived(harness, request) >= occurrence["due"].timestamp()


async def test_a_cancel_while_a_tick_waits_claimed_ahead_stops_it(
    harness: Harness,
) -> None:
    occurrence = await _stopped_while_waiting(harness, "cancel")

    assert occurrence["status"] == "cancelled"
    attempts = await harness.get(f"/v1/occurrences/{occurrence['occurrence_id']}/attempts")
    assert attempts["items"] == []


async def test_a_running_loop_delivers_a_tick_claimed_ahead_at_its_instant_on_the_moved_clock(
    make_harness: Callable[..., Any],
) -> None:
    """The running loop holds a tick claimed ahead until its instant on the database clock
    (`ClaimedAhead`'s `wall`), not on the host's: with the clock moved to a second before a
    tick due in an hour, it is claimed ahead, held that second, and delivered, once. (A
    lease longer than the wait: no claim after a lost lease could deliver it instead.)"""
    due = datetime.now(UTC) + timedelta(hours=1)
    async with (
        make_harness(lease=BOUND * 6) as harness,
        _loop(harness, claim_ahead=3.0) as dispatcher,
    ):
        schedule = await harness.create(trigger={"type": "once", "at": iso(due)})
        await ports.move_clock_past(harness.database, due - timedelta(seconds=1))
        # Claimed ahead, and held.
        await eventually(lambda: dispatcher.waiting == 1, within=BOUND, every=0.01)
        await harness.receiver.wait_for(1, timeout=BOUND)
        await eventually(
            lambda: _status(harness, schedule["id"], "completed"), within=BOUND, every=0.01
        )
        (request,) = harness.receiver.requests
        arrived = _arrived(harness, request)
    assert arrived >= due.timestamp(), "delivered before its instant"
    assert request.headers["X-Attempt"] == "1"


async def _status(harness: Harness, schedule_id: str, status: str) -> bool:
    return await harness.schedule_status(schedule_id) == status


async def test_an_attempt_in_flight_through_a_cancel_is_in_the_attempt_log(
    harness: Harness,
) -> None:
    harness.receiver.script("/hook", Reply(200, delay=1.0))
    async with _loop(harness) as dispatcher:
        schedule = await harness.create()
        # At the receiver, which holds it a second: in flight for sure (a delivery the
        # loop holds may still wait for its start mark, which a cancel stops).
        await harness.receiver.wait_for_arrivals(1, timeout=BOUND)
        assert dispatcher.in_flight == 1
        response = await harness.client.delete(f"/v1/schedules/{schedule['id']}")
        assert response.status_code == 200, response.text
        await harness.receiver.wait_for(1, timeout=BOUND)
        occurrence_id = schedule["next_occurrence_id"]

        async def logged() -> bool:
            found = await harness.get(f"/v1/occurrences/{occurrence_id}/attempts")
            return bool(found["items"])

        await eventually(logged, within=BOUND, every=0.01)
    (attempt,) = (await harness.get(f"/v1/occurrences/{occurrence_id}/attempts"))["items"]
    assert (attempt["attempt"], attempt["outcome"]) == (1, "delivered")
    (occurrence,) = await harness.occurrences(schedule["id"])
    assert occurrence["status"] == "cancelled"


async def test_retries_claimed_ahead_go_out_once_per_attempt_and_spend_no_attempt(
    make_harness: Callable[..., Any],
) -> None:
    # Retries due within the claim-ahead window are claimed ahead again moments after the
    # attempt before them started: each attempt goes out once, under its own number, and
    # the budget is spent on attempts made, so every occurrence dead-letters after exactly
    # max_attempts requests, well inside a lease (none waits for a lost lease to run out).
    attempts = 5
    async with make_harness(retry_base_delay=0.05, retry_max_delay=0.2, lease=30.0) as h:
        h.receiver.always("/hook", Reply(503))
        async with _loop(h):
            ids = [(await h.create(max_attempts=attempts))["id"] for _ in range(8)]

            async def all_dead_lettered() -> bool:
                page = await h.get("/v1/dead-letters?limit=50")
                return len(page["items"]) == len(ids)

            await eventually(all_dead_lettered, within=BOUND, what="every occurrence dead-lettered")
        sent = Counter(
            (request.headers["X-Occurrence-Id"], int(request.headers["X-Attempt"]))
            for request in h.receiver.on("/hook")
        )
        assert max(sent.values()) == 1, "an attempt went out twice"
        by_occurrence = Counter(occurrence for occurrence, _ in sent)
        assert sorted(by_occurrence.values()) == [attempts] * len(ids)
        for item in (await h.get("/v1/dead-letters?limit=50"))["items"]:
            assert item["attempts"] == attempts
