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
        ("/v1/tenants/acme", {"weight": 3}, "weight"),
    ],
)
async def test_a_bad_tenant_is_refused_naming_the_field_and_nothing_is_stored(
    harness: Harness, path: str, body: dict[str, object], field: str
) -> None:
    response = await harness.client.put(path, json=body)
    assert response.status_code == 422, response.text
    assert field in {error["field"] for error in response.json()["errors"]}
    assert [t["id"] for t in (await harness.get("/v1/tenants"))["items"]] == ["default"]
