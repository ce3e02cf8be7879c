"""POST /v1/schedules/{id}/backfill: past ticks fire with their usual ids, once."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from app.domain.ids import occurrence_id
from tests.factories import iso
from tests.integration.conftest import Harness
from tests.receiver import Received
from tests.store import ports

MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def _minutely_since(harness: Harness, start: datetime) -> str:
    created = await harness.create(
        trigger={"type": "interval", "every_seconds": 60, "start_at": iso(start)}
    )
    return str(created["id"])


async def _backfill(
    harness: Harness, schedule_id: str, start: datetime, end: datetime
) -> dict[str, Any]:
    response = await harness.client.post(
        f"/v1/schedules/{schedule_id}/backfill", json={"from": iso(start), "to": iso(end)}
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def test_a_backfill_fires_each_past_tick_in_order_with_its_usual_id(
    harness: Harness,
) -> None:
    start = datetime.now(UTC).replace(second=0, microsecond=0) - 10 * MINUTE
    schedule_id = await _minutely_since(harness, start)

    result = await _backfill(harness, schedule_id, start, start + 4 * MINUTE)

    ticks = [start + n * MINUTE for n in range(5)]
    expected_ids = [str(occurrence_id(uuid.UUID(schedule_id), t)) for t in ticks]
    assert result["created"] == 5
    assert [_at(t["fire_at"]) for t in result["ticks"]] == ticks
    assert [t["occurrence_id"] for t in result["ticks"]] == expected_ids
    assert all(t["created"] for t in result["ticks"])

    await harness.step_until(lambda: _backfilled_at_least(harness, 5))

    requests = _backfilled(harness)
    assert [r.occurrence_id for r in requests] == expected_ids
    assert [_at(r.headers["X-Scheduled-For"]) for r in requests] == ticks
    history = {o["occurrence_id"]: o for o in await harness.occurrences(schedule_id)}
    assert {history[i]["origin"] for i in expected_ids} == {"backfill"}
    # The cadence is untouched: its next tick is still the first one after now.
    snapshot = await harness.get(f"/v1/schedules/{schedule_id}")
    assert _at(snapshot["next_fire_at"]) > datetime.now(UTC)


async def _received(harness: Harness, count: int) -> bool:
    return len(harness.receiver.requests) >= count


def _backfilled(harness: Harness) -> list[Received]:
    """What arrived of the ticks a minutely case backfilled: those are minutes in the past,
    while the schedule's own cadence fires from the next minute on, which a case that runs
    across a minute boundary sees as well."""
    cutoff = datetime.now(UTC) - MINUTE
    return [r for r in harness.receiver.requests if _at(r.headers["X-Scheduled-For"]) < cutoff]


async def _backfilled_at_least(harness: Harness, count: int) -> bool:
    return len(_backfilled(harness)) >= count


async def test_backfilling_the_same_range_twice_creates_nothing_new(harness: Harness) -> None:
    start = datetime.now(UTC).replace(second=0, microsecond=0) - 10 * MINUTE
    schedule_id = await _minutely_since(harness, start)
    first = await _backfill(harness, schedule_id, start, start + 2 * MINUTE)
    await harness.step_until(lambda: _backfilled_at_least(harness, 3))

    again = await _backfill(harness, schedule_id, start - MINUTE, start + 3 * MINUTE)

    assert first["created"] == 3
    assert again["created"] == 1  # only the tick at start + 3 minutes is new
    assert [t["created"] for t in again["ticks"]] == [False, False, False, True]
    await harness.step_until(lambda: _backfilled_at_least(harness, 4))
    assert len(_backfilled(harness)) == 4
    await harness.step()  # nothing more of the backfill goes out
    assert len(_backfilled(harness)) == 4


async def test_a_skipped_tick_can_be_backfilled(harness: Harness) -> None:
    start = datetime.now(UTC).replace(second=0, microsecond=0) - 30 * MINUTE
    created = await harness.create(
        trigger={"type": "interval", "every_seconds": 1, "start_at": iso(start)}
    )
    schedule_id = created["id"]
    paused = (await harness.client.post(f"/v1/schedules/{schedule_id}/pause")).json()
    # A one-second tick (on whole seconds) falls inside the pause.
    paused_at = _at(paused["updated_at"])
    await ports.move_clock_past(harness.database, paused_at.replace(microsecond=0) + SECOND)
    await harness.client.post(f"/v1/schedules/{schedule_id}/resume")
    skipped = [o for o in await harness.occurrences(schedule_id) if o["status"] == "skipped"]
    assert skipped
    tick = _at(skipped[0]["fire_at"])

    result = await _backfill(harness, schedule_id, tick, tick)

    assert result["created"] == 1
    assert result["ticks"][0]["occurrence_id"] == skipped[0]["occurrence_id"]
    await harness.step_until(lambda: _received(harness, 1))
    assert harness.receiver.requests[0].occurrence_id == skipped[0]["occurrence_id"]


async def test_backfill_refuses_bad_ranges_and_schedules(harness: Harness) -> None:
    now = datetime.now(UTC)
    schedule_id = await _minutely_since(harness, now - 5000 * MINUTE)
    url = f"/v1/schedules/{schedule_id}/backfill"

    future = await harness.client.post(
        url, json={"from": iso(now - MINUTE), "to": iso(now + MINUTE)}
    )
    backwards = await harness.client.post(
        url, json={"from": iso(now - MINUTE), "to": iso(now - 2 * MINUTE)}
    )
    too_many = await harness.client.post(
        url, json={"from": iso(now - 2000 * MINUTE), "to": iso(now - MINUTE)}
    )
    missing = await harness.client.post(url, json={"from": iso(now - MINUTE)})

    for response in (future, backwards, too_many):
        assert response.status_code == 422, response.text
        assert response.json()["errors"][0]["pointer"] == "#/to"
    assert "1000" in too_many.json()["errors"][0]["detail"]
    assert missing.status_code == 422
    assert missing.json()["errors"][0]["pointer"] == "#/to"
    history = await harness.occurrences(schedule_id)
    assert [o["origin"] for o in history] == ["schedule"]  # nothing was stored

    one_shot = await harness.create(trigger={"type": "once", "delay_seconds": 3600})
    response = await harness.client.post(
        f"/v1/schedules/{one_shot['id']}/backfill",
        json={"from": iso(now - MINUTE), "to": iso(now)},
    )
    assert response.status_code == 409
    await harness.client.delete(f"/v1/schedules/{schedule_id}")
    cancelled = await harness.client.post(
        url, json={"from": iso(now - 3 * MINUTE), "to": iso(now - MINUTE)}
    )
    assert cancelled.status_code == 409
    unknown = await harness.client.post(
        f"/v1/schedules/{uuid.uuid4()}/backfill",
        json={"from": iso(now - MINUTE), "to": iso(now)},
    )
    assert unknown.status_code == 404


async def test_a_paused_schedule_keeps_its_backfill_until_it_resumes(harness: Harness) -> None:
    start = datetime.now(UTC).replace(second=0, microsecond=0) - 10 * MINUTE
    schedule_id = await _minutely_since(harness, start)
    await harness.client.post(f"/v1/schedules/{schedule_id}/pause")

    result = await _backfill(harness, schedule_id, start, start + MINUTE)

    assert result["created"] == 2
    assert await harness.step() == 0
    await harness.client.post(f"/v1/schedules/{schedule_id}/resume")
    await harness.step_until(lambda: _backfilled_at_least(harness, 2))
    assert [_at(r.headers["X-Scheduled-For"]) for r in _backfilled(harness)] == [
        start,
        start + MINUTE,
    ]


async def test_a_backfill_arrives_in_tick_order_even_when_early_replies_are_slow(
    harness: Harness,
) -> None:
    import random

    from app.worker.dispatcher import Dispatcher
    from tests.receiver import Reply
    from tests.stepping import step

    # Slow first replies would let later ticks overtake them if they ran side by side.
    harness.receiver.script("/hook", *(Reply(delay=0.3 - 0.05 * n) for n in range(6)))
    start = datetime.now(UTC).replace(second=0, microsecond=0) - 10 * MINUTE
    schedule_id = await _minutely_since(harness, start)
    await _backfill(harness, schedule_id, start, start + 5 * MINUTE)

    # The loop's claims take every row, and the lanes start them one at a time.
    dispatcher = Dispatcher(harness.database, harness.sinks, harness.settings, rng=random.Random(4))
    assert await step(dispatcher, harness.database.clock) == 6
    await harness.receiver.wait_for(6, timeout=20)

    # Recorded as each reply completes: side by side, the later ticks would finish first.
    received = harness.receiver.requests
    assert [_at(r.headers["X-Scheduled-For"]) for r in received] == [
        start + n * MINUTE for n in range(6)
    ]
