"""Request limits: bodies refused before they are buffered, stalled bodies timed out, and
target headers that belong to the connection refused."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
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
    timeout = 0.3
    async with make_harness(request_body_timeout=timeout) as h:
        first = json.dumps(_body(h)).encode()
        answered = asyncio.Event()

        async def body() -> AsyncIterator[bytes]:
            yield first[:10]
            await answered.wait()  # the rest never comes before the answer
            yield first[10:]

        started = time.monotonic()
        try:
            # Far past the timeout: only the timeout can answer a body that never ends.
            response = await asyncio.wait_for(
                h.client.post(
                    "/v1/schedules", content=body(), headers={"Content-Type": "application/json"}
                ),
                timeout * 100,
            )
        finally:
            answered.set()
        took = time.monotonic() - started

        assert response.status_code == 408, response.text
        assert response.headers["content-type"].startswith(PROBLEM)
        assert took >= timeout * 0.9, "answered before the body had stalled for the timeout"
        assert await _stored(h) == []


async def test_a_body_that_trickles_is_cut_at_its_total_time(make_harness) -> None:  # type: ignore[no-untyped-def]
    timeout = 0.5
    async with make_harness(request_body_timeout=timeout) as h:
        answered = asyncio.Event()
        sent = 0

        async def body() -> AsyncIterator[bytes]:
            nonlocal sent
            while not answered.is_set():  # a byte every 50 ms: never idle, never done
                sent += 1
                yield b" "
                await asyncio.sleep(0.05)

        started = time.monotonic()
        try:
            # Far past the timeout: only the cut can answer a body that never ends.
            response = await asyncio.wait_for(
                h.client.post(
                    "/v1/schedules", content=body(), headers={"Content-Type": "application/json"}
                ),
                timeout * 60,
            )
        finally:
            answered.set()
        took = time.monotonic() - started

        assert response.status_code == 408, response.text
        assert response.headers["content-type"].startswith(PROBLEM)
        assert response.headers["connection"] == "close"
        assert "CHRONOQ_REQUEST_BODY_TIMEOUT" in response.json()["detail"]
        assert took >= timeout * 0.9, "cut before the body had taken the time allowed"
        assert sent > 1, "cut while idle, not at the total time"
        assert await _stored(h) == []


def _client_at(harness: Harness, address: str) -> httpx.AsyncClient:
    """A client of the harness's app whose requests come from `address`."""
    app = harness.transport.app  # type: ignore[attr-defined]
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://localhost")


class _SlowBody:
    """A create whose body sends its first bytes, then waits for `finish` before the rest."""

    def __init__(self, harness: Harness, finish: asyncio.Event) -> None:
        self._body = json.dumps(_body(harness)).encode()
        self._finish = finish
        self.reading = asyncio.Event()  # the app has its first bytes and waits for more

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._body[:10]
        self.reading.set()
        await self._finish.wait()
        yield self._body[10:]


async def _slow_creates(
    client: httpx.AsyncClient, harness: Harness, count: int, finish: asyncio.Event
) -> list[asyncio.Task[httpx.Response]]:
    """`count` creates from `client` whose bodies are arriving once this returns."""
    bodies = [_SlowBody(harness, finish) for _ in range(count)]
    tasks = [
        asyncio.create_task(
            client.post("/v1/schedules", content=body, headers={"Content-Type": "application/json"})
        )
        for body in bodies
    ]
    async with asyncio.timeout(10):  # generous: each is read at once
        for body in bodies:
            await body.reading.wait()
    return tasks


async def test_one_address_sending_too_many_bodies_at_once_is_refused_and_others_are_not(
    make_harness: Callable[..., Any],
) -> None:
    async with (
        make_harness(max_bodies_per_client=3) as h,
        _client_at(h, "192.0.2.1") as busy,
        _client_at(h, "192.0.2.2") as other,
    ):
        finish = asyncio.Event()
        slow = await _slow_creates(busy, h, 3, finish)

        refused = await busy.post("/v1/schedules", json=_body(h))
        elsewhere = await other.post("/v1/schedules", json=_body(h))
        # A request without a body is not counted.
        listed = await busy.get("/v1/schedules")

        assert refused.status_code == 429, refused.text
        assert refused.headers["content-type"].startswith(PROBLEM)
        assert refused.headers["retry-after"] == "1"
        assert refused.headers["connection"] == "close"
        assert "CHRONOQ_MAX_BODIES_PER_CLIENT" in refused.json()["detail"]
        assert elsewhere.status_code == 201, elsewhere.text
        assert listed.status_code == 200, listed.text
        finish.set()
        assert [(await task).status_code for task in slow] == [201, 201, 201]
        # Their bodies in, the address sends again.
        again = await busy.post("/v1/schedules", json=_body(h))
        assert again.status_code == 201, again.text
        assert len(await _stored(h)) == 5


async def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_bodies(
    make_harness: Callable[..., Any],
) -> None:
    async with (
        make_harness(max_bodies_per_client=1, forwarded_allow_ips="192.0.2.9") as h,
        _client_at(h, "192.0.2.9") as proxy,
    ):
        finish = asyncio.Event()
        proxy.headers["X-Forwarded-For"] = "198.51.100.1"
        slow = await _slow_creates(proxy, h, 1, finish)

        same = await proxy.post("/v1/schedules", json=_body(h))
        proxy.headers["X-Forwarded-For"] = "198.51.100.2"
        another = await proxy.post("/v1/schedules", json=_body(h))

        assert same.status_code == 429, same.text
        assert another.status_code == 201, another.text
        finish.set()
        assert (await slow[0]).status_code == 201


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
