"""Retention: only finished occurrences older than the cutoff go, a bounded batch at a
time, and only in the replica holding the pruning lock."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from app.domain.occurrence import OccurrenceStatus, Settlement
from tests.store import ports
from tests.store.conftest import DIALECTS
from tests.store.ports import Database

# What retention may delete; pending occurrences and dead letters are kept however old.
FINISHED = {
    OccurrenceStatus.DELIVERED,
    OccurrenceStatus.CANCELLED,
    OccurrenceStatus.SKIPPED,
    OccurrenceStatus.COMPLETED,
}


async def one_of_each_status(database: Database) -> None:
    """Occurrences in every status, all changed now: a schedule delivered, one
    dead-lettered, one retrying, a recurring one that skipped a tick and was cancelled, and
    one of a topic that fanned out (to nobody: completed)."""
    delivered, dead, retrying = (ports.draft(ports.immediate()) for _ in range(3))
    cancelled = ports.draft(ports.interval(60))
    topic = f"t-{uuid.uuid4().hex[:8]}"
    await ports.make_topic(database, topic)
    fanned = ports.draft(ports.immediate(), target=ports.topic_target(topic))
    await ports.insert_schedules(database, [delivered, dead, retrying, cancelled, fanned])
    leased = {d.schedule_id: d for d in await ports.claim(database, limit=10)}
    assert set(leased) == {delivered.id, dead.id, retrying.id, cancelled.id}
    await ports.settle(
        database,
        [
            Settlement(leased[delivered.id], OccurrenceStatus.DELIVERED),
            Settlement(leased[dead.id], OccurrenceStatus.DEAD_LETTERED, error="410"),
            Settlement(leased[retrying.id], OccurrenceStatus.PENDING, error="503", retry_in=60.0),
        ],
    )
    earlier = cancelled.first_fire_at - timedelta(seconds=60)
    await ports.record_skipped_tick(database, cancelled.id, earlier, "paused")
    await ports.cancel(database, cancelled.id)  # the claimed tick and the next one
    assert set(await statuses(database)) == set(OccurrenceStatus)


async def statuses(database: Database) -> list[OccurrenceStatus]:
    return sorted(row.status for row in await ports.read_occurrence_rows(database))


async def test_prune_deletes_only_finished_occurrences_older_than_the_cutoff(
    database: Database,
) -> None:
    await one_of_each_status(database)
    cutoff = await ports.database_now(database)
    await one_of_each_status(database)  # changed after the cutoff: kept
    before = await ports.read_occurrence_rows(database)

    expired = [row for row in before if row.status in FINISHED and row.updated_at < cutoff]
    assert {row.status for row in expired} == FINISHED

    deleted = await ports.prune(database, older_than=cutoff, limit=100)

    after = await ports.read_occurrence_rows(database)
    assert deleted == len(expired)
    assert after == [row for row in before if row not in expired]
    assert await ports.prune(database, older_than=cutoff, limit=100) == 0


async def test_prune_keeps_pending_and_dead_letters_however_old(database: Database) -> None:
    await one_of_each_status(database)
    kept = [r for r in await ports.read_occurrence_rows(database) if r.status not in FINISHED]
    far_future = datetime.now(UTC) + timedelta(days=3650)

    assert await ports.prune(database, older_than=far_future, limit=100) > 0

    assert await ports.read_occurrence_rows(database) == kept
    assert set(await statuses(database)) == {
        OccurrenceStatus.PENDING,
        OccurrenceStatus.DEAD_LETTERED,
    }


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


SERVERS = [d for d in DIALECTS if d != "sqlite"]


@pytest.mark.parametrize("dialect", SERVERS, indirect=True)
async def test_prune_deletes_nothing_while_another_replica_holds_the_lock(
    database: Database, store_url: str, dialect: str
) -> None:
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
        assert await ports.prune(database, older_than=far_future, limit=100) > 0
        assert set(await statuses(database)) == {
            OccurrenceStatus.PENDING,
            OccurrenceStatus.DEAD_LETTERED,
        }
    finally:
        await other.close()


@pytest.mark.parametrize("dialect", ["sqlite"], indirect=True)
async def test_on_sqlite_the_pruning_lock_is_always_granted(
    database: Database, store_url: str, dialect: str
) -> None:
    """A SQLite file serves one process, whose single writer is the only pruner: there is
    no other replica to keep out, so the lock never refuses."""
    await one_of_each_status(database)
    far_future = datetime.now(UTC) + timedelta(days=3650)
    async with ports.holding_pruning_lock(database) as granted:
        assert granted
    other = Database(store_url)
    try:
        async with ports.holding_pruning_lock(other) as granted_too:
            assert granted_too
        assert await ports.prune(database, older_than=far_future, limit=100) > 0
    finally:
        await other.close()
