"""The schedules resource through the HTTP API: create, read, list, change and cancel."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import pytest_asyncio
import sqlalchemy as sa

from app.store.schema.tables import schedules
from tests.integration.conftest import ON_MODULE_LOOP, Harness, fresh, shared_harness
from tests.receiver import Reply

PROBLEM = "application/problem+json"


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


def on_grid(origin: datetime, step: timedelta, at_or_after: datetime) -> datetime:
    """The first instant origin + k * step (k integer) that is not before `at_or_after`."""
    ticks = -((origin - at_or_after) // step)
    return origin + ticks * step


def body(harness: Harness, **spec: Any) -> dict[str, Any]:
    return {
        "event_type": "invoice.due",
        "payload": {"invoice": 42},
        "target": harness.webhook(),
        "trigger": {"type": "immediate"},
        **spec,
    }


EPOCH = datetime(2000, 1, 3, tzinfo=UTC)  # a Monday, midnight UTC


async def test_create_answers_201_with_the_location_of_the_new_schedule(harness: Harness) -> None:
    response = await harness.client.post(
        "/v1/schedules", json=body(harness, name="first", labels={"team": "billing"})
    )

    assert response.status_code == 201, response.text
    created = response.json()
    assert response.headers["location"] == f"/v1/schedules/{created['id']}"
    assert await harness.get(response.headers["location"]) == created
    assert created["name"] == "first"
    assert created["event_type"] == "invoice.due"
    assert created["payload"] == {"invoice": 42}
    assert created["labels"] == {"team": "billing"}
    assert created["target"]["url"] == harness.webhook()["url"]


async def test_new_schedule_snapshot_shows_its_first_occurrence_and_nothing_fired(
    harness: Harness,
) -> None:
    created = await harness.create(trigger={"type": "once", "delay_seconds": 3600})

    snapshot = await harness.get(f"/v1/schedules/{created['id']}")

    assert snapshot["status"] == "pending"
    assert instant(snapshot["next_fire_at"]) == instant(snapshot["created_at"]) + timedelta(hours=1)
    assert snapshot["next_occurrence_id"]
    assert snapshot["attempts"] == 0
    assert snapshot["last_error"] is None
    assert snapshot["fire_count"] == 0
    assert snapshot["last_fired_at"] is None
    assert snapshot["max_attempts"] == harness.settings.max_attempts
    (occurrence,) = await harness.occurrences(created["id"])
    assert occurrence["occurrence_id"] == snapshot["next_occurrence_id"]
    assert occurrence["fire_at"] == snapshot["next_fire_at"]
    assert occurrence["status"] == "pending"


async def test_snapshot_shows_attempts_and_last_error_of_a_retrying_occurrence(
    harness: Harness,
) -> None:
    harness.receiver.script("/hook", Reply(status=503, body="maintenance"))
    created = await harness.create()
    schedule = f"/v1/schedules/{created['id']}"

    assert await harness.step() == 1

    retrying = await harness.get(schedule)
    assert retrying["status"] == "pending"
    assert retrying["attempts"] == 1
    assert "503" in retrying["last_error"]
    assert retrying["fire_count"] == 1
    assert retrying["last_fired_at"] is not None
    assert retrying["next_occurrence_id"] == created["next_occurrence_id"]
    assert retrying["next_fire_at"] == created["next_fire_at"]

    async def completed() -> bool:
        return await harness.schedule_status(created["id"]) == "completed"

    await harness.step_until(completed)
    done = await harness.get(schedule)
    assert done["attempts"] == 2
    assert done["last_error"] is None
    assert done["fire_count"] == 1
    assert done["next_fire_at"] is None
    assert done["next_occurrence_id"] is None


async def test_recurring_snapshot_after_a_delivery_points_at_the_next_tick(
    harness: Harness,
) -> None:
    created = await harness.create(trigger={"type": "interval", "every_seconds": 3600})

    assert await harness.step() == 1

    snapshot = await harness.get(f"/v1/schedules/{created['id']}")
    assert snapshot["status"] == "pending"
    assert snapshot["fire_count"] == 1
    assert instant(snapshot["last_fired_at"]) >= instant(created["created_at"])
    assert snapshot["attempts"] == 1
    assert snapshot["last_error"] is None
    assert instant(snapshot["next_fire_at"]) == instant(created["next_fire_at"]) + timedelta(
        hours=1
    )
    assert snapshot["next_occurrence_id"] not in (None, created["next_occurrence_id"])


def _local_time_on_or_after(zone: str, hour: int, minute: int, at: datetime) -> datetime:
    local = at.astimezone(ZoneInfo(zone))
    candidate = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if candidate < local:
        candidate = (local + timedelta(days=1)).replace(
            hour=hour, minute=minute, second=0, microsecond=0
        )
    return candidate.astimezone(UTC)


TRIGGERS = [
    pytest.param(
        {"type": "once", "at": "2031-05-01T12:00:00+02:00"},
        lambda created: datetime(2031, 5, 1, 10, tzinfo=UTC),
        id="once at a future instant with an offset",
    ),
    pytest.param(
        {"type": "once", "at": "2020-01-01T00:00:00Z"},
        lambda created: datetime(2020, 1, 1, tzinfo=UTC),
        id="once at a past instant is due at once",
    ),
    pytest.param(
        {"type": "once", "delay_seconds": 90},
        lambda created: created + timedelta(seconds=90),
        id="once after a delay",
    ),
    pytest.param(
        {"type": "once", "delay_seconds": 0.25},
        lambda created: created + timedelta(seconds=0.25),
        id="once after a fractional delay",
    ),
    pytest.param(
        {"type": "immediate"},
        lambda created: created,
        id="immediate",
    ),
    pytest.param(
        {"type": "cron", "expression": "*/5 * * * *"},
        lambda created: on_grid(EPOCH, timedelta(minutes=5), created),
        id="cron with five fields",
    ),
    pytest.param(
        {"type": "cron", "expression": "*/10 * * * * *"},
        lambda created: on_grid(EPOCH, timedelta(seconds=10), created),
        id="cron with six fields, seconds first",
    ),
    pytest.param(
        {"type": "cron", "expression": "@hourly"},
        lambda created: on_grid(EPOCH, timedelta(hours=1), created),
        id="cron macro @hourly",
    ),
    pytest.param(
        {"type": "cron", "expression": "@daily"},
        lambda created: on_grid(EPOCH, timedelta(days=1), created),
        id="cron macro @daily",
    ),
    pytest.param(
        {"type": "cron", "expression": "@weekly"},
        lambda created: on_grid(EPOCH - timedelta(days=1), timedelta(weeks=1), created),
        id="cron macro @weekly is sunday midnight",
    ),
    pytest.param(
        {"type": "cron", "expression": "0 9 * * *", "timezone": "Asia/Kolkata"},
        lambda created: _local_time_on_or_after("Asia/Kolkata", 9, 0, created),
        id="cron in a time zone with a half-hour offset",
    ),
    pytest.param(
        {"type": "cron", "expression": "30 6 * * *", "timezone": "America/New_York"},
        lambda created: _local_time_on_or_after("America/New_York", 6, 30, created),
        id="cron in a time zone with daylight saving",
    ),
    pytest.param(
        {"type": "interval", "every_seconds": 60},
        lambda created: created,
        id="interval from creation",
    ),
    pytest.param(
        {"type": "interval", "every_seconds": 60, "start_at": "2031-01-01T00:00:00+01:00"},
        lambda created: datetime(2030, 12, 31, 23, tzinfo=UTC),
        id="interval from a future start_at",
    ),
    pytest.param(
        {"type": "interval", "every_seconds": 7, "start_at": "2020-01-01T00:00:00Z"},
        lambda created: on_grid(datetime(2020, 1, 1, tzinfo=UTC), timedelta(seconds=7), created),
        id="interval from a past start_at stays on its grid",
    ),
]


@pytest.mark.parametrize(("trigger", "expected"), TRIGGERS)
async def test_each_trigger_creates_its_first_occurrence_at_the_right_instant(
    harness: Harness, trigger: dict[str, Any], expected: Callable[[datetime], datetime]
) -> None:
    created = await harness.create(trigger=trigger)

    snapshot = await harness.get(f"/v1/schedules/{created['id']}")
    assert instant(snapshot["next_fire_at"]) == expected(instant(snapshot["created_at"]))
    (occurrence,) = await harness.occurrences(created["id"])
    assert occurrence["occurrence_id"] == snapshot["next_occurrence_id"]
    assert snapshot["trigger"]["type"] == trigger["type"]


async def test_same_idempotency_key_and_body_return_the_original_schedule(
    harness: Harness,
) -> None:
    spec = body(harness, trigger={"type": "once", "delay_seconds": 600}, labels={"a": "1"})
    headers = {"Idempotency-Key": "order-7781-reminder"}
    first = await harness.client.post("/v1/schedules", json=spec, headers=headers)
    assert first.status_code == 201, first.text

    again = await harness.client.post("/v1/schedules", json=spec, headers=headers)
    reordered = await harness.client.post(
        "/v1/schedules",
        content=json.dumps(dict(reversed(spec.items())), indent=2),
        headers={**headers, "Content-Type": "application/json"},
    )

    for replay in (again, reordered):
        assert replay.status_code == 200, replay.text
        assert replay.json()["id"] == first.json()["id"]
        assert replay.json()["next_fire_at"] == first.json()["next_fire_at"]
        assert replay.headers["location"] == first.headers["location"]
    listed = (await harness.get("/v1/schedules"))["items"]
    assert [s["id"] for s in listed] == [first.json()["id"]]
    assert len(await harness.occurrences(first.json()["id"])) == 1


async def test_same_idempotency_key_with_another_body_is_a_conflict(harness: Harness) -> None:
    headers = {"Idempotency-Key": "order-7781-reminder"}
    first = await harness.client.post(
        "/v1/schedules", json=body(harness, payload={"order": 7781}), headers=headers
    )
    assert first.status_code == 201, first.text

    response = await harness.client.post(
        "/v1/schedules", json=body(harness, payload={"order": 9999}), headers=headers
    )

    assert response.status_code == 409, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    listed = (await harness.get("/v1/schedules"))["items"]
    assert [s["id"] for s in listed] == [first.json()["id"]]
    assert listed[0]["payload"] == {"order": 7781}


@pytest.mark.parametrize("key", ["a\x1fb", "a\x00b", "a\x7fb"])
async def test_an_idempotency_key_with_a_control_character_is_refused(
    harness: Harness, key: str
) -> None:
    response = await harness.client.post(
        "/v1/schedules", json=body(harness), headers={"Idempotency-Key": key}
    )

    assert response.status_code == 422, response.text
    assert [e["parameter"] for e in response.json()["errors"]] == ["Idempotency-Key"]
    assert (await harness.get("/v1/schedules"))["items"] == []


async def test_different_idempotency_keys_create_different_schedules(harness: Harness) -> None:
    spec = body(harness)
    one = await harness.client.post("/v1/schedules", json=spec, headers={"Idempotency-Key": "k1"})
    two = await harness.client.post("/v1/schedules", json=spec, headers={"Idempotency-Key": "k2"})

    assert (one.status_code, two.status_code) == (201, 201)
    assert one.json()["id"] != two.json()["id"]


async def test_batch_create_stores_every_item_and_answers_in_request_order(
    harness: Harness,
) -> None:
    items = [
        body(
            harness,
            name=f"reminder-{index}",
            payload={"index": index},
            trigger={"type": "interval", "every_seconds": 60 + index},
        )
        for index in range(50)
    ]

    response = await harness.client.post("/v1/schedules/batch", json={"items": items})

    assert response.status_code == 201, response.text
    created = response.json()["items"]
    assert [s["name"] for s in created] == [f"reminder-{index}" for index in range(50)]
    assert [s["payload"] for s in created] == [{"index": index} for index in range(50)]
    assert all(s["status"] == "pending" and s["next_occurrence_id"] for s in created)
    assert len({s["id"] for s in created}) == 50
    listed = (await harness.get("/v1/schedules?limit=500"))["items"]
    assert {s["id"] for s in listed} == {s["id"] for s in created}
    assert await harness.get(f"/v1/schedules/{created[17]['id']}") == created[17]


async def test_batch_of_a_thousand_items_is_accepted(harness: Harness) -> None:
    items = [body(harness, trigger={"type": "cron", "expression": "@daily"}) for _ in range(1000)]

    response = await harness.client.post("/v1/schedules/batch", json={"items": items})

    assert response.status_code == 201, response.text
    created = response.json()["items"]
    assert len(created) == 1000
    assert await harness.get(f"/v1/schedules/{created[-1]['id']}") == created[-1]


async def _fill_catalogue(harness: Harness) -> set[uuid.UUID]:
    """Two invoice webhooks, a report to RabbitMQ, a cancelled one; returns their ids."""
    cron = {"type": "cron", "expression": "0 9 * * *"}
    made = [
        await harness.create(
            name="a",
            event_type="invoice.due",
            trigger=cron,
            labels={"team": "billing", "env": "prod"},
        ),
        await harness.create(
            name="b",
            event_type="invoice.due",
            trigger=cron,
            labels={"team": "billing", "env": "dev"},
        ),
        await harness.create(
            name="c",
            event_type="report.ready",
            trigger=cron,
            target={"type": "rabbitmq", "exchange": "reports", "routing_key": "daily"},
            labels={"team": "data", "env": "prod", "app.kubernetes.io/name": "web"},
        ),
        await harness.create(
            name="d",
            event_type="report.ready",
            trigger=cron,
            labels={"team": "data", "source": "s3://bucket/key"},
        ),
    ]
    response = await harness.client.delete(f"/v1/schedules/{made[-1]['id']}")
    assert response.status_code == 200, response.text
    return {uuid.UUID(schedule["id"]) for schedule in made}


# The filter cases only read: they share one catalogue per store.
shared_with_broker = shared_harness(amqp_url="amqp://guest:guest@127.0.0.1:5672/")
_CATALOGUES: dict[int, set[uuid.UUID]] = {}


@pytest_asyncio.fixture(loop_scope="module")
async def catalogue(shared_with_broker: Harness) -> Harness:
    """Four schedules to filter: two invoice webhooks, a report to RabbitMQ, a cancelled one.
    Made once per shared harness, and made again whenever its store no longer holds just them
    (the server database is every case's: another one empties it)."""
    harness = shared_with_broker
    async with harness.database.engine.connect() as conn:
        stored = set((await conn.execute(sa.select(schedules.c.id))).scalars())
    if stored != _CATALOGUES.get(id(harness)):
        await fresh(harness)
        _CATALOGUES[id(harness)] = await _fill_catalogue(harness)
    return harness


FILTERS = [
    pytest.param("", ["d", "c", "b", "a"], id="no filter, newest first"),
    pytest.param("status=pending", ["c", "b", "a"], id="status pending"),
    pytest.param("status=cancelled", ["d"], id="status cancelled"),
    pytest.param("event_type=invoice.due", ["b", "a"], id="event type"),
    pytest.param("target_type=rabbitmq", ["c"], id="target type rabbitmq"),
    pytest.param("label=team:billing", ["b", "a"], id="one label"),
    pytest.param("label=team:billing&label=env:prod", ["a"], id="two labels must both match"),
    pytest.param("label=app.kubernetes.io/name:web", ["c"], id="label key with dots and slash"),
    pytest.param("label=source:s3://bucket/key", ["d"], id="label value with colons"),
    pytest.param("name=b", ["b"], id="name"),
    pytest.param("event_type=report.ready&status=pending", ["c"], id="filters combine"),
]


@pytest.mark.parametrize(("query", "names"), FILTERS)
@ON_MODULE_LOOP
async def test_list_filters_select_matching_schedules(
    catalogue: Harness, query: str, names: list[str]
) -> None:
    page = await catalogue.get(f"/v1/schedules?{query}")

    assert [s["name"] for s in page["items"]] == names
    assert page["next_cursor"] is None


async def test_cursor_pagination_visits_every_schedule_once_newest_first(
    harness: Harness,
) -> None:
    created = [(await harness.create(name=f"s{index}"))["id"] for index in range(7)]

    seen: list[str] = []
    sizes: list[int] = []
    url = "/v1/schedules?limit=3"
    while True:
        page = await harness.get(url)
        sizes.append(len(page["items"]))
        seen.extend(s["id"] for s in page["items"])
        if page["next_cursor"] is None:
            break
        url = f"/v1/schedules?limit=3&cursor={page['next_cursor']}"

    assert sizes == [3, 3, 1]
    assert seen == created[::-1]


async def test_page_that_holds_the_last_schedule_has_no_next_cursor(harness: Harness) -> None:
    for index in range(3):
        await harness.create(name=f"s{index}")

    page = await harness.get("/v1/schedules?limit=3")

    assert len(page["items"]) == 3
    assert page["next_cursor"] is None


INVALID_CURSORS = [
    pytest.param("/v1/schedules", "not a cursor!", id="schedules garbage"),
    pytest.param("/v1/schedules", "WyJub3QtYS11dWlkIl0", id="schedules well-formed wrong key"),
    pytest.param("/v1/schedules", "", id="schedules empty"),
    pytest.param("/v1/dead-letters", "bm9wZQ", id="dead letters"),
]


@pytest.mark.parametrize(("path", "cursor"), INVALID_CURSORS)
async def test_invalid_cursor_is_a_client_error(harness: Harness, path: str, cursor: str) -> None:
    response = await harness.client.get(path, params={"cursor": cursor})

    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"].startswith(PROBLEM)


async def test_invalid_cursor_for_a_schedule_history_is_a_client_error(harness: Harness) -> None:
    created = await harness.create()

    response = await harness.client.get(
        f"/v1/schedules/{created['id']}/occurrences", params={"cursor": "bm9wZQ"}
    )

    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"].startswith(PROBLEM)


async def test_patch_changes_payload_labels_and_max_attempts_and_keeps_the_cadence(
    harness: Harness,
) -> None:
    created = await harness.create(
        trigger={"type": "cron", "expression": "0 9 * * *"}, labels={"team": "billing"}
    )
    path = f"/v1/schedules/{created['id']}"

    response = await harness.client.patch(
        path,
        json={
            "payload": {"invoice": 43, "lines": [1, 2]},
            "labels": {"team": "payments", "tier": "gold"},
            "max_attempts": 9,
        },
    )

    assert response.status_code == 200, response.text
    snapshot = await harness.get(path)
    assert response.json() == snapshot
    assert snapshot["payload"] == {"invoice": 43, "lines": [1, 2]}
    assert snapshot["labels"] == {"team": "payments", "tier": "gold"}
    assert snapshot["max_attempts"] == 9
    assert snapshot["trigger"] == created["trigger"]
    assert snapshot["next_fire_at"] == created["next_fire_at"]
    assert snapshot["next_occurrence_id"] == created["next_occurrence_id"]
    assert instant(snapshot["updated_at"]) >= instant(created["updated_at"])


async def test_patched_target_and_payload_are_used_by_the_next_delivery(harness: Harness) -> None:
    created = await harness.create(trigger={"type": "interval", "every_seconds": 3600})

    response = await harness.client.patch(
        f"/v1/schedules/{created['id']}",
        json={"target": harness.webhook("/moved", method="PUT"), "payload": {"v": 2}},
    )
    assert response.status_code == 200, response.text

    assert await harness.step() == 1
    (request,) = harness.receiver.requests
    assert (request.method, request.path, request.body) == ("PUT", "/moved", b'{"v":2}')


NEW_TRIGGERS = [
    pytest.param(
        {"type": "once", "at": "2031-03-01T08:00:00Z"},
        lambda updated: datetime(2031, 3, 1, 8, tzinfo=UTC),
        id="to once at an instant",
    ),
    pytest.param(
        {"type": "cron", "expression": "@hourly"},
        lambda updated: on_grid(EPOCH, timedelta(hours=1), updated),
        id="to another cron",
    ),
    pytest.param(
        {"type": "interval", "every_seconds": 30},
        lambda updated: updated,
        id="to an interval from now",
    ),
]


@pytest.mark.parametrize(("trigger", "expected"), NEW_TRIGGERS)
async def test_patching_the_trigger_recomputes_the_next_occurrence(
    harness: Harness, trigger: dict[str, Any], expected: Callable[[datetime], datetime]
) -> None:
    created = await harness.create(trigger={"type": "cron", "expression": "0 0 1 1 *"})
    path = f"/v1/schedules/{created['id']}"

    response = await harness.client.patch(path, json={"trigger": trigger})

    assert response.status_code == 200, response.text
    snapshot = await harness.get(path)
    assert instant(snapshot["next_fire_at"]) == expected(instant(snapshot["updated_at"]))
    assert snapshot["next_occurrence_id"] not in (None, created["next_occurrence_id"])
    assert snapshot["trigger"]["type"] == trigger["type"]
    pending = [o for o in await harness.occurrences(created["id"]) if o["status"] == "pending"]
    assert [o["occurrence_id"] for o in pending] == [snapshot["next_occurrence_id"]]


async def _cancelled(harness: Harness) -> str:
    created = await harness.create(trigger={"type": "cron", "expression": "@daily"})
    response = await harness.client.delete(f"/v1/schedules/{created['id']}")
    assert response.status_code == 200, response.text
    return str(created["id"])


async def _completed(harness: Harness) -> str:
    created = await harness.create()
    assert await harness.step() == 1
    assert await harness.schedule_status(created["id"]) == "completed"
    return str(created["id"])


@pytest.mark.parametrize(
    ("make_terminal", "patch"),
    [
        (_cancelled, {"payload": {"too": "late"}}),
        (_completed, {"trigger": {"type": "immediate"}}),
    ],
    ids=["cancelled", "completed-new-trigger"],
)
async def test_patch_of_a_finished_schedule_is_a_conflict(
    harness: Harness, make_terminal: Callable[[Harness], Any], patch: dict[str, Any]
) -> None:
    schedule_id = await make_terminal(harness)
    before = await harness.get(f"/v1/schedules/{schedule_id}")

    response = await harness.client.patch(f"/v1/schedules/{schedule_id}", json=patch)

    assert response.status_code == 409, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    assert await harness.get(f"/v1/schedules/{schedule_id}") == before


async def test_delete_cancels_the_schedule_and_its_pending_occurrence(harness: Harness) -> None:
    created = await harness.create(trigger={"type": "interval", "every_seconds": 60})
    path = f"/v1/schedules/{created['id']}"

    response = await harness.client.delete(path)

    assert response.status_code == 200, response.text
    assert response.json()["status"] == "cancelled"
    snapshot = await harness.get(path)
    assert snapshot["status"] == "cancelled"
    assert snapshot["next_fire_at"] is None
    assert snapshot["next_occurrence_id"] is None
    (occurrence,) = await harness.occurrences(created["id"])
    assert occurrence["occurrence_id"] == created["next_occurrence_id"]
    assert occurrence["status"] == "cancelled"
    assert await harness.step() == 0
    assert harness.receiver.requests == []


async def test_delete_is_idempotent(harness: Harness) -> None:
    created = await harness.create(trigger={"type": "once", "delay_seconds": 600})
    path = f"/v1/schedules/{created['id']}"
    first = await harness.client.delete(path)

    second = await harness.client.delete(path)

    assert (first.status_code, second.status_code) == (200, 200)
    assert second.json() == first.json()
    assert (await harness.get(path))["status"] == "cancelled"
    statuses = [o["status"] for o in await harness.occurrences(created["id"])]
    assert statuses == ["cancelled"]


async def test_delete_leaves_a_completed_schedule_completed(harness: Harness) -> None:
    schedule_id = await _completed(harness)
    before = await harness.get(f"/v1/schedules/{schedule_id}")

    response = await harness.client.delete(f"/v1/schedules/{schedule_id}")

    assert response.status_code == 200, response.text
    assert response.json() == before
    assert [o["status"] for o in await harness.occurrences(schedule_id)] == ["delivered"]


async def test_every_store_answers_a_schedule_byte_for_byte_the_same(harness: Harness) -> None:
    """What the databases' JSON types would change (key order, spacing, numbers, text
    beyond ASCII) reads back as it was written; labels come back in key order."""
    payload = '{"zeta":1,"alpha":[1.5,1e-7,12345678901234567890],"ü":"日本","n":null}'
    body = (
        '{"event_type":"bytes.same","payload":' + payload + ","
        '"target":{"type":"webhook","url":"' + harness.receiver.url("/hook") + '"},'
        '"trigger":{"type":"once","delay_seconds":3600},'
        '"labels":{"zone":"b","app":"a","tier":"c"}}'
    )
    created = await harness.client.post(
        "/v1/schedules", content=body, headers={"Content-Type": "application/json"}
    )
    assert created.status_code == 201, created.text
    read = await harness.client.get(created.headers["Location"])

    for response in (created, read):
        text = response.text
        assert '"payload":{"zeta":1,"alpha":[1.5,1e-7,12345678901234567890],' in text, text
        assert '"ü":"日本","n":null}' in text, text
        assert '"labels":{"app":"a","tier":"c","zone":"b"}' in text, text
    fields = [key for key in read.json() if key not in ("created_at", "updated_at")]
    assert fields == [key for key in created.json() if key not in ("created_at", "updated_at")]
