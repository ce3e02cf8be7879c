"""/v1/topics and /v1/subscriptions: put, read, listed, changed, removed; what they refuse
(a subscription to a missing topic or endpoint, a glob or a match that is not valid), each a
4xx naming the field with nothing stored; and what a removal waits for."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.integration.conftest import ON_MODULE_LOOP, Harness

pytestmark = ON_MODULE_LOOP


async def _endpoint(harness: Harness) -> str:
    made = await harness.client.post("/v1/endpoints", json={"url": harness.receiver.url("/t")})
    assert made.status_code == 201, made.text
    endpoint_id: str = made.json()["id"]
    return endpoint_id


async def test_topics_and_subscriptions_are_made_read_changed_and_removed(shared: Harness) -> None:
    put = await shared.client.put("/v1/topics/billing", json={"description": "Billing"})
    assert (put.status_code, put.headers["ETag"]) == (201, '"1"')
    again = await shared.client.put(
        "/v1/topics/billing", json={"description": "Bills"}, headers={"If-Match": '"1"'}
    )
    assert (again.status_code, again.json()["version"]) == (200, 2)
    endpoint = await _endpoint(shared)
    made = await shared.client.post(
        "/v1/subscriptions",
        json={"topic": "billing", "endpoint_id": endpoint, "event_types": ["invoice.*"]},
    )
    assert made.status_code == 201, made.text
    subscription = made.json()
    assert (await shared.get("/v1/topics/billing"))["subscriptions"] == 1
    listed = await shared.get("/v1/subscriptions?topic=billing")
    assert [s["id"] for s in listed["items"]] == [subscription["id"]]
    stale = await shared.client.patch(
        f"/v1/subscriptions/{subscription['id']}",
        json={"match": {"region": "eu"}},
        headers={"If-Match": '"7"'},
    )
    assert stale.status_code == 412, stale.text
    changed = await shared.client.patch(
        f"/v1/subscriptions/{subscription['id']}",
        json={"match": {"region": "eu"}, "event_types": None},
    )
    assert changed.status_code == 200, changed.text
    assert (changed.json()["match"], changed.json()["event_types"]) == ({"region": "eu"}, None)
    # The endpoint is named by a subscription: it stays until the subscription goes.
    refused = await shared.client.delete(f"/v1/endpoints/{endpoint}")
    assert refused.status_code == 409, refused.text
    assert subscription["id"] in refused.json()["detail"]
    # The topic is targeted by a live schedule: it stays until the schedule ends.
    schedule = await shared.create(
        target={"type": "topic", "topic": "billing"}, trigger={"type": "once", "delay_seconds": 600}
    )
    assert schedule["target"] == {"type": "topic", "topic": "billing"}
    refused = await shared.client.delete("/v1/topics/billing")
    assert refused.status_code == 409, refused.text
    await shared.client.delete(f"/v1/schedules/{schedule['id']}")
    assert (await shared.client.delete("/v1/topics/billing")).status_code == 204
    assert (await shared.client.get(f"/v1/subscriptions/{subscription['id']}")).status_code == 404
    assert (await shared.client.delete(f"/v1/endpoints/{endpoint}")).status_code == 204


async def test_bad_subscriptions_and_topic_targets_are_refused_naming_the_field(
    shared: Harness,
) -> None:
    await shared.client.put("/v1/topics/billing", json={})
    endpoint = await _endpoint(shared)
    missing = "00000000-0000-7000-8000-000000000000"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"topic": "nope", "endpoint_id": endpoint}, "#/topic"),
        ({"topic": "billing", "endpoint_id": missing}, "#/endpoint_id"),
        (
            {"topic": "billing", "endpoint_id": endpoint, "event_types": ["in[voice"]},
            "#/event_types",
        ),
        ({"topic": "billing", "endpoint_id": endpoint, "event_types": []}, "#/event_types"),
        ({"topic": "billing", "endpoint_id": endpoint, "match": {"a": {"b": 1}}}, "#/match"),
        ({"topic": "billing", "endpoint_id": endpoint, "match": {"a": []}}, "#/match"),
        ({"topic": "bad topic", "endpoint_id": endpoint}, "#/topic"),
    ]
    for body, pointer in cases:
        refused = await shared.client.post("/v1/subscriptions", json=body)
        assert refused.status_code == 422, (body, refused.text)
        pointers = [error["pointer"] for error in refused.json()["errors"]]
        assert any(p.startswith(pointer) for p in pointers), (body, pointers)
    assert (await shared.get("/v1/subscriptions"))["items"] == []
    refused = await shared.client.post(
        "/v1/schedules",
        json={
            "event_type": "e",
            "target": {"type": "topic", "topic": "nope"},
            "trigger": {"type": "immediate"},
        },
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["pointer"] == "#/target/topic"
    assert (await shared.get("/v1/schedules"))["items"] == []


async def test_concurrent_puts_of_a_new_topic_and_names_of_endpoints_never_fail_the_server(
    shared: Harness,
) -> None:
    answers = await asyncio.gather(
        *(shared.client.put("/v1/topics/race", json={}) for _ in range(6))
    )
    statuses = sorted(a.status_code for a in answers)
    assert set(statuses) <= {200, 201, 409}, [a.text for a in answers]
    assert statuses.count(201) == 1, statuses
    made = await asyncio.gather(
        *(
            shared.client.post(
                "/v1/endpoints", json={"name": "same", "url": shared.receiver.url("/x")}
            )
            for _ in range(6)
        )
    )
    assert sorted(m.status_code for m in made).count(201) == 1, [m.text for m in made]
    assert {m.status_code for m in made} <= {201, 409}
