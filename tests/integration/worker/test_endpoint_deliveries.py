"""Deliveries to endpoints through the real loop (DESIGN section 15): each attempt goes to
the endpoint as it is when the attempt is claimed (its URL, headers and live secrets), with
no change to the schedules that target it; a rotation signs with every live secret."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from tests.integration.conftest import Harness
from tests.receiver import Received, Reply


def _verifies(secret: str, request: Received) -> bool:
    try:
        Webhook(secret).verify(request.body, request.headers)
    except WebhookVerificationError:
        return False
    return True


async def _endpoint(harness: Harness, path: str, **body: Any) -> dict[str, Any]:
    made = await harness.client.post(
        "/v1/endpoints", json={"url": harness.receiver.url(path), **body}
    )
    assert made.status_code == 201, made.text
    found: dict[str, Any] = made.json()
    return found


async def _fire(harness: Harness, schedule_id: str) -> None:
    fired = await harness.client.post(f"/v1/schedules/{schedule_id}/trigger")
    assert fired.status_code in (200, 201, 202), fired.text
    await harness.step()


async def test_each_attempt_goes_to_the_endpoint_as_it_is_then_signed_by_its_live_secrets(
    harness: Harness,
) -> None:
    endpoint = await _endpoint(harness, "/first", headers={"X-Team": "billing"})
    first_secret = endpoint["signing_secrets"][0]["secret"]
    schedule = await harness.create(
        target={"type": "endpoint", "endpoint_id": endpoint["id"]},
        trigger={"type": "interval", "every_seconds": 3600},
        payload={"n": 1},
    )
    await harness.step()  # its first tick, now
    (first,) = harness.receiver.on("/first")
    assert first.headers["X-Team"] == "billing"
    assert first.headers["webhook-id"] == first.occurrence_id
    assert _verifies(first_secret, first)
    assert len(first.headers["webhook-signature"].split(" ")) == 1

    moved = await harness.client.patch(
        f"/v1/endpoints/{endpoint['id']}",
        json={"url": harness.receiver.url("/second"), "headers": {"X-Team": "payments"}},
    )
    assert moved.status_code == 200, moved.text
    rotated = await harness.client.post(
        f"/v1/endpoints/{endpoint['id']}/secrets/rotate", json={"overlap_seconds": 3600}
    )
    new_secret = rotated.json()["signing_secrets"][-1]["secret"]
    await _fire(harness, schedule["id"])
    (second,) = harness.receiver.on("/second")
    assert second.headers["X-Team"] == "payments"
    assert len(second.headers["webhook-signature"].split(" ")) == 2
    assert _verifies(first_secret, second)
    assert _verifies(new_secret, second)
    # The schedule was not touched: it still names the endpoint, at its version.
    after = await harness.get(f"/v1/schedules/{schedule['id']}")
    assert after["target"] == {"type": "endpoint", "endpoint_id": endpoint["id"]}
    assert after["flow_key"] is None

    # Once the overlap is over, only the newest signs (an overlap of 0 ends it at once).
    await harness.client.post(
        f"/v1/endpoints/{endpoint['id']}/secrets/rotate", json={"overlap_seconds": 0}
    )
    newest = await harness.get(f"/v1/endpoints/{endpoint['id']}")
    assert len(newest["signing_secrets"]) == 1
    await _fire(harness, schedule["id"])
    third = harness.receiver.on("/second")[-1]
    assert len(third.headers["webhook-signature"].split(" ")) == 1
    assert not _verifies(first_secret, third)
    assert not _verifies(new_secret, third)


async def test_a_receiver_that_fails_opens_the_circuit_and_one_probe_closes_it_once_it_answers(
    harness: Harness,
) -> None:
    harness.receiver.always("/down", Reply(503))
    endpoint = await _endpoint(
        harness, "/down", circuit={"failure_threshold": 2, "cooldown_seconds": 60}
    )
    target = {"type": "endpoint", "endpoint_id": endpoint["id"]}
    for _ in range(4):
        await harness.create(target=target, max_attempts=10)
    await harness.step()
    opened = await harness.get(f"/v1/endpoints/{endpoint['id']}")
    assert (opened["state"], opened["consecutive_failures"]) == ("open", 4)
    assert opened["next_probe_at"] is not None
    sent = len(harness.receiver.on("/down"))
    assert sent == 4
    # Open: the retries come due and wait, uncharged; nothing reaches the receiver.
    harness.database.clock.move(timedelta(seconds=30))
    await harness.step()
    assert len(harness.receiver.on("/down")) == sent
    waiting = await harness.get(f"/v1/endpoints/{endpoint['id']}")
    assert (waiting["state"], waiting["waiting"]) == ("open", 4)

    # Past the cooldown one attempt probes, alone: it fails, and the wait doubles.
    harness.database.clock.move(timedelta(seconds=31))
    assert (await harness.get(f"/v1/endpoints/{endpoint['id']}"))["state"] == "half_open"
    await harness.step()
    assert len(harness.receiver.on("/down")) == sent + 1
    reopened = await harness.get(f"/v1/endpoints/{endpoint['id']}")
    assert (reopened["state"], reopened["consecutive_failures"]) == ("open", 5)

    # The receiver is back: the next probe's 2xx closes the circuit, and the rest flow.
    harness.receiver.always("/down", Reply(200))
    harness.database.clock.move(timedelta(seconds=121))
    await harness.step_until(lambda: _all_delivered(harness, 4))
    closed = await harness.get(f"/v1/endpoints/{endpoint['id']}")
    assert (closed["state"], closed["consecutive_failures"]) == ("closed", 0)
    events = await harness.get(f"/v1/endpoints/{endpoint['id']}/events")
    assert [e["kind"] for e in events["items"]] == ["created", "opened", "reopened", "recovered"]
    assert events["items"][1]["actor"] == "system"
    # Each delivery's attempts: its failed one (and the probe's), then the one that
    # delivered it; the waits in between charged nothing.
    schedules = (await harness.get("/v1/schedules"))["items"]
    assert sorted(s["attempts"] for s in schedules) == [2, 2, 2, 3]
    # The endpoint's attempts, newest first: the four that delivered, the probe, the four
    # that opened it.
    first = await harness.get(f"/v1/endpoints/{endpoint['id']}/attempts?limit=5")
    rest = await harness.get(
        f"/v1/endpoints/{endpoint['id']}/attempts?cursor={first['next_cursor']}"
    )
    codes = [a["status_code"] for a in [*first["items"], *rest["items"]]]
    assert codes == [200] * 4 + [503] * 5, codes
    assert rest["next_cursor"] is None


async def _all_delivered(harness: Harness, count: int) -> bool:
    schedules = (await harness.get("/v1/schedules"))["items"]
    completed: int = sum(s["status"] == "completed" for s in schedules)
    return completed == count
