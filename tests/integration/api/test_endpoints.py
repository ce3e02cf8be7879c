"""/v1/endpoints: endpoints made, read, listed, changed and removed, their secrets
rotated, and their address rules and redaction (DESIGN section 15)."""

from __future__ import annotations

from typing import Any

from tests.integration.conftest import ON_MODULE_LOOP, Harness

pytestmark = ON_MODULE_LOOP


async def _endpoint(harness: Harness, expect: int = 201, **body: Any) -> dict[str, Any]:
    body.setdefault("url", harness.receiver.url("/endpoint"))
    made = await harness.client.post("/v1/endpoints", json=body)
    assert made.status_code == expect, made.text
    found: dict[str, Any] = made.json()
    return found


async def test_an_endpoint_is_made_with_a_secret_shown_once_read_listed_and_changed(
    shared: Harness,
) -> None:
    made = await _endpoint(
        shared,
        name="billing",
        headers={"X-Team": "billing", "Authorization": "Bearer s3cret"},
        flow={"rate": 5, "parallelism": 2},
        circuit={"failure_threshold": 3},
    )
    (secret,) = made["signing_secrets"]
    assert (secret["secret"][:6], secret["expires_at"]) == ("whsec_", None)
    assert secret["hint"] == "whsec_…" + secret["secret"][-4:]
    assert made["headers"] == {"X-Team": "billing", "Authorization": "***"}
    assert made["flow"] == {
        "rate": 5,
        "period_seconds": 1.0,
        "burst": None,
        "parallelism": 2,
        "ordering": "none",
    }
    assert made["circuit"] == {
        "failure_threshold": 3,
        "cooldown_seconds": 30.0,
        "max_cooldown_seconds": 600.0,
        "disable_after_seconds": 432000.0,
    }
    assert (made["state"], made["consecutive_failures"], made["version"]) == ("closed", 0, 1)

    read = await shared.client.get(f"/v1/endpoints/{made['id']}")
    assert read.headers["ETag"] == '"1"'
    assert read.json()["signing_secrets"][0]["secret"] is None
    assert secret["secret"] not in read.text
    listed = await shared.get("/v1/endpoints")
    assert [e["id"] for e in listed["items"]] == [made["id"]]
    assert secret["secret"] not in str(listed)

    stale = await shared.client.patch(
        f"/v1/endpoints/{made['id']}", json={"timeout_seconds": 3}, headers={"If-Match": '"9"'}
    )
    assert stale.status_code == 412, stale.text
    # The redacted header sent back keeps its value while the URL stays; it moves alone.
    changed = await shared.client.patch(
        f"/v1/endpoints/{made['id']}",
        json={"headers": {"Authorization": "***", "X-Team": "payments"}, "flow": None},
        headers={"If-Match": '"1"'},
    )
    assert changed.status_code == 200, changed.text
    assert (changed.json()["flow"], changed.json()["version"]) == (None, 2)
    assert changed.json()["headers"] == {"Authorization": "***", "X-Team": "payments"}
    moved_with_placeholder = await shared.client.patch(
        f"/v1/endpoints/{made['id']}",
        json={"url": shared.receiver.url("/moved"), "headers": {"Authorization": "***"}},
    )
    assert moved_with_placeholder.status_code == 422, moved_with_placeholder.text
    assert moved_with_placeholder.json()["errors"][0]["pointer"] == "#/headers/Authorization"
    moved = await shared.client.patch(
        f"/v1/endpoints/{made['id']}", json={"url": shared.receiver.url("/moved")}
    )
    assert moved.json()["url"] == shared.receiver.url("/moved"), moved.text
    events = await shared.get(f"/v1/endpoints/{made['id']}/events")
    assert [(e["kind"], e["detail"]) for e in events["items"]] == [
        ("created", None),
        ("updated", {"fields": ["headers", "flow"]}),
        ("updated", {"fields": ["url"]}),
    ]


async def test_bad_input_is_refused_naming_the_field_and_nothing_is_stored(
    shared: Harness,
) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"url": "http://169.254.169.254/latest"}, "/url"),
        ({"url": "ftp://127.0.0.1/x"}, "/url"),
        ({"headers": {"Host": "evil"}}, "/headers"),
        ({"flow": {"burst": 3}}, "/flow/burst"),
        ({"circuit": {"failure_threshold": 0}}, "/circuit/failure_threshold"),
        (
            {"circuit": {"cooldown_seconds": 60, "max_cooldown_seconds": 30}},
            "/circuit/max_cooldown_seconds",
        ),
        ({"timeout_seconds": float("nan")}, "/timeout_seconds"),
        ({"description": "two\nlines"}, "/description"),
        ({"unknown": 1}, "/unknown"),
    ]
    for body, pointer in cases:
        body.setdefault("url", shared.receiver.url("/x"))
        refused = await shared.client.post(
            "/v1/endpoints",
            content=__import__("json").dumps(body, allow_nan=True),
            headers={"Content-Type": "application/json"},
        )
        assert refused.status_code == 422, (body, refused.text)
        assert any(error["pointer"].endswith(pointer) for error in refused.json()["errors"]), (
            body,
            refused.json(),
        )
    assert (await shared.get("/v1/endpoints"))["items"] == []


async def test_names_are_unique_in_a_tenant_and_another_tenants_endpoint_is_missing(
    shared: Harness,
) -> None:
    made = await _endpoint(shared, name="one")
    taken = await _endpoint(shared, expect=409, name="one")
    assert "named 'one'" in taken["detail"]
    await shared.client.put("/v1/tenants/acme", json={})
    other = await shared.client.get(
        f"/v1/endpoints/{made['id']}", headers={"Chronoq-Tenant": "acme"}
    )
    assert other.status_code == 404, other.text
    in_acme = await shared.client.post(
        "/v1/endpoints",
        json={"name": "one", "url": shared.receiver.url("/x")},
        headers={"Chronoq-Tenant": "acme"},
    )
    assert in_acme.status_code == 201, in_acme.text


async def test_a_rotation_adds_a_secret_shown_once_and_the_old_ones_expire_after_the_overlap(
    shared: Harness,
) -> None:
    made = await _endpoint(shared)
    first = made["signing_secrets"][0]
    rotated = await shared.client.post(
        f"/v1/endpoints/{made['id']}/secrets/rotate", json={"overlap_seconds": 3600}
    )
    assert rotated.status_code == 200, rotated.text
    old, new = rotated.json()["signing_secrets"]
    assert (old["id"], old["secret"]) == (first["id"], None)
    assert old["expires_at"] is not None
    assert (new["secret"][:6], new["expires_at"]) == ("whsec_", None)
    now_only = await shared.client.post(
        f"/v1/endpoints/{made['id']}/secrets/rotate", json={"overlap_seconds": 0}
    )
    assert [s["id"] for s in now_only.json()["signing_secrets"]] == [
        now_only.json()["signing_secrets"][0]["id"]
    ]
    for overlap in (-1, 30 * 86400 + 1, 1.5, "1"):
        refused = await shared.client.post(
            f"/v1/endpoints/{made['id']}/secrets/rotate", json={"overlap_seconds": overlap}
        )
        assert refused.status_code == 422, refused.text
        assert refused.json()["errors"][0]["pointer"] == "#/overlap_seconds"


async def test_an_endpoint_is_removed_only_once_no_live_schedule_targets_it(
    shared: Harness,
) -> None:
    made = await _endpoint(shared)
    target = {"type": "endpoint", "endpoint_id": made["id"]}
    schedule = await shared.create(target=target, trigger={"type": "once", "delay_seconds": 3600})
    assert schedule["target"] == target
    refused = await shared.client.delete(f"/v1/endpoints/{made['id']}")
    assert refused.status_code == 409, refused.text
    assert schedule["id"] in refused.json()["detail"]
    await shared.client.delete(f"/v1/schedules/{schedule['id']}")
    removed = await shared.client.delete(f"/v1/endpoints/{made['id']}")
    assert removed.status_code == 204, removed.text
    assert (await shared.client.get(f"/v1/endpoints/{made['id']}")).status_code == 404
    kinds = [e["kind"] for e in (await shared.get(f"/v1/endpoints/{made['id']}/events"))["items"]]
    assert kinds == ["created", "deleted"]


async def test_a_schedule_cannot_target_a_missing_endpoint_or_name_a_key_beside_one(
    shared: Harness,
) -> None:
    made = await _endpoint(shared)
    target = {"type": "endpoint", "endpoint_id": made["id"]}
    missing = {"type": "endpoint", "endpoint_id": "00000000-0000-7000-8000-000000000000"}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"target": missing}, "#/target/endpoint_id"),
        ({"target": {"type": "endpoint", "endpoint_id": "nope"}}, "#/target/endpoint/endpoint_id"),
        ({"target": target, "flow_key": "customer-1"}, "#/flow_key"),
        ({"on_failure": target}, "#/on_failure/type"),
    ]
    for body, pointer in cases:
        refused = await shared.client.post(
            "/v1/schedules",
            json={
                "event_type": "e",
                "target": shared.webhook(),
                "trigger": {"type": "immediate"},
                **body,
            },
        )
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["errors"][0]["pointer"] == pointer, refused.json()
    batch = await shared.client.post(
        "/v1/schedules/batch",
        json={
            "items": [
                {"event_type": "e", "target": target, "trigger": {"type": "immediate"}},
                {"event_type": "e", "target": missing, "trigger": {"type": "immediate"}},
            ]
        },
    )
    assert batch.status_code == 422, batch.text
    assert batch.json()["errors"][0]["pointer"] == "#/items/1/target/endpoint_id"
    await shared.client.put("/v1/tenants/acme", json={})
    elsewhere = await shared.client.post(
        "/v1/schedules",
        json={"event_type": "e", "target": target, "trigger": {"type": "immediate"}},
        headers={"Chronoq-Tenant": "acme"},
    )
    assert elsewhere.status_code == 422, elsewhere.text
    assert (await shared.get("/v1/schedules"))["items"] == []


async def test_a_schedule_moves_to_an_endpoint_and_back_and_its_pending_work_follows(
    shared: Harness,
) -> None:
    made = await _endpoint(shared, flow={"parallelism": 1})
    schedule = await shared.create(
        trigger={"type": "once", "delay_seconds": 3600}, flow_key="customer-1"
    )
    refused = await shared.client.patch(
        f"/v1/schedules/{schedule['id']}",
        json={"target": {"type": "endpoint", "endpoint_id": made["id"]}},
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["pointer"] == "#/flow_key"
    moved = await shared.client.patch(
        f"/v1/schedules/{schedule['id']}",
        json={"target": {"type": "endpoint", "endpoint_id": made["id"]}, "flow_key": None},
    )
    assert moved.status_code == 200, moved.text
    assert (moved.json()["flow_key"], moved.json()["target"]["type"]) == (None, "endpoint")
    # The endpoint's key is the endpoint's: no flow key lists it.
    assert (await shared.get("/v1/flow-keys"))["items"] == []
    refused = await shared.client.delete(f"/v1/endpoints/{made['id']}")
    assert refused.status_code == 409, refused.text
    back = await shared.client.patch(
        f"/v1/schedules/{schedule['id']}", json={"target": shared.webhook()}
    )
    assert back.status_code == 200, back.text
    assert (await shared.client.delete(f"/v1/endpoints/{made['id']}")).status_code == 204
