"""Operator events (DESIGN section 15): a tenant's `events_target` is told, signed and at
least once, when one of its endpoints' circuit opens, recovers or is disabled, a schedule
pauses itself, an occurrence is dead-lettered, and a quota refuses a request (once a minute);
an event that fails for good is given up with an ERROR line, never an event about itself."""

from __future__ import annotations

import base64
import json
import logging
import secrets
from datetime import timedelta
from typing import Any

import pytest
from standardwebhooks import Webhook

from app.domain.operator_events import MAX_EVENT_ATTEMPTS
from app.worker.operator_events import EventSender
from tests.integration.conftest import Harness
from tests.receiver import Received, Reply

ACME = {"Chronoq-Tenant": "acme"}


def _secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


async def _tenant(harness: Harness, expect: int = 201, **body: Any) -> dict[str, Any]:
    put = await harness.client.put("/v1/tenants/acme", json=body)
    assert put.status_code == expect, put.text
    found: dict[str, Any] = put.json()
    return found


async def _send(harness: Harness) -> int:
    return await EventSender(harness.database, harness.sinks, harness.settings).run_once()


def _events(requests: list[Received]) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in requests]


async def test_an_events_target_is_checked_kept_redacted_and_carried_by_a_pause(
    harness: Harness,
) -> None:
    secret = _secret()
    target = harness.webhook("/events", signing_secret=secret)
    made = await _tenant(harness, events_target=target)
    assert made["events_target"]["signing_secret"] == "whsec_…" + secret[-4:]
    # A pause through the console's or the CLI's way (the tenant put back whole, its
    # redacted secret sent back) keeps the target and its secret.
    back = {**made["events_target"]}
    again = await _tenant(harness, 200, paused=True, events_target=back)
    assert again["events_target"]["signing_secret"] == made["events_target"]["signing_secret"]
    for body, pointer in [
        ({"type": "webhook", "url": "http://169.254.169.254/x"}, "#/events_target/url"),
        (
            {"type": "endpoint", "endpoint_id": "00000000-0000-7000-8000-000000000000"},
            "#/events_target/endpoint_id",
        ),
        ({"type": "rabbitmq", "routing_key": "ops"}, "#/events_target/type"),
        (
            {"type": "webhook", "url": harness.receiver.url("/x"), "signing_secret": "whsec_…abcd"},
            "#/events_target/signing_secret",
        ),
    ]:
        refused = await harness.client.put("/v1/tenants/zeta", json={"events_target": body})
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["errors"][0]["pointer"] == pointer, refused.json()
    assert (await harness.client.get("/v1/tenants/zeta")).status_code == 404


async def test_a_circuit_a_dead_letter_and_an_auto_pause_are_told_signed_and_once(
    harness: Harness,
) -> None:
    secret = _secret()
    await _tenant(harness, events_target=harness.webhook("/events", signing_secret=secret))
    harness.receiver.always("/down", Reply(503))
    endpoint = await harness.client.post(
        "/v1/endpoints",
        json={"url": harness.receiver.url("/down"), "circuit": {"failure_threshold": 1}},
        headers=ACME,
    )
    assert endpoint.status_code == 201, endpoint.text
    schedule = await harness.client.post(
        "/v1/schedules",
        json={
            "event_type": "invoice.due",
            "target": {"type": "endpoint", "endpoint_id": endpoint.json()["id"]},
            "trigger": {"type": "interval", "every_seconds": 3600},
            "max_attempts": 1,
            "pause_after_failures": 1,
        },
        headers=ACME,
    )
    assert schedule.status_code == 201, schedule.text
    await harness.step()
    assert await _send(harness) == 3
    told = harness.receiver.on("/events")
    kinds = sorted(event["type"] for event in _events(told))
    assert kinds == ["endpoint.opened", "occurrence.dead_lettered", "schedule.auto_paused"]
    for request in told:
        event = Webhook(secret).verify(request.body, request.headers)
        assert request.headers["webhook-id"] == event["id"]
        assert event["tenant"] == "acme"
    dead = next(e for e in _events(told) if e["type"] == "occurrence.dead_lettered")
    assert dead["data"]["schedule_id"] == schedule.json()["id"]
    assert dead["data"]["error"] == "HTTP 503"
    # Told once: nothing is left to send.
    assert await _send(harness) == 0


async def test_a_quota_refusal_is_told_once_a_minute(harness: Harness) -> None:
    await _tenant(harness, quotas={"max_schedules": 1}, events_target=harness.webhook("/events"))
    body = {
        "event_type": "e",
        "target": harness.webhook(),
        "trigger": {"type": "once", "delay_seconds": 600},
    }
    assert (await harness.client.post("/v1/schedules", json=body, headers=ACME)).status_code == 201
    for _ in range(3):
        refused = await harness.client.post("/v1/schedules", json=body, headers=ACME)
        assert refused.status_code == 429, refused.text
    assert await _send(harness) == 1
    (event,) = _events(harness.receiver.on("/events"))
    assert (event["type"], event["data"]["quota"]) == ("quota.exceeded", "max_schedules")
    harness.database.clock.move(timedelta(minutes=1))
    refused = await harness.client.post("/v1/schedules", json=body, headers=ACME)
    assert refused.status_code == 429
    assert await _send(harness) == 1


async def test_an_event_its_target_refuses_is_retried_then_given_up_and_never_told_of(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    await _tenant(
        harness, quotas={"max_schedules": 1}, events_target=harness.webhook("/events-down")
    )
    harness.receiver.always("/events-down", Reply(503))
    body = {
        "event_type": "e",
        "target": harness.webhook(),
        "trigger": {"type": "once", "delay_seconds": 600},
    }
    await harness.client.post("/v1/schedules", json=body, headers=ACME)
    await harness.client.post("/v1/schedules", json=body, headers=ACME)
    with caplog.at_level(logging.ERROR, logger="app.worker.operator_events"):
        for attempt in range(MAX_EVENT_ATTEMPTS):
            assert await _send(harness) == 1, attempt
            harness.database.clock.move(timedelta(minutes=11))
    assert len(harness.receiver.on("/events-down")) == MAX_EVENT_ATTEMPTS
    assert "given up after 12 attempts" in caplog.text
    assert await _send(harness) == 0  # nothing about the event given up
    # A permanent refusal gives up at once.
    harness.receiver.always("/events-down", Reply(400))
    harness.database.clock.move(timedelta(minutes=1))
    await harness.client.post("/v1/schedules", json=body, headers=ACME)
    assert await _send(harness) == 1
    assert await _send(harness) == 0
