"""Failure callbacks: a dead letter of a schedule with `on_failure` writes, in its own
transaction, a callback occurrence that the claim delivers like any other, to that target;
a callback is none of its schedule's firings, no pause holds it, and its own dead letter
calls nothing."""

from __future__ import annotations

import dataclasses
import json
import uuid

from app.domain.callbacks import CALLBACK_EVENT_TYPE, callback_id
from app.domain.ids import format_instant
from app.domain.occurrence import Delivery, OccurrenceStatus, Origin, Settlement
from app.domain.schedule import ScheduleDraft, ScheduleStatus
from app.domain.target import RabbitMQTarget
from tests.store import ports
from tests.store.ports import Database, OccurrenceRow

ON_FAILURE = RabbitMQTarget(type="rabbitmq", exchange="alerts", routing_key="dead")


async def dead_lettered(
    database: Database, schedule: ScheduleDraft, error: str = "410 Gone"
) -> tuple[Delivery, OccurrenceRow]:
    """The schedule stored, its first occurrence claimed and dead-lettered, and the one
    callback row that wrote."""
    await ports.insert_schedules(database, [schedule])
    (delivery,) = await ports.claim(database, limit=1)
    await ports.settle(
        database, [Settlement(delivery, OccurrenceStatus.DEAD_LETTERED, error=error)]
    )
    return delivery, await the_callback(database, schedule.id)


async def callbacks(database: Database, schedule_id: uuid.UUID) -> list[OccurrenceRow]:
    rows = await ports.read_occurrence_rows(database, schedule_id)
    return [row for row in rows if row.origin is Origin.CALLBACK]


async def the_callback(database: Database, schedule_id: uuid.UUID) -> OccurrenceRow:
    (row,) = await callbacks(database, schedule_id)
    return row


async def test_a_dead_letter_writes_its_callback_which_the_claim_delivers_to_on_failure(
    database: Database,
) -> None:
    schedule = ports.draft(ports.immediate(), max_attempts=3, on_failure=ON_FAILURE)
    delivery, row = await dead_lettered(database, schedule, error="410 Gone")

    dead = next(
        r
        for r in await ports.read_occurrence_rows(database, schedule.id)
        if r.occurrence_id == delivery.occurrence_id
    )
    assert dead.dead_lettered_at is not None
    assert row.callback_of == delivery.occurrence_id
    assert row.occurrence_id == callback_id(delivery.occurrence_id, dead.dead_lettered_at)
    assert (row.status, row.attempts) == (OccurrenceStatus.PENDING, 0)
    # The schedule is done with its firing: a callback still pending keeps it from nothing.
    assert await ports.read_schedule_status(database, schedule.id) is ScheduleStatus.FAILED

    (callback,) = await ports.claim(database, limit=5)

    assert callback.occurrence_id == row.occurrence_id
    assert callback.event_type == CALLBACK_EVENT_TYPE
    assert callback.target == ON_FAILURE
    assert (callback.one_shot, callback.last, callback.flow_key) == (False, False, None)
    assert json.loads(callback.body) == {
        "type": "occurrence.dead_lettered",
        "occurrence_id": str(delivery.occurrence_id),
        "schedule_id": str(schedule.id),
        "event_type": schedule.event_type,
        "fire_at": format_instant(delivery.fire_at),
        "attempts": 1,
        "last_error": "410 Gone",
        "payload": schedule.payload,
    }
    stored = await ports.read_schedule(database, schedule.id)
    assert stored.fire_count == 1, "a callback's claim counted as a firing"
    await ports.settle(database, [Settlement(callback, OccurrenceStatus.DELIVERED)])
    assert (await the_callback(database, schedule.id)).status is OccurrenceStatus.DELIVERED
    assert await ports.read_schedule_status(database, schedule.id) is ScheduleStatus.FAILED
    assert (await ports.read_schedule(database, schedule.id)).consecutive_failures == 1


async def test_no_callback_without_on_failure_nor_for_a_settle_whose_lease_was_lost(
    database: Database,
) -> None:
    plain = ports.draft(ports.immediate())
    await ports.insert_schedules(database, [plain])
    (delivery,) = await ports.claim(database, limit=1)
    await ports.settle(database, [Settlement(delivery, OccurrenceStatus.DEAD_LETTERED, error="x")])
    assert await callbacks(database, plain.id) == []

    told = ports.draft(ports.immediate(), on_failure=ON_FAILURE)
    await ports.insert_schedules(database, [told])
    (delivery,) = await ports.claim(database, limit=1)
    stale = dataclasses.replace(delivery, lease_token=uuid.uuid4())
    await ports.settle(database, [Settlement(stale, OccurrenceStatus.DEAD_LETTERED, error="x")])
    assert await callbacks(database, told.id) == []


async def test_a_callback_that_fails_for_good_is_a_dead_letter_that_calls_no_callback(
    database: Database,
) -> None:
    schedule = ports.draft(ports.immediate(), max_attempts=1, on_failure=ON_FAILURE)
    delivery, row = await dead_lettered(database, schedule)
    (callback,) = await ports.claim(database, limit=5)
    assert callback.max_attempts == 1

    await ports.settle(
        database, [Settlement(callback, OccurrenceStatus.DEAD_LETTERED, error="no route")]
    )

    assert (await the_callback(database, schedule.id)).status is OccurrenceStatus.DEAD_LETTERED
    assert await ports.claim(database, limit=5) == []
    letters = {
        letter.occurrence.occurrence_id: letter for letter in await ports.dead_letters(database)
    }
    assert letters.keys() == {delivery.occurrence_id, row.occurrence_id}
    letter = letters[row.occurrence_id]
    assert (letter.event_type, letter.target) == (CALLBACK_EVENT_TYPE, ON_FAILURE)
    assert letter.occurrence.callback_of == delivery.occurrence_id
    assert letter.payload["occurrence_id"] == str(delivery.occurrence_id)
    # Only the schedule's own dead letter counts toward its failures in a row.
    assert (await ports.read_schedule(database, schedule.id)).consecutive_failures == 1

    # Replayed, the callback goes out again under its own id, and its schedule stays failed.
    assert await ports.replay(database, [row.occurrence_id]) == [row.occurrence_id]
    (again,) = await ports.claim(database, limit=5)
    assert (again.occurrence_id, again.event_type) == (row.occurrence_id, CALLBACK_EVENT_TYPE)
    await ports.settle(database, [Settlement(again, OccurrenceStatus.DELIVERED)])
    assert await ports.read_schedule_status(database, schedule.id) is ScheduleStatus.FAILED


async def test_a_pause_holds_no_callback_and_an_auto_pause_is_reported(
    database: Database,
) -> None:
    schedule = ports.draft(
        ports.interval(3600), on_failure=ON_FAILURE, pause_after_failures=1, max_attempts=1
    )
    _, row = await dead_lettered(database, schedule)
    assert await ports.read_schedule_status(database, schedule.id) is ScheduleStatus.PAUSED

    (callback,) = await ports.claim(database, limit=5)
    assert callback.occurrence_id == row.occurrence_id
    # Handed back unsent while paused, it is due again, not held for the resume.
    await ports.release(database, [callback], started=False)
    (again,) = await ports.claim(database, limit=5)
    assert again.occurrence_id == row.occurrence_id
    await ports.settle(database, [Settlement(again, OccurrenceStatus.DELIVERED)])
    assert await ports.read_schedule_status(database, schedule.id) is ScheduleStatus.PAUSED


async def test_a_manual_pause_leaves_pending_callbacks_due(database: Database) -> None:
    schedule = ports.draft(ports.interval(3600), on_failure=ON_FAILURE, max_attempts=1)
    _, row = await dead_lettered(database, schedule)

    await ports.hold(database, schedule.id)

    assert (await the_callback(database, schedule.id)).available_at is not None
    (callback,) = await ports.claim(database, limit=5)
    assert callback.occurrence_id == row.occurrence_id


async def test_a_last_attempt_whose_lease_ran_out_calls_back(database: Database) -> None:
    schedule = ports.draft(ports.immediate(), max_attempts=1, on_failure=ON_FAILURE)
    await ports.insert_schedules(database, [schedule])
    (delivery,) = await ports.claim(database, limit=1)
    await ports.run_out_lease(database, delivery.occurrence_id)

    assert await ports.claim(database, limit=5) == []  # the claim dead-letters it

    row = await the_callback(database, schedule.id)
    assert row.callback_of == delivery.occurrence_id
    (callback,) = await ports.claim(database, limit=5)
    body = json.loads(callback.body)
    assert body["occurrence_id"] == str(delivery.occurrence_id)
    assert "lease" in body["last_error"]


async def test_each_dead_lettering_has_a_callback_of_its_own(database: Database) -> None:
    schedule = ports.draft(ports.immediate(), max_attempts=1, on_failure=ON_FAILURE)
    delivery, first = await dead_lettered(database, schedule)
    (callback,) = await ports.claim(database, limit=5)
    await ports.settle(database, [Settlement(callback, OccurrenceStatus.DELIVERED)])

    await ports.replay(database, [delivery.occurrence_id])
    (again,) = await ports.claim(database, limit=5)
    await ports.settle(database, [Settlement(again, OccurrenceStatus.DEAD_LETTERED, error="x")])

    rows = await callbacks(database, schedule.id)
    assert len(rows) == 2
    assert {r.callback_of for r in rows} == {delivery.occurrence_id}
    (second,) = [r for r in rows if r.occurrence_id != first.occurrence_id]
    assert second.status is OccurrenceStatus.PENDING


async def test_removing_on_failure_cancels_the_callbacks_not_yet_delivered(
    database: Database,
) -> None:
    schedule = ports.draft(ports.immediate(), max_attempts=1, on_failure=ON_FAILURE)
    await dead_lettered(database, schedule)

    await ports.remove_on_failure(database, schedule.id)

    assert (await the_callback(database, schedule.id)).status is OccurrenceStatus.CANCELLED
    assert await ports.claim(database, limit=5) == []
    assert (await ports.read_schedule(database, schedule.id)).on_failure is None
