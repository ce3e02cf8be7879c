"""Traces off: a create request's valid traceparent is stored with its schedules and sent as
it is on every delivery of their occurrences, and named in their attempt records; garbage is
ignored, never stored, never an error."""

from __future__ import annotations

from typing import Any

import pytest

from app.telemetry import tracing
from tests.integration.conftest import Harness
from tests.receiver import Reply

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING = f"00-{TRACE}-00f067aa0ba902b7-01"


def spec(harness: Harness, **extra: Any) -> dict[str, Any]:
    return {
        "event_type": "test.event",
        "payload": {"n": 1},
        "trigger": {"type": "immediate"},
        "target": harness.webhook(),
        **extra,
    }


async def test_a_stored_traceparent_is_sent_as_it_is_on_every_attempt(harness: Harness) -> None:
    assert tracing.active() is None
    harness.receiver.script("/hook", Reply(status=503))
    response = await harness.client.post(
        "/v1/schedules", json=spec(harness), headers={"traceparent": INCOMING}
    )
    assert response.status_code == 201, response.text
    occurrence = response.json()["next_occurrence_id"]

    await harness.step_until(lambda: _attempted(harness, 2))

    assert [r.headers.get("traceparent") for r in harness.receiver.requests] == [INCOMING] * 2
    attempts = await harness.get(f"/v1/occurrences/{occurrence}/attempts")
    assert [a["trace_id"] for a in attempts["items"]] == [TRACE, TRACE]


def traceparents(headers: dict[str, str]) -> list[str]:
    return [value for name, value in headers.items() if name.lower() == "traceparent"]


async def _attempted(harness: Harness, times: int) -> bool:
    return len(harness.receiver.requests) >= times


async def test_each_schedule_of_a_batch_stores_the_requests_traceparent(harness: Harness) -> None:
    response = await harness.client.post(
        "/v1/schedules/batch",
        json={"items": [spec(harness), spec(harness)]},
        headers={"traceparent": INCOMING},
    )
    assert response.status_code == 201, response.text

    assert await harness.step() == 2

    assert [r.headers.get("traceparent") for r in harness.receiver.requests] == [INCOMING] * 2


@pytest.mark.parametrize(
    "garbage",
    [
        "00-garbage",
        INCOMING.upper(),  # hex is lowercase
        f"00-{'0' * 32}-00f067aa0ba902b7-01",  # an all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # an all-zero parent id
        f"ff-{TRACE}-00f067aa0ba902b7-01",  # version ff is invalid
        f"01-{TRACE}-00f067aa0ba902b7-01-extra",  # a later version: not taken
        f" {INCOMING}",
        INCOMING + "0",
    ],
)
async def test_a_traceparent_that_is_not_valid_is_ignored(harness: Harness, garbage: str) -> None:
    response = await harness.client.post(
        "/v1/schedules",
        json=spec(harness, target=harness.webhook(headers={"TraceParent": "the target's own"})),
        headers={"traceparent": garbage},
    )
    assert response.status_code == 201, response.text
    occurrence = response.json()["next_occurrence_id"]

    assert await harness.step() == 1

    (request,) = harness.receiver.requests
    # Nothing stored: the target's own header goes out as the target set it.
    assert traceparents(request.headers) == ["the target's own"]
    attempts = await harness.get(f"/v1/occurrences/{occurrence}/attempts")
    assert attempts["items"][0]["trace_id"] is None


async def test_a_stored_traceparent_replaces_a_targets_own(harness: Harness) -> None:
    response = await harness.client.post(
        "/v1/schedules",
        json=spec(harness, target=harness.webhook(headers={"TraceParent": "the target's own"})),
        headers={"traceparent": INCOMING},
    )
    assert response.status_code == 201, response.text

    assert await harness.step() == 1

    (request,) = harness.receiver.requests
    assert traceparents(request.headers) == [INCOMING]
