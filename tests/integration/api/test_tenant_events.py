"""A tenant's audit events through the HTTP API (GET /v1/tenants/{tenant}/events): each change
of the tenant or of its keys, its version and its actor, oldest first and paged; a removed
tenant's kept; read by operator keys, and by a tenant's key for its own tenant only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.api import pagination
from tests.integration.api.test_auth import KEYS, READER, WRITER, bearer
from tests.integration.conftest import Harness

OPERATOR = bearer(WRITER)


async def trail(harness: Harness, tenant: str, **headers: str) -> list[dict[str, Any]]:
    response = await harness.client.get(f"/v1/tenants/{tenant}/events?limit=500", headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["next_cursor"] is None
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def kinds(items: list[dict[str, Any]]) -> list[tuple[str, int | None, str | None]]:
    return [(e["kind"], e["version"], e["actor"]) for e in items]


async def put(harness: Harness, tenant: str, body: dict[str, Any], **headers: str) -> None:
    response = await harness.client.put(f"/v1/tenants/{tenant}", json=body, headers=headers)
    assert response.status_code in (200, 201), response.text


async def test_every_change_of_a_tenant_is_an_event_and_they_outlive_it(
    harness: Harness,
) -> None:
    await put(harness, "acme", {"display_name": "Acme"})
    await put(harness, "acme", {"display_name": "Acme"})  # changes nothing: a version still
    await put(
        harness, "acme", {"display_name": "Acme", "weight": 3, "quotas": {"max_in_flight": 2}}
    )
    await put(harness, "acme", {"display_name": "Acme", "weight": 3, "paused": True})
    await put(harness, "acme", {})
    refused = await harness.client.put(
        "/v1/tenants/acme", json={"weight": 9}, headers={"If-Match": '"1"'}
    )
    assert refused.status_code == 412, refused.text
    removed = await harness.client.delete("/v1/tenants/acme")
    assert removed.status_code == 204, removed.text

    # Gone, and its trail is still there, its removal last.
    assert (await harness.client.get("/v1/tenants/acme")).status_code == 404
    items = await trail(harness, "acme")
    assert kinds(items) == [
        ("created", 1, None),
        ("updated", 2, None),
        ("updated", 3, None),
        ("updated", 4, None),
        ("paused", 4, None),
        ("updated", 5, None),
        ("resumed", 5, None),
        ("deleted", None, None),
    ]
    assert [e["fields"] for e in items if e["kind"] == "updated"] == [
        [],
        ["weight", "quotas"],
        ["paused", "quotas"],
        ["display_name", "weight", "paused"],
    ]
    assert all(e["fields"] is None for e in items if e["kind"] != "updated")
    assert {(e["tenant"], e["key_id"], e["key_name"]) for e in items} == {("acme", None, None)}
    assert [e["id"] for e in items] == sorted(e["id"] for e in items)
    assert [e["at"] for e in items] == sorted(e["at"] for e in items)


async def test_events_page_oldest_first_and_a_cursor_not_issued_is_a_422(
    harness: Harness,
) -> None:
    for weight in range(1, 6):
        await put(harness, "acme", {"weight": weight})
    everything = await trail(harness, "acme")
    assert len(everything) == 5

    seen: list[str] = []
    path = "/v1/tenants/acme/events?limit=2"
    while True:
        page = await harness.get(path)
        assert len(page["items"]) <= 2
        seen += [e["id"] for e in page["items"]]
        if page["next_cursor"] is None:
            break
        path = f"/v1/tenants/acme/events?limit=2&cursor={page['next_cursor']}"
    assert seen == [e["id"] for e in everything]
    # A cursor past the last event: an empty page of a tenant that exists.
    past = pagination.encode(everything[-1]["id"])
    assert (await harness.get(f"/v1/tenants/acme/events?cursor={past}"))["items"] == []

    tenants = await harness.get("/v1/tenants?limit=1")  # a cursor of another list
    for cursor in ("nope", tenants["next_cursor"], "W10", "A" * 300):
        response = await harness.client.get(f"/v1/tenants/acme/events?cursor={cursor}")
        assert response.status_code == 422, (cursor, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["errors"][0]["parameter"] == "cursor"


async def test_a_tenant_that_never_was_is_a_404_and_one_without_events_an_empty_list(
    harness: Harness,
) -> None:
    missing = await harness.client.get("/v1/tenants/nobody/events")
    assert (missing.status_code, missing.json()["detail"]) == (404, "tenant nobody does not exist")
    assert missing.headers["content-type"].startswith("application/problem+json")
    # The default tenant always exists; nothing has changed it yet.
    assert await harness.get("/v1/tenants/default/events") == {"items": [], "next_cursor": None}
    bad = await harness.client.get("/v1/tenants/Not-A-Tenant/events")
    assert bad.status_code == 422, bad.text

    await put(harness, "acme", {})
    assert (await harness.client.delete("/v1/tenants/acme")).status_code == 204
    made, deleted = (await harness.get("/v1/tenants/acme/events"))["items"]
    assert (made["kind"], deleted["kind"]) == ("created", "deleted")
    # Removed, and past its last event: its page, empty, not a missing tenant.
    past = pagination.encode(deleted["id"])
    assert await harness.get(f"/v1/tenants/acme/events?cursor={past}") == {
        "items": [],
        "next_cursor": None,
    }


async def test_operator_keys_name_the_actor_and_a_tenant_key_reads_its_own_tenants_only(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=KEYS) as keyed:
        for tenant in ("acme", "zeta"):
            await put(keyed, tenant, {}, **OPERATOR)
        made = await keyed.client.post(
            "/v1/tenants/acme/keys", json={"name": "ci", "role": "write"}, headers=OPERATOR
        )
        assert made.status_code == 201, made.text
        key = made.json()
        revoked = await keyed.client.delete(f"/v1/tenants/acme/keys/{key['id']}", headers=OPERATOR)
        assert revoked.status_code == 204, revoked.text
        reader = await keyed.client.post(
            "/v1/tenants/acme/keys", json={"name": "viewer", "role": "read"}, headers=OPERATOR
        )
        tenant_key = bearer(reader.json()["key"])

        # A tenant's key changes no tenant, and so records nothing.
        refused = await keyed.client.put("/v1/tenants/acme", json={"weight": 2}, headers=tenant_key)
        assert refused.status_code == 403, refused.text
        items = await trail(keyed, "acme", **OPERATOR)
        assert kinds(items) == [
            ("created", 1, "deploy-bot"),
            ("key_created", None, "deploy-bot"),
            ("key_revoked", None, "deploy-bot"),
            ("key_created", None, "deploy-bot"),
        ]
        assert [(e["key_id"], e["key_name"]) for e in items[1:]] == [
            (key["id"], "ci"),
            (key["id"], "ci"),
            (reader.json()["id"], "viewer"),
        ]
        # An operator's read key reads any tenant's; a tenant's key its own tenant's only.
        assert kinds(await trail(keyed, "zeta", **bearer(READER))) == [("created", 1, "deploy-bot")]
        own = await keyed.client.get("/v1/tenants/acme/events", headers=tenant_key)
        assert own.status_code == 200, own.text
        assert own.json()["items"] == items
        other = await keyed.client.get("/v1/tenants/zeta/events", headers=tenant_key)
        assert (other.status_code, other.json()["detail"]) == (
            403,
            "this key acts in tenant acme only",
        )
        unknown = await keyed.client.get("/v1/tenants/nobody/events", headers=tenant_key)
        assert unknown.status_code == 403
        unauthenticated = await keyed.client.get("/v1/tenants/acme/events")
        assert unauthenticated.status_code == 401
