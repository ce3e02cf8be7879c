"""End to end through the API and the stepped loop: create, fire, deliver, settle."""

from __future__ import annotations

from tests.integration.conftest import Harness


async def test_immediate_schedule_is_delivered_once_with_contract_headers(harness: Harness) -> None:
    created = await harness.create(event_type="invoice.due", payload={"b": 1, "a": [1, 2]})

    assert await harness.step() == 1

    (request,) = harness.receiver.requests
    assert request.method == "POST"
    assert request.body == b'{"b":1,"a":[1,2]}'
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["X-Occurrence-Id"] == created["next_occurrence_id"]
    assert request.headers["Idempotency-Key"] == created["next_occurrence_id"]
    assert request.headers["X-Schedule-Id"] == created["id"]
    assert request.headers["X-Event-Type"] == "invoice.due"
    assert request.headers["X-Chronoq-Tenant"] == "default"
    assert request.headers["X-Attempt"] == "1"
    assert request.headers["X-Scheduled-For"].endswith("Z")
    snapshot = await harness.get(f"/v1/schedules/{created['id']}")
    assert snapshot["status"] == "completed"
    assert snapshot["fire_count"] == 1
    assert await harness.step() == 0
