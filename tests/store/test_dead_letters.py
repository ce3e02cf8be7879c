"""Dead letters: an attempt budget spent, by failures or by leases that ran out, ends in
a dead letter; a replay makes it due again under the same id."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

from app.domain.filters import DeadLetterFilter
from app.domain.occurrence import OccurrenceStatus, Settlement
from app.domain.schedule import ScheduleStatus
from tests.store import ports
from tests.store.ports import Database


async def test_a_replayed_dead_letter_is_due_at_once_with_its_id_and_a_new_budget(
    database: Database,
) -> None:
    schedule = ports.draft(ports.immediate(), max_attempts=1)
    await ports.insert_schedules(database, [schedule])
    (delivery,) = await ports.claim(database, limit=1)
    await ports.settle(
        database, [Settlement(delivery, OccurrenceStatus.DEAD_LETTERED, error="410")]
    )
    assert await ports.read_schedule_status(database, schedule.id) is ScheduleStatus.FAILED
    (letter,) = await ports.dead_letters(database)
    assert letter.occurrence.occurrence_id == delivery.occurrence_id
    assert (letter.occurrence.attempts, letter.occurrence.last_error) == (1, "410")
    assert letter.payload == schedule.payload

    assert await ports.replay(database, [delivery.occurrence_id]) == [delivery.occurrence_id]

    (row,) = await ports.read_occurrence_rows(database, schedule.id)
    assert (row.status, row.attempts, row.dead_lettered_at) == (OccurrenceStatus.PENDING, 0, None)
    assert await ports.dead_letters(database) == []
    (again,) = await ports.claim(database, limit=1)
    assert (again.occurrence_id, again.attempt) == (delivery.occurrence_id, 1)
    await ports.settle(database, [Settlement(again, OccurrenceStatus.DELIVERED)])
    assert await ports.read_schedule_status(database, schedule.id) is ScheduleStatus.COMPLETED
    assert await ports.replay(database, [delivery.occurrence_id]) == [], "replayed a delivery"


async def test_a_last_attempt_whose_lease_ran_out_is_dead_lettered_not_retried(
    database: Database,
) -> None:
    schedule = ports.draft(ports.immediate(), max_attempts=2)
    await ports.insert_schedules(database, [schedule])
    (first,) = await ports.claim(database, limit=1)
    await ports.run_out_lease(database, first.occurrence_id)
    (last,) = await ports.claim(database, limit=1)
    assert (first.attempt, last.attempt) == (1, 2)
    assert await ports.claim(database, limit=1) == [], "still leased"
    (row,) = await ports.read_occurrence_rows(database, schedule.id)
    assert row.status is OccurrenceStatus.PENDING

    # Once the last lease runs out, a claim finds it and dead-letters it instead.
    await ports.run_out_lease(database, last.occurrence_id)
    assert await ports.claim(database, limit=1) == [], "claimed beyond its attempt budget"

    (row,) = await ports.read_occurrence_rows(database, schedule.id)
    assert row.status is OccurrenceStatus.DEAD_LETTERED
    assert row.attempts == 2
    assert row.last_error is not None
    assert "lease" in row.last_error
    assert await ports.read_schedule_status(database, schedule.id) is ScheduleStatus.FAILED


async def test_a_replayed_dead_letter_keeps_the_schedule_s_last_error_until_it_is_delivered(
    database: Database,
) -> None:
    schedule = ports.draft(ports.immediate(), max_attempts=1)
    await ports.insert_schedules(database, [schedule])
    (delivery,) = await ports.claim(database, limit=1)
    await ports.settle(
        database, [Settlement(delivery, OccurrenceStatus.DEAD_LETTERED, error="HTTP 503: busy")]
    )

    assert await ports.replay(database, [delivery.occurrence_id]) == [delivery.occurrence_id]

    replayed = await ports.read_schedule(database, schedule.id)
    assert (replayed.attempts, replayed.last_error) == (0, "HTTP 503: busy")
    (again,) = await ports.claim(database, limit=1)
    assert (await ports.read_schedule(database, schedule.id)).last_error == "HTTP 503: busy"
    await ports.settle(database, [Settlement(again, OccurrenceStatus.DELIVERED)])
    delivered = await ports.read_schedule(database, schedule.id)
    assert (delivered.attempts, delivered.last_error) == (1, None)


async def _dead_letters_of(database: Database, event_type: str, count: int) -> list[uuid.UUID]:
    drafts = [
        dataclasses.replace(ports.draft(ports.immediate(), max_attempts=1), event_type=event_type)
        for _ in range(count)
    ]
    await ports.insert_schedules(database, drafts)
    claimed = await ports.claim(database, limit=count)
    assert len(claimed) == count
    await ports.settle(
        database, [Settlement(d, OccurrenceStatus.DEAD_LETTERED, error="410") for d in claimed]
    )
    return [d.occurrence_id for d in claimed]


async def test_a_replay_by_filter_goes_in_batches_until_none_is_left(database: Database) -> None:
    wanted = await _dead_letters_of(database, "kind.a", 5)
    other = await _dead_letters_of(database, "kind.b", 1)
    where = DeadLetterFilter(event_type="kind.a")

    batches = [await ports.replay_matching(database, where, limit=2) for _ in range(4)]

    assert [len(batch) for batch in batches] == [2, 2, 1, 0]
    assert sorted(id_ for batch in batches for id_ in batch) == sorted(wanted)
    letters = await ports.dead_letters(database)
    assert [letter.occurrence.occurrence_id for letter in letters] == other
    rows = {row.occurrence_id: row for row in await ports.read_occurrence_rows(database)}
    assert {(rows[id_].status, rows[id_].attempts) for id_ in wanted} == {
        (OccurrenceStatus.PENDING, 0)
    }


async def test_a_replay_by_filter_leaves_what_was_dead_lettered_after_its_bound(
    database: Database,
) -> None:
    (earlier,) = await _dead_letters_of(database, "kind.a", 1)
    bound = await ports.database_now(database)
    ports.move_clock(database, timedelta(seconds=1))
    (later,) = await _dead_letters_of(database, "kind.a", 1)
    where = DeadLetterFilter(event_type="kind.a")

    assert await ports.replay_matching(database, where, limit=10, dead_lettered_by=bound) == [
        earlier
    ]
    assert await ports.replay_matching(database, where, limit=10, dead_lettered_by=bound) == []
    (letter,) = await ports.dead_letters(database)
    assert letter.occurrence.occurrence_id == later
