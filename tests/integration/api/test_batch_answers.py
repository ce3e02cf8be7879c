"""A batch create, as a client sees it: each payload is kept as the JSON it sent, its size
is the bytes of that JSON, and the answer shows every schedule as reading it back does."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import AMQP_URL
from tests.integration.conftest import Harness


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


# Equal in Python (1 == 1.0 == True) but three JSON texts; then text beyond ASCII, nesting
# at the limit, brackets that are no nesting, many shallow members, and bare values.
TRICKY_PAYLOADS: list[Any] = [
    {"n": 1},
    {"n": 1.0},
    {"n": True},
    {"é": "☕ \u2028", "n": -0.0, "big": 1e16, "small": 1e-7},
    nested(64),
    {"a": "[" * 100 + "{" * 100},
    [[], {}] * 100,
    "text",
    None,
    # Bare numbers: a store must keep each as its text (SQLite would make 1.0 the integer 1
    # and the long integer a float, were it let).
    2.5,
    1.0,
    7,
    12345678901234567890123,
]
DELIVERED = TRICKY_PAYLOADS


async def test_a_batch_delivers_each_payload_as_the_json_it_was_sent(harness: Harness) -> None:
    items = [
        {
            "event_type": "batch.payload",
            "payload": payload,
            "target": harness.webhook(f"/p{index}"),
            "trigger": {"type": "immediate"},
        }
        for index, payload in enumerate(DELIVERED)
    ]

    response = await harness.client.post("/v1/schedules/batch", json={"items": items})

    assert response.status_code == 201, response.text
    created = response.json()["items"]
    # Parsed JSON keeps 1, 1.0 and true apart; dumping it again shows which one it is.
    assert [json.dumps(s["payload"]) for s in created] == [json.dumps(p) for p in DELIVERED]
    await harness.step_until(lambda: _delivered(harness, len(DELIVERED)), timeout=20.0)
    for index, payload in enumerate(DELIVERED):
        (request,) = harness.receiver.on(f"/p{index}")
        compact = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
        assert request.body == compact.encode()


async def _delivered(harness: Harness, count: int) -> bool:
    return len(harness.receiver.requests) >= count


@pytest.mark.parametrize(
    ("second", "status"),
    [
        # A JSON string of n two-byte characters is 2n + 2 bytes with its quotes.
        pytest.param("é" * 499, 201, id="at the limit in UTF-8"),
        pytest.param("é" * 499 + "x", 413, id="one byte over"),
        # Counted without the spaces the client's JSON has: {"a":["x..."]} is 10 + n bytes.
        pytest.param({"a": ["x" * 990]}, 201, id="indented JSON at the limit"),
        pytest.param({"a": ["x" * 991]}, 413, id="indented JSON one byte over"),
    ],
)
async def test_a_batch_item_payload_limit_counts_the_bytes_of_its_compact_json(
    make_harness: Callable[..., Any], second: Any, status: int
) -> None:
    async with make_harness(max_payload_bytes=1000) as harness:
        items = [
            {
                "event_type": "big",
                "payload": payload,
                "target": harness.webhook(),
                "trigger": {"type": "immediate"},
            }
            for payload in ("small", second)
        ]
        text = json.dumps({"items": items}, indent=2, ensure_ascii=False)

        response = await harness.client.post(
            "/v1/schedules/batch",
            content=text.encode(),
            headers={"Content-Type": "application/json"},
        )

        assert response.status_code == status, response.text
        if status == 413:
            (error,) = response.json()["errors"]
            assert error["pointer"] == "#/items/1/payload"
            assert (await harness.get("/v1/schedules"))["items"] == []


@pytest.mark.parametrize(
    ("text", "pointer"),
    [
        pytest.param('{"a": NaN}', "#/items/1/payload/a", id="NaN"),
        pytest.param('{"a": [1, Infinity]}', "#/items/1/payload/a/1", id="Infinity"),
        pytest.param("[" * 65 + "]" * 65, "#/items/1/payload", id="65 deep"),
    ],
)
async def test_a_batch_item_payload_that_no_consumer_parses_is_refused_naming_it(
    harness: Harness, text: str, pointer: str
) -> None:
    item = {"event_type": "x", "target": harness.webhook(), "trigger": {"type": "immediate"}}
    good = json.dumps({**item, "payload": [1]})
    bad = json.dumps({**item, "payload": "PAYLOAD"}).replace('"PAYLOAD"', text)

    response = await harness.client.post(
        "/v1/schedules/batch",
        content=f'{{"items": [{good}, {bad}]}}'.encode(),
        headers={"Content-Type": "application/json"},
    )

    assert response.status_code == 422, response.text
    assert [e["pointer"] for e in response.json()["errors"]] == [pointer]
    assert (await harness.get("/v1/schedules"))["items"] == []


async def test_a_batch_answers_each_schedule_byte_for_byte_as_reading_it_back_does(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(amqp_url=AMQP_URL) as harness:
        items = answered_items(harness)

        response = await harness.client.post("/v1/schedules/batch", json={"items": items})

        assert response.status_code == 201, response.text
        assert response.headers["content-type"] == "application/json"
        ids = [s["id"] for s in response.json()["items"]]
        read_back = [(await harness.client.get(f"/v1/schedules/{id_}")).content for id_ in ids]
        assert response.content == b'{"items":[' + b",".join(read_back) + b"]}"
        shown = response.json()["items"]
        assert shown[0]["target"]["headers"] == {"Authorization": "***"}
        assert shown[len(TRICKY_PAYLOADS)]["target"]["url"].startswith("http://user:***@")
        assert shown[-1]["target"]["headers"]["token"] == "***"


def answered_items(harness: Harness) -> list[dict[str, Any]]:
    """Schedules of every kind, with numbers given as integers where floats are kept. Object
    keys come in the order every store reads them back in (shorter first, then by text)."""
    url = harness.webhook()["url"]
    items: list[dict[str, Any]] = [
        {
            "name": f"Café ☕ {index}",
            "event_type": "batch.answer",
            "payload": payload,
            "target": harness.webhook(headers={"Authorization": "Bearer abc"}, timeout_seconds=3),
            "trigger": {"type": "immediate"},
            "labels": {"team": "ops", "ünï": "cödé"},
            "jitter_seconds": 0,
            "misfire_grace_seconds": 7,
            "max_attempts": 2,
        }
        for index, payload in enumerate(TRICKY_PAYLOADS)
    ]
    return [
        *items,
        {
            "event_type": "batch.answer",
            "target": {
                "type": "webhook",
                "url": url.replace("://", "://user:pw@"),
                "method": "PUT",
            },
            "trigger": {"type": "interval", "every_seconds": 60},
            "misfire_policy": "fire_all",
            "max_catchup": 3,
            "max_occurrences": 9,
            "pause_after_failures": 4,
        },
        {
            "event_type": "batch.answer",
            "target": harness.webhook(),
            "trigger": {"type": "cron", "expression": "0 9 * * *", "timezone": "Europe/Paris"},
        },
        {
            "event_type": "batch.answer",
            "target": harness.webhook(),
            "trigger": {"type": "once", "delay_seconds": 3600},
            "jitter_seconds": 30,
        },
        {
            "event_type": "batch.answer",
            "target": {
                "type": "rabbitmq",
                "exchange": "events",
                "routing_key": "jobs",
                "headers": {"a": 1, "b": True, "c": 1.5, "d": None, "e": "é", "token": "t"},
            },
            "trigger": {
                "type": "interval",
                "every_seconds": 3600,
                "start_at": "2030-01-01T00:00:00+02:00",
            },
        },
    ]
