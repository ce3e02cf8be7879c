"""Settles and releases: each matches only under the current lease token."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest

from app.domain.occurrence import Delivery, OccurrenceStatus, Settlement
from tests.store import ports
from tests.store.ports import Database, OccurrenceRow


def stale(delivery: Delivery) -> Delivery:
    """The same claim as a replica whose lease was replaced holds it."""
    return dataclasses.replace(delivery, lease_token=uuid.uuid4())


async def claimed_one(
    database: Database, *, max_attempts: int = 5
) -> tuple[Delivery, OccurrenceRow]:
    schedule = ports.draft(ports.immediate(), max_attempts=max_attempts)
    await ports.insert_schedules(database, [schedule])
    (delivery,) = await ports.claim(database, limit=1)
    (row,) = await ports.read_occurrence_rows(database, schedule.id)
    return delivery, row


async def test_delivered_is_recorded_under_the_lease_token_only(database: Database) -> None:
    delivery, leased = await claimed_one(database)

    await ports.settle(database, [Settlement(stale(delivery), OccurrenceStatus.DELIVERED)])
    assert await ports.read_occurrence_rows(database, delivery.schedule_id) == [leased]

    await ports.settle(database, [Settlement(delivery, OccurrenceStatus.DELIVERED)])
    (row,) = await ports.read_occurrence_rows(database, delivery.schedule_id)
    assert row.status is OccurrenceStatus.DELIVERED
    assert row.delivered_at is not None
    assert (row.attempts, row.lease_token, row.last_error) == (1, None, None)
    assert await ports.claim(database, limit=1) == []


async def test_a_retry_is_due_again_at_its_instant_and_not_before(database: Database) -> None:
    retry_in = 20.0  # less than the claim's 30 s lease
    delivery, leased = await claimed_one(database)

    retry = Settlement(
        delivery, OccurrenceStatus.PENDING, error="503 from target", retry_in=retry_in
    )
    await ports.settle(database, [dataclasses.replace(retry, delivery=stale(delivery))])
    assert await ports.read_occurrence_rows(database, delivery.schedule_id) == [leased]

    await ports.settle(database, [retry])
    (row,) = await ports.read_occurrence_rows(database, delivery.schedule_id)
    assert row.status is OccurrenceStatus.PENDING
    assert (row.attempts, row.lease_token, row.last_error) == (1, None, "503 from target")
    assert row.available_at is not None
    assert leased.available_at is not None
    assert row.available_at < leased.available_at, "the retry instant is not the lease's end"
    assert await ports.claim(database, limit=1) == [], "claimed at once"
    await ports.move_clock_past(database, row.available_at - timedelta(seconds=5))
    assert await ports.claim(database, limit=1) == [], "claimed before its retry instant"

    await ports.move_clock_past(database, row.available_at)
    (again,) = await ports.claim(database, limit=1)
    assert (again.occurrence_id, again.attempt) == (delivery.occurrence_id, 2)


async def test_a_dead_letter_is_recorded_under_the_lease_token_only(database: Database) -> None:
    delivery, leased = await claimed_one(database)
    dead = Settlement(delivery, OccurrenceStatus.DEAD_LETTERED, error="410 Gone")

    await ports.settle(database, [dataclasses.replace(dead, delivery=stale(delivery))])
    assert await ports.read_occurrence_rows(database, delivery.schedule_id) == [leased]

    await ports.settle(database, [dead])
    (row,) = await ports.read_occurrence_rows(database, delivery.schedule_id)
    assert row.status is OccurrenceStatus.DEAD_LETTERED
    assert row.dead_lettered_at is not None
    assert (row.attempts, row.lease_token, row.last_error) == (1, None, "410 Gone")
    assert row.available_at is None
    assert await ports.claim(database, limit=1) == []


@pytest.mark.parametrize(("started", "counted"), [(False, 0), (True, 1)])
async def test_release_hands_back_at_once_and_counts_only_a_started_attempt(
    database: Database, started: bool, counted: int
) -> None:
    delivery, leased = await claimed_one(database)

    await ports.release(database, [stale(delivery)], started=started)
    assert await ports.read_occurrence_rows(database, delivery.schedule_id) == [leased]

    await ports.release(database, [delivery], started=started)
    (row,) = await ports.read_occurrence_rows(database, delivery.schedule_id)
    assert row.status is OccurrenceStatus.PENDING
    assert (row.attempts, row.lease_token) == (counted, None)

    # Due now although its 30 s lease has not run out.
    (again,) = await ports.claim(database, limit=1)
    assert again.occurrence_id == delivery.occurrence_id
    assert again.attempt == counted + 1
    assert again.lease_token != delivery.lease_token


async def test_only_a_current_delivery_restarts_the_count_of_dead_letters_in_a_row(
    database: Database,
) -> None:
    delivery, _ = await claimed_one(database, max_attempts=1)
    await ports.settle(database, [Settlement(delivery, OccurrenceStatus.DEAD_LETTERED, error="x")])
    assert (await ports.read_schedule(database, delivery.schedule_id)).consecutive_failures == 1

    assert await ports.replay(database, [delivery.occurrence_id]) == [delivery.occurrence_id]
    (again,) = await ports.claim(database, limit=1)
    late = Settlement(stale(again), OccurrenceStatus.DELIVERED)
    await ports.settle(database, [late])
    assert (await ports.read_schedule(database, delivery.schedule_id)).consecutive_failures == 1

    await ports.settle(database, [Settlement(again, OccurrenceStatus.DELIVERED)])
    schedule = await ports.read_schedule(database, delivery.schedule_id)
    assert schedule.consecutive_failures == 0
    assert schedule.status.value == "completed"
