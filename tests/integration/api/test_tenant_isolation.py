"""Isolation between tenants, on every operation of the API (DESIGN section 14): acting in
another tenant, a tenant's schedule, occurrence, dead letter or flow key is one that does not
exist, answered exactly as a missing one is; its lists, filters and replays by filter reach
none of them; and nothing of it changes.

The operations are read from the served OpenAPI document, so that a route added later is
tried too: each is called in tenant `acme` twice, once naming the default tenant's
resources and once naming ones that exist nowhere, and the two answers must be the same
but for the ids named."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from tests.integration.conftest import Harness
from tests.receiver import Reply

ACME = {"Chronoq-Tenant": "acme"}
# Operations that manage tenants rather than act in one (/v1/tenants), and those that
# reach no stored resource.
NOT_IN_A_TENANT = ("/v1/tenants", "/v1/triggers")


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if path.startswith("/v1/") and not path.startswith(NOT_IN_A_TENANT)
    ]


def _body(operation: dict[str, Any]) -> Any:
    body = operation.get("requestBody")
    if body is None:
        return None
    examples = body["content"]["application/json"]["examples"]
    return next(iter(examples.values()))["value"]


def _filled(text: Any, names: dict[str, str]) -> Any:
    """`text` (a path, or a body's JSON) with each `{placeholder}` as `names` says."""
    if isinstance(text, str):
        for name, value in names.items():
            text = text.replace("{" + name + "}", value)
        return text
    if isinstance(text, dict):
        return {key: _filled(value, names) for key, value in text.items()}
    if isinstance(text, list):
        return [_filled(value, names) for value in text]
    return text


async def _defaults_resources(harness: Harness) -> dict[str, str]:
    """A schedule of the default tenant with a flow key and limits on it, and a dead letter
    of it: their ids, by the names the document's paths give them."""
    harness.receiver.always("/broken", Reply(503))
    created = await harness.create(
        target=harness.webhook("/broken"),
        trigger={"type": "interval", "every_seconds": 3600},
        max_attempts=1,
        flow_key="shared-key",
        name="nightly",
    )
    assert await harness.step() == 1
    response = await harness.client.put("/v1/flow-keys/shared-key", json={"rate": 5})
    assert response.status_code == 201, response.text
    dead = await harness.get(f"/v1/dead-letters?schedule_id={created['id']}")
    (letter,) = dead["items"]
    endpoint = await harness.client.post("/v1/endpoints", json={"url": harness.receiver.url()})
    assert endpoint.status_code == 201, endpoint.text
    assert (await harness.client.put("/v1/topics/shared-topic", json={})).status_code == 201
    subscription = await harness.client.post(
        "/v1/subscriptions", json={"topic": "shared-topic", "endpoint_id": endpoint.json()["id"]}
    )
    assert subscription.status_code == 201, subscription.text
    return {
        "schedule_id": created["id"],
        "occurrence_id": letter["occurrence_id"],
        "key": "shared-key",
        "endpoint_id": endpoint.json()["id"],
        "topic": "shared-topic",
        "subscription_id": subscription.json()["id"],
    }


def _missing() -> dict[str, str]:
    return {
        "schedule_id": str(uuid.uuid4()),
        "occurrence_id": str(uuid.uuid4()),
        "key": "no-such-key",
        "endpoint_id": str(uuid.uuid4()),
        "topic": "no-such-topic",
        "subscription_id": str(uuid.uuid4()),
    }


_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def _as_missing(text: str, real: dict[str, str], missing: dict[str, str]) -> str:
    """An answer with the ids it names as those of `missing`, and its instants blanked (a
    flow key put in each call is made at its own instant)."""
    for name, value in real.items():
        text = text.replace(value, missing[name])
    return _INSTANT.sub("<instant>", text)


async def _snapshot(harness: Harness, real: dict[str, str]) -> list[Any]:
    """What the default tenant sees of its resources."""
    schedule = await harness.get(f"/v1/schedules/{real['schedule_id']}")
    return [
        {k: v for k, v in schedule.items() if k != "next_fire_at"},
        await harness.get(f"/v1/dead-letters/{real['occurrence_id']}"),
        await harness.get(f"/v1/schedules/{real['schedule_id']}/events"),
        (await harness.get("/v1/flow-keys/shared-key"))["rate"],
        await harness.get(f"/v1/endpoints/{real['endpoint_id']}"),
        await harness.get("/v1/topics/shared-topic"),
        await harness.get(f"/v1/subscriptions/{real['subscription_id']}"),
    ]


async def test_another_tenants_resources_are_missing_on_every_operation(
    harness: Harness,
) -> None:
    response = await harness.client.put("/v1/tenants/acme", json={"display_name": "Acme"})
    assert response.status_code == 201, response.text
    document = (await harness.client.get("/openapi.json")).json()
    real = await _defaults_resources(harness)
    before = await _snapshot(harness, real)

    tried = set()
    for method, path, operation in _operations(document):
        creates = ("/v1/schedules", "/v1/schedules/batch", "/v1/endpoints", "/v1/subscriptions")
        if path in creates and method == "post":
            continue  # a create makes the caller's own, below
        missing = _missing()
        answers = []
        for names in (real, missing):
            response = await harness.client.request(
                method,
                _filled(path, names),
                json=_filled(_body(operation), names),
                headers=ACME,
            )
            answers.append(response)
        theirs, nobodys = answers
        assert theirs.status_code == nobodys.status_code, (method, path, theirs.text)
        expected = _as_missing(nobodys.text, missing, missing)
        assert _as_missing(theirs.text, real, missing) == expected, (method, path)
        tried.add(operation["operationId"])

    # Every operation on a schedule, an occurrence, a dead letter or a flow key was tried.
    assert {
        "get_schedule",
        "patch_schedule",
        "cancel_schedule",
        "pause_schedule",
        "resume_schedule",
        "trigger_schedule",
        "backfill_schedule",
        "list_occurrences",
        "list_events",
        "list_schedules",
        "get_occurrence",
        "list_attempts",
        "list_dead_letters",
        "get_dead_letter",
        "replay_dead_letter",
        "replay_dead_letters",
        "discard_dead_letter",
        "list_flow_keys",
        "get_flow_key",
        "put_flow_key",
        "clear_flow_key_backoff",
        "delete_flow_key",
        "list_endpoints",
        "get_endpoint",
        "patch_endpoint",
        "delete_endpoint",
        "rotate_endpoint_secret",
        "enable_endpoint",
        "list_endpoint_events",
        "list_endpoint_attempts",
        "list_topics",
        "get_topic",
        "put_topic",
        "delete_topic",
        "list_subscriptions",
        "get_subscription",
        "patch_subscription",
        "delete_subscription",
    } <= tried
    # Nothing of the default tenant's changed (the flow key's rate is still its own).
    assert await _snapshot(harness, real) == before


async def test_lists_and_filters_reach_the_callers_tenant_only(harness: Harness) -> None:
    await harness.client.put("/v1/tenants/acme", json={})
    real = await _defaults_resources(harness)
    theirs = await harness.client.post(
        "/v1/schedules",
        json={
            "event_type": "test.event",
            "target": harness.webhook(),
            "trigger": {"type": "interval", "every_seconds": 3600},
            "name": "nightly",  # the default tenant's name, free in this one
            "flow_key": "shared-key",
        },
        headers=ACME,
    )
    assert theirs.status_code == 201, theirs.text
    assert theirs.json()["tenant"] == "acme"

    listed = (await harness.client.get("/v1/schedules", headers=ACME)).json()["items"]
    assert [s["id"] for s in listed] == [theirs.json()["id"]]
    named = await harness.client.get("/v1/schedules?name=nightly", headers=ACME)
    assert [s["id"] for s in named.json()["items"]] == [theirs.json()["id"]]
    ours = (await harness.client.get("/v1/schedules")).json()["items"]
    assert [s["id"] for s in ours] == [real["schedule_id"]]
    # Its own key of that name: no limits (the default tenant's rate is not its), and its
    # own schedule's tick waiting on it.
    keys = (await harness.client.get("/v1/flow-keys", headers=ACME)).json()["items"]
    assert [(k["key"], k["rate"], k["waiting"]) for k in keys] == [("shared-key", None, 1)]
    dead = await harness.client.get("/v1/dead-letters", headers=ACME)
    assert dead.json()["items"] == []
    replayed = await harness.client.post(
        "/v1/dead-letters/replay", json={"event_type": "test.event"}, headers=ACME
    )
    assert replayed.json()["replayed"] == 0
    assert (await harness.get(f"/v1/dead-letters/{real['occurrence_id']}"))["attempts"] == 1


@pytest.mark.parametrize(
    ("header", "status", "detail"),
    [
        ("nobody", 404, "tenant nobody does not exist"),
        ("Acme", 422, "a tenant id is 1-63 of a-z 0-9 _ -, starting with a letter or a digit"),
        ("-acme", 422, "a tenant id is 1-63 of a-z 0-9 _ -, starting with a letter or a digit"),
        ("a" * 64, 422, "a tenant id is 1-63 of a-z 0-9 _ -, starting with a letter or a digit"),
    ],
)
async def test_a_tenant_header_naming_no_tenant_is_refused_and_stores_nothing(
    harness: Harness, header: str, status: int, detail: str
) -> None:
    for method, path, body in (
        ("GET", "/v1/schedules", None),
        ("POST", "/v1/schedules", {"event_type": "x", "target": harness.webhook()}),
        ("PUT", "/v1/flow-keys/k", {"rate": 1}),
    ):
        response = await harness.client.request(
            method, path, json=body, headers={"Chronoq-Tenant": header}
        )
        assert response.status_code == status, response.text
        problem = response.json()
        assert problem["detail"] == detail
        if status == 422:
            assert problem["errors"][0]["parameter"] == "Chronoq-Tenant"
    assert (await harness.get("/v1/schedules"))["items"] == []
    assert (await harness.get("/v1/flow-keys"))["items"] == []


async def test_a_delivery_names_its_schedules_tenant(harness: Harness) -> None:
    await harness.client.put("/v1/tenants/acme", json={})
    body = {
        "event_type": "e",
        "target": harness.webhook("/tenanted"),
        "trigger": {"type": "immediate"},
    }
    theirs = await harness.client.post("/v1/schedules", json=body, headers=ACME)
    ours = await harness.client.post("/v1/schedules", json=body)
    assert await harness.step() == 2
    named = {
        r.headers["X-Schedule-Id"]: r.headers["X-Chronoq-Tenant"]
        for r in harness.receiver.on("/tenanted")
    }
    assert named == {theirs.json()["id"]: "acme", ours.json()["id"]: "default"}
