"""Failure callbacks through the API and the loop (DESIGN 11): `on_failure` shown redacted,
changed and cleared; a dead letter's message delivered, signed, to that target with an id of
its own; a callback that fails for good is a dead letter that calls nothing; bad input
refused naming the field, with nothing stored."""

from __future__ import annotations

import json
from typing import Any

import pytest
from standardwebhooks import Webhook

from tests.integration.api.test_bad_input import assert_problem_names, stored_schedules
from tests.integration.api.test_redaction import SECRET, SHOWN
from tests.integration.conftest import ON_MODULE_LOOP, Harness
from tests.receiver import Received, Reply

HOUR = {"type": "once", "delay_seconds": 3600}


def arrived(harness: Harness, path: str) -> list[Received]:
    return [r for r in harness.receiver.requests if r.path == path]


async def failing(harness: Harness, **spec: Any) -> dict[str, Any]:
    """An immediate schedule whose attempts fail (500; one by default) and dead-letter,
    told at /alerts."""
    harness.receiver.always("/bad", Reply(500, body="down for maintenance"))
    spec.setdefault("on_failure", harness.webhook("/alerts"))
    spec.setdefault("max_attempts", 1)
    return await harness.create(target=harness.webhook("/bad"), payload={"order": 7}, **spec)


async def test_a_dead_letter_is_reported_to_on_failure_signed_under_an_id_of_its_own(
    harness: Harness,
) -> None:
    on_failure = harness.webhook(
        "/alerts", signing_secret=SECRET, headers={"Authorization": "Bearer alert-token"}
    )
    created = await failing(harness, on_failure=on_failure)
    assert created["on_failure"]["signing_secret"] == SHOWN
    assert created["on_failure"]["headers"]["Authorization"] == "***"

    await harness.step_until(lambda: _any(harness, "/alerts"))

    (failed,) = arrived(harness, "/bad")
    (told,) = arrived(harness, "/alerts")
    assert told.headers["X-Event-Type"] == "chronoq.dead_lettered"
    assert told.headers["X-Occurrence-Id"] != failed.occurrence_id
    assert told.headers["Idempotency-Key"] == told.occurrence_id
    assert told.headers["Authorization"] == "Bearer alert-token"
    body = Webhook(SECRET).verify(told.body, told.headers)
    assert body == {
        "type": "occurrence.dead_lettered",
        "occurrence_id": failed.occurrence_id,
        "schedule_id": created["id"],
        "event_type": "test.event",
        "fire_at": failed.headers["X-Scheduled-For"],
        "attempts": 1,
        "last_error": body["last_error"],
        "payload": {"order": 7},
    }
    assert "500" in body["last_error"]

    occurrences = {o["occurrence_id"]: o for o in await harness.occurrences(created["id"])}
    callback = occurrences[told.occurrence_id]
    assert (callback["origin"], callback["status"]) == ("callback", "delivered")
    assert callback["callback_of"] == failed.occurrence_id
    assert occurrences[failed.occurrence_id]["callback_of"] is None
    schedule = await harness.get(f"/v1/schedules/{created['id']}")
    # The schedule's own figures are its firing's, not its callback's.
    assert (schedule["status"], schedule["consecutive_failures"]) == ("failed", 1)
    assert schedule["last_error"] == occurrences[failed.occurrence_id]["last_error"]


async def _any(harness: Harness, path: str) -> bool:
    return bool(arrived(harness, path))


async def test_a_callback_that_fails_for_good_is_a_dead_letter_that_calls_nothing(
    harness: Harness,
) -> None:
    harness.receiver.always("/alerts", Reply(410))
    created = await failing(harness)

    async def both_dead() -> bool:
        listed = await harness.get(f"/v1/dead-letters?schedule_id={created['id']}")
        return len(listed["items"]) == 2

    await harness.step_until(both_dead)
    await harness.step()

    listed = (await harness.get(f"/v1/dead-letters?schedule_id={created['id']}"))["items"]
    (callback,) = [d for d in listed if d["origin"] == "callback"]
    assert callback["event_type"] == "chronoq.dead_lettered"
    assert callback["target"]["url"] == harness.receiver.url("/alerts")
    assert callback["payload"]["type"] == "occurrence.dead_lettered"
    assert len(arrived(harness, "/alerts")) == 1, "a callback's dead letter called back"
    schedule = await harness.get(f"/v1/schedules/{created['id']}")
    assert schedule["consecutive_failures"] == 1


async def test_an_auto_paused_schedule_still_reports_the_dead_letter_that_paused_it(
    harness: Harness,
) -> None:
    created = await failing(harness, trigger=HOUR, pause_after_failures=1)
    trigger = await harness.client.post(f"/v1/schedules/{created['id']}/trigger")
    assert trigger.status_code in (200, 201, 202), trigger.text

    await harness.step_until(lambda: _any(harness, "/alerts"))

    schedule = await harness.get(f"/v1/schedules/{created['id']}")
    assert (schedule["status"], schedule["pause_reason"]) == ("paused", "failures")
    (told,) = arrived(harness, "/alerts")
    assert json.loads(told.body)["occurrence_id"] == arrived(harness, "/bad")[0].occurrence_id


async def test_patch_sets_keeps_the_redacted_secret_and_null_cancels_pending_callbacks(
    harness: Harness,
) -> None:
    harness.receiver.always("/alerts", Reply(503))  # the callback keeps retrying
    # A callback has its schedule's attempt budget and retry policy.
    created = await failing(
        harness,
        on_failure=None,
        trigger=HOUR,
        max_attempts=3,
        retry={"base_delay_seconds": 60, "max_delay_seconds": 60},
    )
    harness.receiver.always("/bad", Reply(410))  # no retry: dead-lettered at once
    assert created["on_failure"] is None
    path = f"/v1/schedules/{created['id']}"

    set_ = await harness.client.patch(
        path, json={"on_failure": harness.webhook("/alerts", signing_secret=SECRET)}
    )
    assert set_.status_code == 200, set_.text
    kept = await harness.client.patch(path, json={"on_failure": set_.json()["on_failure"]})
    assert kept.status_code == 200, kept.text
    await harness.client.post(f"{path}/trigger")
    await harness.step_until(lambda: _any(harness, "/alerts"))
    # The redacted form sent back kept the stored secret: the callback verifies with it.
    Webhook(SECRET).verify(
        arrived(harness, "/alerts")[0].body, arrived(harness, "/alerts")[0].headers
    )
    pending = [o for o in await harness.occurrences(created["id"]) if o["origin"] == "callback"]
    assert [o["status"] for o in pending] == ["pending"]

    cleared = await harness.client.patch(path, json={"on_failure": None})

    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["on_failure"] is None
    after = [o for o in await harness.occurrences(created["id"]) if o["origin"] == "callback"]
    assert [o["status"] for o in after] == ["cancelled"]
    events = (await harness.get(f"{path}/events"))["items"]
    assert ["on_failure"] in [e["fields"] for e in events if e["kind"] == "updated"]


@pytest.mark.parametrize(
    ("on_failure", "pointer"),
    [
        pytest.param({"type": "webhook"}, "#/on_failure/url", id="no url"),
        pytest.param(
            {"type": "webhook", "url": "ftp://127.0.0.1/x"}, "#/on_failure/url", id="scheme"
        ),
        pytest.param(
            {"type": "webhook", "url": "http://169.254.169.254/latest"},
            "#/on_failure/url",
            id="denied address",
        ),
        pytest.param({"type": "carrier-pigeon"}, "#/on_failure/type", id="unknown type"),
        pytest.param(
            {"type": "rabbitmq", "exchange": "alerts", "routing_key": "dead"},
            "#/on_failure/type",
            id="rabbitmq without a broker",
        ),
        pytest.param(
            {"type": "webhook", "url": "http://127.0.0.1:9/x", "signing_secret": SHOWN},
            "#/on_failure/signing_secret",
            id="redacted secret on create",
        ),
        pytest.param(
            {"type": "webhook", "url": "http://127.0.0.1:9/x", "timeout_seconds": "NaN"},
            "#/on_failure/timeout_seconds",
            id="NaN timeout",
        ),
        pytest.param("http://127.0.0.1:9/x", "#/on_failure", id="not an object"),
    ],
)
@ON_MODULE_LOOP
async def test_a_bad_on_failure_is_a_422_naming_it_and_nothing_is_stored(
    shared: Harness, on_failure: Any, pointer: str
) -> None:
    body = {
        "event_type": "test.event",
        "target": shared.webhook(),
        "trigger": HOUR,
        "on_failure": on_failure,
    }

    created = await shared.client.post("/v1/schedules", json=body)
    assert_problem_names(created, 422, pointer)
    assert await stored_schedules(shared) == []

    existing = await shared.create(trigger=HOUR)
    patched = await shared.client.patch(
        f"/v1/schedules/{existing['id']}", json={"on_failure": on_failure}
    )
    if pointer.endswith("signing_secret"):
        # A PATCH may send a redacted form back only where one is stored.
        assert patched.status_code == 422, patched.text
    else:
        assert_problem_names(patched, 422, pointer)
    assert (await shared.get(f"/v1/schedules/{existing['id']}"))["on_failure"] is None


@ON_MODULE_LOOP
async def test_a_batch_names_the_item_whose_on_failure_is_refused(shared: Harness) -> None:
    def item(on_failure: dict[str, Any]) -> dict[str, Any]:
        return {
            "event_type": "test.event",
            "target": shared.webhook(),
            "trigger": HOUR,
            "on_failure": on_failure,
        }

    items = [
        item(shared.webhook("/alerts")),
        item({"type": "webhook", "url": "http://169.254.169.254/latest"}),
    ]
    refused = await shared.client.post("/v1/schedules/batch", json={"items": items})

    assert_problem_names(refused, 422, "#/items/1/on_failure/url")
    assert await stored_schedules(shared) == []
    accepted = await shared.client.post("/v1/schedules/batch", json={"items": items[:1]})
    assert accepted.status_code == 201, accepted.text
    (created,) = accepted.json()["items"]
    assert created["on_failure"]["url"] == shared.receiver.url("/alerts")
