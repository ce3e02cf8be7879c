"""How each delivery outcome settles an occurrence: delivered, retried, or dead-lettered."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.integration.conftest import Harness
from tests.receiver import Reply


async def test_retryable_failure_is_retried_with_the_same_occurrence_id_until_delivered(
    harness: Harness,
) -> None:
    harness.receiver.script("/hook", Reply(500, body="boom"), Reply(503))
    created = await harness.create()

    await harness.step_until(lambda: _arrived(harness, 3))

    attempts = [r.headers["X-Attempt"] for r in harness.receiver.requests]
    ids = {r.occurrence_id for r in harness.receiver.requests}
    assert attempts == ["1", "2", "3"]
    assert ids == {created["next_occurrence_id"]}
    await harness.step()
    assert await harness.schedule_status(created["id"]) == "completed"
    (occurrence,) = await harness.occurrences(created["id"])
    assert occurrence["status"] == "delivered"
    assert occurrence["attempts"] == 3


async def test_last_error_is_visible_while_an_occurrence_retries(harness: Harness) -> None:
    harness.receiver.script("/hook", Reply(500, body="database on fire"))
    created = await harness.create()

    await harness.step()

    snapshot = await harness.get(f"/v1/schedules/{created['id']}")
    assert snapshot["status"] == "pending"
    assert snapshot["attempts"] == 1
    assert "HTTP 500" in snapshot["last_error"]
    assert "database on fire" in snapshot["last_error"]


async def test_spent_attempt_budget_dead_letters_and_fails_a_one_shot(harness: Harness) -> None:
    harness.receiver.always("/hook", Reply(502))
    created = await harness.create(max_attempts=3)

    await harness.step_until(lambda: _status(harness, created["id"], "failed"))

    assert len(harness.receiver.requests) == 3
    (dead,) = (await harness.get("/v1/dead-letters"))["items"]
    assert dead["occurrence_id"] == created["next_occurrence_id"]
    assert dead["attempts"] == 3
    assert dead["last_error"].startswith("HTTP 502")


@pytest.mark.parametrize("status", [400, 401, 404, 410, 422])
async def test_permanent_status_dead_letters_at_once(harness: Harness, status: int) -> None:
    harness.receiver.always("/hook", Reply(status))
    created = await harness.create(max_attempts=5)

    await harness.step()

    assert len(harness.receiver.requests) == 1
    assert await harness.schedule_status(created["id"]) == "failed"
    (occurrence,) = await harness.occurrences(created["id"])
    assert occurrence["status"] == "dead_lettered"
    assert occurrence["last_error"].startswith(f"HTTP {status}")


async def test_redirects_are_not_followed(harness: Harness) -> None:
    harness.receiver.always("/hook", Reply(302, headers={"Location": "/elsewhere"}))
    created = await harness.create()

    await harness.step()

    assert [r.path for r in harness.receiver.requests] == ["/hook"]
    assert await harness.schedule_status(created["id"]) == "failed"


async def test_retry_after_on_429_delays_the_next_attempt(harness: Harness) -> None:
    harness.receiver.script("/hook", Reply(429, headers={"Retry-After": "30"}))
    # Honoured up to the most its policy waits (the harness's service waits 0.2 s at most).
    created = await harness.create(retry={"max_delay_seconds": 60})

    await harness.step()

    (occurrence,) = await harness.occurrences(created["id"])
    assert occurrence["status"] == "pending"
    first = harness.receiver.requests[0].at
    available = datetime.fromisoformat(occurrence["available_at"]).timestamp()
    assert available - first >= 29
    assert await harness.step() == 0


async def test_a_slow_target_times_out_and_is_retried(make_harness) -> None:  # type: ignore[no-untyped-def]
    async with make_harness(dispatch_timeout=0.5) as harness:
        harness.receiver.script("/slow", Reply(delay=2.0))
        created = await harness.create(target=harness.webhook("/slow"))

        await harness.step()

        (occurrence,) = await harness.occurrences(created["id"])
        assert occurrence["status"] == "pending"
        assert occurrence["attempts"] == 1
        assert "timed out" in occurrence["last_error"]
        await harness.step_until(lambda: _status(harness, created["id"], "completed"))


async def test_a_target_timeout_below_the_dispatch_timeout_applies(harness: Harness) -> None:
    harness.receiver.script("/slow", Reply(delay=1.5))
    created = await harness.create(target=harness.webhook("/slow", timeout_seconds=0.3))

    await harness.step()

    (occurrence,) = await harness.occurrences(created["id"])
    assert "timed out after 0.3s" in occurrence["last_error"]


async def test_an_unreachable_target_is_retried(harness: Harness) -> None:
    created = await harness.create(
        target={"type": "webhook", "url": "http://127.0.0.1:9/nothing-listens-here"}
    )

    await harness.step()

    (occurrence,) = await harness.occurrences(created["id"])
    assert occurrence["status"] == "pending"
    assert occurrence["last_error"]


async def test_method_and_custom_headers_reach_the_target(harness: Harness) -> None:
    await harness.create(target=harness.webhook(method="PUT", headers={"X-Tenant": "acme"}))

    await harness.step()

    (request,) = harness.receiver.requests
    assert request.method == "PUT"
    assert request.headers["X-Tenant"] == "acme"


async def test_deliveries_are_signed_when_a_secret_is_configured(make_harness) -> None:  # type: ignore[no-untyped-def]
    from standardwebhooks import Webhook

    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    async with make_harness(webhook_signing_secret=secret) as harness:
        await harness.create(payload={"signed": True})
        await harness.step()

        (request,) = harness.receiver.requests
        verified = Webhook(secret).verify(request.body, request.headers)
        assert verified == {"signed": True}
        assert request.headers["webhook-id"] == request.occurrence_id


async def _arrived(harness: Harness, count: int) -> bool:
    return len(harness.receiver.requests) >= count


async def _status(harness: Harness, schedule_id: str, status: str) -> bool:
    return await harness.schedule_status(schedule_id) == status
