"""Recurring cadence, misfire, pause/resume, trigger, cancel: what operators see."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.factories import iso
from tests.integration.conftest import Harness
from tests.receiver import Reply
from tests.store import ports


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def test_a_retrying_tick_does_not_delay_the_next_one(harness: Harness) -> None:
    harness.receiver.always("/hook", Reply(500))
    start = datetime.now(UTC) + timedelta(seconds=1)
    created = await harness.create(
        trigger={"type": "interval", "every_seconds": 60, "start_at": iso(start)}
    )
    await ports.move_clock_past(harness.database, _at(created["next_fire_at"]))

    await harness.step_until(lambda: _requests(harness, 1))

    items = await harness.occurrences(created["id"])
    pending = sorted(items, key=lambda o: o["fire_at"])
    assert [o["attempts"] for o in pending] == [1, 0]
    assert _at(pending[1]["fire_at"]) - _at(pending[0]["fire_at"]) == timedelta(seconds=60)
    snapshot = await harness.get(f"/v1/schedules/{created['id']}")
    assert snapshot["fire_count"] == 1


async def test_missed_ticks_collapse_into_one_catch_up_then_the_schedule_realigns(
    harness: Harness,
) -> None:
    # A minute apart, so that the tick after the catch-up is far off however slow the
    # machine is between the two steps; the clock is moved instead.
    created = await harness.create(trigger={"type": "interval", "every_seconds": 60})
    # The loop is not stepped while two more ticks go by, as if every scheduler were down.
    before = await ports.move_clock_past(
        harness.database, _at(created["next_fire_at"]) + timedelta(seconds=120)
    )

    assert await harness.step() == 1
    assert await harness.step() == 0

    (request,) = harness.receiver.requests
    assert request.headers["X-Scheduled-For"] == created["next_fire_at"]
    upcoming = [o for o in await harness.occurrences(created["id"]) if o["status"] == "pending"]
    assert len(upcoming) == 1
    assert _at(upcoming[0]["fire_at"]) > before


async def test_an_overdue_recurring_occurrence_fires_once_and_the_next_is_in_the_future(
    harness: Harness,
) -> None:
    long_ago = datetime.now(UTC) - timedelta(hours=5)
    created = await harness.create(trigger={"type": "once", "at": iso(long_ago)})
    await harness.step()
    assert len(harness.receiver.requests) == 1
    assert await harness.schedule_status(created["id"]) == "completed"

    cron = await harness.create(trigger={"type": "cron", "expression": "* * * * * *"})
    before = await ports.move_clock_past(harness.database, _at(cron["next_fire_at"]))
    await harness.step_until(lambda: _delivered_count(harness, cron["id"], 1))
    occurrences = await harness.occurrences(cron["id"])
    upcoming = [o for o in occurrences if o["status"] == "pending"]
    assert len(upcoming) == 1
    assert _at(upcoming[0]["fire_at"]) > before


async def test_pause_holds_everything_and_resume_realigns_to_the_future(harness: Harness) -> None:
    # A minute apart, so that the tick after the resume is far off however slow the
    # machine is between the resume and the step after it; the clock is moved instead.
    start = datetime.now(UTC) + timedelta(milliseconds=300)
    created = await harness.create(
        trigger={"type": "interval", "every_seconds": 60, "start_at": iso(start)}
    )

    paused = (await harness.client.post(f"/v1/schedules/{created['id']}/pause")).json()
    assert paused["status"] == "paused"
    assert paused["next_fire_at"] is None

    # Past two ticks: nothing fires while paused.
    await ports.move_clock_past(harness.database, start + timedelta(seconds=60))
    assert await harness.step() == 0
    assert harness.receiver.requests == []

    before = await ports.database_now(harness.database)
    resumed = (await harness.client.post(f"/v1/schedules/{created['id']}/resume")).json()
    assert resumed["status"] == "pending"
    assert _at(resumed["next_fire_at"]) > before
    assert await harness.step() == 0  # nothing fires on resume itself
    await ports.move_clock_past(harness.database, _at(resumed["next_fire_at"]))
    await harness.step_until(lambda: _delivered_count(harness, created["id"], 1))
    fired = harness.receiver.requests[0].headers["X-Scheduled-For"]
    assert _at(fired) > before


async def test_a_paused_one_shot_due_meanwhile_fires_once_on_resume(harness: Harness) -> None:
    # Due already: nothing steps the loop before the pause, so it falls due while paused.
    due = datetime.now(UTC) - timedelta(seconds=1)
    created = await harness.create(trigger={"type": "once", "at": iso(due)})
    await harness.client.post(f"/v1/schedules/{created['id']}/pause")
    assert await harness.step() == 0

    await harness.client.post(f"/v1/schedules/{created['id']}/resume")
    assert await harness.step() == 1

    assert [r.occurrence_id for r in harness.receiver.requests] == [created["next_occurrence_id"]]
    assert await harness.schedule_status(created["id"]) == "completed"


async def test_pause_and_resume_are_idempotent(harness: Harness) -> None:
    created = await harness.create(trigger={"type": "cron", "expression": "@hourly"})
    for _ in range(2):
        response = await harness.client.post(f"/v1/schedules/{created['id']}/pause")
        assert response.status_code == 200
        assert response.json()["status"] == "paused"
    for _ in range(2):
        response = await harness.client.post(f"/v1/schedules/{created['id']}/resume")
        assert response.status_code == 200
        assert response.json()["status"] == "pending"
    pending = [o for o in await harness.occurrences(created["id"]) if o["status"] == "pending"]
    assert len(pending) == 1


async def test_trigger_fires_an_extra_occurrence_and_leaves_the_cadence_alone(
    harness: Harness,
) -> None:
    created = await harness.create(trigger={"type": "cron", "expression": "@daily"})

    response = await harness.client.post(f"/v1/schedules/{created['id']}/trigger")
    assert response.status_code == 202
    extra = response.json()
    assert extra["origin"] == "trigger"
    assert extra["occurrence_id"] != created["next_occurrence_id"]

    assert await harness.step() == 1
    (request,) = harness.receiver.requests
    assert request.occurrence_id == extra["occurrence_id"]
    snapshot = await harness.get(f"/v1/schedules/{created['id']}")
    assert snapshot["next_occurrence_id"] == created["next_occurrence_id"]
    assert snapshot["next_fire_at"] == created["next_fire_at"]


async def test_a_paused_schedule_cannot_be_triggered(harness: Harness) -> None:
    created = await harness.create(trigger={"type": "cron", "expression": "@daily"})
    await harness.client.post(f"/v1/schedules/{created['id']}/pause")

    response = await harness.client.post(f"/v1/schedules/{created['id']}/trigger")

    assert response.status_code == 409
    assert response.headers["content-type"] == "application/problem+json"


async def test_cancel_stops_every_pending_occurrence(harness: Harness) -> None:
    created = await harness.create(trigger={"type": "interval", "every_seconds": 1})

    response = await harness.client.delete(f"/v1/schedules/{created['id']}")

    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert await harness.step() == 0
    statuses = {o["status"] for o in await harness.occurrences(created["id"])}
    assert statuses == {"cancelled"}
    resumed = await harness.client.post(f"/v1/schedules/{created['id']}/resume")
    assert resumed.status_code == 409


async def test_patching_the_trigger_moves_the_next_occurrence(harness: Harness) -> None:
    created = await harness.create(trigger={"type": "cron", "expression": "@yearly"})
    soon = datetime.now(UTC) + timedelta(milliseconds=500)

    response = await harness.client.patch(
        f"/v1/schedules/{created['id']}",
        json={"trigger": {"type": "interval", "every_seconds": 3600, "start_at": iso(soon)}},
    )

    assert response.status_code == 200
    patched = response.json()
    assert _at(patched["next_fire_at"]) == soon.replace(microsecond=soon.microsecond)
    assert patched["next_occurrence_id"] != created["next_occurrence_id"]
    await ports.move_clock_past(harness.database, soon)
    await harness.step_until(lambda: _delivered_count(harness, created["id"], 1))
    assert harness.receiver.requests[0].occurrence_id == patched["next_occurrence_id"]


async def test_patched_payload_is_what_the_next_attempt_sends(harness: Harness) -> None:
    harness.receiver.script("/hook", Reply(500))
    created = await harness.create(payload={"version": 1})
    await harness.step()

    await harness.client.patch(f"/v1/schedules/{created['id']}", json={"payload": {"version": 2}})
    await harness.step_until(lambda: _delivered_count(harness, created["id"], 1))

    assert [r.body for r in harness.receiver.requests] == [b'{"version":1}', b'{"version":2}']


async def _requests(harness: Harness, count: int) -> bool:
    return len(harness.receiver.requests) >= count


async def _delivered_count(harness: Harness, schedule_id: str, count: int) -> bool:
    items = await harness.occurrences(schedule_id)
    return sum(1 for o in items if o["status"] == "delivered") >= count
