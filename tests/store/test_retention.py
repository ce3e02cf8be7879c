"""Retention: only finished occurrences older than the cutoff go, a bounded batch at a
time, and only in the replica holding the pruning lock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.domain.occurrence import OccurrenceStatus, Settlement
from app.domain.schedule import ScheduleDraft
from tests.store import ports
from tests.store.ports import Database


async def one_of_each_status(database: Database) -> dict[OccurrenceStatus, ScheduleDraft]:
    """A schedule whose only occurrence is in each status, all changed now."""
    made = {status: ports.draft(ports.immediate()) for status in OccurrenceStatus}
    await ports.insert_schedules(database, list(made.values()))
    leased = {d.schedule_id: d for d in await ports.claim(database, limit=len(made))}
    assert len(leased) == len(made)
    delivered, dead = made[OccurrenceStatus.DELIVERED], made[OccurrenceStatus.DEAD_LETTERED]
    pending = made[OccurrenceStatus.PENDING]
    await ports.settle(
        database,
        [
            Settlement(leased[delivered.id], OccurrenceStatus.DELIVERED),
            Settlement(leased[dead.id], OccurrenceStatus.DEAD_LETTERED, error="410"),
            Settlement(leased[pending.id], OccurrenceStatus.PENDING, error="503", retry_in=60.0),
        ],
    )
    # Handed back unattempted, so that they can be cancelled and skipped like new ones.
    cancelled, skipped = made[OccurrenceStatus.CANCELLED], made[OccurrenceStatus.SKIPPED]
    await ports.release(database, [leased[cancelled.id], leased[skipped.id]], started=False)
    await ports.cancel(database, cancelled.id)
    assert await ports.skip_due_ticks(database, skipped.id) == 1
    for status, schedule in made.items():
        (row,) = await ports.read_occurrence_rows(database, schedule.id)
        assert row.status is status
    return made


async def statuses(database: Database) -> list[OccurrenceStatus]:
    return sorted(row.status for row in await ports.read_occurrence_rows(database))


async def test_prune_deletes_only_finished_occurrences_older_than_the_cutoff(
    database: Database,
) -> None:
    await one_of_each_status(database)
    cutoff = await ports.database_now(database)
    await one_of_each_status(database)  # changed after the cutoff: kept
    before = await ports.read_occurrence_rows(database)

    deleted = await ports.prune(database, older_than=cutoff, limit=100)

    assert deleted == 3
    after = await ports.read_occurrence_rows(database)
    gone = [row for row in before if row not in after]
    assert sorted(row.status for row in gone) == sorted(
        [OccurrenceStatus.DELIVERED, OccurrenceStatus.CANCELLED, OccurrenceStatus.SKIPPED]
    )
    assert all(row.updated_at < cutoff for row in gone)
    assert all(row in after for row in before if row.updated_at >= cutoff)
    assert await ports.prune(database, older_than=cutoff, limit=100) == 0


async def test_prune_keeps_pending_and_dead_letters_however_old(database: Database) -> None:
    await one_of_each_status(database)
    far_future = datetime.now(UTC) + timedelta(days=3650)

    assert await ports.prune(database, older_than=far_future, limit=100) == 3

    assert await statuses(database) == sorted(
        [OccurrenceStatus.PENDING, OccurrenceStatus.DEAD_LETTERED]
    )


async def test_prune_deletes_at_most_limit_oldest_first(database: Database) -> None:
    drafts = [ports.draft(ports.immediate()) for _ in range(5)]
    await ports.insert_schedules(database, drafts)
    for delivery in await ports.claim(database, limit=5):  # one settle each: five instants
        await ports.settle(database, [Settlement(delivery, OccurrenceStatus.DELIVERED)])
    cutoff = await ports.database_now(database)
    by_age = sorted(await ports.read_occurrence_rows(database), key=lambda row: row.updated_at)

    assert await ports.prune(database, older_than=cutoff, limit=2) == 2
    assert await ports.read_occurrence_rows(database) == sorted(
        by_age[2:], key=lambda row: (row.fire_at, row.occurrence_id)
    )
    assert await ports.prune(database, older_than=cutoff, limit=2) == 2
    assert await ports.prune(database, older_than=cutoff, limit=2) == 1
    assert await ports.read_occurrence_rows(database) == []


async def test_prune_deletes_nothing_while_another_replica_holds_the_lock(
    database: Database, store_url: str, dialect: str
) -> None:
    if dialect == "sqlite":
        pytest.skip("SQLite serves a single process: the pruning lock is always granted")
    await one_of_each_status(database)
    far_future = datetime.now(UTC) + timedelta(days=3650)
    other = Database(store_url)
    try:
        async with ports.holding_pruning_lock(other) as granted:
            assert granted
            assert await ports.prune(database, older_than=far_future, limit=100) == 0
            async with ports.holding_pruning_lock(database) as granted_too:
                assert not granted_too, "two replicas held the pruning lock at once"
        # Released with the holder's transaction.
        assert await ports.prune(database, older_than=far_future, limit=100) == 3
    finally:
        await other.close()
