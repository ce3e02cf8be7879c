"""Settles and releases: each matches only under the current lease token."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa

from app.domain.occurrence import Delivery, OccurrenceStatus, Settlement
from app.domain.schedule import ScheduleStatus
from app.store.engine.database import Connection
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


# The settle's check of each one-shot it finishes for a dead-lettered firing, as
# `finish_one_shots` makes it (PostgreSQL).
_DEAD_LETTER_CHECK = sa.text(
    "EXPLAIN SELECT s.id, EXISTS (SELECT 1 FROM occurrences AS o WHERE o.schedule_id = s.id"
    " AND o.status = 'dead_lettered' AND o.origin = 'schedule' OFFSET 0)"
    " FROM schedules AS s WHERE s.id = ANY(CAST(:ids AS uuid[]))"
)


@pytest.mark.parametrize("dialect", [pytest.param("postgresql", marks=pytest.mark.postgres)])
async def test_finishing_one_shots_looks_their_dead_letters_up_beside_another_schedules_many(
    database: Database,
) -> None:
    failing = ports.draft(ports.interval(60), max_attempts=1)
    await ports.insert_schedules(database, [failing])
    (delivery,) = await ports.claim(database, limit=1)
    await ports.settle(database, [Settlement(delivery, OccurrenceStatus.DEAD_LETTERED, error="x")])

    async def many_dead_letters(conn: Connection) -> None:
        # Copies of its dead letter: a schedule failing for days holds thousands.
        await conn.execute(
            sa.text(
                "INSERT INTO occurrences SELECT r.* FROM occurrences AS o"
                " CROSS JOIN generate_series(1, 30000) AS n, LATERAL jsonb_populate_record("
                " NULL::occurrences, to_jsonb(o) || jsonb_build_object("
                " 'occurrence_id', gen_random_uuid(), 'attempts', n * 0 + 1)) AS r"
                " WHERE o.status = 'dead_lettered'"
            )
        )
        # Statistics that see them: the planner then expects each schedule to hold about
        # 30,000 / 21 occurrences, and a scan to find one soon.
        await conn.execute(sa.text("ANALYZE occurrences"))

    one_shots = [ports.draft(ports.immediate()) for _ in range(20)]
    await ports.insert_schedules(database, one_shots)
    await database.run(many_dead_letters)

    async def plan(conn: Connection) -> str:
        rows = await conn.execute(_DEAD_LETTER_CHECK, {"ids": [s.id for s in one_shots]})
        return "\n".join(str(row[0]) for row in rows)

    # A lookup by schedule, not a scan of every occurrence for each one-shot.
    assert "ix_occurrences_dead_letters_by_schedule" in await database.run(plan)
    leased = await ports.claim(database, limit=20)
    await ports.settle(database, [Settlement(d, OccurrenceStatus.DELIVERED) for d in leased])
    for schedule in one_shots:
        assert await ports.read_schedule_status(database, schedule.id) is ScheduleStatus.COMPLETED
