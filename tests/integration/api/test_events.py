"""A schedule's audit events through the HTTP API: each change, its version and its actor."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.integration.api.test_auth import KEYS, WRITER, bearer
from tests.integration.conftest import Harness
from tests.receiver import Reply

HOUR = {"type": "once", "delay_seconds": 3600}


async def events(harness: Harness, schedule_id: str, **headers: str) -> list[dict[str, Any]]:
    response = await harness.client.get(
        f"/v1/schedules/{schedule_id}/events?limit=500", headers=headers
    )
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def kinds(items: list[dict[str, Any]]) -> list[tuple[str, int, str | None]]:
    return [(e["kind"], e["version"], e["actor"]) for e in items]


async def ok(harness: Harness, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    response = await harness.client.request(method, path, **kwargs)
    assert response.status_code in (200, 201, 202), response.text
    result: dict[str, Any] = response.json()
    return result


async def test_every_change_is_an_event_at_its_new_version_with_no_actor_without_keys(
    harness: Harness,
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    since = (now - timedelta(hours=5)).isoformat()
    created = await harness.create(
        trigger={"type": "interval", "every_seconds": 3600, "start_at": since}
    )
    path = f"/v1/schedules/{created['id']}"
    start = (now - timedelta(hours=3, minutes=30)).isoformat()
    end = (now - timedelta(hours=1, minutes=30)).isoformat()

    await ok(harness, "PATCH", path, json={"labels": {"team": "ops"}, "max_attempts": 7})
    await ok(harness, "POST", f"{path}/pause")
    await ok(harness, "POST", f"{path}/pause")  # already paused: no change, no event
    await ok(harness, "POST", f"{path}/resume")
    await ok(harness, "POST", f"{path}/trigger")
    await ok(harness, "POST", f"{path}/backfill", json={"from": start, "to": end})
    await ok(harness, "DELETE", path)
    final = await ok(harness, "DELETE", path)  # already cancelled: no change, no event

    items = await events(harness, created["id"])
    assert kinds(items) == [
        ("created", 1, None),
        ("updated", 2, None),
        ("paused", 3, None),
        ("resumed", 4, None),
        ("triggered", 5, None),
        ("backfilled", 6, None),
        ("cancelled", 7, None),
    ]
    assert final["version"] == 7
    assert items[1]["fields"] == ["labels", "max_attempts"]
    assert all(e["fields"] is None for e in items if e["kind"] != "updated")
    assert [e["id"] for e in items] == sorted(e["id"] for e in items)
    assert all(
        datetime.fromisoformat(e["at"]) >= datetime.fromisoformat(created["created_at"])
        for e in items
    )


async def test_the_actor_is_the_api_keys_name(make_harness: Callable[..., Any]) -> None:
    auth = bearer(WRITER)
    async with make_harness(api_keys=KEYS) as h:
        response = await h.client.post(
            "/v1/schedules",
            json={"event_type": "e", "target": h.webhook(), "trigger": HOUR},
            headers=auth,
        )
        path = f"/v1/schedules/{response.json()['id']}"
        await ok(h, "PATCH", path, json={"payload": {"n": 2}}, headers=auth)
        await ok(h, "POST", f"{path}/pause", headers=auth)
        await ok(h, "POST", f"{path}/resume", headers=auth)
        await ok(h, "POST", f"{path}/trigger", headers=auth)
        await ok(h, "DELETE", path, headers=auth)

        items = await events(h, response.json()["id"], **auth)

    assert kinds(items) == [
        ("created", 1, "deploy-bot"),
        ("updated", 2, "deploy-bot"),
        ("paused", 3, "deploy-bot"),
        ("resumed", 4, "deploy-bot"),
        ("triggered", 5, "deploy-bot"),
        ("cancelled", 6, "deploy-bot"),
    ]
    assert items[1]["fields"] == ["payload"]


async def test_dead_letter_replays_and_discards_name_the_api_key(
    make_harness: Callable[..., Any],
) -> None:
    auth = bearer(WRITER)
    async with make_harness(api_keys=KEYS) as h:
        h.receiver.always("/gone", Reply(410))
        created = []
        for _ in range(3):
            response = await h.client.post(
                "/v1/schedules",
                json={
                    "event_type": "e",
                    "target": h.webhook("/gone"),
                    "trigger": {"type": "immediate"},
                },
                headers=auth,
            )
            created.append(response.json())
        await h.step()
        first, second, third = created
        await ok(h, "POST", f"/v1/dead-letters/{first['next_occurrence_id']}/replay", headers=auth)
        await ok(
            h, "POST", "/v1/dead-letters/replay", json={"schedule_id": second["id"]}, headers=auth
        )
        discarded = await h.client.delete(
            f"/v1/dead-letters/{third['next_occurrence_id']}", headers=auth
        )
        assert discarded.status_code == 204

        last = [kinds(await events(h, c["id"], **auth))[-1] for c in created]

    assert last == [
        ("dead_letter_replayed", 1, "deploy-bot"),
        ("dead_letter_replayed", 1, "deploy-bot"),
        ("dead_letter_discarded", 1, "deploy-bot"),
    ]


async def test_updated_names_only_the_fields_whose_value_changed(harness: Harness) -> None:
    created = await harness.create(trigger=HOUR, labels={"a": "1"}, max_attempts=3)
    path = f"/v1/schedules/{created['id']}"

    await ok(harness, "PATCH", path, json={"labels": {"a": "1"}, "max_attempts": 4})
    await ok(harness, "PATCH", path, json={"pause_after_failures": 5, "jitter_seconds": 0})

    updates = [e for e in await events(harness, created["id"]) if e["kind"] == "updated"]
    assert [(e["version"], e["fields"]) for e in updates] == [
        (2, ["max_attempts"]),
        (3, ["pause_after_failures"]),
    ]


async def test_each_item_of_a_batch_is_created_and_an_idempotent_replay_writes_nothing(
    harness: Harness,
) -> None:
    body = {"event_type": "e", "target": harness.webhook(), "trigger": HOUR}
    batch = await ok(harness, "POST", "/v1/schedules/batch", json={"items": [body, body]})
    key = {"Idempotency-Key": "order-7"}
    first = await harness.client.post("/v1/schedules", json=body, headers=key)
    again = await harness.client.post("/v1/schedules", json=body, headers=key)

    assert again.status_code == 200
    for schedule in [*batch["items"], first.json()]:
        assert kinds(await events(harness, schedule["id"])) == [("created", 1, None)]


async def test_the_loop_completes_and_fails_one_shots_as_system(harness: Harness) -> None:
    harness.receiver.always("/gone", Reply(410))
    delivered = await harness.create()
    failed = await harness.create(target=harness.webhook("/gone"))

    await harness.step()

    assert kinds(await events(harness, delivered["id"])) == [
        ("created", 1, None),
        ("completed", 1, "system"),
    ]
    assert kinds(await events(harness, failed["id"])) == [
        ("created", 1, None),
        ("failed", 1, "system"),
    ]


async def test_a_replayed_dead_letter_that_delivers_completes_the_failed_schedule(
    harness: Harness,
) -> None:
    harness.receiver.script("/flaky", Reply(410))
    failed = await harness.create(target=harness.webhook("/flaky"))
    await harness.step()

    replay = await harness.client.post(f"/v1/dead-letters/{failed['next_occurrence_id']}/replay")
    assert replay.status_code == 202
    await harness.step()

    assert kinds(await events(harness, failed["id"])) == [
        ("created", 1, None),
        ("failed", 1, "system"),
        ("dead_letter_replayed", 1, None),
        ("completed", 1, "system"),
    ]


async def test_replaying_many_writes_one_event_per_schedule_and_a_discard_its_own(
    harness: Harness,
) -> None:
    harness.receiver.always("/gone", Reply(410))
    created = await harness.create(target=harness.webhook("/gone"), trigger=HOUR)
    path = f"/v1/schedules/{created['id']}"
    for _ in range(2):
        await ok(harness, "POST", f"{path}/trigger")
    await harness.step()
    other = await harness.create(target=harness.webhook("/gone"))
    await harness.step()

    replayed = await ok(
        harness, "POST", "/v1/dead-letters/replay", json={"schedule_id": created["id"]}
    )
    assert replayed["replayed"] == 2
    discarded = await harness.client.delete(f"/v1/dead-letters/{other['next_occurrence_id']}")
    assert discarded.status_code == 204

    assert kinds(await events(harness, created["id"]))[-1:] == [("dead_letter_replayed", 3, None)]
    assert [k for k, _, _ in kinds(await events(harness, created["id"]))].count(
        "dead_letter_replayed"
    ) == 1
    assert kinds(await events(harness, other["id"]))[-1:] == [("dead_letter_discarded", 1, None)]


async def test_events_are_oldest_first_and_paginate(harness: Harness) -> None:
    created = await harness.create(trigger=HOUR)
    path = f"/v1/schedules/{created['id']}"
    for n in range(5):
        await ok(harness, "PATCH", path, json={"payload": {"n": n + 10}})

    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = "?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = await harness.get(f"{path}/events{query}")
        assert len(page["items"]) <= 2
        seen += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert [e["version"] for e in seen] == [1, 2, 3, 4, 5, 6]
    assert [e["kind"] for e in seen] == ["created"] + ["updated"] * 5
    assert set(seen[0]) == {"id", "kind", "at", "version", "actor", "fields"}


async def test_events_of_an_unknown_schedule_are_404(harness: Harness) -> None:
    response = await harness.client.get(f"/v1/schedules/{uuid.uuid4()}/events")

    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_a_tampered_events_cursor_is_422(harness: Harness) -> None:
    created = await harness.create(trigger=HOUR)

    response = await harness.client.get(f"/v1/schedules/{created['id']}/events?cursor=nope")

    assert response.status_code == 422
