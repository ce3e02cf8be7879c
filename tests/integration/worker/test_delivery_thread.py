"""The app's delivery loop on its own thread: it hears the API's writes at once, reports
readiness, and lets a delivery in flight finish and settle when the app stops."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from asgi_lifespan import LifespanManager

from app.main import create_app
from tests.conftest import make_settings
from tests.receiver import Receiver, Reply

PROMPT = 5.0  # generous bound for "at once" on a busy 2-core machine


@asynccontextmanager
async def _serving(database_url: str, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its delivery loop, as `chronoq serve` runs it; stopped on exit."""
    settings = make_settings(database_url, **{"worker_enabled": True, **overrides})
    app = create_app(settings)
    async with LifespanManager(app) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client


async def _within(seconds: float, condition: Callable[[], Awaitable[bool]]) -> None:
    deadline = time.monotonic() + seconds
    while not await condition():
        assert time.monotonic() < deadline, f"not within {seconds}s"
        await asyncio.sleep(0.02)


async def _create(client: httpx.AsyncClient, url: str) -> str:
    body = {
        "event_type": "test.event",
        "payload": {"n": 1},
        "target": {"type": "webhook", "url": url},
        "trigger": {"type": "immediate"},
    }
    response = await client.post("/v1/schedules", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def _in_flight(client: httpx.AsyncClient) -> float:
    text = (await client.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith("chronoq_deliveries_in_flight "):
            return float(line.split()[1])
    raise AssertionError("no in-flight gauge on /metrics")


async def test_a_write_through_the_api_wakes_the_idle_loop_at_once(
    database_url: str, receiver: Receiver
) -> None:
    # Polling every minute: a delivery within seconds means the create's announcement
    # crossed from the API's event loop to the loop's thread.
    async with _serving(database_url, poll_interval=60.0) as client:
        await asyncio.sleep(0.3)  # the loop's first claim found nothing; it sleeps
        await _create(client, receiver.url())

        arrived = await receiver.wait_for(1, timeout=PROMPT)

    assert len(arrived) == 1


async def test_readiness_reports_the_loop_running_on_its_thread(database_url: str) -> None:
    async with _serving(database_url) as client:
        response = await client.get("/readyz")

    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "worker": "ok"}


async def test_stopping_the_app_lets_a_delivery_in_flight_finish_and_settle(
    database_url: str, receiver: Receiver
) -> None:
    receiver.always("/slow", Reply(delay=1.0))
    async with _serving(database_url) as client:
        schedule_id = await _create(client, receiver.url("/slow"))
        await _within(10.0, lambda: _is_positive(_in_flight(client)))
    # The app has stopped: the delivery it had started was answered and settled first.

    assert len(receiver.on("/slow")) == 1
    async with _serving(database_url, worker_enabled=False) as client:
        items = (await client.get(f"/v1/schedules/{schedule_id}/occurrences")).json()["items"]
    assert [item["status"] for item in items] == ["delivered"]


async def _is_positive(value: Awaitable[float]) -> bool:
    return await value > 0
