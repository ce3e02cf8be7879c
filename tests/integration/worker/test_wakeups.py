"""Wake-ups: with a poll interval far longer than the test, the loop still fires on time,
because it sleeps until the next due instant it knows of and writes announce earlier ones
(LISTEN/NOTIFY on PostgreSQL, in process on SQLite)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from app.store.engine.database import Database
from app.store.loop.claims import Claimed
from app.store.loop.queue import DeliveryQueue
from app.worker.dispatcher import Dispatcher
from tests.conftest import ALL_STORES
from tests.factories import iso
from tests.integration.conftest import Harness
from tests.receiver import Reply
from tests.waiting import eventually, suspended_in

POLL = 60.0  # never reached: anything that arrives in time was woken up
PROMPT = 5.0  # generous bound for "at once" on a busy 2-core machine


class _CountedQueue(DeliveryQueue):
    """The store's queue, counting the claims that have come back."""

    answered = 0

    async def claim(
        self,
        *,
        limit: int,
        lease: float,
        owner: str,
        backoff: Callable[[int], float],
        ahead: float = 0.0,
        start: int | None = None,
        skip: Sequence[str] = (),
    ) -> Claimed:
        try:
            return await super().claim(
                limit=limit,
                lease=lease,
                owner=owner,
                backoff=backoff,
                ahead=ahead,
                start=start,
                skip=skip,
            )
        finally:
            self.answered += 1


@asynccontextmanager
async def _idle_loop(harness: Harness) -> AsyncIterator[Dispatcher]:
    """A running loop that polls only every POLL seconds, and has gone idle."""
    settings = harness.settings.model_copy(update={"poll_interval": POLL})
    queue = _CountedQueue(harness.database, harness.wakeups)
    dispatcher = Dispatcher(
        harness.database,
        harness.sinks,
        settings,
        queue=queue,
        rng=random.Random(5),
        wakeups=harness.wakeups,
    )

    def asleep() -> bool:
        # Every claim it issued came back (with nothing), and it waits on its alarm.
        return (
            dispatcher.cycles >= 1
            and queue.answered == dispatcher.cycles
            and suspended_in(dispatcher._task, "Alarm.sleep")
        )

    async with dispatcher.started():
        await eventually(asleep, within=PROMPT, every=0.01, what="the loop idle")
        yield dispatcher


async def _true(value: bool) -> bool:
    return value


def _received(harness: Harness, count: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return len(harness.receiver.requests) >= count

    return check


# Each database wakes the loop its own way (LISTEN/NOTIFY, or in process after a commit).
@ALL_STORES
async def test_a_new_schedule_wakes_an_idle_loop(harness: Harness) -> None:
    async with _idle_loop(harness):
        await harness.create(trigger={"type": "immediate"})
        await eventually(_received(harness, 1), within=PROMPT, every=0.01)


@ALL_STORES
async def test_an_idle_loop_sleeps_until_the_next_due_instant(harness: Harness) -> None:
    due = datetime.now(UTC) + timedelta(seconds=1.5)
    await harness.create(trigger={"type": "once", "at": iso(due)})
    async with _idle_loop(harness):
        await eventually(_received(harness, 1), within=PROMPT, every=0.01)

    arrived = datetime.fromtimestamp(harness.receiver.requests[0].at, UTC)
    # Woken for it: the loop's poll (POLL) would have come far later.
    assert timedelta(0) <= arrived - due < timedelta(seconds=PROMPT)


@ALL_STORES
async def test_a_recurring_schedule_keeps_its_cadence_without_polling(harness: Harness) -> None:
    start = datetime.now(UTC) + timedelta(milliseconds=500)
    async with _idle_loop(harness):
        await harness.create(
            trigger={"type": "interval", "every_seconds": 1, "start_at": iso(start)}
        )
        await eventually(_received(harness, 3), within=PROMPT + 3, every=0.01)

    for n, request in enumerate(harness.receiver.requests[:3]):
        arrived = datetime.fromtimestamp(request.at, UTC)
        assert arrived - (start + n * timedelta(seconds=1)) < timedelta(seconds=PROMPT)


@ALL_STORES
async def test_a_retry_wakes_the_loop_when_it_comes_due(make_harness) -> None:  # type: ignore[no-untyped-def]
    async with make_harness(retry_base_delay=0.2, retry_max_delay=0.4) as harness:
        harness.receiver.script("/hook", Reply(status=503))
        async with _idle_loop(harness):
            await harness.create(trigger={"type": "immediate"})
            await eventually(_received(harness, 2), within=PROMPT, every=0.01)

        assert [r.headers["X-Attempt"] for r in harness.receiver.requests] == ["1", "2"]


@ALL_STORES
async def test_trigger_replay_and_resume_wake_an_idle_loop(make_harness) -> None:  # type: ignore[no-untyped-def]
    async with make_harness(max_attempts=1) as harness:
        harness.receiver.script("/hook", Reply(status=400))
        later = datetime.now(UTC) + timedelta(hours=1)
        created = await harness.create(trigger={"type": "once", "at": iso(later)})
        paused = await harness.create(trigger={"type": "immediate"})
        await harness.client.post(f"/v1/schedules/{paused['id']}/pause")
        async with _idle_loop(harness):
            await harness.client.post(f"/v1/schedules/{created['id']}/trigger")
            await eventually(
                _received(harness, 1), within=PROMPT, every=0.01
            )  # refused with 400: dead letter

            async def dead_lettered() -> bool:
                return bool((await harness.get("/v1/dead-letters"))["items"])

            await eventually(dead_lettered, within=PROMPT, every=0.01)
            (letter,) = (await harness.get("/v1/dead-letters"))["items"]
            await harness.client.post(f"/v1/dead-letters/{letter['occurrence_id']}/replay")
            await eventually(_received(harness, 2), within=PROMPT, every=0.01)

            await harness.client.post(f"/v1/schedules/{paused['id']}/resume")
            await eventually(_received(harness, 3), within=PROMPT, every=0.01)

        # Each woke the loop for its own occurrence: the triggered one, the same again
        # replayed, and the resumed schedule's.
        assert [r.occurrence_id for r in harness.receiver.requests] == [
            letter["occurrence_id"],
            letter["occurrence_id"],
            paused["next_occurrence_id"],
        ]
        assert letter["schedule_id"] == created["id"]


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_a_lost_listen_connection_is_re_established(harness: Harness) -> None:
    async with _idle_loop(harness):
        killed = await _terminate_listeners(harness.database)
        assert killed
        # The listener notices and listens again on a connection of its own.
        await eventually(
            lambda: _listening_anew(harness.database, killed), within=PROMPT, every=0.01
        )
        await harness.create(trigger={"type": "immediate"})
        await eventually(_received(harness, 1), within=PROMPT, every=0.01)
        assert await _listeners(harness.database) >= 1


async def _terminate_listeners(database: Database) -> list[int]:
    """The process ids of the listening connections it ended."""

    async def work(conn):  # type: ignore[no-untyped-def]
        result = await conn.execute(
            sa.text(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'chronoq-listen' AND datname = current_database()"
            )
        )
        return [row[0] for row in result]

    killed: list[int] = await database.run(work)
    return killed


async def _listening_anew(database: Database, killed: list[int]) -> bool:
    """A listening connection other than those ended has run its LISTEN."""

    async def work(conn):  # type: ignore[no-untyped-def]
        return await conn.scalar(
            sa.text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name = 'chronoq-listen' AND datname = current_database() "
                "AND NOT (pid = ANY(:killed)) AND query LIKE 'LISTEN%'"
            ),
            {"killed": killed},
        )

    count: int = await database.run(work)
    return count >= 1


async def _listeners(database: Database) -> int:
    async def work(conn):  # type: ignore[no-untyped-def]
        return await conn.scalar(
            sa.text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name = 'chronoq-listen' AND datname = current_database()"
            )
        )

    count: int = await database.run(work)
    return count
