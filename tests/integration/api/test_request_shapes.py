"""Bodies that are not JSON, methods a resource does not accept, and how the OpenAPI
document declares those answers."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest

from app.domain.schedule import NOT_NULLABLE
from app.main import create_app
from tests.integration.conftest import ON_MODULE_LOOP, Harness

PROBLEM = "application/problem+json"


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"Content-Type": "text/plain"}, id="text/plain"),
        pytest.param({"Content-Type": "application/x-www-form-urlencoded"}, id="form"),
        pytest.param({}, id="no content type"),
    ],
)
@ON_MODULE_LOOP
async def test_a_body_that_is_not_declared_json_is_a_415_problem(
    shared: Harness, headers: dict[str, str]
) -> None:
    body = b'{"event_type": "x", "target": {}, "trigger": {"type": "immediate"}}'

    response = await shared.client.post("/v1/schedules", content=body, headers=headers)

    assert response.status_code == 415, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.json()["status"] == 415
    assert (await shared.get("/v1/schedules"))["items"] == []


@ON_MODULE_LOOP
async def test_a_json_body_that_is_not_utf8_is_a_400_problem(shared: Harness) -> None:
    response = await shared.client.post(
        "/v1/schedules",
        content=b'{"event_type": "\xff"}',
        headers={"Content-Type": "application/json"},
    )

    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.json()["title"] == "Bad Request"


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        pytest.param("PATCH", "/v1/schedules/batch", "POST", id="PATCH on the batch"),
        pytest.param("DELETE", "/v1/schedules/batch", "POST", id="DELETE on the batch"),
        pytest.param("GET", "/v1/dead-letters/replay", "POST", id="GET on the bulk replay"),
        pytest.param("OPTIONS", "/v1/dead-letters/replay", "POST", id="OPTIONS on the replay"),
    ],
)
@ON_MODULE_LOOP
async def test_a_literal_path_is_never_taken_for_an_id(
    shared: Harness, method: str, path: str, allowed: str
) -> None:
    response = await shared.client.request(method, path, json={} if method == "PATCH" else None)

    assert response.status_code == 405, response.text
    assert response.headers["allow"] == allowed
    assert response.headers["content-type"].startswith(PROBLEM)


@functools.cache
def _document() -> dict[str, Any]:
    """The app's OpenAPI document, built once for the module's cases: building one takes a
    third of a second, and they only read it."""
    document: dict[str, Any] = create_app().openapi()
    return document


def _operations() -> list[tuple[str, str, dict[str, Any]]]:
    document = _document()
    return [
        (method.upper(), path, operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    ]


def test_every_operation_with_a_body_declares_400_415_and_422_problems() -> None:
    for method, path, operation in _operations():
        if "requestBody" not in operation:
            continue
        declared = operation["responses"]
        assert {"400", "415", "422"} <= declared.keys(), (method, path)


def test_every_operation_on_the_database_declares_a_retryable_503() -> None:
    for method, path, operation in _operations():
        if not path.startswith(("/v1/schedules", "/v1/dead-letters")):
            continue
        unavailable = operation["responses"]["503"]
        assert unavailable["headers"]["Retry-After"]["required"] is True, (method, path)


def test_every_declared_problem_is_application_problem_json() -> None:
    for method, path, operation in _operations():
        if path == "/readyz":
            continue  # its 503 is the readiness report itself
        for status, response in operation["responses"].items():
            if int(status) >= 400:
                assert list(response["content"]) == [PROBLEM], (method, path, status)
                schema = response["content"][PROBLEM]["schema"]
                assert schema == {"$ref": "#/components/schemas/Problem"}


@pytest.mark.parametrize("field", NOT_NULLABLE)
@ON_MODULE_LOOP
async def test_a_patch_field_the_schema_does_not_offer_null_refuses_null(
    shared: Harness, field: str
) -> None:
    schema = _document()["components"]["schemas"]["SchedulePatch"]
    assert "null" not in json.dumps(schema["properties"][field])
    created = await shared.create(trigger={"type": "cron", "expression": "0 9 * * *"})

    response = await shared.client.patch(f"/v1/schedules/{created['id']}", json={field: None})

    assert response.status_code == 422, response.text
    assert [e["pointer"] for e in response.json()["errors"]] == [f"#/{field}"]


@pytest.mark.parametrize("field", ["payload", "max_occurrences"])
@ON_MODULE_LOOP
async def test_a_patch_field_the_schema_offers_null_takes_null(shared: Harness, field: str) -> None:
    created = await shared.create(
        trigger={"type": "cron", "expression": "0 9 * * *"}, max_occurrences=5
    )

    response = await shared.client.patch(f"/v1/schedules/{created['id']}", json={field: None})

    assert response.status_code == 200, response.text
    assert response.json()[field] is None
