"""Request limits: bodies refused before they are buffered, stalled bodies timed out, and
target headers that belong to the connection refused."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.conftest import ON_MODULE_LOOP, Harness

PROBLEM = "application/problem+json"


def _body(harness: Harness, **extra: Any) -> dict[str, Any]:
    return {
        "event_type": "limits",
        "target": harness.webhook(),
        "trigger": {"type": "immediate"},
        **extra,
    }


async def _stored(harness: Harness) -> list[Any]:
    items: list[Any] = (await harness.get("/v1/schedules"))["items"]
    return items


async def test_a_body_declared_larger_than_the_limit_is_refused_unread(make_harness) -> None:  # type: ignore[no-untyped-def]
    async with make_harness(max_request_bytes=4096) as h:
        sent = 0

        async def body() -> AsyncIterator[bytes]:
            nonlocal sent
            for _ in range(64):
                sent += 1
                yield b"x" * 1024

        response = await h.client.post(
            "/v1/schedules",
            content=body(),
            headers={"Content-Type": "application/json", "Content-Length": str(64 * 1024)},
        )

        assert response.status_code == 413, response.text
        assert response.headers["content-type"].startswith(PROBLEM)
        assert "CHRONOQ_MAX_REQUEST_BYTES" in response.json()["detail"]
        assert sent <= 1  # refused from the header: the body was not read
        assert await _stored(h) == []


async def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(make_harness) -> None:  # type: ignore[no-untyped-def]
    async with make_harness(max_request_bytes=4096) as h:
        sent = 0

        async def body() -> AsyncIterator[bytes]:
            nonlocal sent
            for _ in range(1000):
                sent += 1
                yield b" " * 1024

        response = await h.client.post(
            "/v1/schedules", content=body(), headers={"Content-Type": "application/json"}
        )

        assert response.status_code == 413, response.text
        assert response.json()["status"] == 413
        assert sent < 10  # stopped reading near the limit, not at the end
        assert await _stored(h) == []


async def test_a_batch_over_the_request_limit_stores_nothing(make_harness) -> None:  # type: ignore[no-untyped-def]
    async with make_harness(max_request_bytes=64 * 1024) as h:
        items = [_body(h, payload={"blob": "x" * 10_000}) for _ in range(10)]

        response = await h.client.post("/v1/schedules/batch", json={"items": items})

        assert response.status_code == 413, response.text
        assert await _stored(h) == []


async def test_a_body_that_stalls_is_timed_out(make_harness) -> None:  # type: ignore[no-untyped-def]
    async with make_harness(request_body_timeout=0.3) as h:
        first = json.dumps(_body(h)).encode()

        async def body() -> AsyncIterator[bytes]:
            yield first[:10]
            await asyncio.sleep(5)  # never sends the rest in time
            yield first[10:]

        started = time.monotonic()
        response = await h.client.post(
            "/v1/schedules", content=body(), headers={"Content-Type": "application/json"}
        )

        assert response.status_code == 408, response.text
        assert response.headers["content-type"].startswith(PROBLEM)
        assert time.monotonic() - started < 4
        assert await _stored(h) == []


async def test_a_body_that_trickles_is_cut_at_its_total_time(make_harness) -> None:  # type: ignore[no-untyped-def]
    async with make_harness(request_body_timeout=0.5) as h:

        async def body() -> AsyncIterator[bytes]:
            for _ in range(200):  # a byte every 50 ms: never idle, done in 10 s
                yield b" "
                await asyncio.sleep(0.05)

        started = time.monotonic()
        response = await h.client.post(
            "/v1/schedules", content=body(), headers={"Content-Type": "application/json"}
        )

        assert response.status_code == 408, response.text
        assert response.headers["content-type"].startswith(PROBLEM)
        assert response.headers["connection"] == "close"
        assert "CHRONOQ_REQUEST_BODY_TIMEOUT" in response.json()["detail"]
        assert time.monotonic() - started < 4
        assert await _stored(h) == []


async def test_a_body_under_the_limit_is_accepted(make_harness) -> None:  # type: ignore[no-untyped-def]
    async with make_harness(max_request_bytes=4096) as h:
        response = await h.client.post("/v1/schedules", json=_body(h))
        assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    "name",
    [
        "Connection",
        "Upgrade",
        "TE",
        "Keep-Alive",
        "Proxy-Authorization",
        "Proxy-Connection",
        "Transfer-Encoding",
        "Expect",
        "Content-Encoding",
        "Host",
        "Content-Length",
        "content-length",
    ],
)
@ON_MODULE_LOOP
async def test_connection_and_framing_headers_are_refused_in_a_target(
    shared: Harness, name: str
) -> None:
    body = _body(shared, target=shared.webhook(headers={name: "x"}))

    response = await shared.client.post("/v1/schedules", json=body)

    assert response.status_code == 422, response.text
    assert [e["pointer"] for e in response.json()["errors"]] == ["#/target/headers"]
    assert await _stored(shared) == []


@ON_MODULE_LOOP
async def test_header_names_that_differ_only_in_case_are_refused(shared: Harness) -> None:
    body = _body(shared, target=shared.webhook(headers={"X-Team": "a", "x-team": "b"}))

    response = await shared.client.post("/v1/schedules", json=body)

    assert response.status_code == 422, response.text
    assert "case" in response.json()["errors"][0]["detail"]
    assert await _stored(shared) == []
