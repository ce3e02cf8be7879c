"""Hold and unhold (a schedule paused and resumed): nothing held is claimed, and each
occurrence gets its own instant back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.domain.occurrence import OccurrenceStatus, Settlement
from app.domain.schedule import ScheduleStatus
from tests.store import ports
from tests.store.ports import Database


async def test_a_held_occurrence_is_not_claimed_and_one_due_in_the_pause_is_due_at_unhold(
    database: Database,
) -> None:
    at = datetime.now(UTC) + timedelta(hours=1)
    schedule = ports.draft(ports.once(at))
    await ports.insert_schedules(database, [schedule])

    await ports.hold(database, schedule.id)
    assert await ports.read_schedule_status(database, schedule.id) is ScheduleStatus.PAUSED
    # Its instant passes while it is held.
    await ports.move_clock_past(database, at)
    assert await ports.claim(database, limit=1) == [], "a held occurrence was claimed"
    (row,) = await ports.read_occurrence_rows(database, schedule.id)
    assert (row.status, row.available_at) == (OccurrenceStatus.PENDING, None)

    await ports.unhold(database, schedule.id)
    (row,) = await ports.read_occurrence_rows(database, schedule.id)
    assert row.available_at == at, "unhold did not give back the occurrence's own instant"
    (delivery,) = await ports.claim(database, limit=1)
    assert (delivery.schedule_id, delivery.attempt) == (schedule.id, 1)


async def test_unhold_gives_a_future_occurrence_its_own_instant_and_it_stays_future(
    database: Database,
) -> None:
    at = datetime.now(UTC).replace(microsecond=654321) + timedelta(hours=1)
    schedule = ports.draft(ports.once(at))
    await ports.insert_schedules(database, [schedule])

    await ports.hold(database, schedule.id)
    await ports.unhold(database, schedule.id)

    (row,) = await ports.read_occurrence_rows(database, schedule.id)
    assert (row.status, row.available_at) == (OccurrenceStatus.PENDING, at)
    assert await ports.read_schedule_status(database, schedule.id) is ScheduleStatus.PENDING
    assert await ports.claim(database, limit=1) == []


async def test_unhold_gives_a_retrying_occurrence_its_retry_instant(database: Database) -> None:
    schedule = ports.draft(ports.immediate())
    await ports.insert_schedules(database, [schedule])
    (delivery,) = await ports.claim(database, limit=1)
    retry = Settlement(delivery, OccurrenceStatus.PENDING, error="timeout", retry_in=3600.0)
    await ports.settle(database, [retry])
    (retrying,) = await ports.read_occurrence_rows(database, schedule.id)

    await ports.hold(database, schedule.id)
    await ports.unhold(database, schedule.id)

    (row,) = await ports.read_occurrence_rows(database, schedule.id)
    assert row.available_at == retrying.available_at
    assert (row.attempts, row.last_error) == (1, "timeout")
    assert await ports.claim(database, limit=1) == []


async def test_holding_a_recurring_schedule_records_its_due_tick_as_skipped(
    database: Database,
) -> None:
    schedule = ports.draft(ports.interval(60))  # its first tick is due now
    await ports.insert_schedules(database, [schedule])

    assert await ports.skip_due_ticks(database, schedule.id) == 1
    await ports.hold(database, schedule.id)

    (row,) = await ports.read_occurrence_rows(database, schedule.id)
    assert (row.status, row.skip_reason, row.attempts) == (OccurrenceStatus.SKIPPED, "paused", 0)
    assert row.available_at is None
    assert await ports.claim(database, limit=1) == []
