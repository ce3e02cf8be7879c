"""Bad input through the HTTP API: a 4xx problem naming the field, and nothing stored."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.integration.conftest import ON_MODULE_LOOP, Harness, fresh, shared_harness

PROBLEM = "application/problem+json"
PAYLOAD_LIMIT = 1024
HOOK = "http://127.0.0.1:9/hook"
MISSING = object()


def valid_body(**changes: Any) -> dict[str, Any]:
    """A schedule the API accepts, with `changes` applied (MISSING removes a field)."""
    body: dict[str, Any] = {
        "event_type": "invoice.due",
        "payload": {"invoice": 42},
        "target": {"type": "webhook", "url": HOOK},
        "trigger": {"type": "cron", "expression": "*/5 * * * *"},
    }
    for key, value in changes.items():
        if value is MISSING:
            del body[key]
        else:
            body[key] = value
    return body


def cron(expression: str, **extra: Any) -> dict[str, Any]:
    return {"type": "cron", "expression": expression, **extra}


def webhook(**extra: Any) -> dict[str, Any]:
    return {"type": "webhook", "url": HOOK, **extra}


def field_of(pointer: str) -> str:
    """The dotted field a JSON pointer names: "#/trigger/expression" -> "trigger.expression"."""
    return ".".join(pointer.removeprefix("#/").split("/"))


def assert_problem_names(response: httpx.Response, status: int, pointer: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    problem = response.json()
    assert problem["status"] == status
    assert problem["type"]
    assert problem["title"]
    assert problem["detail"]
    named = {(error.get("pointer"), error.get("field")) for error in problem["errors"]}
    expected = (pointer, field_of(pointer)) if pointer != "#" else (pointer, "body")
    assert expected in named, problem["errors"]


async def stored_schedules(harness: Harness) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await harness.get("/v1/schedules?limit=500"))["items"]
    return items


# The module's cases share a harness per store, its store emptied before each case: one
# without a broker and with a small payload limit (`strict`), and the suite's `shared`.
shared_strict = shared_harness(amqp_url=None, max_payload_bytes=PAYLOAD_LIMIT)


@pytest_asyncio.fixture(loop_scope="module")
async def strict(shared_strict: Harness) -> Harness:
    """A harness without a broker and with a small payload limit."""
    return await fresh(shared_strict)


BAD_SCHEDULES = [
    pytest.param(
        valid_body(trigger={"type": "weekly", "day": "monday"}),
        422,
        "#/trigger/type",
        id="unknown trigger type",
    ),
    pytest.param(
        valid_body(trigger={"expression": "* * * * *"}),
        422,
        "#/trigger/type",
        id="trigger without a type",
    ),
    pytest.param(
        valid_body(target={"type": "sqs", "queue": "jobs"}),
        422,
        "#/target/type",
        id="unknown target type",
    ),
    pytest.param(
        valid_body(trigger=cron("not a cron")),
        422,
        "#/trigger/expression",
        id="cron expression that is not cron",
    ),
    pytest.param(
        valid_body(trigger=cron("61 * * * *")),
        422,
        "#/trigger/expression",
        id="cron minute out of range",
    ),
    pytest.param(
        valid_body(trigger=cron("0 0 30 2 *")),
        422,
        "#/trigger/expression",
        id="cron that can never fire",
    ),
    pytest.param(
        valid_body(trigger=cron("0 0 * 2 1#5", timezone="Asia/Kathmandu")),
        422,
        "#/trigger/expression",
        id="cron with 27 years in a row without a tick",
    ),
    pytest.param(
        valid_body(trigger=cron("0 0 29 2 1#5", timezone="Asia/Kathmandu")),
        422,
        "#/trigger/expression",
        id="cron with a day of the month and an nth weekday",
    ),
    pytest.param(
        valid_body(trigger=cron("@fortnightly")),
        422,
        "#/trigger/expression",
        id="unknown cron macro",
    ),
    pytest.param(
        valid_body(trigger=cron("0 9 * * *", timezone="Mars/Olympus")),
        422,
        "#/trigger/timezone",
        id="unknown time zone",
    ),
    pytest.param(
        valid_body(trigger={"type": "once", "at": "2031-01-01T09:00:00"}),
        422,
        "#/trigger/at",
        id="once at without an offset",
    ),
    pytest.param(
        valid_body(trigger={"type": "once", "at": "2031-01-01T09:00:00Z", "delay_seconds": 60}),
        422,
        "#/trigger",
        id="once with both at and delay_seconds",
    ),
    pytest.param(
        valid_body(trigger={"type": "once"}),
        422,
        "#/trigger",
        id="once with neither at nor delay_seconds",
    ),
    pytest.param(
        valid_body(trigger={"type": "once", "delay_seconds": -5}),
        422,
        "#/trigger/delay_seconds",
        id="negative delay_seconds",
    ),
    pytest.param(
        valid_body(trigger={"type": "interval", "every_seconds": 0.5}),
        422,
        "#/trigger/every_seconds",
        id="interval shorter than a second",
    ),
    pytest.param(
        valid_body(
            trigger={"type": "interval", "every_seconds": 60, "start_at": "2031-01-01T00:00:00"}
        ),
        422,
        "#/trigger/start_at",
        id="interval start_at without an offset",
    ),
    pytest.param(
        valid_body(target={"type": "webhook", "url": "ftp://127.0.0.1/hook"}),
        422,
        "#/target/url",
        id="ftp url",
    ),
    pytest.param(
        valid_body(target={"type": "webhook", "url": "http:///hook"}),
        422,
        "#/target/url",
        id="url without a host",
    ),
    pytest.param(
        valid_body(target=webhook(method="GET")),
        422,
        "#/target/method",
        id="webhook method GET",
    ),
    pytest.param(
        valid_body(target=webhook(headers={"X-Occurrence-Id": "mine"})),
        422,
        "#/target/headers",
        id="reserved header X-Occurrence-Id",
    ),
    pytest.param(
        valid_body(target=webhook(headers={"idempotency-key": "mine"})),
        422,
        "#/target/headers",
        id="reserved header Idempotency-Key in lower case",
    ),
    pytest.param(
        valid_body(target=webhook(headers={"X-Team": "a\r\nHost: elsewhere"})),
        422,
        "#/target/headers",
        id="header value with a line break",
    ),
    pytest.param(
        valid_body(payload={"blob": "x" * (PAYLOAD_LIMIT + 1)}),
        413,
        "#/payload",
        id="payload over the limit",
    ),
    pytest.param(
        valid_body(colour="blue"),
        422,
        "#/colour",
        id="unknown top-level field",
    ),
    pytest.param(
        valid_body(trigger=cron("*/5 * * * *", jitter=3)),
        422,
        "#/trigger/jitter",
        id="unknown field inside trigger",
    ),
    pytest.param(
        valid_body(target=webhook(retries=3)),
        422,
        "#/target/retries",
        id="unknown field inside target",
    ),
    pytest.param(
        valid_body(event_type=MISSING),
        422,
        "#/event_type",
        id="missing event_type",
    ),
    pytest.param(
        valid_body(max_attempts=0),
        422,
        "#/max_attempts",
        id="max_attempts of zero",
    ),
    pytest.param(
        valid_body(target={"type": "rabbitmq", "exchange": "", "routing_key": "jobs"}),
        422,
        "#/target/type",
        id="rabbitmq target without AMQP_URL",
    ),
    pytest.param(
        valid_body(labels={"team:core": "payments"}),
        422,
        "#/labels",
        id="label key with a colon",
    ),
    pytest.param(valid_body(flow_key=""), 422, "#/flow_key", id="empty flow key"),
    pytest.param(valid_body(flow_key="customer 42"), 422, "#/flow_key", id="flow key with a space"),
    pytest.param(
        valid_body(flow_key="k" * 129), 422, "#/flow_key", id="flow key over 128 characters"
    ),
    pytest.param(
        valid_body(flow_key="caf\u00e9\u0000"), 422, "#/flow_key", id="flow key out of the alphabet"
    ),
    pytest.param(valid_body(flow_key=42), 422, "#/flow_key", id="flow key that is a number"),
]


@pytest.mark.parametrize(("body", "status", "pointer"), BAD_SCHEDULES)
@ON_MODULE_LOOP
async def test_bad_schedule_is_refused_with_the_field_named_and_nothing_stored(
    strict: Harness, body: dict[str, Any], status: int, pointer: str
) -> None:
    response = await strict.client.post("/v1/schedules", json=body)

    assert_problem_names(response, status, pointer)
    assert await stored_schedules(strict) == []


@ON_MODULE_LOOP
async def test_body_that_is_not_json_is_refused_and_nothing_stored(shared: Harness) -> None:
    response = await shared.client.post(
        "/v1/schedules",
        content=b'{"event_type": "invoice.due", ',
        headers={"Content-Type": "application/json"},
    )

    assert_problem_names(response, 400, "#")
    assert await stored_schedules(shared) == []


def batch_of(count: int, **changes_at_3: Any) -> dict[str, Any]:
    """`count` valid named items, with `changes_at_3` applied to the item at index 3."""
    items = [valid_body(name=f"item-{index}") for index in range(count)]
    items[3] = valid_body(**{"name": "item-3", **changes_at_3})
    return {"items": items}


BAD_BATCHES = [
    pytest.param(
        batch_of(6, trigger=cron("every minute")),
        422,
        "#/items/3/trigger/expression",
        id="invalid cron at index 3",
    ),
    pytest.param(
        batch_of(6, target={"type": "webhook", "url": "ftp://127.0.0.1/x"}),
        422,
        "#/items/3/target/url",
        id="ftp url at index 3",
    ),
    pytest.param(
        batch_of(6, colour="blue"),
        422,
        "#/items/3/colour",
        id="unknown field at index 3",
    ),
    pytest.param(
        batch_of(6, target={"type": "rabbitmq", "routing_key": "jobs"}),
        422,
        "#/items/3/target/type",
        id="rabbitmq target without AMQP_URL at index 3",
    ),
    pytest.param(
        batch_of(6, payload="x" * (PAYLOAD_LIMIT + 1)),
        413,
        "#/items/3/payload",
        id="payload over the limit at index 3",
    ),
    pytest.param(
        batch_of(6, name="item-1"),
        422,
        "#/items/3/name",
        id="name repeated within the batch at index 3",
    ),
    pytest.param(
        {"items": [valid_body() for _ in range(1001)]},
        422,
        "#/items",
        id="1001 items",
    ),
]


@pytest.mark.parametrize(("body", "status", "pointer"), BAD_BATCHES)
@ON_MODULE_LOOP
async def test_bad_batch_is_refused_with_the_item_named_and_nothing_stored(
    strict: Harness, body: dict[str, Any], status: int, pointer: str
) -> None:
    response = await strict.client.post("/v1/schedules/batch", json=body)

    assert_problem_names(response, status, pointer)
    assert await stored_schedules(strict) == []


@ON_MODULE_LOOP
async def test_batch_naming_an_existing_schedule_conflicts_and_stores_none_of_its_items(
    shared: Harness,
) -> None:
    existing = await shared.create(name="item-3", trigger={"type": "interval", "every_seconds": 60})

    response = await shared.client.post("/v1/schedules/batch", json=batch_of(6))

    assert response.status_code == 409, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.json()["errors"][0]["pointer"] == "#/items/3/name"
    assert [s["id"] for s in await stored_schedules(shared)] == [existing["id"]]


BAD_PATCHES = [
    pytest.param(
        {"trigger": cron("61 * * * *")},
        422,
        "#/trigger/expression",
        id="invalid cron",
    ),
    pytest.param(
        {"payload": {"changed": True}, "trigger": cron("@sometimes")},
        422,
        "#/trigger/expression",
        id="valid payload with an invalid trigger",
    ),
    pytest.param(
        {"trigger": {"type": "once", "at": "2031-01-01T09:00:00"}},
        422,
        "#/trigger/at",
        id="once at without an offset",
    ),
    pytest.param(
        {"trigger": None},
        422,
        "#/trigger",
        id="null trigger",
    ),
    pytest.param(
        {"trigger": cron("0 0 * 2 1#5")},
        422,
        "#/trigger/expression",
        id="cron with 27 years in a row without a tick",
    ),
    pytest.param(
        {"target": {"type": "webhook", "url": "ftp://127.0.0.1/x"}},
        422,
        "#/target/url",
        id="ftp url",
    ),
    pytest.param(
        {"target": {"type": "rabbitmq", "routing_key": "jobs"}},
        422,
        "#/target/type",
        id="rabbitmq target without AMQP_URL",
    ),
    pytest.param(
        {"max_attempts": 0},
        422,
        "#/max_attempts",
        id="max_attempts of zero",
    ),
    pytest.param(
        {"labels": {"a:b": "c"}},
        422,
        "#/labels",
        id="label key with a colon",
    ),
    pytest.param(
        {"name": "renamed"},
        422,
        "#/name",
        id="field that cannot be patched",
    ),
    pytest.param(
        {"payload": "x" * (PAYLOAD_LIMIT + 1)},
        413,
        "#/payload",
        id="payload over the limit",
    ),
    pytest.param({"flow_key": "a/b"}, 422, "#/flow_key", id="flow key with a slash"),
]


@pytest.mark.parametrize(("patch", "status", "pointer"), BAD_PATCHES)
@ON_MODULE_LOOP
async def test_bad_patch_is_refused_and_leaves_the_schedule_unchanged(
    strict: Harness, patch: dict[str, Any], status: int, pointer: str
) -> None:
    created = await strict.create(trigger=cron("0 9 * * *"), labels={"team": "billing"})
    path = f"/v1/schedules/{created['id']}"
    before = await strict.get(path)
    occurrences_before = await strict.occurrences(created["id"])

    response = await strict.client.patch(path, json=patch)

    assert_problem_names(response, status, pointer)
    assert await strict.get(path) == before
    assert await strict.occurrences(created["id"]) == occurrences_before


BAD_FLOW_KEYS = [
    pytest.param({"rate": 0}, "#/rate", id="zero rate"),
    pytest.param({"rate": -5}, "#/rate", id="negative rate"),
    pytest.param({"rate": 10**12}, "#/rate", id="huge rate"),
    pytest.param({"rate": 1.5}, "#/rate", id="fractional rate"),
    pytest.param({"rate": "5"}, "#/rate", id="rate that is a string"),
    pytest.param({"rate": 5, "period_seconds": 0}, "#/period_seconds", id="zero period"),
    pytest.param({"rate": 5, "period_seconds": 1e9}, "#/period_seconds", id="period over a day"),
    pytest.param({"burst": 5}, "#/burst", id="burst without a rate"),
    pytest.param({"parallelism": 0}, "#/parallelism", id="parallelism 0"),
    pytest.param({"ordering": "lifo"}, "#/ordering", id="unknown ordering"),
    pytest.param(
        {"ordering": "fifo", "parallelism": 2}, "#/parallelism", id="fifo with parallelism 2"
    ),
    pytest.param({"paused": "yes"}, "#/paused", id="paused that is a string"),
    pytest.param({"in_flight": 3}, "#/in_flight", id="a live figure as input"),
]


@pytest.mark.parametrize(("body", "pointer"), BAD_FLOW_KEYS)
@ON_MODULE_LOOP
async def test_bad_flow_key_limits_are_refused_and_nothing_stored(
    strict: Harness, body: dict[str, Any], pointer: str
) -> None:
    response = await strict.client.put("/v1/flow-keys/bad-input", json=body)

    assert_problem_names(response, 422, pointer)
    assert (await strict.get("/v1/flow-keys/bad-input"))["version"] is None


@pytest.mark.parametrize(
    "key", ["a%20b", "caf%C3%A9", "k" * 129, "a%00b"], ids=["space", "accent", "long", "nul"]
)
@ON_MODULE_LOOP
async def test_a_flow_key_out_of_the_alphabet_is_refused_as_the_path_names_it(
    strict: Harness, key: str
) -> None:
    response = await strict.client.put(f"/v1/flow-keys/{key}", json={"rate": 1})
    assert response.status_code == 422, response.text
    assert {error.get("field") for error in response.json()["errors"]} == {"key"}


BAD_RETRIES = [
    pytest.param({"base_delay_seconds": 0}, "#/retry/base_delay_seconds", id="zero base"),
    pytest.param({"base_delay_seconds": -1}, "#/retry/base_delay_seconds", id="negative base"),
    # A retry every millisecond, a thousand times: retries are at least 0.1 s apart.
    pytest.param(
        {"base_delay_seconds": 0.001, "max_delay_seconds": 0.001},
        "#/retry/base_delay_seconds",
        id="base below the floor",
    ),
    pytest.param(
        {"base_delay_seconds": 0.0999}, "#/retry/base_delay_seconds", id="base just below the floor"
    ),
    pytest.param({"max_delay_seconds": 1e12}, "#/retry/max_delay_seconds", id="max over a day"),
    pytest.param(
        {"base_delay_seconds": 60, "max_delay_seconds": 30},
        "#/retry/max_delay_seconds",
        id="max below base",
    ),
    # The service's own policy here: 0.05 s doubling up to 0.2 s.
    pytest.param(
        {"max_delay_seconds": 0.01}, "#/retry/max_delay_seconds", id="max below the service's base"
    ),
    pytest.param(
        {"base_delay_seconds": 1}, "#/retry/base_delay_seconds", id="base above the service's max"
    ),
    pytest.param({"jitter": "yes"}, "#/retry/jitter", id="jitter that is a string"),
    pytest.param({"base_delay_seconds": "5"}, "#/retry/base_delay_seconds", id="base as a string"),
    pytest.param({"attempts": 3}, "#/retry/attempts", id="unknown retry field"),
]


@pytest.mark.parametrize(("retry", "pointer"), BAD_RETRIES)
@ON_MODULE_LOOP
async def test_a_bad_retry_policy_is_refused_on_create_and_on_patch(
    strict: Harness, retry: dict[str, Any], pointer: str
) -> None:
    response = await strict.client.post("/v1/schedules", json=valid_body(retry=retry))
    assert_problem_names(response, 422, pointer)
    assert await stored_schedules(strict) == []

    created = await strict.create(trigger=cron("0 9 * * *"))
    path = f"/v1/schedules/{created['id']}"
    patched = await strict.client.patch(path, json={"retry": retry})
    assert_problem_names(patched, 422, pointer)
    assert (await strict.get(path))["retry"] is None
