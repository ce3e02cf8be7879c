"""jitter_seconds: each firing is spread over [fire_at, fire_at + jitter); its identity is not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.factories import iso
from tests.integration.conftest import Harness


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def _pending(harness: Harness, schedule_id: str) -> list[dict[str, object]]:
    return [o for o in await harness.occurrences(schedule_id) if o["status"] == "pending"]


async def test_an_occurrence_becomes_due_within_its_jitter_window_keeping_its_instant_and_id(
    harness: Harness,
) -> None:
    at = datetime.now(UTC) + timedelta(hours=1)
    created = await harness.create(trigger={"type": "once", "at": iso(at)}, jitter_seconds=600)

    (occurrence,) = await _pending(harness, created["id"])

    assert created["jitter_seconds"] == 600
    assert _at(str(occurrence["fire_at"])) == at
    assert occurrence["occurrence_id"] == created["next_occurrence_id"]
    available = _at(str(occurrence["available_at"]))
    assert at <= available < at + timedelta(seconds=600)


async def test_a_jittered_delivery_names_its_nominal_instant(harness: Harness) -> None:
    at = datetime.now(UTC) - timedelta(seconds=30)
    created = await harness.create(trigger={"type": "once", "at": iso(at)}, jitter_seconds=1)

    assert await harness.step() == 1

    (request,) = harness.receiver.requests
    assert _at(request.headers["X-Scheduled-For"]) == at
    assert request.occurrence_id == created["next_occurrence_id"]


async def test_every_tick_of_a_recurring_schedule_is_jittered(harness: Harness) -> None:
    start = datetime.now(UTC) + timedelta(seconds=1)
    created = await harness.create(
        trigger={"type": "interval", "every_seconds": 3600, "start_at": iso(start)},
        jitter_seconds=0.01,
    )
    await harness.step_until(lambda: _requests(harness, 1))

    (upcoming,) = await _pending(harness, created["id"])

    fire_at = _at(str(upcoming["fire_at"]))
    available = _at(str(upcoming["available_at"]))
    assert fire_at - start == timedelta(seconds=3600)
    assert fire_at <= available < fire_at + timedelta(seconds=0.01)


async def test_patching_the_jitter_redraws_the_next_occurrence(harness: Harness) -> None:
    at = datetime.now(UTC) + timedelta(hours=2)
    created = await harness.create(trigger={"type": "once", "at": iso(at)})

    response = await harness.client.patch(
        f"/v1/schedules/{created['id']}", json={"jitter_seconds": 3600}
    )

    assert response.status_code == 200, response.text
    assert response.json()["jitter_seconds"] == 3600
    (occurrence,) = await _pending(harness, created["id"])
    assert occurrence["occurrence_id"] == created["next_occurrence_id"]
    available = _at(str(occurrence["available_at"]))
    assert at <= available < at + timedelta(seconds=3600)


async def test_a_negative_jitter_is_refused(harness: Harness) -> None:
    response = await harness.client.post(
        "/v1/schedules",
        json={
            "event_type": "x",
            "target": harness.webhook(),
            "trigger": {"type": "immediate"},
            "jitter_seconds": -1,
        },
    )

    assert response.status_code == 422
    assert response.json()["errors"][0]["pointer"] == "#/jitter_seconds"
    assert (await harness.get("/v1/schedules"))["items"] == []


async def _requests(harness: Harness, count: int) -> bool:
    return len(harness.receiver.requests) >= count
