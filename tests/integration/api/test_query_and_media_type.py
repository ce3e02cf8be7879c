"""A body sent as something other than JSON is told what to send; a query parameter an
operation does not declare is refused, naming it, on every /v1 route and on no other."""

from __future__ import annotations

import re

import pytest

from tests.integration.conftest import ON_MODULE_LOOP, Harness

PROBLEM = "application/problem+json"


BODY = b'{"event_type": "x", "target": {}, "trigger": {"type": "immediate"}}'


@pytest.mark.parametrize(
    ("headers", "told"),
    [
        pytest.param({"Content-Type": "text/plain"}, "it was sent as 'text/plain'", id="text"),
        pytest.param({}, "it had no Content-Type", id="none"),
    ],
)
@ON_MODULE_LOOP
async def test_a_body_not_sent_as_json_is_a_415_saying_what_to_send(
    shared: Harness, headers: dict[str, str], told: str
) -> None:
    created = await shared.create(trigger={"type": "once", "delay_seconds": 3600})

    posted = await shared.client.post("/v1/schedules", content=BODY, headers=headers)
    patched = await shared.client.patch(
        f"/v1/schedules/{created['id']}", content=b'{"max_attempts": 2}', headers=headers
    )

    for response in (posted, patched):
        assert response.status_code == 415, response.text
        assert response.headers["content-type"].startswith(PROBLEM)
        detail = response.json()["detail"]
        assert "Content-Type: application/json" in detail
        assert told in detail
    assert posted.headers["accept-post"] == "application/json"
    assert patched.headers["accept-patch"] == "application/json"
    assert len((await shared.get("/v1/schedules"))["items"]) == 1
    assert (await shared.get(f"/v1/schedules/{created['id']}"))["max_attempts"] != 2


@ON_MODULE_LOOP
async def test_an_unknown_query_parameter_is_a_422_naming_it(shared: Harness) -> None:
    await shared.create(trigger={"type": "once", "delay_seconds": 3600})

    response = await shared.client.get("/v1/schedules?staus=paused&limit=5&zz=1")

    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    problem = response.json()
    assert [e["parameter"] for e in problem["errors"]] == ["staus", "zz"]
    assert "staus" in problem["detail"]
    assert "status" in problem["detail"]  # what the operation takes


@ON_MODULE_LOOP
async def test_declared_parameters_and_aliases_still_work(shared: Harness) -> None:
    created = await shared.create(
        trigger={"type": "once", "delay_seconds": 3600}, labels={"team": "ops"}
    )

    listed = await shared.get(
        "/v1/schedules?status=pending&label=team:ops&limit=5&event_type=test.event"
    )
    occurrences = await shared.get(f"/v1/schedules/{created['id']}/occurrences?limit=1")
    dead = await shared.get("/v1/dead-letters?limit=1")

    assert [s["id"] for s in listed["items"]] == [created["id"]]
    assert len(occurrences["items"]) == 1
    assert dead["items"] == []


@ON_MODULE_LOOP
async def test_every_v1_operation_refuses_an_unknown_parameter(shared: Harness) -> None:
    created = await shared.create(trigger={"type": "once", "delay_seconds": 3600})
    ids = {"schedule_id": created["id"], "occurrence_id": created["next_occurrence_id"]}
    paths = (await shared.get("/openapi.json"))["paths"]
    operations = [
        (method.upper(), re.sub(r"\{(\w+)\}", lambda m: ids.get(m[1], "x"), template))
        for template, methods in paths.items()
        if template.startswith("/v1/")
        for method in methods
    ]
    assert len(operations) >= 10

    for method, path in operations:
        body: dict[str, object] | None = None if method in ("GET", "DELETE") else {}
        response = await shared.client.request(method, f"{path}?no_such_parameter=1", json=body)
        assert response.status_code == 422, (method, path, response.text)
        assert response.json()["errors"][0]["parameter"] == "no_such_parameter"
    # None of them changed anything.
    assert (await shared.get(f"/v1/schedules/{created['id']}"))["status"] == "pending"


@ON_MODULE_LOOP
async def test_routes_outside_v1_take_any_query(shared: Harness) -> None:
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
        response = await shared.client.get(f"{path}?cache_buster=1")
        assert response.status_code == 200, (path, response.text)
