"""Hostile or careless input through the HTTP API: a 422 problem naming the field, nothing
stored; and nothing a row may hold makes a later read fail."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import pytest_asyncio
import sqlalchemy as sa
from croniter import croniter
from pydantic import TypeAdapter

from app.domain import limits
from app.domain.limits import STORED
from app.domain.target import EndpointTarget, Target, TopicTarget
from app.domain.trigger import first_fire_or_refuse
from app.store.schema.tables import schedules
from tests.conftest import ALL_STORES, EMBEDDED_ONLY, STORES
from tests.integration.api.test_bad_input import (
    HOOK,
    PROBLEM,
    assert_problem_names,
    cron,
    stored_schedules,
    valid_body,
    webhook,
)
from tests.integration.conftest import ON_MODULE_LOOP, Harness, fresh, shared_harness
from tests.receiver import Reply

TEN_YEARS = 10 * 365 * 86400
# Query parameters as the (name, value) pairs httpx takes, repeated names included.
QueryPairs = list[tuple[str, str | int | float | bool | None]]


def interval(every: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "interval", "every_seconds": every, **extra}


def nested(depth: int) -> str:
    """JSON text of arrays nested `depth` levels deep."""
    return "[" * depth + "]" * depth


def raw_body(payload_text: str, **changes: Any) -> bytes:
    """A valid schedule whose payload is the given JSON text, spelled as-is (json.dumps
    would refuse NaN with allow_nan=False and cannot write a lone surrogate)."""
    body = json.dumps(valid_body(payload="PAYLOAD", **changes))
    return body.replace('"PAYLOAD"', payload_text).encode()


async def post_raw(harness: Harness, path: str, content: bytes) -> Any:
    return await harness.client.post(
        path, content=content, headers={"Content-Type": "application/json"}
    )


def assert_parameter_named(response: Any, parameter: str) -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    named = [e.get("parameter", "") for e in response.json()["errors"]]
    assert any(p == parameter or p.startswith(f"{parameter}.") for p in named), named


# The module's cases that need no harness of their own share one per store, its store
# emptied before each case: the suite's `shared`, and one without a broker.
shared_offline = shared_harness(amqp_url=None)
# The cases that keep to the embedded store.
SHARED_EMBEDDED_ONLY = pytest.mark.parametrize("shared_offline", STORES[:1], indirect=True)


@pytest_asyncio.fixture(loop_scope="module")
async def offline(shared_offline: Harness) -> Harness:
    return await fresh(shared_offline)


# -- bounds on numbers and instants -----------------------------------------------------

OUT_OF_BOUNDS = [
    pytest.param(valid_body(trigger=interval(1e18)), "#/trigger/every_seconds", id="every 1e18"),
    pytest.param(valid_body(trigger=interval(1e300)), "#/trigger/every_seconds", id="every 1e300"),
    pytest.param(
        valid_body(trigger=interval(TEN_YEARS + 1)),
        "#/trigger/every_seconds",
        id="every just over ten years",
    ),
    pytest.param(
        valid_body(trigger={"type": "once", "delay_seconds": 1e18}),
        "#/trigger/delay_seconds",
        id="delay 1e18",
    ),
    pytest.param(valid_body(max_occurrences=2**63), "#/max_occurrences", id="max_occurrences 2^63"),
    pytest.param(
        valid_body(max_occurrences=10**9 + 1), "#/max_occurrences", id="max_occurrences 10^9+1"
    ),
    pytest.param(valid_body(jitter_seconds=86401), "#/jitter_seconds", id="jitter over a day"),
    pytest.param(
        valid_body(misfire_grace_seconds=1e18), "#/misfire_grace_seconds", id="grace 1e18"
    ),
    pytest.param(valid_body(max_catchup=10**12), "#/max_catchup", id="max_catchup 10^12"),
    pytest.param(
        valid_body(target=webhook(timeout_seconds=1e18)),
        "#/target/timeout_seconds",
        id="timeout 1e18",
    ),
    pytest.param(
        valid_body(target=webhook(timeout_seconds=3601)),
        "#/target/timeout_seconds",
        id="timeout over an hour",
    ),
    pytest.param(
        valid_body(trigger={"type": "once", "at": "9999-12-31T23:59:59-14:00"}),
        "#/trigger/at",
        id="at past year 9999 once in UTC",
    ),
    pytest.param(
        valid_body(trigger={"type": "once", "at": "9999-01-01T00:00:00Z"}),
        "#/trigger/at",
        id="at the horizon",
    ),
    pytest.param(
        valid_body(trigger={"type": "once", "at": "0001-01-01T00:00:00+14:00"}),
        "#/trigger/at",
        id="at before year 1 once in UTC",
    ),
    pytest.param(
        valid_body(trigger={"type": "once", "at": "1969-12-31T23:59:59Z"}),
        "#/trigger/at",
        id="at before 1970",
    ),
    pytest.param(
        valid_body(trigger=interval(60, start_at="0001-01-01T00:00:00Z")),
        "#/trigger/start_at",
        id="interval start_at in year 1",
    ),
    pytest.param(
        valid_body(trigger=cron("0 9 * * *", end_at="9999-12-31T23:59:59Z")),
        "#/trigger/end_at",
        id="cron end_at in year 9999",
    ),
]


@pytest.mark.parametrize(("body", "pointer"), OUT_OF_BOUNDS)
@ON_MODULE_LOOP
async def test_numbers_and_instants_out_of_bounds_are_refused_and_nothing_stored(
    offline: Harness, body: dict[str, Any], pointer: str
) -> None:
    response = await offline.client.post("/v1/schedules", json=body)

    assert_problem_names(response, 422, pointer)
    assert await stored_schedules(offline) == []


@ALL_STORES
async def test_the_largest_accepted_values_read_back_and_plan_without_overflow(
    harness: Harness,
) -> None:
    last = "9998-12-31T23:59:59.999999Z"
    created = [
        await harness.create(
            trigger={"type": "once", "at": last},
            jitter_seconds=86400,
            max_occurrences=10**9,
            target=harness.webhook(timeout_seconds=3600),
        ),
        await harness.create(trigger=interval(TEN_YEARS, start_at=last), jitter_seconds=86400),
        await harness.create(trigger=cron("59 23 31 12 *", timezone="Etc/GMT+12")),
        await harness.create(trigger={"type": "once", "delay_seconds": TEN_YEARS}),
    ]

    for schedule in created:
        snapshot = await harness.get(f"/v1/schedules/{schedule['id']}")
        assert snapshot["next_fire_at"] < "9999"
    assert len((await harness.get("/v1/schedules"))["items"]) == 4


# -- the preview and backfill ------------------------------------------------------------


@ON_MODULE_LOOP
async def test_a_preview_whose_ticks_overflow_is_refused_naming_the_interval(
    shared: Harness,
) -> None:
    response = await shared.client.post(
        "/v1/triggers/preview", json={"trigger": interval(1e10), "count": 100}
    )

    assert_problem_names(response, 422, "#/trigger/every_seconds")


@ON_MODULE_LOOP
async def test_a_preview_stops_at_the_year_9999_edge(shared: Harness) -> None:
    response = await shared.client.post(
        "/v1/triggers/preview",
        json={
            "trigger": interval(TEN_YEARS / 10, start_at="9990-01-01T00:00:00Z"),
            "after": "9989-01-01T00:00:00Z",
            "count": 100,
        },
    )

    assert response.status_code == 200, response.text
    times = response.json()["fire_times"]
    assert 0 < len(times) < 100
    assert all(t < "9999" for t in times)


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        pytest.param({"trigger": interval(60), "after": "0001-01-01T00:00:00Z"}, "#/after"),
        pytest.param({"trigger": interval(60), "after": 4102444800}, "#/after"),
        pytest.param({"trigger": interval(60), "count": 10**6}, "#/count"),
        pytest.param({"trigger": interval(60), "max_occurrences": 2**63}, "#/max_occurrences"),
        pytest.param({"trigger": interval(60), "count": "5"}, "#/count"),
    ],
)
@ON_MODULE_LOOP
async def test_a_preview_out_of_bounds_is_refused_naming_the_field(
    shared: Harness, body: dict[str, Any], pointer: str
) -> None:
    response = await shared.client.post("/v1/triggers/preview", json=body)

    assert_problem_names(response, 422, pointer)


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        pytest.param(
            {"from": "0001-01-01T00:00:00Z", "to": "2020-01-01T00:00:00Z"},
            "#/from",
            id="from year 1",
        ),
        pytest.param(
            {"from": "2020-01-01T00:00:00Z", "to": "9999-12-31T23:59:59-14:00"},
            "#/to",
            id="to past year 9999",
        ),
        pytest.param(
            {"from": "1970-01-01T00:00:00Z", "to": "2020-01-01T00:00:00Z"},
            "#/to",
            id="more than 1000 ticks",
        ),
        pytest.param({"from": 0, "to": "2020-01-01T00:00:00Z"}, "#/from", id="from a number"),
    ],
)
@ON_MODULE_LOOP
async def test_a_backfill_out_of_bounds_is_refused_naming_the_field_and_creates_nothing(
    shared: Harness, body: dict[str, Any], pointer: str
) -> None:
    created = await shared.create(trigger=cron("0 * * * *", start_at="2019-01-01T00:00:00Z"))
    before = await shared.occurrences(created["id"])

    response = await shared.client.post(f"/v1/schedules/{created['id']}/backfill", json=body)

    assert_problem_names(response, 422, pointer)
    assert await shared.occurrences(created["id"]) == before


BAD_PATCHES = [
    pytest.param({"trigger": interval(1e18)}, "#/trigger/every_seconds", id="every 1e18"),
    pytest.param({"max_occurrences": 2**63}, "#/max_occurrences", id="max_occurrences 2^63"),
    pytest.param(
        {"target": webhook(timeout_seconds=1e9)}, "#/target/timeout_seconds", id="timeout 1e9"
    ),
    pytest.param(
        {"trigger": {"type": "once", "at": "9999-12-31T23:59:59-14:00"}},
        "#/trigger/at",
        id="at past year 9999",
    ),
    pytest.param({"labels": {f"k{i}": "v" for i in range(65)}}, "#/labels", id="65 labels"),
    pytest.param({"max_attempts": "5"}, "#/max_attempts", id="max_attempts as a string"),
    pytest.param(
        {"target": webhook(url="http://127.1/hook")}, "#/target/url", id="short IPv4 form"
    ),
]


@pytest.mark.parametrize(("patch", "pointer"), BAD_PATCHES)
@ON_MODULE_LOOP
async def test_a_patch_has_the_bounds_of_a_create(
    shared: Harness, patch: dict[str, Any], pointer: str
) -> None:
    created = await shared.create(trigger=cron("0 9 * * *"))
    path = f"/v1/schedules/{created['id']}"
    before = await shared.get(path)

    response = await shared.client.patch(path, json=patch)

    assert_problem_names(response, 422, pointer)
    assert await shared.get(path) == before


@ON_MODULE_LOOP
async def test_a_patch_nested_too_deep_is_refused_naming_the_payload(shared: Harness) -> None:
    created = await shared.create(trigger=cron("0 9 * * *"))
    path = f"/v1/schedules/{created['id']}"
    before = await shared.get(path)

    response = await shared.client.patch(
        path,
        content=f'{{"payload": {nested(65)}}}'.encode(),
        headers={"Content-Type": "application/json"},
    )

    assert_problem_names(response, 422, "#/payload")
    assert await shared.get(path) == before


# -- payloads: nesting, NaN, surrogates ------------------------------------------------------


@ON_MODULE_LOOP
async def test_a_payload_nested_64_deep_is_accepted_and_65_refused(shared: Harness) -> None:
    accepted = await post_raw(shared, "/v1/schedules", raw_body(nested(64)))
    refused = await post_raw(shared, "/v1/schedules", raw_body(nested(65)))
    deeper = await post_raw(shared, "/v1/schedules", raw_body(nested(300)))

    assert accepted.status_code == 201, accepted.text
    assert_problem_names(refused, 422, "#/payload")
    assert_problem_names(deeper, 422, "#/payload")
    assert [s["id"] for s in await stored_schedules(shared)] == [accepted.json()["id"]]


@ON_MODULE_LOOP
async def test_a_deeply_nested_object_payload_is_refused(shared: Harness) -> None:
    payload = '{"a":' * 100 + "1" + "}" * 100

    response = await post_raw(shared, "/v1/schedules", raw_body(payload))

    assert_problem_names(response, 422, "#/payload")
    assert await stored_schedules(shared) == []


@pytest.mark.parametrize(
    ("payload", "pointer"),
    [
        pytest.param('{"a": NaN}', "#/payload/a", id="NaN"),
        pytest.param('{"a": [1, Infinity]}', "#/payload/a/1", id="Infinity"),
        pytest.param("-Infinity", "#/payload", id="-Infinity at the top"),
        pytest.param('{"a": {"b": 1e999}}', "#/payload/a/b", id="a number beyond float"),
        pytest.param('{"a": ["ok", "\\ud800"]}', "#/payload/a/1", id="lone surrogate"),
        pytest.param('{"a": {"\\udfff": 1}}', "#/payload/a", id="lone surrogate in a key"),
    ],
)
@ON_MODULE_LOOP
async def test_a_payload_that_is_not_json_text_is_refused_naming_its_path(
    shared: Harness, payload: str, pointer: str
) -> None:
    response = await post_raw(shared, "/v1/schedules", raw_body(payload))

    assert_problem_names(response, 422, pointer)
    assert await stored_schedules(shared) == []


@pytest.mark.parametrize(
    ("text", "pointer"),
    [
        pytest.param(
            '{"event_type": "\\ud800", "trigger": {"type": "immediate"}, "target": TARGET}',
            "#/event_type",
            id="event_type",
        ),
        pytest.param(
            '{"event_type": "x", "name": "a\\ud800", "trigger": {"type": "immediate"}, '
            '"target": TARGET}',
            "#/name",
            id="name",
        ),
        pytest.param(
            '{"event_type": "x", "labels": {"team": "\\udc00"}, "trigger": {"type": "immediate"}, '
            '"target": TARGET}',
            "#/labels/team",
            id="label value",
        ),
        pytest.param(
            '{"event_type": "x", "labels": {"\\ud800": "v"}, "trigger": {"type": "immediate"}, '
            '"target": TARGET}',
            "#/labels",
            id="label key",
        ),
        pytest.param(
            '{"event_type": "x", "trigger": {"type": "immediate"}, '
            '"target": {"type": "webhook", "url": "http://127.0.0.1:9/", '
            '"headers": {"X-Team": "\\ud800"}}}',
            "#/target/headers/X-Team",
            id="header value",
        ),
        pytest.param(
            '{"event_type": "x", "trigger": {"type": "\\ud800"}, "target": TARGET}',
            "#/trigger/type",
            id="trigger type",
        ),
        pytest.param(
            '{"event_type": "x", "\\ud800": 1, "trigger": {"type": "immediate"}, "target": TARGET}',
            "#",
            id="unknown field name",
        ),
    ],
)
@ON_MODULE_LOOP
async def test_a_lone_surrogate_anywhere_is_refused_naming_the_field(
    shared: Harness, text: str, pointer: str
) -> None:
    target = json.dumps(shared.webhook())

    response = await post_raw(shared, "/v1/schedules", text.replace("TARGET", target).encode())

    assert_problem_names(response, 422, pointer)
    assert await stored_schedules(shared) == []


@ON_MODULE_LOOP
async def test_a_lone_surrogate_in_a_batch_item_is_refused_naming_the_item(
    shared: Harness,
) -> None:
    good = json.dumps(valid_body())
    bad = good.replace('"invoice.due"', '"\\ud800"')

    response = await post_raw(
        shared, "/v1/schedules/batch", f'{{"items": [{good}, {bad}]}}'.encode()
    )

    assert_problem_names(response, 422, "#/items/1/event_type")
    assert await stored_schedules(shared) == []


# -- strings and numbers that cannot be delivered ---------------------------------------

UNDELIVERABLE = [
    pytest.param(
        valid_body(target=webhook(headers={"X-A": "a\x00b"})), "#/target/headers", id="header NUL"
    ),
    pytest.param(
        valid_body(target=webhook(headers={"X-A": "a\x0bb"})), "#/target/headers", id="header VT"
    ),
    pytest.param(
        valid_body(target=webhook(headers={"X-A": "a\x0cb"})), "#/target/headers", id="header FF"
    ),
    pytest.param(
        valid_body(target=webhook(headers={"X-A": "a\x1bb"})), "#/target/headers", id="header ESC"
    ),
    pytest.param(
        valid_body(target=webhook(headers={"X-A": "x" * 8193})),
        "#/target/headers",
        id="header value over 8 KiB",
    ),
    pytest.param(
        valid_body(target=webhook(headers={f"X-{i}": "v" for i in range(65)})),
        "#/target/headers",
        id="65 headers",
    ),
    pytest.param(valid_body(event_type="a\rb"), "#/event_type", id="event_type CR"),
    pytest.param(valid_body(event_type="a\nb"), "#/event_type", id="event_type LF"),
    pytest.param(valid_body(event_type="a\x00b"), "#/event_type", id="event_type NUL"),
    pytest.param(valid_body(event_type="a\tb"), "#/event_type", id="event_type tab"),
    pytest.param(valid_body(event_type="é" * 128), "#/event_type", id="event_type over 255 bytes"),
    pytest.param(valid_body(name="a\x00"), "#/name", id="name NUL"),
    pytest.param(valid_body(labels={"team": "a\x00"}), "#/labels", id="label value NUL"),
    pytest.param(valid_body(labels={"k" * 64: "v"}), "#/labels", id="label key of 64"),
    pytest.param(valid_body(labels={"k": "v" * 256}), "#/labels", id="label value of 256"),
    pytest.param(
        valid_body(target=webhook(url="http://2130706433/")), "#/target/url", id="integer host"
    ),
    pytest.param(
        valid_body(target=webhook(url="http://0177.0.0.1/")), "#/target/url", id="octal host"
    ),
    pytest.param(
        valid_body(target=webhook(url="http://127.1/")), "#/target/url", id="short dotted host"
    ),
    pytest.param(
        valid_body(target=webhook(url="http://0x7f.0.0.1/")), "#/target/url", id="hex host"
    ),
    pytest.param(
        valid_body(target=webhook(url="http://127.0.0.1.5/")),
        "#/target/url",
        id="five numeric labels",
    ),
    pytest.param(
        valid_body(target=webhook(url="http://127.0.0.1:99999/")),
        "#/target/url",
        id="port out of range",
    ),
    pytest.param(
        valid_body(target=webhook(url="http://exa mple.com/")), "#/target/url", id="url space"
    ),
]


@pytest.mark.parametrize(("body", "pointer"), UNDELIVERABLE)
@ON_MODULE_LOOP
async def test_text_that_cannot_be_delivered_is_refused_at_create(
    shared: Harness, body: dict[str, Any], pointer: str
) -> None:
    response = await shared.client.post("/v1/schedules", json=body)

    assert_problem_names(response, 422, pointer)
    assert await stored_schedules(shared) == []


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://[::1]:9/hook",
        "http://[::ffff:127.0.0.1]:9/hook",
        "https://hooks.example.com/x",
        "http://10.0.0.1/x",
    ],
)
@ON_MODULE_LOOP
async def test_canonical_hosts_are_accepted(offline: Harness, url: str) -> None:
    response = await offline.client.post("/v1/schedules", json=valid_body(target=webhook(url=url)))

    assert response.status_code == 201, response.text
    assert response.json()["target"]["url"] == url, "stored as written"
    stored = await offline.get(f"/v1/schedules/{response.json()['id']}")
    assert stored["target"]["url"] == url


@ON_MODULE_LOOP
async def test_a_tab_inside_a_header_value_is_accepted(shared: Harness) -> None:
    created = await shared.create(target=shared.webhook(headers={"X-A": "a\tb"}))

    assert created["target"]["headers"] == {"X-A": "a\tb"}


@pytest.mark.rabbitmq
@pytest.mark.parametrize(
    ("headers", "pointer"),
    [
        pytest.param({"k": 2**63}, "#/target/headers", id="integer over int64"),
        pytest.param({"k": -(2**63) - 1}, "#/target/headers", id="integer under int64"),
        pytest.param({"k" * 129: 1}, "#/target/headers", id="key over 128 bytes"),
        pytest.param({"a\x00b": 1}, "#/target/headers", id="key with NUL"),
        pytest.param({"k": "a\x00b"}, "#/target/headers", id="value with NUL"),
    ],
)
async def test_rabbitmq_headers_an_amqp_table_cannot_carry_are_refused(
    make_harness: Callable[..., Any], amqp_url: str, headers: dict[str, Any], pointer: str
) -> None:
    target = {"type": "rabbitmq", "exchange": "", "routing_key": "jobs", "headers": headers}
    async with make_harness(amqp_url=amqp_url) as h:
        response = await h.client.post("/v1/schedules", json=valid_body(target=target))

        assert_problem_names(response, 422, pointer)
        assert await stored_schedules(h) == []


# -- containers over their limit ---------------------------------------------------------

# Far more entries than any limit: each would be an error of its own if its items were
# validated before the container's size (some 8 MiB of JSON, hundreds of thousands of errors).
OVERSIZE = 200_000
RABBITMQ = {"type": "rabbitmq", "exchange": "", "routing_key": "jobs"}

OVERSIZE_CONTAINERS = [
    pytest.param(valid_body(labels={f"k{i}": i for i in range(OVERSIZE)}), "#/labels", id="labels"),
    pytest.param(
        valid_body(target=webhook(headers={f"X-H{i}": i for i in range(OVERSIZE)})),
        "#/target/headers",
        id="webhook headers",
    ),
    pytest.param(
        valid_body(target={**RABBITMQ, "headers": {f"h{i}": [i] for i in range(OVERSIZE)}}),
        "#/target/headers",
        id="rabbitmq headers",
    ),
]


@SHARED_EMBEDDED_ONLY
@pytest.mark.parametrize(("body", "pointer"), OVERSIZE_CONTAINERS)
@ON_MODULE_LOOP
async def test_an_oversize_container_is_one_error_naming_it_and_nothing_stored(
    offline: Harness, body: dict[str, Any], pointer: str
) -> None:
    response = await offline.client.post("/v1/schedules", json=body)

    assert_problem_names(response, 422, pointer)
    assert len(response.json()["errors"]) == 1
    assert await stored_schedules(offline) == []


@SHARED_EMBEDDED_ONLY
@ON_MODULE_LOOP
async def test_a_lone_surrogate_inside_an_oversize_container_is_not_echoed(
    offline: Harness,
) -> None:
    labels = ", ".join(f'"k{i}": "v"' for i in range(2000))
    text = json.dumps(valid_body(labels="LABELS")).replace(
        '"LABELS"', '{"\\ud800": "\\udfff", ' + labels + "}"
    )

    response = await post_raw(offline, "/v1/schedules", text.encode())

    assert_problem_names(response, 422, "#/labels")
    assert len(response.json()["errors"]) == 1


@EMBEDDED_ONLY
async def test_a_patch_with_oversize_labels_is_one_error_naming_them(harness: Harness) -> None:
    created = await harness.create(labels={"team": "a"})

    response = await harness.client.patch(
        f"/v1/schedules/{created['id']}", json={"labels": {f"k{i}": i for i in range(OVERSIZE)}}
    )

    assert_problem_names(response, 422, "#/labels")
    assert len(response.json()["errors"]) == 1
    assert (await harness.get(f"/v1/schedules/{created['id']}"))["labels"] == {"team": "a"}


@EMBEDDED_ONLY
async def test_an_oversize_batch_is_refused_before_any_item_is_validated(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each item validated would look at the text of its field names.
    looked_at: list[str] = []
    original = limits.has_surrogate

    def counting(text: str) -> bool:
        looked_at.append(text)
        return original(text)

    monkeypatch.setattr(limits, "has_surrogate", counting)
    items = [{"event_type": "e", "name": str(i)} for i in range(OVERSIZE)]

    response = await harness.client.post("/v1/schedules/batch", json={"items": items})

    assert_problem_names(response, 422, "#/items")
    assert len(response.json()["errors"]) == 1
    assert len(looked_at) < 10
    assert await stored_schedules(harness) == []


@EMBEDDED_ONLY
async def test_an_oversize_replay_is_one_error_naming_its_ids(harness: Harness) -> None:
    ids = [f"not-an-id-{i}" for i in range(OVERSIZE)]

    response = await harness.client.post("/v1/dead-letters/replay", json={"occurrence_ids": ids})

    assert_problem_names(response, 422, "#/occurrence_ids")
    assert len(response.json()["errors"]) == 1


# -- cron expressions that cost a walk of decades ----------------------------------------


@EMBEDDED_ONLY
async def test_a_batch_of_a_thousand_crons_too_sparse_is_refused_asking_croniter_little(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[object] = []
    original = croniter.get_next

    def counting(self: croniter, *args: Any, **kwargs: Any) -> Any:
        asked.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(croniter, "get_next", counting)
    # The fifth Monday of February: once in 28 years or more.
    sparse = cron("0 0 * 2 1#5", timezone="Asia/Kathmandu")
    items = [valid_body(target=harness.webhook(), trigger=sparse) for _ in range(1000)]

    response = await harness.client.post("/v1/schedules/batch", json={"items": items})

    assert_problem_names(response, 422, "#/items/0/trigger/expression")
    assert len(response.json()["errors"]) == 1
    assert len(asked) <= 14  # one question per kind of calendar year, for all 1000 items
    assert await stored_schedules(harness) == []


@EMBEDDED_ONLY
async def test_a_batch_plans_its_triggers_off_the_event_loop(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    planned_on: set[int] = set()

    def recording(*args: Any, **kwargs: Any) -> Any:
        planned_on.add(threading.get_ident())
        return first_fire_or_refuse(*args, **kwargs)

    monkeypatch.setattr("app.service.schedules.creation.first_fire_or_refuse", recording)
    items = [valid_body(target=harness.webhook(), trigger=cron("*/5 * * * *"))] * 100

    response = await harness.client.post("/v1/schedules/batch", json={"items": items})

    assert response.status_code == 201, response.text
    assert planned_on
    assert threading.get_ident() not in planned_on


@EMBEDDED_ONLY
async def test_a_batch_walks_its_calendars_before_it_takes_the_write_lock(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The walk of the batch's first calendar waits, in its thread, until a write of
    # another request has committed: on SQLite, one writer at a time, that write could not
    # commit while the batch's transaction were open.
    walking, written = threading.Event(), threading.Event()

    def waiting(*args: Any, **kwargs: Any) -> Any:
        if not walking.is_set():
            walking.set()
            written.wait(30)
        return first_fire_or_refuse(*args, **kwargs)

    monkeypatch.setattr("app.service.schedules.creation.first_fire_or_refuse", waiting)
    heavy = cron("0 0 29 2 1", timezone="Asia/Kathmandu")  # a Monday 29 February
    items = [valid_body(target=harness.webhook(), trigger=heavy) for _ in range(1000)]
    batch = asyncio.create_task(harness.client.post("/v1/schedules/batch", json={"items": items}))
    try:
        assert await asyncio.to_thread(walking.wait, 30), "the batch never planned"
        async with asyncio.timeout(10):  # generous: the write waits for nothing else
            other = await harness.client.post("/v1/schedules", json=valid_body(name="other"))
    finally:
        written.set()
        response = await batch

    assert other.status_code == 201, other.text
    assert response.status_code == 201, response.text
    assert len(response.json()["items"]) == 1000


# -- headers a receiver or the broker would act on ----------------------------------------


@EMBEDDED_ONLY
@pytest.mark.parametrize(
    "name",
    [
        "X-Forwarded-For",
        "x-forwarded-for",
        "X-FORWARDED-HOST",
        "X-Forwarded-Proto",
        "X-Forwarded-Port",
        "X-Real-IP",
        "Forwarded",
        "True-Client-IP",
    ],
)
async def test_a_webhook_header_that_forges_the_client_s_origin_is_refused_naming_it(
    harness: Harness, name: str
) -> None:
    target = harness.webhook(headers={"X-Tenant": "acme", name: "10.0.0.1"})
    created = await harness.create(target=harness.webhook())

    response = await harness.client.post("/v1/schedules", json=valid_body(target=target))
    patched = await harness.client.patch(f"/v1/schedules/{created['id']}", json={"target": target})

    assert_problem_names(response, 422, f"#/target/headers/{name}")
    assert_problem_names(patched, 422, f"#/target/headers/{name}")
    assert [s["id"] for s in await stored_schedules(harness)] == [created["id"]]
    assert (await harness.get(f"/v1/schedules/{created['id']}"))["target"]["headers"] == {}


@SHARED_EMBEDDED_ONLY
@pytest.mark.parametrize("name", ["CC", "BCC", "cc", "Bcc"])
@pytest.mark.parametrize("value", ["jobs", 5, None, "é\u200b"])
@ON_MODULE_LOOP
async def test_a_rabbitmq_cc_or_bcc_header_is_refused_naming_it(
    offline: Harness, name: str, value: Any
) -> None:
    # The broker reads CC and BCC as arrays of routing keys; any other value makes it close
    # the shared channel on publish. The routing key is the way to route.
    target = {**RABBITMQ, "headers": {"x-kind": "report", name: value}}

    response = await offline.client.post("/v1/schedules", json=valid_body(target=target))

    assert_problem_names(response, 422, f"#/target/headers/{name}")
    assert await stored_schedules(offline) == []


@pytest.mark.parametrize(
    "target",
    [
        {**RABBITMQ, "headers": {"CC": "jobs"}},
        {"type": "webhook", "url": HOOK, "headers": {"X-Forwarded-For": "10.0.0.1"}},
    ],
)
def test_a_stored_target_with_such_a_header_still_reads(target: dict[str, Any]) -> None:
    read = TypeAdapter(Target).validate_python(target, context=STORED)

    assert not isinstance(read, EndpointTarget | TopicTarget)
    assert read.headers == target["headers"]


# -- strict JSON types -------------------------------------------------------------------

NOT_STRICT = [
    pytest.param(valid_body(max_attempts="5"), "#/max_attempts", id="max_attempts string"),
    pytest.param(valid_body(max_attempts=5.0), "#/max_attempts", id="max_attempts float"),
    pytest.param(valid_body(max_attempts=True), "#/max_attempts", id="max_attempts boolean"),
    pytest.param(
        valid_body(trigger={"type": "once", "at": 4102444800}), "#/trigger/at", id="at number"
    ),
    pytest.param(
        valid_body(trigger={"type": "once", "at": "4102444800"}),
        "#/trigger/at",
        id="at digits",
    ),
    pytest.param(
        valid_body(trigger=interval("60")), "#/trigger/every_seconds", id="every_seconds string"
    ),
    pytest.param(
        valid_body(trigger=interval(True)), "#/trigger/every_seconds", id="every_seconds boolean"
    ),
    pytest.param(valid_body(name=5), "#/name", id="name number"),
    pytest.param(valid_body(event_type=5), "#/event_type", id="event_type number"),
    pytest.param(valid_body(labels={"team": 5}), "#/labels/team", id="label value number"),
    pytest.param(valid_body(jitter_seconds="1"), "#/jitter_seconds", id="jitter string"),
    pytest.param(
        valid_body(target=webhook(timeout_seconds="5")),
        "#/target/timeout_seconds",
        id="timeout string",
    ),
]


@pytest.mark.parametrize(("body", "pointer"), NOT_STRICT)
@ON_MODULE_LOOP
async def test_a_value_of_the_wrong_json_type_is_refused_not_coerced(
    shared: Harness, body: dict[str, Any], pointer: str
) -> None:
    response = await shared.client.post("/v1/schedules", json=body)

    assert_problem_names(response, 422, pointer)
    assert await stored_schedules(shared) == []


@ON_MODULE_LOOP
async def test_instants_and_ids_come_as_strings(shared: Harness) -> None:
    created = await shared.create(
        trigger={"type": "once", "at": "2031-01-01T09:00:00+02:00"}, jitter_seconds=5
    )

    assert created["trigger"]["at"].startswith("2031-01-01T09:00:00")
    response = await shared.client.post(
        "/v1/dead-letters/replay", json={"schedule_id": created["id"]}
    )
    assert response.status_code == 202, response.text
    refused = await shared.client.post("/v1/dead-letters/replay", json={"schedule_id": 5})
    assert_problem_names(refused, 422, "#/schedule_id")


# -- query parameters and cursors --------------------------------------------------------


def cursor_of(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


SOME_ID = "0190c0de-7b1a-7c3e-9f00-1a2b3c4d5e6f"
TAMPERED = [
    pytest.param(base64.urlsafe_b64encode(nested(5000).encode()).decode(), id="deep array"),
    pytest.param(cursor_of(["2020-01-01T00:00:00", SOME_ID]), id="naive instant"),
    pytest.param(cursor_of(["0001-01-01T00:00:00+14:00", SOME_ID]), id="instant before year 1"),
    pytest.param(cursor_of([10**300, SOME_ID]), id="huge number"),
    pytest.param(cursor_of([1e308]), id="a float"),
    pytest.param(cursor_of(SOME_ID), id="a bare string"),
    pytest.param("é" * 10, id="not base64"),
    pytest.param("A" * 10_000, id="very long"),
]


@pytest.mark.parametrize("cursor", TAMPERED)
@pytest.mark.parametrize("path", ["/v1/schedules", "/v1/dead-letters", "OCCURRENCES"])
@ON_MODULE_LOOP
async def test_a_tampered_cursor_is_refused_on_every_list(
    shared: Harness, path: str, cursor: str
) -> None:
    if path == "OCCURRENCES":
        created = await shared.create(trigger=cron("0 9 * * *"))
        path = f"/v1/schedules/{created['id']}/occurrences"

    response = await shared.client.get(path, params={"cursor": cursor})

    assert_parameter_named(response, "cursor")


@ON_MODULE_LOOP
async def test_more_than_20_label_filters_are_refused(shared: Harness) -> None:
    twenty: QueryPairs = [("label", f"k{i}:v") for i in range(20)]

    assert (await shared.client.get("/v1/schedules", params=twenty)).status_code == 200
    many: QueryPairs = [("label", f"k{i}:v") for i in range(1000)]
    assert_parameter_named(await shared.client.get("/v1/schedules", params=many), "label")
    assert_parameter_named(
        await shared.client.get("/v1/schedules", params=[*twenty, ("label", "k:v")]), "label"
    )


@pytest.mark.parametrize(
    ("path", "parameter", "value"),
    [
        ("/v1/schedules", "event_type", "a\x00b"),
        ("/v1/schedules", "name", "a\x00"),
        ("/v1/schedules", "label", "a\x00:b"),
        ("/v1/schedules", "label", "a:b\x00"),
        ("/v1/schedules", "label", "k:" + "v" * 10_000),
        ("/v1/schedules", "event_type", "x" * 10_000),
        ("/v1/schedules", "limit", "9" * 40),
        ("/v1/dead-letters", "event_type", "a\x00b"),
        ("/v1/dead-letters", "limit", "-1"),
    ],
)
@ON_MODULE_LOOP
async def test_query_values_no_schedule_can_match_are_refused(
    shared: Harness, path: str, parameter: str, value: str
) -> None:
    response = await shared.client.get(path, params={parameter: value})

    assert_parameter_named(response, parameter)


# -- reads of odd stored rows --------------------------------------------------------------

ODD_PAYLOADS = [
    pytest.param(nested(300), id="300 deep"),
    pytest.param('{"a": NaN, "b": [Infinity]}', id="NaN"),
    pytest.param('{"a": 1e999}', id="a number beyond float"),
    pytest.param('{"a": ["\\ud800"]}', id="lone surrogate"),
]


async def plant_payload(harness: Harness, schedule_id: str, text: str) -> None:
    """Write a payload around the API, as an older version or an operator could have."""
    value = (
        "CAST(:payload AS json)" if harness.database.dialect.name == "postgresql" else ":payload"
    )
    async with harness.database.engine.begin() as conn:
        statement = sa.text(f"UPDATE schedules SET payload = {value} WHERE id = :id")
        await conn.execute(
            # The column's own type: a UUID is spelled differently by each database.
            statement.bindparams(sa.bindparam("id", type_=schedules.c.id.type)),
            {"payload": text, "id": uuid.UUID(schedule_id)},
        )


async def dead_letter(harness: Harness) -> dict[str, Any]:
    """A schedule whose only occurrence was dead-lettered (its target refused it)."""
    harness.receiver.always("/refuses", Reply(status=400))
    created = await harness.create(target=harness.webhook("/refuses"))

    async def dead() -> bool:
        return bool((await harness.get("/v1/dead-letters"))["items"])

    await harness.step_until(dead)
    return created


@ALL_STORES
@pytest.mark.parametrize("text", ODD_PAYLOADS)
async def test_a_row_with_an_odd_payload_still_reads(harness: Harness, text: str) -> None:
    created = await dead_letter(harness)
    other = await harness.create(payload={"fine": True})
    if "NaN" in text and harness.database.dialect.name == "postgresql":
        # PostgreSQL's json type refuses NaN, so no such row can exist there.
        with pytest.raises(sa.exc.DBAPIError):
            await plant_payload(harness, created["id"], text)
        return
    await plant_payload(harness, created["id"], text)

    one = await harness.client.get(f"/v1/schedules/{created['id']}")
    listed = await harness.client.get("/v1/schedules")
    dead = await harness.client.get("/v1/dead-letters")
    letter = await harness.client.get(
        f"/v1/dead-letters/{dead.json()['items'][0]['occurrence_id']}"
    )

    for response in (one, listed, dead, letter):
        assert response.status_code == 200, response.text
        json.loads(response.text)  # strict JSON: no NaN literals
    assert {s["id"] for s in listed.json()["items"]} == {created["id"], other["id"]}
    assert next(s for s in listed.json()["items"] if s["id"] == other["id"])["payload"] == {
        "fine": True
    }


@ALL_STORES
@pytest.mark.parametrize(
    "text",
    [
        pytest.param(nested(5000), id="5000 deep"),
        pytest.param('{"n": 1' + "0" * 5000 + "}", id="an integer too long to convert"),
    ],
)
async def test_a_schedule_whose_payload_json_cannot_decode_still_reads(
    harness: Harness, text: str
) -> None:
    created = await harness.create(trigger=cron("0 9 * * *"))
    await plant_payload(harness, created["id"], text)

    one = await harness.client.get(f"/v1/schedules/{created['id']}")
    listed = await harness.client.get("/v1/schedules")

    assert one.status_code == 200, one.text
    assert one.json()["payload"] is None
    assert listed.status_code == 200, listed.text


@ALL_STORES
@pytest.mark.parametrize(
    "text",
    [
        pytest.param(nested(5000), id="5000 deep"),
        pytest.param('{"n": 1' + "0" * 5000 + "}", id="an integer too long to convert"),
    ],
)
async def test_a_dead_letter_whose_payload_json_cannot_decode_still_reads(
    harness: Harness, text: str
) -> None:
    harness.receiver.always("/gone", Reply(410))
    created = await harness.create(target=harness.webhook("/gone"))
    assert await harness.step() == 1  # dead-lettered at once
    await plant_payload(harness, created["id"], text)

    listed = await harness.client.get("/v1/dead-letters")
    one = await harness.client.get(f"/v1/dead-letters/{created['next_occurrence_id']}")

    assert listed.status_code == 200, listed.text
    assert [d["payload"] for d in listed.json()["items"]] == [None]
    assert one.status_code == 200, one.text
    assert one.json()["payload"] is None


@ALL_STORES
async def test_a_payload_nested_64_deep_is_delivered_and_reads_back(harness: Harness) -> None:
    body = raw_body(nested(64), target=harness.webhook(), trigger={"type": "immediate"})
    response = await post_raw(harness, "/v1/schedules", body)
    created = response.json()

    await harness.step_until(lambda: _delivered(harness))

    assert harness.receiver.requests[0].body == nested(64).encode()
    snapshot = await harness.get(f"/v1/schedules/{created['id']}")
    assert json.dumps(snapshot["payload"], separators=(",", ":")) == nested(64)


async def _delivered(harness: Harness) -> bool:
    return len(harness.receiver.requests) >= 1


@ON_MODULE_LOOP
async def test_a_create_of_many_unknown_fields_is_refused_naming_the_first_only(
    shared: Harness,
) -> None:
    body = {**valid_body(), **{f"unknown{n:05d}": n for n in range(20_000)}}

    response = await shared.client.post("/v1/schedules", json=body)

    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["errors"] == [
        {
            "pointer": "#/unknown00000",
            "field": "unknown00000",
            "detail": "Extra inputs are not permitted",
        }
    ]
    assert "errors in all" not in problem["detail"]
    assert await stored_schedules(shared) == []
