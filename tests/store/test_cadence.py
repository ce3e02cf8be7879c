"""Recurring schedules: the claim of a tick writes the next one, in the same transaction,
exactly once, with the id derived from the schedule and the instant."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from app.domain.ids import occurrence_id
from app.domain.misfire import Rules
from app.domain.occurrence import OccurrenceStatus, Settlement
from app.domain.schedule import ScheduleDraft, ScheduleStatus
from app.domain.trigger import next_fire_after
from tests.store import ports
from tests.store.ports import Database, OccurrenceRow


def interval_draft() -> ScheduleDraft:
    """Every minute from now: its first tick is due at once."""
    return ports.draft(ports.interval(60))


def cron_draft() -> ScheduleDraft:
    """Daily at midnight UTC, with last midnight's tick still to fire (it was behind)."""
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return ports.draft(ports.cron("0 0 * * *"), fire_at=midnight)


def pending_future(rows: list[OccurrenceRow], now: datetime) -> list[OccurrenceRow]:
    return [r for r in rows if r.status is OccurrenceStatus.PENDING and r.fire_at > now]


def next_tick(schedule: ScheduleDraft) -> datetime:
    upcoming = next_fire_after(schedule.trigger, schedule.first_fire_at)
    assert upcoming is not None
    return upcoming


@pytest.mark.parametrize("make", [interval_draft, cron_draft], ids=["interval", "cron"])
async def test_claiming_a_tick_writes_the_next_one_with_its_derived_id(
    database: Database, make: Callable[[], ScheduleDraft]
) -> None:
    schedule = make()
    await ports.insert_schedules(database, [schedule])

    (delivery,) = await ports.claim(database, limit=10)
    now = await ports.database_now(database)

    assert delivery.occurrence_id == occurrence_id(schedule.id, schedule.first_fire_at)
    assert delivery.one_shot is False
    rows = await ports.read_occurrence_rows(database, schedule.id)
    (upcoming,) = pending_future(rows, now)
    assert upcoming.fire_at == next_tick(schedule)
    assert upcoming.occurrence_id == occurrence_id(schedule.id, upcoming.fire_at)
    assert (upcoming.attempts, upcoming.lease_token) == (0, None)
    assert upcoming.available_at == upcoming.fire_at
    assert len(rows) == 2


async def test_concurrent_and_repeated_claims_write_each_next_tick_once(
    database: Database, store_url: str
) -> None:
    drafts = [interval_draft() for _ in range(20)]
    await ports.insert_schedules(database, drafts)
    expected = {occurrence_id(d.id, d.first_fire_at) for d in drafts}
    claimers = [Database(store_url) for _ in range(4)]

    async def drain(claimer: Database, lease: float) -> set[uuid.UUID]:
        claimed: set[uuid.UUID] = set()
        while batch := await ports.claim(claimer, limit=3, lease=lease):
            claimed |= {d.occurrence_id for d in batch}
        return claimed

    try:
        # Leases shorter than the interval: the next ticks are not due when they run out.
        first = await asyncio.gather(*(drain(claimer, 10.0) for claimer in claimers))
        assert set().union(*first) == expected
        # Once every lease has run out, the ticks are claimed again, by whoever comes first.
        rows = await ports.read_occurrence_rows(database)
        last_lease = max(r.available_at or r.fire_at for r in rows if r.occurrence_id in expected)
        await ports.move_clock_past(database, last_lease)
        again = await asyncio.gather(*(drain(claimer, 30.0) for claimer in claimers))
        assert set().union(*again) == expected
    finally:
        for claimer in claimers:
            await claimer.close()

    now = await ports.database_now(database)
    for schedule in drafts:
        rows = await ports.read_occurrence_rows(database, schedule.id)
        (upcoming,) = pending_future(rows, now)
        assert upcoming.fire_at == next_tick(schedule)
        assert len(rows) == 2
        claimed = next(r for r in rows if r.fire_at == schedule.first_fire_at)
        assert claimed.attempts >= 2


@pytest.mark.parametrize(
    "outcome", [OccurrenceStatus.PENDING, OccurrenceStatus.DEAD_LETTERED], ids=["retry", "dead"]
)
async def test_the_next_tick_stays_whatever_becomes_of_the_claimed_one(
    database: Database, outcome: OccurrenceStatus
) -> None:
    schedule = interval_draft()
    await ports.insert_schedules(database, [schedule])
    (delivery,) = await ports.claim(database, limit=1)

    retry_in = 3600.0 if outcome is OccurrenceStatus.PENDING else None
    await ports.settle(database, [Settlement(delivery, outcome, error="boom", retry_in=retry_in)])

    now = await ports.database_now(database)
    rows = await ports.read_occurrence_rows(database, schedule.id)
    claimed = next(r for r in rows if r.occurrence_id == delivery.occurrence_id)
    assert (claimed.status, claimed.last_error) == (outcome, "boom")
    (upcoming,) = [r for r in pending_future(rows, now) if r is not claimed]
    assert upcoming.fire_at == next_tick(schedule)
    assert await ports.read_schedule_status(database, schedule.id) is ScheduleStatus.PENDING
    assert await ports.claim(database, limit=10) == []


async def test_a_tick_past_its_grace_is_skipped_and_the_definition_reads_back_exactly(
    database: Database,
) -> None:
    """The claim plans with the rules as stored: fractional seconds come back as the
    floats they were (a database's decimal type would fail the plan), and a `skip` tick
    older than its grace is recorded as skipped while the next one is written."""
    now = datetime.now(UTC)
    rules = Rules(policy="skip", grace_seconds=1.5, max_catchup=7)
    schedule = ports.draft(
        ports.interval(60, start_at=now - timedelta(seconds=600)),
        fire_at=now - timedelta(seconds=60),
        rules=rules,
        jitter_seconds=0.25,
    )
    await ports.insert_schedules(database, [schedule])

    stored = await ports.read_schedule(database, schedule.id)
    assert (stored.jitter_seconds, stored.rules.grace_seconds) == (0.25, 1.5)
    assert type(stored.jitter_seconds) is float
    assert type(stored.rules.grace_seconds) is float
    assert (stored.rules.policy, stored.rules.max_catchup) == ("skip", 7)

    assert await ports.claim(database, limit=10) == []

    rows = await ports.read_occurrence_rows(database, schedule.id)
    claimed = next(r for r in rows if r.fire_at == schedule.first_fire_at)
    assert claimed.status is OccurrenceStatus.SKIPPED
    assert claimed.skip_reason == "misfire"
    assert len(pending_future(rows, await ports.database_now(database))) == 1
