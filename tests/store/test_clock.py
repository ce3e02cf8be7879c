"""The database clock, and instants kept exactly as written: UTC, to the microsecond."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from tests.store import ports
from tests.store.ports import Database


def is_utc(instant: datetime | None) -> bool:
    return instant is not None and instant.utcoffset() == timedelta(0)


async def test_the_database_clock_is_utc_and_moves_forward_between_transactions(
    database: Database,
) -> None:
    first = await ports.database_now(database)
    second = await ports.database_now(database)

    assert is_utc(first)
    assert is_utc(second)
    assert first < second
    assert abs(first - datetime.now(UTC)) < timedelta(minutes=5), "not the current instant"


async def test_an_instant_is_read_back_as_written_to_the_microsecond(database: Database) -> None:
    # Given in another offset: stored and read back as the same instant, in UTC.
    at = datetime(2031, 7, 14, 9, 26, 53, 123457, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    schedule = ports.draft(ports.once(at))
    await ports.insert_schedules(database, [schedule])

    (row,) = await ports.read_occurrence_rows(database, schedule.id)

    assert row.fire_at == at
    assert row.available_at == at
    assert is_utc(row.fire_at)
    assert is_utc(row.available_at)
    assert row.fire_at.microsecond == 123457


async def test_a_lease_ends_a_lease_after_the_database_clock(database: Database) -> None:
    schedule = ports.draft(ports.immediate())
    await ports.insert_schedules(database, [schedule])

    before = await ports.database_now(database)
    await ports.claim(database, limit=1, lease=30.0)
    after = await ports.database_now(database)

    (row,) = await ports.read_occurrence_rows(database, schedule.id)
    assert row.available_at is not None
    assert is_utc(row.available_at)
    lease = timedelta(seconds=30)
    assert before + lease <= row.available_at <= after + lease
    assert before <= row.updated_at <= after
