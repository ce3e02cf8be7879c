"""Every error is an RFC 9457 problem: the right status, the fields named, no internals."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from app.main import create_app
from tests.conftest import make_settings
from tests.integration.conftest import ON_MODULE_LOOP, Harness

PROBLEM = "application/problem+json"
SECRET = "secret internals: password=hunter2 at /srv/chronoq/app.py line 42"


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    """The response is a problem document with `status`; returns it."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    problem: dict[str, Any] = response.json()
    assert problem["status"] == status
    for member in ("type", "title", "detail"):
        assert isinstance(problem[member], str), problem
        assert problem[member], problem
    return problem


UNKNOWN = str(uuid.UUID("0190a0b0-0000-7000-8000-000000000000"))

UNKNOWN_RESOURCES = [
    pytest.param("GET", f"/v1/schedules/{UNKNOWN}", None, id="get schedule"),
    pytest.param("PATCH", f"/v1/schedules/{UNKNOWN}", {"max_attempts": 3}, id="patch schedule"),
    pytest.param("DELETE", f"/v1/schedules/{UNKNOWN}", None, id="cancel schedule"),
    pytest.param("POST", f"/v1/schedules/{UNKNOWN}/pause", None, id="pause schedule"),
    pytest.param("POST", f"/v1/schedules/{UNKNOWN}/resume", None, id="resume schedule"),
    pytest.param("POST", f"/v1/schedules/{UNKNOWN}/trigger", None, id="trigger schedule"),
    pytest.param("GET", f"/v1/schedules/{UNKNOWN}/occurrences", None, id="schedule history"),
    pytest.param("GET", f"/v1/dead-letters/{UNKNOWN}", None, id="get dead letter"),
    pytest.param("POST", f"/v1/dead-letters/{UNKNOWN}/replay", None, id="replay dead letter"),
    pytest.param("DELETE", f"/v1/dead-letters/{UNKNOWN}", None, id="discard dead letter"),
]


@pytest.mark.parametrize(("method", "path", "body"), UNKNOWN_RESOURCES)
@ON_MODULE_LOOP
async def test_unknown_resource_is_a_404_problem_naming_the_id(
    shared: Harness, method: str, path: str, body: dict[str, Any] | None
) -> None:
    response = await shared.client.request(method, path, json=body)

    problem = assert_problem(response, 404)
    assert UNKNOWN in problem["detail"]


@ON_MODULE_LOOP
async def test_pending_occurrence_is_not_a_dead_letter(shared: Harness) -> None:
    created = await shared.create(trigger={"type": "once", "delay_seconds": 3600})

    response = await shared.client.get(f"/v1/dead-letters/{created['next_occurrence_id']}")

    assert_problem(response, 404)


@ON_MODULE_LOOP
async def test_unknown_route_is_a_404_problem(shared: Harness) -> None:
    response = await shared.client.get("/v1/calendars")

    assert_problem(response, 404)


WRONG_METHODS = [
    pytest.param("PUT", "/v1/schedules", {"GET", "POST"}, id="PUT on the collection"),
    pytest.param("DELETE", "/v1/schedules", {"GET", "POST"}, id="DELETE on the collection"),
    pytest.param(
        "PUT", f"/v1/schedules/{UNKNOWN}", {"GET", "PATCH", "DELETE"}, id="PUT on a schedule"
    ),
    pytest.param("GET", f"/v1/schedules/{UNKNOWN}/pause", {"POST"}, id="GET on pause"),
]


@pytest.mark.parametrize(("method", "path", "allowed"), WRONG_METHODS)
@ON_MODULE_LOOP
async def test_wrong_method_is_a_405_problem_advertising_only_allowed_methods(
    shared: Harness, method: str, path: str, allowed: set[str]
) -> None:
    response = await shared.client.request(method, path)

    assert_problem(response, 405)
    listed = {m.strip() for m in response.headers["allow"].split(",")} - {"HEAD"}
    assert listed <= allowed


@pytest.mark.parametrize(("method", "path", "allowed"), WRONG_METHODS)
@ON_MODULE_LOOP
async def test_wrong_method_answer_lists_every_method_the_resource_allows(
    shared: Harness, method: str, path: str, allowed: set[str]
) -> None:
    response = await shared.client.request(method, path)

    assert response.status_code == 405
    listed = {m.strip() for m in response.headers["allow"].split(",")} - {"HEAD"}
    assert listed == allowed


@ON_MODULE_LOOP
async def test_duplicate_name_is_a_409_problem_and_stores_nothing(shared: Harness) -> None:
    first = await shared.create(
        name="nightly-report", trigger={"type": "cron", "expression": "@daily"}
    )

    response = await shared.client.post(
        "/v1/schedules",
        json={
            "name": "nightly-report",
            "event_type": "report.other",
            "target": shared.webhook(),
            "trigger": {"type": "immediate"},
        },
    )

    problem = assert_problem(response, 409)
    assert "nightly-report" in problem["detail"]
    listed = (await shared.get("/v1/schedules"))["items"]
    assert [s["id"] for s in listed] == [first["id"]]


VALIDATOR_REFUSALS = [
    pytest.param(
        {"type": "once"},
        "#/trigger",
        "give exactly one of 'at' or 'delay_seconds'",
        id="a model validator",
    ),
    pytest.param(
        {"type": "cron", "expression": "61 * * * *"},
        "#/trigger/expression",
        "minute field: 61 is out of range 0-59",
        id="a field validator",
    ),
    pytest.param(
        {"type": "cron", "expression": "0 9 * * *", "timezone": "Mars/Olympus"},
        "#/trigger/timezone",
        "unknown IANA time zone 'Mars/Olympus'",
        id="a time zone",
    ),
]


@pytest.mark.parametrize(("trigger", "pointer", "reason"), VALIDATOR_REFUSALS)
@ON_MODULE_LOOP
async def test_a_validators_refusal_reads_as_its_reason_alone(
    shared: Harness, trigger: dict[str, Any], pointer: str, reason: str
) -> None:
    """What a validator raised reaches the client as it said it, with no "Value error,"
    before it."""
    response = await shared.client.post(
        "/v1/schedules",
        json={"event_type": "x.y", "target": shared.webhook(), "trigger": trigger},
    )

    problem = assert_problem(response, 422)
    assert [(e["pointer"], e["detail"]) for e in problem["errors"]] == [(pointer, reason)]
    assert "error," not in response.text.lower()
    assert (await shared.get("/v1/schedules"))["items"] == []


MALFORMED_PARAMETERS = [
    pytest.param("GET", "/v1/schedules/not-a-uuid", "schedule_id", id="schedule id"),
    pytest.param("GET", "/v1/schedules/xyz/occurrences", "schedule_id", id="schedule id history"),
    pytest.param("GET", "/v1/dead-letters/not-a-uuid", "occurrence_id", id="occurrence id"),
    pytest.param(
        "POST", "/v1/dead-letters/not-a-uuid/replay", "occurrence_id", id="occurrence id replay"
    ),
    pytest.param("GET", "/v1/schedules?limit=0", "limit", id="limit of zero"),
    pytest.param("GET", "/v1/schedules?limit=501", "limit", id="limit over 500"),
    pytest.param("GET", "/v1/schedules?status=sleeping", "status", id="unknown status"),
    pytest.param("GET", "/v1/schedules?target_type=sqs", "target_type", id="unknown target type"),
    pytest.param(
        "GET", "/v1/dead-letters?schedule_id=nope", "schedule_id", id="dead letter schedule filter"
    ),
    pytest.param("GET", "/v1/schedules?label=team", "label", id="label filter without a colon"),
    pytest.param("GET", "/v1/schedules?cursor=bm9wZQ", "cursor", id="cursor not issued here"),
]


@pytest.mark.parametrize(("method", "path", "parameter"), MALFORMED_PARAMETERS)
@ON_MODULE_LOOP
async def test_malformed_parameter_is_a_422_problem_naming_the_parameter(
    shared: Harness, method: str, path: str, parameter: str
) -> None:
    response = await shared.client.request(method, path)

    problem = assert_problem(response, 422)
    assert parameter in {error.get("parameter") for error in problem["errors"]}, problem
    assert parameter in {error.get("field") for error in problem["errors"]}, problem


async def test_payload_over_the_limit_is_a_413_problem_stating_the_limit(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(max_payload_bytes=2000) as harness:
        response = await harness.client.post(
            "/v1/schedules", json=spec_with(harness, {"blob": "x" * 2000})
        )

        problem = assert_problem(response, 413)
        assert "2000" in problem["detail"]
        assert {"pointer": "#/payload", "field": "payload"}.items() <= problem["errors"][0].items()
        assert (await harness.get("/v1/schedules"))["items"] == []


@pytest.mark.parametrize(
    ("length", "status"),
    [pytest.param(998, 201, id="at the limit"), pytest.param(999, 413, id="one byte over")],
)
async def test_payload_limit_counts_the_bytes_of_the_json_payload(
    make_harness: Callable[..., Any], length: int, status: int
) -> None:
    async with make_harness(max_payload_bytes=1000) as harness:
        # A JSON string of n characters is n + 2 bytes with its quotes.
        response = await harness.client.post("/v1/schedules", json=spec_with(harness, "x" * length))

        assert response.status_code == status, response.text


@ON_MODULE_LOOP
async def test_a_body_of_ten_thousand_bad_entries_is_answered_in_a_few_kib(
    shared: Harness,
) -> None:
    item = {**spec_with(shared, {"n": 1}), **{f"unknown{n}": n for n in range(10)}}

    response = await shared.client.post("/v1/schedules/batch", json={"items": [item] * 1000})

    problem = assert_problem(response, 422)
    assert len(response.content) < 16 * 1024
    assert len(problem["errors"]) == 50
    # Each item's first unknown field: its others are not looked at.
    assert "1000 errors in all; the first 50 are listed" in problem["detail"]
    assert len(problem["detail"]) <= 500
    assert problem["errors"][0] == {
        "pointer": "#/items/0/unknown0",
        "field": "items.0.unknown0",
        "detail": "Extra inputs are not permitted",
    }
    assert (await shared.get("/v1/schedules"))["items"] == []


HUGE = "x" * 100_000


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"target": {"type": HUGE}}, id="a union tag the message repeats"),
        pytest.param({"labels": {HUGE: "v"}}, id="a label key a validator repeats"),
        pytest.param({"labels": {HUGE: {"not": "text"}}}, id="a label key in the location"),
        pytest.param({"trigger": {"type": "cron", "expression": HUGE}}, id="a long value"),
    ],
)
@ON_MODULE_LOOP
async def test_no_problem_repeats_more_than_an_excerpt_of_a_huge_input(
    shared: Harness, change: dict[str, Any]
) -> None:
    response = await shared.client.post(
        "/v1/schedules", json={**spec_with(shared, {"n": 1}), **change}
    )

    problem = assert_problem(response, 422)
    assert len(response.content) < 2048
    assert len(problem["detail"]) <= 500
    for error in problem["errors"]:
        assert len(error["detail"]) <= 200
        assert all(len(error.get(name) or "") <= 200 for name in ("pointer", "field"))


def spec_with(harness: Harness, payload: Any) -> dict[str, Any]:
    return {
        "event_type": "big",
        "payload": payload,
        "target": harness.webhook(),
        "trigger": {"type": "immediate"},
    }


@pytest.fixture
async def failing_client(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The real app with one extra route that fails the way a bug would."""
    app = create_app(make_settings(database_url))

    async def explode() -> None:
        raise RuntimeError(SECRET)

    app.add_api_route("/v1/explode", explode, methods=["GET"])
    async with LifespanManager(app) as manager:
        # The server error middleware re-raises after answering; the client should see the
        # answer, as a real HTTP client would.
        transport = httpx.ASGITransport(app=manager.app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client


async def test_unexpected_error_is_a_500_problem_without_internals(
    failing_client: httpx.AsyncClient,
) -> None:
    response = await failing_client.get("/v1/explode")

    problem = assert_problem(response, 500)
    text = response.text
    for leak in ("secret", "hunter2", "RuntimeError", "Traceback", "app.py", "/srv/"):
        assert leak not in text
    assert "errors" not in problem
    assert (await failing_client.get("/healthz")).status_code == 200
