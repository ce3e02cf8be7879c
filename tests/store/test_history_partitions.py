"""History in day partitions (PostgreSQL): the migration moves the attempt log and the
schedules' events into partitioned tables and keeps every row; the days ahead are made and
rows land in their day; an expired day is dropped whole, keeping what still belongs to an
occurrence or schedule that is there; the default partition is swept of rows whose owner is
gone; a change that would wait for a busy table gives way."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from app.domain.ids import event_id
from app.domain.occurrence import OccurrenceStatus, Settlement
from app.store.engine.database import Connection
from app.store.schema.partitions import ATTEMPTS, EVENTS
from app.store.schema.tables import schedule_events
from tests.store import ports
from tests.store.catalog import differences, read_catalog
from tests.store.ports import Database

pytestmark = pytest.mark.parametrize(
    "dialect", [pytest.param("postgresql", marks=pytest.mark.postgres)]
)

FAR_FUTURE = datetime.now(UTC) + timedelta(days=3650)
# The migration that partitions history.
PARTITIONED = "0031_history_partitions"


async def rows_of(database: Database, table: str) -> set[tuple[Any, ...]]:
    """Every row of `table`, whole."""

    async def work(conn: Connection) -> set[tuple[Any, ...]]:
        return {tuple(row) for row in await conn.execute(sa.text(f"SELECT * FROM {table}"))}

    return await database.run(work)


async def where_rows_are(database: Database, table: str) -> dict[str, int]:
    """The partitions holding `table`'s rows, and how many each."""

    async def work(conn: Connection) -> dict[str, int]:
        found = await conn.execute(
            sa.text(f"SELECT tableoid::regclass::text, count(*) FROM {table} GROUP BY 1")
        )
        return {str(name): int(count) for name, count in found}

    return await database.run(work)


async def history_of_every_kind(database: Database) -> dict[str, uuid.UUID]:
    """A one-shot delivered (its schedule completed), and two recurring schedules running,
    one of whose occurrences was dead-lettered, each with an attempt and events."""
    delivered = ports.draft(ports.immediate())
    dead = ports.draft(ports.interval(3600), max_attempts=1)
    running = ports.draft(ports.interval(3600))
    await ports.insert_schedules(database, [delivered, dead, running])
    leased = {d.schedule_id: d for d in await ports.claim(database, limit=10)}
    await ports.settle(
        database,
        [
            Settlement(leased[delivered.id], OccurrenceStatus.DELIVERED),
            Settlement(leased[dead.id], OccurrenceStatus.DEAD_LETTERED, error="HTTP 410"),
            Settlement(leased[running.id], OccurrenceStatus.DELIVERED),
        ],
    )
    ids = {"delivered": delivered.id, "dead": dead.id, "running": running.id}
    now = await ports.database_now(database)
    for schedule_id in ids.values():
        await record_event(database, schedule_id, now)
    return ids


async def test_the_migration_partitions_history_and_keeps_every_row_and_so_does_its_downgrade(
    empty_store: Callable[[], str],
) -> None:
    async with ports.opened(empty_store()) as database:
        await ports.migrate_to(database, "0030_activity_minutes")
        flat = await read_catalog(database)
        # History as this version writes it, taken back to before the partitions (this
        # version's settle writes columns that came later).
        await ports.upgrade_to_head(database)
        await history_of_every_kind(database)
        await ports.migrate_to(database, "0030_activity_minutes")
        before = {t: await rows_of(database, t) for t in ("attempts", "schedule_events")}
        assert all(before.values())

        await ports.migrate_to(database, PARTITIONED)

        assert {t: await rows_of(database, t) for t in before} == before
        tomorrow = datetime.now(UTC).date() + timedelta(days=1)
        for table, rows in before.items():
            upto = f"{table}_upto_{tomorrow:%Y%m%d}"
            assert await where_rows_are(database, table) == {upto: len(rows)}
            assert set(await ports.history_partitions(database, table)) == {upto, f"{table}_kept"}
        # Still written and read as before.
        await ports.upgrade_to_head(database)
        ids = await history_of_every_kind(database)
        (row, _) = await ports.read_occurrence_rows(database, ids["dead"])
        assert [a.outcome for a in await ports.read_attempt_log(database, row.occurrence_id)] == [
            "dead_lettered"
        ]

        await ports.migrate_to(database, "0030_activity_minutes")

        assert not differences(await read_catalog(database), flat)
        for table, rows in before.items():
            assert rows <= await rows_of(database, table)


async def test_the_days_ahead_are_made_once_and_rows_land_in_their_day(
    database: Database,
) -> None:
    await today_made(database)
    today = await ports.database_now(database)
    later = today.date() + timedelta(days=30)  # past the migration's partition

    made = await ports.make_history_days(database, later)

    days = [later + timedelta(days=n) for n in range(3)]
    assert sorted(made) == sorted(h.day(d) for h in (ATTEMPTS, EVENTS) for d in days)
    assert await ports.make_history_days(database, later) == []
    ids = await history_of_every_kind(database)
    await record_event(database, ids["running"], _noon(days[1]))
    assert (await where_rows_are(database, "schedule_events"))[EVENTS.day(days[1])] == 1


async def test_a_day_the_default_partition_holds_rows_of_stays_there(database: Database) -> None:
    await today_made(database)
    day = (await ports.database_now(database)).date() + timedelta(days=60)
    ids = await history_of_every_kind(database)
    await record_event(database, ids["running"], _noon(day))
    assert (await where_rows_are(database, "schedule_events"))[EVENTS.kept] == 1

    made = await ports.make_history_days(database, day)

    assert EVENTS.day(day) not in made  # its row would have had to move
    assert EVENTS.day(day + timedelta(days=1)) in made
    assert ATTEMPTS.day(day) in made
    assert "updated" in await ports.read_events(database, ids["running"])


async def test_an_expired_day_goes_whole_but_for_what_a_live_occurrence_or_schedule_holds(
    database: Database,
) -> None:
    await today_made(database)
    ids = await history_of_every_kind(database)
    occurrences = {k: await ports.read_occurrence_rows(database, v) for k, v in ids.items()}
    attempts = {
        k: await ports.read_attempt_log(database, rows[0].occurrence_id)
        for k, rows in occurrences.items()
    }
    events = {k: await ports.read_events(database, v) for k, v in ids.items()}
    # The delivered one-shot's occurrence and schedule go, row by row, as retention does.
    assert await ports.prune_schedules(database, older_than=FAR_FUTURE, limit=100) == 1
    # A day back: the migration's partition ends at the midnight after the database was
    # made, which may have passed since (and with it, rightly, that partition's time).
    cutoff = await ports.database_now(database) - timedelta(days=1)

    assert await ports.drop_history(database, older_than=cutoff) == []  # none ended yet
    dropped = await ports.drop_history(database, older_than=FAR_FUTURE)

    assert dropped
    assert not set(dropped) & await _all_partitions(database)
    # What the dead letter and the running schedule hold stays, whole; what was the
    # delivered one's is gone.
    for kind in ("dead", "running"):
        (occurrence, *_) = occurrences[kind]
        assert await ports.read_attempt_log(database, occurrence.occurrence_id) == attempts[kind]
        assert await ports.read_events(database, ids[kind]) == events[kind]
    gone = occurrences["delivered"][0].occurrence_id
    assert await ports.read_attempt_log(database, gone) == []
    assert await ports.read_events(database, ids["delivered"]) == []
    assert await where_rows_are(database, "attempts") == {ATTEMPTS.kept: 2}
    assert await where_rows_are(database, "schedule_events") == {
        EVENTS.kept: len(events["dead"]) + len(events["running"])
    }


async def test_the_default_partition_is_swept_of_what_lost_its_owner(database: Database) -> None:
    await today_made(database)
    ids = await history_of_every_kind(database)
    await ports.drop_history(database, older_than=FAR_FUTURE)  # all of it kept, by default
    events = {k: await ports.read_events(database, v) for k, v in ids.items()}
    assert await ports.sweep_history(database, "attempts") == 0
    assert await ports.sweep_history(database, "schedule_events") == 0

    # The delivered occurrences go, and the completed schedule; the dead letter stays.
    assert await ports.prune(database, older_than=FAR_FUTURE, limit=100) == 2
    assert await ports.prune_schedules(database, older_than=FAR_FUTURE, limit=100) == 1

    assert await ports.sweep_history(database, "attempts", limit=1) == 2
    assert await ports.sweep_history(database, "schedule_events", limit=1) == len(
        events["delivered"]
    )
    (dead,) = [
        row
        for row in await ports.read_occurrence_rows(database, ids["dead"])
        if row.status is OccurrenceStatus.DEAD_LETTERED
    ]
    assert await ports.read_attempt_log(database, dead.occurrence_id)
    assert await ports.count_rows(database, "attempts") == 1
    assert await ports.read_events(database, ids["dead"]) == events["dead"]
    assert await ports.read_events(database, ids["running"]) == events["running"]


async def test_a_drop_gives_way_to_a_busy_table(database: Database) -> None:
    await today_made(database)
    await history_of_every_kind(database)
    attempts_before = await ports.history_partitions(database, "attempts")
    events_before = await ports.history_partitions(database, "schedule_events")

    async with database.engine.begin() as other:
        await other.execute(sa.text("LOCK TABLE attempts IN ROW EXCLUSIVE MODE"))
        # The attempt log's day waits its bound for the table, then is left for a later
        # round; the events' days, whose table is free, go.
        dropped = await ports.drop_history(database, older_than=FAR_FUTURE)

        assert sorted(dropped) == sorted(n for n in events_before if n != EVENTS.kept)
        assert await ports.history_partitions(database, "attempts") == attempts_before

    assert await ports.drop_history(database, older_than=FAR_FUTURE)
    assert set(await ports.history_partitions(database, "attempts")) == {ATTEMPTS.kept}


async def today_made(database: Database) -> None:
    """Today's partitions, made unless the migration's covers today (another case on this
    database may have dropped it)."""
    await ports.make_history_days(database, (await ports.database_now(database)).date())


async def record_event(database: Database, schedule_id: uuid.UUID, at: datetime) -> None:
    """An `updated` event of the schedule at `at`."""
    row = {
        "id": event_id(at),
        "schedule_id": schedule_id,
        "kind": "updated",
        "at": at,
        "version": 2,
    }
    await database.run(lambda conn: conn.execute(schedule_events.insert().values(**row)))


def _noon(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, 12, tzinfo=UTC)


async def _all_partitions(database: Database) -> set[str]:
    found = set()
    for table in ("attempts", "schedule_events"):
        found |= set(await ports.history_partitions(database, table))
    return found
