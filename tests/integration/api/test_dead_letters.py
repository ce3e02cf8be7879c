"""Dead letters as their own resource: list, inspect, replay one or many, discard."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from tests.conftest import ALL_STORES, STORES
from tests.integration.conftest import Harness
from tests.receiver import Reply


async def _dead_letter(harness: Harness, path: str = "/fail", **spec: Any) -> dict[str, Any]:
    harness.receiver.always(path, Reply(410))
    created = await harness.create(target=harness.webhook(path), **spec)
    await harness.step()
    return created


async def test_dead_letters_list_most_recent_first_with_filters(harness: Harness) -> None:
    first = await _dead_letter(harness, event_type="a.one")
    second = await _dead_letter(harness, event_type="b.two")

    listed = (await harness.get("/v1/dead-letters"))["items"]
    assert [d["schedule_id"] for d in listed] == [second["id"], first["id"]]

    by_schedule = (await harness.get(f"/v1/dead-letters?schedule_id={first['id']}"))["items"]
    assert [d["schedule_id"] for d in by_schedule] == [first["id"]]
    by_type = (await harness.get("/v1/dead-letters?event_type=b.two"))["items"]
    assert [d["schedule_id"] for d in by_type] == [second["id"]]


async def test_dead_letters_paginate(harness: Harness) -> None:
    for _ in range(5):
        await _dead_letter(harness)
    seen: list[str] = []
    cursor = None
    while True:
        query = "?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = await harness.get(f"/v1/dead-letters{query}")
        seen += [d["occurrence_id"] for d in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 5


async def test_a_dead_letter_shows_what_it_would_have_delivered(harness: Harness) -> None:
    created = await _dead_letter(harness, payload={"order": 42}, event_type="order.paid")

    detail = await harness.get(f"/v1/dead-letters/{created['next_occurrence_id']}")

    assert detail["payload"] == {"order": 42}
    assert detail["event_type"] == "order.paid"
    assert detail["target"]["url"].endswith("/fail")
    assert detail["attempts"] == 1
    assert detail["last_error"].startswith("HTTP 410")
    assert detail["dead_lettered_at"] is not None


async def test_replay_delivers_the_same_occurrence_id_with_attempts_reset(
    harness: Harness,
) -> None:
    created = await _dead_letter(harness)
    occurrence_id = created["next_occurrence_id"]
    harness.receiver.always("/fail", Reply(200))

    response = await harness.client.post(f"/v1/dead-letters/{occurrence_id}/replay")

    assert response.status_code == 202
    assert await harness.step() == 1
    replayed = harness.receiver.requests[-1]
    assert replayed.occurrence_id == occurrence_id
    assert replayed.headers["X-Attempt"] == "1"
    assert await harness.schedule_status(created["id"]) == "completed"
    assert (await harness.get("/v1/dead-letters"))["items"] == []


async def test_replaying_what_is_not_dead_lettered_is_a_conflict(harness: Harness) -> None:
    created = await harness.create()
    await harness.step()

    response = await harness.client.post(f"/v1/dead-letters/{created['next_occurrence_id']}/replay")

    assert response.status_code == 409
    missing = await harness.client.get(f"/v1/dead-letters/{created['next_occurrence_id']}")
    assert missing.status_code == 404


@ALL_STORES
async def test_bulk_replay_by_ids_and_by_filter(harness: Harness) -> None:
    a = await _dead_letter(harness, event_type="kind.a")
    b = await _dead_letter(harness, event_type="kind.a")
    c = await _dead_letter(harness, event_type="kind.c")
    harness.receiver.always("/fail", Reply(200))

    by_ids = await harness.client.post(
        "/v1/dead-letters/replay", json={"occurrence_ids": [a["next_occurrence_id"]]}
    )
    assert by_ids.status_code == 202
    assert by_ids.json()["replayed"] == 1

    by_filter = await harness.client.post("/v1/dead-letters/replay", json={"event_type": "kind.a"})
    assert by_filter.json()["occurrence_ids"] == [b["next_occurrence_id"]]

    remaining = (await harness.get("/v1/dead-letters"))["items"]
    assert [d["occurrence_id"] for d in remaining] == [c["next_occurrence_id"]]


# More than PostgreSQL binds in one statement (32,767 parameters).
MANY_DEAD_LETTERS = 33_000


@pytest.mark.parametrize("database_url", STORES[1:2], indirect=True)
async def test_a_replay_by_filter_replays_more_dead_letters_than_a_statement_binds(
    harness: Harness,
) -> None:
    created = await _dead_letter(harness, event_type="bulk.replay")
    first = created["next_occurrence_id"]

    async def dead_letter_many(conn: AsyncConnection) -> None:
        await conn.execute(
            sa.text(
                "INSERT INTO occurrences (occurrence_id, schedule_id, fire_at, status, origin,"
                " attempts, last_error, dead_lettered_at, created_at, updated_at)"
                " SELECT gen_random_uuid(), :schedule_id, now() - n * interval '1 second',"
                " 'dead_lettered', 'trigger', 1, 'HTTP 410', now(), now(), now()"
                " FROM generate_series(1, :count) AS n"
            ),
            {"schedule_id": created["id"], "count": MANY_DEAD_LETTERS},
        )

    await harness.database.run(dead_letter_many)

    response = await harness.client.post(
        "/v1/dead-letters/replay", json={"event_type": "bulk.replay"}
    )

    assert response.status_code == 202, response.text
    body = response.json()
    assert body["replayed"] == MANY_DEAD_LETTERS + 1
    # A bounded sample of the ids, the longest dead first: the harness's own came first.
    assert len(body["occurrence_ids"]) == 1000
    assert body["occurrence_ids"][0] == first
    assert len(response.content) < 64 * 1024
    assert (await harness.get("/v1/dead-letters?event_type=bulk.replay"))["items"] == []

    async def pending(conn: AsyncConnection) -> int:
        statement = sa.text(
            "SELECT count(*) FROM occurrences WHERE schedule_id = :id AND status = 'pending'"
            " AND attempts = 0 AND available_at IS NOT NULL"
        )
        return int((await conn.execute(statement, {"id": created["id"]})).scalar_one())

    assert await harness.database.run(pending) == MANY_DEAD_LETTERS + 1
    # One audit event for the schedule and the call, however many transactions it took.
    events = (await harness.get(f"/v1/schedules/{created['id']}/events?limit=500"))["items"]
    assert [e["kind"] for e in events].count("dead_letter_replayed") == 1


async def test_bulk_replay_without_ids_or_filters_is_refused(harness: Harness) -> None:
    await _dead_letter(harness)

    response = await harness.client.post("/v1/dead-letters/replay", json={})

    assert response.status_code == 422
    assert len((await harness.get("/v1/dead-letters"))["items"]) == 1


@ALL_STORES
async def test_discard_removes_a_dead_letter_for_good(harness: Harness) -> None:
    created = await _dead_letter(harness)
    occurrence_id = created["next_occurrence_id"]

    response = await harness.client.delete(f"/v1/dead-letters/{occurrence_id}")

    assert response.status_code == 204
    assert (await harness.get("/v1/dead-letters"))["items"] == []
    (occurrence,) = await harness.occurrences(created["id"])
    assert occurrence["status"] == "cancelled"
    again = await harness.client.delete(f"/v1/dead-letters/{occurrence_id}")
    assert again.status_code == 409


async def test_a_recurring_schedule_keeps_running_after_a_dead_letter(harness: Harness) -> None:
    harness.receiver.always("/fail", Reply(400))
    created = await harness.create(
        target=harness.webhook("/fail"), trigger={"type": "interval", "every_seconds": 3600}
    )

    await harness.step()

    snapshot = await harness.get(f"/v1/schedules/{created['id']}")
    assert snapshot["status"] == "pending"
    assert snapshot["next_fire_at"] > created["next_fire_at"]


async def test_a_failed_schedule_can_be_repointed_and_its_dead_letter_replayed(
    harness: Harness,
) -> None:
    created = await _dead_letter(harness, path="/broken")
    assert await harness.schedule_status(created["id"]) == "failed"

    patched = await harness.client.patch(
        f"/v1/schedules/{created['id']}", json={"target": harness.webhook("/fixed")}
    )
    assert patched.status_code == 200, patched.text
    await harness.client.post(f"/v1/dead-letters/{created['next_occurrence_id']}/replay")
    assert await harness.step() == 1

    (request,) = harness.receiver.on("/fixed")
    assert request.occurrence_id == created["next_occurrence_id"]
    assert await harness.schedule_status(created["id"]) == "completed"


async def test_a_replay_keeps_the_snapshot_s_last_error_in_the_api_and_the_console(
    harness: Harness,
) -> None:
    created = await harness.failing(Reply(503, body="busy"))
    path = f"/v1/schedules/{created['id']}"
    (dead,) = (await harness.get("/v1/dead-letters"))["items"]

    replayed = await harness.client.post(f"/v1/dead-letters/{dead['occurrence_id']}/replay")
    assert replayed.status_code == 202, replayed.text

    snapshot = await harness.get(path)
    assert (snapshot["attempts"], snapshot["last_error"]) == (0, "HTTP 503: busy")
    page = (await harness.client.get(f"/ui/schedules/{created['id']}")).text
    assert '<dt>Last error</dt><dd class="error-text">HTTP 503: busy</dd>' in page
    harness.receiver.always("/broken", Reply(200))
    assert await harness.step() == 1
    delivered = await harness.get(path)
    assert (delivered["attempts"], delivered["last_error"]) == (1, None)
