"""The clock seam: a database clock moved forward is what every read of it sees, at once,
on every store (its claims, leases, retry instants and the instants transactions stamp)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from app.domain.occurrence import OccurrenceStatus, Settlement
from tests.store import ports
from tests.store.ports import Database

HOUR = timedelta(hours=1)
# What a clock read can take on a loaded machine, at most: far less than any move here.
SLACK = timedelta(minutes=1)


async def test_a_moved_clock_is_read_later_by_every_database_of_the_store(
    database: Database, store_url: str
) -> None:
    before = await ports.database_now(database)

    ports.move_clock(database, HOUR)

    # Another pool on the same database (the delivery loop's, another replica's) too.
    other = Database(store_url)
    try:
        moved = [await ports.database_now(database), await ports.database_now(other)]
    finally:
        await other.close()
    for now in moved:
        assert before + HOUR < now < before + HOUR + SLACK
    database.clock.reset()
    assert before < await ports.database_now(database) < before + SLACK


async def test_an_occurrence_due_in_an_hour_is_claimed_once_the_clock_moved_an_hour(
    database: Database,
) -> None:
    due = await ports.database_now(database) + HOUR
    schedule = ports.draft(ports.once(due))
    await ports.insert_schedules(database, [schedule])
    assert await ports.claim(database, limit=5) == []

    ports.move_clock(database, HOUR / 2)
    # The loop's "next due in" reads the moved clock: half an hour left.
    due_in = await ports.due_in(database)
    assert due_in is not None
    assert (HOUR / 2 - SLACK).total_seconds() < due_in <= (HOUR / 2).total_seconds()
    assert await ports.claim(database, limit=5) == []

    ports.move_clock(database, HOUR / 2)
    before = await ports.database_now(database)
    (delivery,) = await ports.claim(database, limit=5, lease=30.0)
    after = await ports.database_now(database)

    assert delivery.schedule_id == schedule.id
    assert delivery.fire_at == due
    row = await ports.read_lease(database, delivery.occurrence_id)
    assert row.available_at is not None
    lease = timedelta(seconds=30)
    # Leased, stamped and started on the moved clock.
    assert before + lease <= row.available_at <= after + lease
    assert row.leased_at is not None
    assert before <= row.leased_at <= after
    (stored,) = await ports.read_occurrence_rows(database, schedule.id)
    assert before <= stored.updated_at <= after


async def test_a_lease_runs_out_once_the_clock_moved_past_its_end(database: Database) -> None:
    await ports.insert_schedules(database, [ports.draft(ports.immediate())])
    (first,) = await ports.claim(database, limit=5, lease=30.0, owner="replica-a")
    ports.move_clock(database, timedelta(seconds=29))
    assert await ports.claim(database, limit=5, owner="replica-b") == [], "still leased"

    ports.move_clock(database, timedelta(seconds=1, milliseconds=1))
    (second,) = await ports.claim(database, limit=5, owner="replica-b")

    assert second.occurrence_id == first.occurrence_id
    assert (first.attempt, second.attempt) == (1, 2)
    (lost,) = await ports.read_attempt_log(database, first.occurrence_id)
    assert (lost.outcome, lost.replica) == ("lease_expired", "replica-a")
    assert lost.duration_ms == 30_000, "it held its lease, on the database clock"


async def test_a_retry_is_due_its_backoff_after_the_moved_clock(database: Database) -> None:
    await ports.insert_schedules(database, [ports.draft(ports.immediate())])
    (delivery,) = await ports.claim(database, limit=5)
    ports.move_clock(database, HOUR)

    before = await ports.database_now(database)
    retry = Settlement(delivery, OccurrenceStatus.PENDING, error="503", retry_in=60.0)
    await ports.settle(database, [retry])
    after = await ports.database_now(database)

    row = await ports.read_lease(database, delivery.occurrence_id)
    assert row.available_at is not None
    backoff = timedelta(seconds=60)
    assert before + backoff <= row.available_at <= after + backoff
    assert await ports.claim(database, limit=5) == []
    ports.move_clock(database, backoff)
    (again,) = await ports.claim(database, limit=5)
    assert (again.occurrence_id, again.attempt) == (delivery.occurrence_id, 2)


async def test_the_clock_moves_forward_only(database: Database) -> None:
    with pytest.raises(ValueError, match="forward only"):
        ports.move_clock(database, -timedelta(microseconds=1))

    assert abs(await ports.database_now(database) - datetime.now(UTC)) < SLACK


async def test_sql_that_reads_a_clock_the_move_cannot_reach_is_refused(
    database: Database,
) -> None:
    # Before any move it runs, and reads the clock the database keeps.
    assert await ports.read_sql_clock(database, "CURRENT_TIMESTAMP") is not None
    ports.move_clock(database, HOUR)

    with pytest.raises(AssertionError, match="does not see the moved database clock"):
        await ports.read_sql_clock(database, "CURRENT_TIMESTAMP")


async def test_a_frozen_clock_stands_still_in_every_read_and_runs_on_once_unfrozen(
    database: Database, store_url: str
) -> None:
    ports.move_clock(database, HOUR)
    at = await ports.database_now(database)
    database.clock.freeze(at)
    # What falls due a moment after the frozen instant is not due while it stands still.
    schedule = ports.draft(ports.once(at + timedelta(milliseconds=1)))
    await ports.insert_schedules(database, [schedule])
    other = Database(store_url)
    try:
        assert [await ports.database_now(database), await ports.database_now(other)] == [at, at]
        assert await ports.claim(database, limit=5) == []
        assert database.clock.host_now() == at
        assert database.clock.time() == at.timestamp()
    finally:
        await other.close()
        database.clock.unfreeze()
    assert await ports.database_now(database) > at
    (delivery,) = await ports.claim(database, limit=5)
    assert delivery.schedule_id == schedule.id


async def test_a_clock_frozen_ahead_runs_until_that_instant(database: Database) -> None:
    now = await ports.database_now(database)
    database.clock.freeze(now + HOUR)
    try:
        assert now <= await ports.database_now(database) < now + SLACK
    finally:
        database.clock.unfreeze()


async def test_a_claim_ahead_reads_the_moved_clock_before_anything_it_leases(
    database: Database,
) -> None:
    # Its reading bounds the database's clock for the waits of what it claimed ahead: an
    # instant no later than the claim's own, taken on the moved clock, noted by loop time.
    ports.move_clock(database, HOUR)
    before = await ports.database_now(database)
    schedule = ports.draft(ports.once(before + timedelta(seconds=5)))
    await ports.insert_schedules(database, [schedule])

    claimed = await ports.claim_ahead(database, limit=5, ahead=10.0)
    after = await ports.database_now(database)

    assert claimed.reading is not None
    instant, read_by = claimed.reading
    assert claimed.claimed_at is not None
    assert before <= instant <= claimed.claimed_at <= after
    assert read_by <= asyncio.get_running_loop().time()
    (delivery,) = claimed.deliveries
    assert claimed.not_before[delivery.occurrence_id] == delivery.fire_at


async def test_a_claim_not_ahead_takes_no_reading(database: Database) -> None:
    assert (await ports.claimed(database, limit=5)).reading is None
