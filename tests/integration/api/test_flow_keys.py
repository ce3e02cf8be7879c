"""Flow keys through the HTTP API: schedules naming a key, and the keys' own resource."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from app.domain.tenants import key_name_or_none
from app.store.schema.tables import occurrences
from tests.integration.conftest import Harness
from tests.receiver import Reply


async def pending_keys(harness: Harness, schedule_id: str) -> list[str | None]:
    async with harness.database.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(occurrences.c.flow_key).where(
                occurrences.c.schedule_id == uuid.UUID(schedule_id),
                occurrences.c.status == "pending",
            )
        )
        # Stored by tenant and name (`app.domain.tenants.stored_key`): the name.
        return [key_name_or_none(row.flow_key) for row in rows]


async def test_a_schedule_names_its_flow_key_and_its_occurrences_carry_it(
    harness: Harness,
) -> None:
    created = await harness.create(
        flow_key="customer-42", trigger={"type": "interval", "every_seconds": 3600}
    )

    assert created["flow_key"] == "customer-42"
    assert (await harness.get(f"/v1/schedules/{created['id']}"))["flow_key"] == "customer-42"
    assert await pending_keys(harness, created["id"]) == ["customer-42"]


async def test_a_schedule_without_a_flow_key_shows_null(harness: Harness) -> None:
    created = await harness.create(trigger={"type": "interval", "every_seconds": 3600})

    assert created["flow_key"] is None
    assert await pending_keys(harness, created["id"]) == [None]


async def test_patching_the_flow_key_moves_the_waiting_occurrence_to_the_new_key(
    harness: Harness,
) -> None:
    created = await harness.create(
        flow_key="customer-42", trigger={"type": "cron", "expression": "0 9 * * *"}
    )
    path = f"/v1/schedules/{created['id']}"

    moved = await harness.client.patch(path, json={"flow_key": "customer-43"})
    assert moved.status_code == 200, moved.text
    assert moved.json()["flow_key"] == "customer-43"
    assert moved.json()["next_occurrence_id"] == created["next_occurrence_id"]
    assert await pending_keys(harness, created["id"]) == ["customer-43"]

    cleared = await harness.client.patch(path, json={"flow_key": None})
    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["flow_key"] is None
    assert await pending_keys(harness, created["id"]) == [None]


async def test_an_occurrence_of_a_keyed_schedule_is_delivered(harness: Harness) -> None:
    created = await harness.create(flow_key="customer-42")

    assert await harness.step() == 1
    assert await harness.schedule_status(created["id"]) == "completed"


# -- the keys' resource ----------------------------------------------------------------


async def test_a_key_is_put_new_then_replaced_under_if_match(harness: Harness) -> None:
    path = "/v1/flow-keys/customer-42"
    created = await harness.client.put(path, json={"rate": 50, "burst": 100, "parallelism": 10})
    assert created.status_code == 201, created.text
    assert created.headers["ETag"] == '"1"'
    body = created.json()
    assert {k: body[k] for k in ("key", "rate", "period_seconds", "burst", "parallelism")} == {
        "key": "customer-42",
        "rate": 50,
        "period_seconds": 1.0,
        "burst": 100,
        "parallelism": 10,
    }
    assert (body["ordering"], body["paused"], body["version"]) == ("none", False, 1)
    assert (body["in_flight"], body["waiting"], body["backoff_until"]) == (0, 0, None)

    replaced = await harness.client.put(
        path, json={"ordering": "fifo"}, headers={"If-Match": '"1"'}
    )
    assert replaced.status_code == 200, replaced.text
    assert replaced.headers["ETag"] == '"2"'
    # A PUT is whole: what it leaves out has no limit.
    assert (replaced.json()["rate"], replaced.json()["ordering"]) == (None, "fifo")

    stale = await harness.client.put(path, json={"rate": 1}, headers={"If-Match": '"1"'})
    assert stale.status_code == 412, stale.text
    assert (await harness.get(path))["ordering"] == "fifo"


async def test_a_key_never_put_answers_with_no_limits_and_its_figures(harness: Harness) -> None:
    await harness.create(flow_key="named-only", trigger={"type": "interval", "every_seconds": 3600})
    response = await harness.client.get("/v1/flow-keys/named-only")
    assert response.status_code == 200, response.text
    assert "ETag" not in response.headers
    body = response.json()
    assert (body["rate"], body["parallelism"], body["version"]) == (None, None, None)
    # Its first tick is due and not started: it waits, though on no limit yet.
    assert (body["in_flight"], body["waiting"]) == (0, 1)


async def test_a_deleted_key_runs_unlimited_and_a_second_delete_is_not_found(
    harness: Harness,
) -> None:
    await harness.client.put("/v1/flow-keys/k1", json={"paused": True})
    created = await harness.create(flow_key="k1")
    assert await harness.step() == 0, "a paused key started something"
    waiting = await harness.get("/v1/flow-keys/k1")
    assert waiting["waiting"] == 1

    stale = await harness.client.delete("/v1/flow-keys/k1", headers={"If-Match": '"7"'})
    assert stale.status_code == 412, stale.text
    gone = await harness.client.delete("/v1/flow-keys/k1")
    assert gone.status_code == 204, gone.text
    assert await harness.step() == 1
    assert await harness.schedule_status(created["id"]) == "completed"
    again = await harness.client.delete("/v1/flow-keys/k1")
    assert again.status_code == 404, again.text


async def test_the_list_pages_through_every_key_in_name_order(harness: Harness) -> None:
    for key in ("c", "a", "b"):
        assert (await harness.client.put(f"/v1/flow-keys/{key}", json={})).status_code == 201
    await harness.create(flow_key="d", trigger={"type": "interval", "every_seconds": 3600})

    first = await harness.get("/v1/flow-keys?limit=2")
    assert [k["key"] for k in first["items"]] == ["a", "b"]
    rest = await harness.get(f"/v1/flow-keys?limit=2&cursor={first['next_cursor']}")
    assert [k["key"] for k in rest["items"]] == ["c", "d"]
    assert rest["next_cursor"] is None


async def test_parallelism_holds_through_the_api_and_the_loop(harness: Harness) -> None:
    await harness.client.put("/v1/flow-keys/one-at-a-time", json={"parallelism": 1})
    harness.receiver.script("/hook", *(Reply(delay=0.2) for _ in range(3)))
    for _ in range(3):
        await harness.create(flow_key="one-at-a-time")
    # All three are due: the step delivers them one after another, each once the one
    # before it has been answered.
    assert await harness.step() == 3
    arrivals = [r.at for r in harness.receiver.requests]
    assert all(later - earlier >= 0.2 for earlier, later in itertools.pairwise(arrivals))
    assert await harness.step() == 0


async def test_a_429_with_retry_after_holds_every_occurrence_of_the_key(harness: Harness) -> None:
    harness.receiver.script("/busy", Reply(429, headers={"Retry-After": "120"}))
    await harness.client.put("/v1/flow-keys/busy-customer", json={"parallelism": 1})
    # Its policy waits up to 600 s, so the 120 s asked for is honoured whole.
    first = await harness.create(
        flow_key="busy-customer", target=harness.webhook("/busy"), retry={"max_delay_seconds": 600}
    )
    assert await harness.step() == 1

    # Another schedule on the key waits too, though its own target never answered; an
    # unkeyed one goes out.
    other = await harness.create(flow_key="busy-customer", target=harness.webhook("/busy"))
    unkeyed = await harness.create(target=harness.webhook("/free"))
    assert await harness.step() == 1
    assert [r.path for r in harness.receiver.requests] == ["/busy", "/free"]
    key = await harness.get("/v1/flow-keys/busy-customer")
    assert key["backoff_until"] is not None
    assert key["waiting"] == 1
    assert await harness.schedule_status(unkeyed["id"]) == "completed"
    assert await harness.schedule_status(other["id"]) == "pending"  # not fired yet
    assert await harness.schedule_status(first["id"]) == "pending"  # its retry waits too


async def test_a_huge_retry_after_holds_the_key_no_longer_than_the_schedules_most_delay(
    make_harness: Any,
) -> None:
    # A step's writes read its instant, from before its deliveries: delays of a few
    # seconds, so that what the step wrote is still ahead when the case reads it.
    async with make_harness(retry_max_delay=2.0) as harness:
        await _a_huge_retry_after_is_capped(harness)


async def _a_huge_retry_after_is_capped(harness: Harness) -> None:
    # A receiver that asks for 31 years, every time.
    harness.receiver.always("/flood", Reply(429, headers={"Retry-After": "999999999"}))
    created = await harness.create(
        flow_key="asking",
        target=harness.webhook("/flood"),
        retry={"base_delay_seconds": 0.2, "max_delay_seconds": 2, "jitter": False},
    )
    started = datetime.now(UTC)
    assert await harness.step() == 1
    key = await harness.get("/v1/flow-keys/asking")
    until = datetime.fromisoformat(key["backoff_until"])
    assert until - started < timedelta(seconds=3), until
    occurrence, *_ = await harness.occurrences(created["id"])
    assert datetime.fromisoformat(occurrence["available_at"]) - started < timedelta(seconds=3)

    # So the key and its retry come round within the schedule's most delay (2 s).
    async def asked_again() -> bool:
        return len(harness.receiver.on("/flood")) >= 2

    await harness.step_until(asked_again, timeout=15)
    # Without a policy of its own, the service's most (CHRONOQ_RETRY_MAX_DELAY, 2 s here).
    other = await harness.create(flow_key="asking-too", target=harness.webhook("/flood"))
    started = datetime.now(UTC)
    assert await harness.step() >= 1
    key = await harness.get("/v1/flow-keys/asking-too")
    assert datetime.fromisoformat(key["backoff_until"]) - started < timedelta(seconds=3)
    assert await harness.schedule_status(other["id"]) == "pending"


async def backed_off(harness: Harness, key: str) -> dict[str, Any]:
    """A key its destination asked to wait 20 minutes (429, Retry-After), with another
    schedule on it waiting: the key as the API then answers it."""
    harness.receiver.script("/busy", Reply(429, headers={"Retry-After": "1200"}))
    await harness.create(
        flow_key=key, target=harness.webhook("/busy"), retry={"max_delay_seconds": 3600}
    )
    assert await harness.step() == 1
    await harness.create(flow_key=key, target=harness.webhook("/free"))
    assert await harness.step() == 0
    found = await harness.get(f"/v1/flow-keys/{key}")
    assert found["backoff_until"] is not None
    return found


async def test_clear_backoff_ends_a_destinations_back_off_and_keeps_the_limits(
    harness: Harness,
) -> None:
    put = await harness.client.put("/v1/flow-keys/busy", json={"parallelism": 3})
    assert put.status_code == 201, put.text
    before = await backed_off(harness, "busy")

    response = await harness.client.post("/v1/flow-keys/busy/clear-backoff")
    assert response.status_code == 200, response.text
    cleared = response.json()
    assert cleared["backoff_until"] is None
    assert response.headers["ETag"] == '"1"'
    assert {k: v for k, v in cleared.items() if k not in ("backoff_until", "updated_at")} == {
        k: v for k, v in before.items() if k not in ("backoff_until", "updated_at")
    }
    # What waited on the key goes out now, not in 20 minutes.
    assert await harness.step() == 1
    assert [r.path for r in harness.receiver.requests] == ["/busy", "/free"]


async def test_clear_backoff_of_a_key_without_one_answers_it_as_it_is(harness: Harness) -> None:
    response = await harness.client.post("/v1/flow-keys/never-put/clear-backoff")
    assert response.status_code == 200, response.text
    assert response.json() == await harness.get("/v1/flow-keys/never-put")
    assert response.json()["version"] is None

    refused = await harness.client.post("/v1/flow-keys/not%20a%20key/clear-backoff")
    assert refused.status_code == 422, refused.text


async def test_schedules_filter_by_flow_key_and_the_key_lists_what_waits_on_it(
    harness: Harness,
) -> None:
    await harness.client.put("/v1/flow-keys/customer-42", json={"paused": True})
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    keyed = [
        await harness.create(flow_key="customer-42", trigger={"type": "once", "at": later})
        for _ in range(3)
    ]
    await harness.create(flow_key="customer-43")
    await harness.create()

    listed = await harness.get("/v1/schedules?flow_key=customer-42&limit=2")
    rest = await harness.get(f"/v1/schedules?flow_key=customer-42&cursor={listed['next_cursor']}")
    found = [s["id"] for s in listed["items"] + rest["items"]]
    assert found == [s["id"] for s in reversed(keyed)], "newest first, no other key's"
    assert rest["next_cursor"] is None

    # What waits on the key: pending, in fire order, paged; due or not, held or not.
    first = await harness.get("/v1/flow-keys/customer-42/occurrences?limit=2")
    more = await harness.get(f"/v1/flow-keys/customer-42/occurrences?cursor={first['next_cursor']}")
    waiting = first["items"] + more["items"]
    assert sorted(o["occurrence_id"] for o in waiting) == sorted(
        s["next_occurrence_id"] for s in keyed
    )
    assert [(o["fire_at"], o["occurrence_id"]) for o in waiting] == sorted(
        (o["fire_at"], o["occurrence_id"]) for o in waiting
    )
    assert {o["status"] for o in waiting} == {"pending"}
    assert (await harness.get("/v1/flow-keys/nobody/occurrences"))["items"] == []


async def test_a_flow_key_filter_that_is_no_key_is_refused_naming_it(harness: Harness) -> None:
    for bad in ("a b", "x" * 129, "", "café"):
        answer = await harness.client.get("/v1/schedules", params={"flow_key": bad})
        assert answer.status_code == 422, (bad, answer.text)
        assert "flow_key" in answer.text
    cursor = await harness.client.get("/v1/flow-keys/k/occurrences", params={"cursor": "nope"})
    assert cursor.status_code == 422
