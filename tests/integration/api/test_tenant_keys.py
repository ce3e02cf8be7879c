"""Tenant keys (DESIGN section 14): made, listed and revoked by operator keys; each acts in
its own tenant only, on the API and in the console, and stops working when revoked or
expired."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from app.store.schema.tables import schedule_events, tenant_keys
from app.worker.activity import ActivityRollup
from tests.integration.api.test_auth import KEYS, READER, WRITER, basic, bearer, spec
from tests.integration.conftest import Harness
from tests.waiting import eventually

OPERATOR = bearer(WRITER)


@pytest.fixture
async def keyed(make_harness: Callable[..., Any]) -> AsyncIterator[Harness]:
    async with make_harness(api_keys=KEYS) as harness:
        for tenant in ("acme", "zeta"):
            made = await harness.client.put(f"/v1/tenants/{tenant}", json={}, headers=OPERATOR)
            assert made.status_code == 201, made.text
        yield harness


async def _make(harness: Harness, tenant: str, name: str, **extra: Any) -> dict[str, Any]:
    response = await harness.client.post(
        f"/v1/tenants/{tenant}/keys",
        json={"name": name, "role": "write", **extra},
        headers=OPERATOR,
    )
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()
    return made


async def test_a_key_is_shown_once_stored_as_its_digest_and_listed_without_it(
    keyed: Harness,
) -> None:
    made = await _make(keyed, "acme", "deploy-bot")
    secret = made["key"]
    assert secret.startswith("cq_")
    assert len(secret) >= 3 + 43  # 256 random bits in base64url
    assert made["prefix"] == secret[:11]
    assert (made["tenant"], made["name"], made["role"]) == ("acme", "deploy-bot", "write")

    listed = await keyed.client.get("/v1/tenants/acme/keys", headers=OPERATOR)
    assert listed.status_code == 200, listed.text
    (shown,) = listed.json()["items"]
    assert "key" not in shown
    assert secret not in listed.text
    assert (shown["id"], shown["prefix"], shown["revoked_at"]) == (made["id"], made["prefix"], None)

    async def stored(conn: Any) -> list[Any]:
        return list((await conn.execute(sa.select(tenant_keys))).mappings())

    (row,) = await keyed.database.run(stored)
    assert row["digest"] == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in str(dict(row))

    again = await keyed.client.post(
        "/v1/tenants/acme/keys", json={"name": "deploy-bot", "role": "read"}, headers=OPERATOR
    )
    assert again.status_code == 409, again.text
    elsewhere = await _make(keyed, "zeta", "deploy-bot")  # names are per tenant
    assert elsewhere["key"] != secret


async def test_a_tenant_key_acts_in_its_own_tenant_only(keyed: Harness) -> None:
    acme = bearer((await _make(keyed, "acme", "deploy-bot"))["key"])
    ours = await keyed.client.post("/v1/schedules", json=spec(keyed), headers=OPERATOR)
    zetas = await keyed.client.post(
        "/v1/schedules", json=spec(keyed), headers=OPERATOR | {"Chronoq-Tenant": "zeta"}
    )

    theirs = await keyed.client.post("/v1/schedules", json=spec(keyed, name="n"), headers=acme)
    assert theirs.status_code == 201, theirs.text
    assert theirs.json()["tenant"] == "acme"
    listed = await keyed.client.get("/v1/schedules", headers=acme)
    assert [s["id"] for s in listed.json()["items"]] == [theirs.json()["id"]]
    for other in (ours, zetas):
        missing = await keyed.client.get(f"/v1/schedules/{other.json()['id']}", headers=acme)
        assert missing.status_code == 404
    named = await keyed.client.get("/v1/schedules", headers=acme | {"Chronoq-Tenant": "acme"})
    assert named.status_code == 200
    for header in ("zeta", "default", "nobody"):
        refused = await keyed.client.get("/v1/schedules", headers=acme | {"Chronoq-Tenant": header})
        assert refused.status_code == 403, refused.text
        assert refused.json()["detail"] == "this key acts in tenant acme only"

    # It reads its own tenant and manages none.
    assert (await keyed.client.get("/v1/tenants/acme", headers=acme)).status_code == 200
    for method, path, body in (
        ("GET", "/v1/tenants/zeta", None),
        ("GET", "/v1/tenants", None),
        ("PUT", "/v1/tenants/acme", {}),
        ("PUT", "/v1/tenants/new", {}),
        ("DELETE", "/v1/tenants/zeta", None),
        ("GET", "/v1/tenants/acme/keys", None),
        ("GET", "/v1/tenants/zeta/events", None),
        ("POST", "/v1/tenants/acme/keys", {"name": "more", "role": "write"}),
    ):
        refused = await keyed.client.request(method, path, json=body, headers=acme)
        assert refused.status_code == 403, (method, path, refused.text)
    assert (await keyed.client.get("/v1/tenants/new", headers=OPERATOR)).status_code == 404

    # Audit events name the key by its tenant and name.
    async def actors(conn: Any) -> list[str]:
        return list((await conn.execute(sa.select(schedule_events.c.actor))).scalars())

    assert "acme/deploy-bot" in await keyed.database.run(actors)
    assert theirs.json()["created_by"] == "acme/deploy-bot"


async def test_a_read_key_reads_and_changes_nothing(keyed: Harness) -> None:
    response = await keyed.client.post(
        "/v1/tenants/acme/keys", json={"name": "dash", "role": "read"}, headers=OPERATOR
    )
    reader = bearer(response.json()["key"])
    assert (await keyed.client.get("/v1/schedules", headers=reader)).status_code == 200
    refused = await keyed.client.post("/v1/schedules", json=spec(keyed), headers=reader)
    assert refused.status_code == 403, refused.text
    assert (await keyed.client.get("/v1/schedules", headers=OPERATOR)).json()["items"] == []


async def test_a_revoked_or_expired_key_is_a_401(keyed: Harness) -> None:
    made = await _make(keyed, "acme", "ci")
    key = bearer(made["key"])
    assert (await keyed.client.get("/v1/schedules", headers=key)).status_code == 200
    revoked = await keyed.client.delete(f"/v1/tenants/acme/keys/{made['id']}", headers=OPERATOR)
    assert revoked.status_code == 204, revoked.text
    again = await keyed.client.delete(f"/v1/tenants/acme/keys/{made['id']}", headers=OPERATOR)
    assert again.status_code == 204  # revoked it stays
    elsewhere = await keyed.client.delete(f"/v1/tenants/zeta/keys/{made['id']}", headers=OPERATOR)
    assert elsewhere.status_code == 404

    async def refused() -> bool:
        answer = await keyed.client.get("/v1/schedules", headers=key)
        return answer.status_code == 401

    await eventually(refused, within=10.0, every=0.1)
    (listed,) = (await keyed.client.get("/v1/tenants/acme/keys", headers=OPERATOR)).json()["items"]
    assert listed["revoked_at"] is not None
    assert listed["last_used_at"] is not None

    soon = datetime.now(UTC) + timedelta(seconds=1)
    brief = await _make(keyed, "acme", "brief", expires_at=soon.isoformat().replace("+00:00", "Z"))
    expiring = bearer(brief["key"])

    async def expired() -> bool:
        answer = await keyed.client.get("/v1/schedules", headers=expiring)
        return answer.status_code == 401

    await eventually(expired, within=10.0, every=0.1)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "has space", "role": "write"}, "name"),
        ({"name": "", "role": "write"}, "name"),
        ({"name": "x" * 65, "role": "write"}, "name"),
        ({"name": "ok", "role": "admin"}, "role"),
        ({"name": "ok"}, "role"),
        ({"name": "ok", "role": "write", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
        ({"name": "ok", "role": "write", "expires_at": "tomorrow"}, "expires_at"),
        ({"name": "ok", "role": "write", "key": "chosen-by-me"}, "key"),
    ],
)
async def test_a_bad_key_request_names_its_field_and_makes_nothing(
    keyed: Harness, body: dict[str, Any], field: str
) -> None:
    response = await keyed.client.post("/v1/tenants/acme/keys", json=body, headers=OPERATOR)
    assert response.status_code == 422, response.text
    assert field in {error["field"] for error in response.json()["errors"]}
    listed = await keyed.client.get("/v1/tenants/acme/keys", headers=OPERATOR)
    assert listed.json()["items"] == []


async def test_only_an_operator_write_key_makes_keys_and_an_unknown_tenant_has_none(
    keyed: Harness,
) -> None:
    body = {"name": "k", "role": "write"}
    read = await keyed.client.post("/v1/tenants/acme/keys", json=body, headers=bearer(READER))
    assert read.status_code == 403
    missing = await keyed.client.post("/v1/tenants/nobody/keys", json=body, headers=OPERATOR)
    assert (missing.status_code, missing.json()["detail"]) == (404, "tenant nobody does not exist")


async def test_an_open_api_makes_no_tenant_keys(harness: Harness) -> None:
    await harness.client.put("/v1/tenants/acme", json={})
    refused = await harness.client.post(
        "/v1/tenants/acme/keys", json={"name": "k", "role": "write"}
    )
    assert refused.status_code == 409, refused.text


async def test_a_tenant_key_logs_in_to_the_console_and_sees_its_tenant_only(
    keyed: Harness,
) -> None:
    login = basic((await _make(keyed, "acme", "portal"))["key"])
    ours = await keyed.client.post("/v1/schedules", json=spec(keyed, name="ours"), headers=OPERATOR)
    theirs = await keyed.client.post(
        "/v1/schedules",
        json=spec(keyed, name="theirs"),
        headers=OPERATOR | {"Chronoq-Tenant": "acme"},
    )
    page = await keyed.client.get("/ui/schedules", headers=login)
    assert page.status_code == 200, page.text
    assert theirs.json()["id"] in page.text
    assert ours.json()["id"] not in page.text
    other = await keyed.client.get(f"/ui/schedules/{ours.json()['id']}", headers=login)
    assert other.status_code == 404
    mine = await keyed.client.get(f"/ui/schedules/{theirs.json()['id']}", headers=login)
    assert mine.status_code == 200
    # The installation's figures are not its to see; an operator's page shows them.
    assert 'id="live"' not in page.text
    assert 'id="live"' not in (await keyed.client.get("/ui/live", headers=login)).text
    operator = await keyed.client.get("/ui/schedules", headers=basic(WRITER))
    assert 'id="live"' in operator.text


async def test_a_tenant_key_sees_its_own_tenants_activity_and_no_other(keyed: Harness) -> None:
    mine = bearer((await _make(keyed, "acme", "charts"))["key"])
    made = await keyed.client.post(
        "/v1/schedules", json=spec(keyed, trigger={"type": "immediate"}), headers=mine
    )
    assert made.status_code == 201, made.text
    other = await keyed.client.post(
        "/v1/schedules",
        json=spec(keyed, trigger={"type": "immediate"}),
        headers={**OPERATOR, "Chronoq-Tenant": "zeta"},
    )
    assert other.status_code == 201, other.text
    assert await keyed.step() == 2
    await ActivityRollup(keyed.database, keyed.settings).run_once()

    own = await keyed.client.get("/v1/activity", headers=mine)
    fleet = await keyed.client.get("/v1/activity", headers=OPERATOR)
    refused = await keyed.client.get("/v1/activity?tenant=zeta", headers=mine)

    assert own.status_code == 200, own.text
    assert (own.json()["scope"], own.json()["subject"]) == ("tenant", "acme")
    assert own.json()["totals"]["delivered"] == 1
    assert fleet.json()["scope"] == "fleet"
    assert fleet.json()["totals"]["delivered"] == 2
    assert refused.status_code == 403
