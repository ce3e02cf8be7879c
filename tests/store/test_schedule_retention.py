"""Schedule retention: ended schedules (completed, cancelled, failed) that nothing has changed
since the cutoff go, with their occurrences, attempts and events (on PostgreSQL the last two
with their day); schedules still running, and
ended ones with a pending or recently changed occurrence, stay; a bounded batch at a time, oldest
first, and only in the replica holding the pruning lock."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from app.domain.occurrence import OccurrenceStatus, Settlement
from app.domain.schedule import ScheduleStatus
from tests.store import ports
from tests.store.conftest import DIALECTS
from tests.store.ports import Database

FAR_FUTURE = datetime.now(UTC) + timedelta(days=3650)


async def ended_of_each_kind(database: Database) -> dict[ScheduleStatus, uuid.UUID]:
    """A one-shot delivered (completed), one dead-lettered (failed), a recurring one
    cancelled, and two still running: a recurring one and a paused one."""
    delivered, dead = ports.draft(ports.immediate()), ports.draft(ports.immediate(), max_attempts=1)
    cancelled, running, paused = (ports.draft(ports.interval(3600)) for _ in range(3))
    await ports.insert_schedules(database, [delivered, dead, cancelled, running, paused])
    leased = {d.schedule_id: d for d in await ports.claim(database, limit=10)}
    await ports.settle(
        database,
        [
            Settlement(leased[delivered.id], OccurrenceStatus.DELIVERED),
            Settlement(leased[dead.id], OccurrenceStatus.DEAD_LETTERED, error="HTTP 410"),
            Settlement(leased[cancelled.id], OccurrenceStatus.DELIVERED),
            Settlement(leased[running.id], OccurrenceStatus.DELIVERED),
            Settlement(leased[paused.id], OccurrenceStatus.DELIVERED),
        ],
    )
    await ports.cancel(database, cancelled.id)
    await ports.end_schedule(database, cancelled.id, ScheduleStatus.CANCELLED)
    await ports.end_schedule(database, paused.id, ScheduleStatus.PAUSED)
    ids = {
        ScheduleStatus.COMPLETED: delivered.id,
        ScheduleStatus.FAILED: dead.id,
        ScheduleStatus.CANCELLED: cancelled.id,
        ScheduleStatus.PENDING: running.id,
        ScheduleStatus.PAUSED: paused.id,
    }
    for status, schedule_id in ids.items():
        assert await ports.read_schedule_status(database, schedule_id) is status
    return ids


async def history(database: Database, schedule_id: uuid.UUID) -> tuple[int, int, int]:
    """The schedule's occurrences, attempts and events."""
    rows = await ports.read_occurrence_rows(database, schedule_id)
    logged = sum([len(await ports.read_attempt_log(database, r.occurrence_id)) for r in rows])
    events = len(await ports.read_events(database, schedule_id))
    return len(rows), logged, events


async def test_ended_schedules_go_with_their_history_and_running_ones_stay(
    database: Database,
) -> None:
    ids = await ended_of_each_kind(database)
    ended = [
        ids[s] for s in (ScheduleStatus.COMPLETED, ScheduleStatus.FAILED, ScheduleStatus.CANCELLED)
    ]
    for schedule_id in ended:
        occurrences, attempts, _ = await history(database, schedule_id)
        assert occurrences
        assert attempts
    before = {
        s: await history(database, ids[s]) for s in (ScheduleStatus.PENDING, ScheduleStatus.PAUSED)
    }

    assert await ports.prune_schedules(database, older_than=FAR_FUTURE, limit=100) == 3
    # On PostgreSQL attempts and events go by the day (their partition), keeping what is
    # still a schedule's or occurrence's; elsewhere they went with their schedule.
    await ports.drop_history(database, older_than=FAR_FUTURE)

    for schedule_id in ended:
        assert await ports.schedule_exists(database, schedule_id) is False
        assert await history(database, schedule_id) == (0, 0, 0)
    for status, kept in before.items():
        assert await ports.read_schedule_status(database, ids[status]) is status
        assert await history(database, ids[status]) == kept
    assert await ports.count_rows(database, "schedules") == 2
    assert await ports.prune_schedules(database, older_than=FAR_FUTURE, limit=100) == 0


async def test_schedules_that_ended_after_the_cutoff_stay(database: Database) -> None:
    await ended_of_each_kind(database)
    cutoff = await ports.database_now(database)
    later = await ended_of_each_kind(database)

    assert await ports.prune_schedules(database, older_than=cutoff, limit=100) == 3

    assert await ports.count_rows(database, "schedules") == 7  # 2 running, 5 later
    for status, schedule_id in later.items():
        assert await ports.read_schedule_status(database, schedule_id) is status


async def test_an_ended_schedule_with_a_pending_or_recent_occurrence_stays(
    database: Database,
) -> None:
    ids = await ended_of_each_kind(database)
    failed = ids[ScheduleStatus.FAILED]
    (dead,) = await ports.read_occurrence_rows(database, failed)
    cutoff = await ports.database_now(database)

    # Its dead letter replayed after the cutoff: pending, and changed since.
    assert await ports.replay(database, [dead.occurrence_id]) == [dead.occurrence_id]
    assert await ports.prune_schedules(database, older_than=FAR_FUTURE, limit=100) == 2
    assert await ports.prune_schedules(database, older_than=cutoff, limit=100) == 0
    assert await ports.read_schedule_status(database, failed) is ScheduleStatus.FAILED

    # Dead again: no longer pending, but changed after the cutoff.
    (again,) = await ports.claim(database, limit=10)
    await ports.settle(database, [Settlement(again, OccurrenceStatus.DEAD_LETTERED, error="410")])
    assert await ports.prune_schedules(database, older_than=cutoff, limit=100) == 0
    assert await ports.prune_schedules(database, older_than=FAR_FUTURE, limit=100) == 1
    assert await ports.schedule_exists(database, failed) is False


async def test_at_most_limit_go_oldest_first(database: Database) -> None:
    drafts = [ports.draft(ports.immediate()) for _ in range(5)]
    await ports.insert_schedules(database, drafts)
    order = []
    for delivery in await ports.claim(database, limit=5):  # a settle each: five instants
        await ports.settle(database, [Settlement(delivery, OccurrenceStatus.DELIVERED)])
        order.append(delivery.schedule_id)

    assert await ports.prune_schedules(database, older_than=FAR_FUTURE, limit=2) == 2
    assert [await ports.schedule_exists(database, i) for i in order] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert await ports.prune_schedules(database, older_than=FAR_FUTURE, limit=2) == 2
    assert await ports.prune_schedules(database, older_than=FAR_FUTURE, limit=2) == 1
    assert await ports.count_rows(database, "schedules") == 0


@pytest.mark.parametrize("dialect", [d for d in DIALECTS if d != "sqlite"], indirect=True)
async def test_nothing_goes_while_another_replica_holds_the_pruning_lock(
    database: Database, store_url: str, dialect: str
) -> None:
    await ended_of_each_kind(database)
    other = Database(store_url)
    try:
        async with ports.holding_pruning_lock(other) as granted:
            assert granted
            assert await ports.prune_schedules(database, older_than=FAR_FUTURE, limit=100) == 0
        assert await ports.prune_schedules(database, older_than=FAR_FUTURE, limit=100) == 3
    finally:
        await other.close()


async def test_a_tenant_with_a_retention_of_its_own_is_pruned_in_its_own_pass(
    database: Database,
) -> None:
    for tenant in ("keep", "short"):
        await ports.put_tenant(database, tenant)
    drafts = {
        tenant: ports.draft(ports.immediate(), tenant=tenant)
        for tenant in ("default", "keep", "short")
    }
    await ports.insert_schedules(database, list(drafts.values()))
    await ports.settle(
        database,
        [Settlement(d, OccurrenceStatus.DELIVERED) for d in await ports.claim(database, limit=10)],
    )
    own = ["keep", "short"]

    # The setting's pass leaves the tenants that have their own.
    assert await ports.prune_schedules(database, older_than=FAR_FUTURE, limit=10, kept=own) == 1
    assert not await ports.schedule_exists(database, drafts["default"].id)
    assert await ports.schedule_exists(database, drafts["short"].id)
    # A tenant's own pass deletes its schedules only.
    assert (
        await ports.prune_schedules(database, older_than=FAR_FUTURE, limit=10, only=["short"]) == 1
    )
    assert not await ports.schedule_exists(database, drafts["short"].id)
    assert await ports.schedule_exists(database, drafts["keep"].id)
