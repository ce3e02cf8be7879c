"""Bounds (start_at, end_at, max_occurrences): a schedule fires within them and then
completes; PATCH plans the next tick again; the preview honours them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.factories import iso
from tests.integration.conftest import Harness

SECOND = timedelta(seconds=1)


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def _starting_soon(
    harness: Harness, trigger: Callable[[datetime], dict[str, Any]], **spec: Any
) -> tuple[datetime, dict[str, Any]]:
    """A schedule whose interval (`trigger(start)`) starts half a second from now, and its
    start. A start already past when the service reads it would move the first tick on by
    an interval: on a machine that slow, the schedule is cancelled and made again with a
    longer lead."""
    lead = timedelta(milliseconds=500)
    for _ in range(5):
        start = datetime.now(UTC) + lead
        created = await harness.create(trigger=trigger(start), **spec)
        if _at(created["next_fire_at"]) == start:
            return start, created
        cancelled = await harness.client.delete(f"/v1/schedules/{created['id']}")
        assert cancelled.status_code == 200, cancelled.text
        lead *= 2
    raise AssertionError("no schedule could be created before its start")


def _interval(every_seconds: float) -> Callable[[datetime], dict[str, Any]]:
    return lambda start: {
        "type": "interval",
        "every_seconds": every_seconds,
        "start_at": iso(start),
    }


async def _completed(harness: Harness, schedule_id: str) -> bool:
    return await harness.schedule_status(schedule_id) == "completed"


async def test_an_interval_stops_at_end_at_and_completes(harness: Harness) -> None:
    start, created = await _starting_soon(
        harness,
        lambda start: {
            "type": "interval",
            "every_seconds": 1,
            "start_at": iso(start),
            "end_at": iso(start + 2 * SECOND),
        },
    )

    await harness.step_until(lambda: _completed(harness, created["id"]))

    fired = [_at(r.headers["X-Scheduled-For"]) for r in harness.receiver.requests]
    assert fired == [start, start + SECOND, start + 2 * SECOND]
    snapshot = await harness.get(f"/v1/schedules/{created['id']}")
    assert snapshot["next_fire_at"] is None
    assert snapshot["fire_count"] == 3


async def test_max_occurrences_caps_the_ticks_that_fire(harness: Harness) -> None:
    _, created = await _starting_soon(harness, _interval(1), max_occurrences=2)

    await harness.step_until(lambda: _completed(harness, created["id"]))

    assert len(harness.receiver.requests) == 2
    snapshot = await harness.get(f"/v1/schedules/{created['id']}")
    assert snapshot["max_occurrences"] == 2
    assert snapshot["fire_count"] == 2
    assert [o["status"] for o in await harness.occurrences(created["id"])] == [
        "delivered",
        "delivered",
    ]


async def test_a_bounded_schedule_whose_last_tick_needed_a_retry_still_completes(
    harness: Harness,
) -> None:
    from tests.receiver import Reply

    harness.receiver.script("/hook", Reply(status=503))
    _, created = await _starting_soon(harness, _interval(3600), max_occurrences=1)

    await harness.step_until(lambda: _completed(harness, created["id"]))

    assert [r.headers["X-Attempt"] for r in harness.receiver.requests] == ["1", "2"]


async def test_a_cron_with_start_at_fires_nothing_before_it(harness: Harness) -> None:
    start = datetime(2031, 6, 1, 12, 0, 30, tzinfo=UTC)
    created = await harness.create(
        trigger={"type": "cron", "expression": "0 * * * *", "start_at": iso(start)}
    )

    assert _at(created["next_fire_at"]) == datetime(2031, 6, 1, 13, 0, tzinfo=UTC)


async def test_an_end_at_before_the_first_tick_is_refused_naming_it(harness: Harness) -> None:
    now = datetime.now(UTC)
    cases: list[dict[str, Any]] = [
        {"type": "cron", "expression": "0 0 1 1 *", "end_at": iso(now + timedelta(days=1))},
        {
            "type": "cron",
            "expression": "* * * * *",
            "start_at": iso(now + timedelta(days=2)),
            "end_at": iso(now + timedelta(days=1)),
        },
        {
            "type": "interval",
            "every_seconds": 60,
            "start_at": iso(now - timedelta(seconds=90)),
            "end_at": iso(now - timedelta(seconds=1)),
        },
    ]
    for trigger in cases:
        response = await harness.client.post(
            "/v1/schedules",
            json={"event_type": "x", "target": harness.webhook(), "trigger": trigger},
        )
        assert response.status_code == 422, response.text
        assert response.json()["errors"][0]["pointer"] == "#/trigger/end_at", trigger

    batch = await harness.client.post(
        "/v1/schedules/batch",
        json={
            "items": [
                {"event_type": "x", "target": harness.webhook(), "trigger": {"type": "immediate"}},
                {"event_type": "x", "target": harness.webhook(), "trigger": cases[0]},
            ]
        },
    )
    assert batch.status_code == 422
    assert batch.json()["errors"][0]["pointer"] == "#/items/1/trigger/end_at"
    assert (await harness.get("/v1/schedules"))["items"] == []


async def test_patching_bounds_and_policies_plans_the_next_tick_again(harness: Harness) -> None:
    created = await harness.create(
        trigger={"type": "cron", "expression": "0 9 * * *", "timezone": "Europe/Paris"}
    )
    url = f"/v1/schedules/{created['id']}"
    start = datetime(2031, 1, 10, tzinfo=UTC)

    moved = await harness.client.patch(
        url,
        json={
            "trigger": {
                "type": "cron",
                "expression": "0 9 * * *",
                "timezone": "Europe/Paris",
                "start_at": iso(start),
            },
            "misfire_policy": "fire_all",
            "max_catchup": 7,
        },
    )

    assert moved.status_code == 200, moved.text
    body = moved.json()
    assert _at(body["next_fire_at"]) == datetime(2031, 1, 10, 8, 0, tzinfo=UTC)
    assert (body["misfire_policy"], body["max_catchup"]) == ("fire_all", 7)
    pending = [o for o in await harness.occurrences(created["id"]) if o["status"] == "pending"]
    assert [_at(o["fire_at"]) for o in pending] == [datetime(2031, 1, 10, 8, 0, tzinfo=UTC)]

    refused = await harness.client.patch(
        url,
        json={
            "trigger": {
                "type": "cron",
                "expression": "0 9 * * *",
                "start_at": iso(start),
                "end_at": iso(start + timedelta(hours=1)),
            }
        },
    )
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["pointer"] == "#/trigger/end_at"
    null_policy = await harness.client.patch(url, json={"misfire_policy": None})
    assert null_policy.status_code == 422
    assert null_policy.json()["errors"][0]["pointer"] == "#/misfire_policy"
    unchanged = await harness.get(url)
    assert _at(unchanged["next_fire_at"]) == datetime(2031, 1, 10, 8, 0, tzinfo=UTC)


async def test_lowering_max_occurrences_below_what_fired_completes_the_schedule(
    harness: Harness,
) -> None:
    _, created = await _starting_soon(harness, _interval(3600))
    await harness.step_until(lambda: _received(harness, 1))

    patched = await harness.client.patch(
        f"/v1/schedules/{created['id']}", json={"max_occurrences": 1}
    )

    assert patched.status_code == 200, patched.text
    assert patched.json()["status"] == "completed"
    assert patched.json()["next_fire_at"] is None
    lifted = await harness.client.patch(
        f"/v1/schedules/{created['id']}", json={"max_occurrences": None}
    )
    assert lifted.status_code == 409  # a completed schedule has fired


async def _received(harness: Harness, count: int) -> bool:
    return len(harness.receiver.requests) >= count


async def test_the_preview_honours_bounds(harness: Harness) -> None:
    after = datetime(2031, 1, 1, tzinfo=UTC)
    response = await harness.client.post(
        "/v1/triggers/preview",
        json={
            "trigger": {
                "type": "cron",
                "expression": "0 12 * * *",
                "start_at": iso(after + timedelta(days=2)),
                "end_at": iso(after + timedelta(days=5, hours=12)),
            },
            "after": iso(after),
            "count": 10,
        },
    )
    capped = await harness.client.post(
        "/v1/triggers/preview",
        json={
            "trigger": {"type": "cron", "expression": "0 12 * * *"},
            "after": iso(after),
            "count": 10,
            "max_occurrences": 2,
        },
    )
    never = await harness.client.post(
        "/v1/triggers/preview",
        json={
            "trigger": {
                "type": "cron",
                "expression": "0 0 1 1 *",
                "end_at": iso(datetime.now(UTC) + timedelta(days=1)),
            }
        },
    )

    assert response.status_code == 200, response.text
    assert [_at(t) for t in response.json()["fire_times"]] == [
        datetime(2031, 1, day, 12, tzinfo=UTC) for day in (3, 4, 5, 6)
    ]
    assert len(capped.json()["fire_times"]) == 2
    assert never.status_code == 422
    assert never.json()["errors"][0]["pointer"] == "#/trigger/end_at"
