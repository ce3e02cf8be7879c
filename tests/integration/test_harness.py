"""The API harness (tests/integration/conftest.py): each harness serves an app of its own,
and nothing a case did to its app or gave it (its state, its settings as the middleware
and the routes read them, dependency overrides) reaches a later harness's, though the
routes FastAPI built for the first are lent to them all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI

from tests.integration.conftest import Harness

KEY = "0123456789abcdef-writer"
AUTHORIZED = {"Authorization": f"Bearer {KEY}"}
LIMIT = 4096  # bytes; the default limit is far larger


def _body(harness: Harness, size: int) -> dict[str, Any]:
    return {
        "event_type": "harness",
        "payload": {"blob": "x" * size},
        "target": harness.webhook(),
        "trigger": {"type": "once", "delay_seconds": 3600},
    }


def _included(app: FastAPI) -> list[Any]:
    return [route for route in app.router.routes if hasattr(route, "original_router")]


async def test_a_harness_app_carries_nothing_of_the_harness_before_it(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=f"bot:{KEY}", max_request_bytes=LIMIT) as first:
        first.app.state.leftover = "first"
        assert (await first.client.get("/v1/schedules")).status_code == 401
        big = await first.client.post("/v1/schedules", json=_body(first, LIMIT), headers=AUTHORIZED)
        assert big.status_code == 413, big.text
        with pytest.raises(TypeError):
            first.app.dependency_overrides[_body] = _included  # read by no route of it
        first_stack = first.app.middleware_stack
        assert first_stack is not None, "built by its first request"

    async with make_harness() as second:
        assert second.app is not first.app
        assert not hasattr(second.app.state, "leftover")
        assert second.app.dependency_overrides == {}
        # Its own settings, as its middleware and routes read them: no key, no small limit.
        listed = await second.client.get("/v1/schedules")
        assert listed.status_code == 200, listed.text
        assert listed.json()["items"] == []
        created = await second.client.post("/v1/schedules", json=_body(second, LIMIT))
        assert created.status_code == 201, created.text
        assert second.app.middleware_stack is not first_stack
        # What FastAPI built of the routes is the first app's, lent, not built again.
        assert _included(second.app)
        assert all(a is b for a, b in zip(_included(first.app), _included(second.app), strict=True))

    # And the other way round: a key check where the harness before had none.
    async with make_harness(api_keys=f"bot:{KEY}") as third:
        assert (await third.client.get("/v1/schedules")).status_code == 401
        assert (await third.client.get("/v1/schedules", headers=AUTHORIZED)).status_code == 200
