"""/v1/tenants: tenants put, read, listed and removed (DESIGN section 14)."""

from __future__ import annotations

import pytest

from tests.integration.conftest import Harness


async def test_a_tenant_is_created_replaced_under_if_match_listed_and_read(
    harness: Harness,
) -> None:
    made = await harness.client.put("/v1/tenants/acme", json={"display_name": "Acme"})
    assert made.status_code == 201, made.text
    assert made.headers["ETag"] == '"1"'
    assert made.json() | {"created_at": None, "updated_at": None} == {
        "id": "acme",
        "display_name": "Acme",
        "version": 1,
        "weight": 1,
        "paused": False,
        "quotas": {
            "max_schedules": None,
            "max_creates_per_minute": None,
            "max_deliveries_per_second": None,
            "max_in_flight": None,
        },
        "retention_seconds": None,
        "events_target": None,
        "usage": {
            "schedules": 0,
            "pending_occurrences": 0,
            "in_flight": 0,
            "waiting": 0,
            "dead_letters": 0,
        },
        "created_at": None,
        "updated_at": None,
    }
    stale = await harness.client.put(
        "/v1/tenants/acme", json={"display_name": "Acme Inc"}, headers={"If-Match": '"7"'}
    )
    assert stale.status_code == 412, stale.text
    replaced = await harness.client.put(
        "/v1/tenants/acme", json={"display_name": "Acme Inc"}, headers={"If-Match": '"1"'}
    )
    assert replaced.status_code == 200, replaced.text
    assert (replaced.json()["display_name"], replaced.json()["version"]) == ("Acme Inc", 2)
    assert replaced.json()["created_at"] == made.json()["created_at"]
    cleared = await harness.client.put("/v1/tenants/acme", json={})
    assert (cleared.json()["display_name"], cleared.json()["version"]) == (None, 3)

    for name in ("zeta", "beta"):
        assert (await harness.client.put(f"/v1/tenants/{name}", json={})).status_code == 201
    first = await harness.get("/v1/tenants?limit=2")
    assert [t["id"] for t in first["items"]] == ["acme", "beta"]
    rest = await harness.get(f"/v1/tenants?cursor={first['next_cursor']}")
    assert [t["id"] for t in rest["items"]] == ["default", "zeta"]
    assert rest["next_cursor"] is None
    assert (await harness.get("/v1/tenants/beta"))["version"] == 1
    missing = await harness.client.get("/v1/tenants/nobody")
    assert (missing.status_code, missing.json()["detail"]) == (404, "tenant nobody does not exist")


async def test_a_tenant_is_removed_once_none_of_its_schedules_is_live(harness: Harness) -> None:
    await harness.client.put("/v1/tenants/acme", json={})
    acme = {"Chronoq-Tenant": "acme"}
    created = await harness.client.post(
        "/v1/schedules",
        json={"event_type": "e", "target": harness.webhook(), "trigger": {"type": "immediate"}},
        headers=acme,
    )
    assert created.status_code == 201, created.text

    refused = await harness.client.delete("/v1/tenants/acme")
    assert refused.status_code == 409, refused.text
    assert "has 1 pending or paused schedules" in refused.json()["detail"]
    refused = await harness.client.delete("/v1/tenants/default")
    assert (refused.status_code, refused.json()["detail"]) == (
        409,
        "the default tenant cannot be deleted",
    )

    schedule = created.json()["id"]
    cancelled = await harness.client.delete(f"/v1/schedules/{schedule}", headers=acme)
    assert cancelled.status_code == 200, cancelled.text
    stale = await harness.client.delete("/v1/tenants/acme", headers={"If-Match": '"2"'})
    assert stale.status_code == 412, stale.text
    removed = await harness.client.delete("/v1/tenants/acme", headers={"If-Match": '"1"'})
    assert removed.status_code == 204, removed.text

    # Gone with what it held; acting in it is acting in a tenant that does not exist.
    gone = await harness.client.get(f"/v1/schedules/{schedule}", headers=acme)
    assert (gone.status_code, gone.json()["detail"]) == (404, "tenant acme does not exist")
    assert (await harness.client.get("/v1/tenants/acme")).status_code == 404
    # Made again, it is empty.
    await harness.client.put("/v1/tenants/acme", json={})
    again = await harness.client.get(f"/v1/schedules/{schedule}", headers=acme)
    assert again.status_code == 404
    assert (await harness.client.get("/v1/schedules", headers=acme)).json()["items"] == []


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/tenants/Acme", {}, "tenant"),
        ("/v1/tenants/-acme", {}, "tenant"),
        ("/v1/tenants/" + "a" * 64, {}, "tenant"),
        ("/v1/tenants/acme", {"display_name": "tab\there"}, "display_name"),
        ("/v1/tenants/acme", {"display_name": "x" * 201}, "display_name"),
        ("/v1/tenants/acme", {"display_name": 7}, "display_name"),
        ("/v1/tenants/acme", {"weight": 0}, "weight"),
        ("/v1/tenants/acme", {"weight": 101}, "weight"),
        ("/v1/tenants/acme", {"weight": 2.5}, "weight"),
        ("/v1/tenants/acme", {"weight": "3"}, "weight"),
        ("/v1/tenants/acme", {"paused": "yes"}, "paused"),
        ("/v1/tenants/acme", {"paused": None}, "paused"),
        ("/v1/tenants/acme", {"retention_seconds": -1}, "retention_seconds"),
        ("/v1/tenants/acme", {"retention_seconds": 10**12}, "retention_seconds"),
        ("/v1/tenants/acme", {"quotas": {"max_in_flight": 0}}, "quotas.max_in_flight"),
        ("/v1/tenants/acme", {"quotas": {"max_in_flight": 10**6}}, "quotas.max_in_flight"),
        (
            "/v1/tenants/acme",
            {"quotas": {"max_deliveries_per_second": -5}},
            "quotas.max_deliveries_per_second",
        ),
        (
            "/v1/tenants/acme",
            {"quotas": {"max_deliveries_per_second": 10**30}},
            "quotas.max_deliveries_per_second",
        ),
        ("/v1/tenants/acme", {"quotas": {"max_schedules": -1}}, "quotas.max_schedules"),
        ("/v1/tenants/acme", {"quotas": {"surprise": 1}}, "quotas.surprise"),
    ],
)
async def test_a_bad_tenant_is_refused_naming_the_field_and_nothing_is_stored(
    harness: Harness, path: str, body: dict[str, object], field: str
) -> None:
    response = await harness.client.put(path, json=body)
    assert response.status_code == 422, response.text
    assert field in {error["field"] for error in response.json()["errors"]}
    assert [t["id"] for t in (await harness.get("/v1/tenants"))["items"]] == ["default"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"paused": True}, "paused"),
        ({"quotas": {"max_in_flight": 5}}, "quotas.max_in_flight"),
        ({"quotas": {"max_deliveries_per_second": 5}}, "quotas.max_deliveries_per_second"),
    ],
)
async def test_the_default_tenant_takes_no_pause_and_no_delivery_quota(
    harness: Harness, body: dict[str, object], field: str
) -> None:
    response = await harness.client.put("/v1/tenants/default", json=body)
    assert response.status_code == 422, response.text
    assert field in {error["field"] for error in response.json()["errors"]}
    default = await harness.get("/v1/tenants/default")
    assert (default["version"], default["paused"], default["quotas"]["max_in_flight"]) == (
        1,
        False,
        None,
    )
    # Its weight, create quotas and retention it takes.
    put = await harness.client.put(
        "/v1/tenants/default",
        json={"weight": 4, "retention_seconds": 60, "quotas": {"max_schedules": 10}},
    )
    assert put.status_code == 200, put.text
    assert (put.json()["weight"], put.json()["retention_seconds"]) == (4, 60)


async def test_a_create_past_a_quota_is_a_429_naming_it_and_stores_nothing(
    harness: Harness,
) -> None:
    quotas = {"max_schedules": 3, "max_creates_per_minute": 1000}
    made = await harness.client.put("/v1/tenants/acme", json={"quotas": quotas})
    assert made.json()["quotas"] == quotas | {
        "max_deliveries_per_second": None,
        "max_in_flight": None,
    }
    acme = {"Chronoq-Tenant": "acme"}
    item = {"event_type": "e", "target": harness.webhook(), "trigger": {"type": "immediate"}}
    first = await harness.client.post(
        "/v1/schedules", json=item, headers=acme | {"Idempotency-Key": "k-1"}
    )
    assert first.status_code == 201, first.text
    batch = await harness.client.post(
        "/v1/schedules/batch", json={"items": [item] * 3}, headers=acme
    )
    assert batch.status_code == 429, batch.text
    problem = batch.json()
    assert problem["type"] == "urn:chronoq:problem:quota-exceeded"
    assert (problem["quota"], problem["limit"], problem["used"]) == ("max_schedules", 3, 1)
    assert "Retry-After" not in batch.headers
    assert len((await harness.client.get("/v1/schedules", headers=acme)).json()["items"]) == 1
    # A replay of a create makes nothing, and is charged nothing.
    replay = await harness.client.post(
        "/v1/schedules", json=item, headers=acme | {"Idempotency-Key": "k-1"}
    )
    assert replay.status_code == 200, replay.text
    ok = await harness.client.post("/v1/schedules/batch", json={"items": [item] * 2}, headers=acme)
    assert ok.status_code == 201, ok.text
    # The default tenant's own creates are not the tenant's to limit.
    assert (await harness.client.post("/v1/schedules", json=item)).status_code == 201


async def test_creates_past_the_rate_are_a_429_with_retry_after(harness: Harness) -> None:
    await harness.client.put("/v1/tenants/acme", json={"quotas": {"max_creates_per_minute": 2}})
    acme = {"Chronoq-Tenant": "acme"}
    item = {"event_type": "e", "target": harness.webhook(), "trigger": {"type": "immediate"}}
    made = await harness.client.post(
        "/v1/schedules/batch", json={"items": [item] * 2}, headers=acme
    )
    assert made.status_code == 201, made.text
    refused = await harness.client.post("/v1/schedules", json=item, headers=acme)
    assert refused.status_code == 429, refused.text
    assert refused.json()["quota"] == "max_creates_per_minute"
    assert 1 <= int(refused.headers["Retry-After"]) <= 30
    # Lifting the quota lets the next create through at once.
    await harness.client.put("/v1/tenants/acme", json={})
    assert (await harness.client.post("/v1/schedules", json=item, headers=acme)).status_code == 201


@pytest.mark.parametrize(
    "quotas",
    [
        {"max_schedules": 0},
        {"max_schedules": -1},
        {"max_schedules": 10**10},
        {"max_schedules": 1.5},
        {"max_schedules": "5"},
        {"max_creates_per_minute": 0},
        {"max_deliveries_per_second": 0},
        {"max_deliveries_per_second": 10**400},
        {"max_in_flight": True},
        {"max_in_flight": 100001},
    ],
)
async def test_a_bad_quota_is_refused_naming_it(
    harness: Harness, quotas: dict[str, object]
) -> None:
    response = await harness.client.put("/v1/tenants/acme", json={"quotas": quotas})
    assert response.status_code == 422, response.text
    (name,) = quotas
    assert {e["field"] for e in response.json()["errors"]} == {f"quotas.{name}"}
    assert (await harness.client.get("/v1/tenants/acme")).status_code == 404
