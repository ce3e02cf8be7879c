"""Topics and fan-out through the real loop (DESIGN section 15): an occurrence of a schedule
that targets a topic fans out, as it fires, to one delivery per subscription that matches it
then, each with its own id, attempts and endpoint; one failing subscriber delays and charges
none of the others; a topic with no match completes with no delivery."""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

from standardwebhooks import Webhook

from app.domain.topics import delivery_id
from app.sinks import open_sinks
from app.worker.dispatcher import Dispatcher
from tests.integration.conftest import Harness
from tests.integration.worker.test_isolation import Tarpit
from tests.receiver import Reply
from tests.waiting import eventually


async def _endpoint(harness: Harness, path: str, **body: Any) -> dict[str, Any]:
    made = await harness.client.post(
        "/v1/endpoints", json={"url": harness.receiver.url(path), **body}
    )
    assert made.status_code == 201, made.text
    found: dict[str, Any] = made.json()
    return found


async def _subscribe(harness: Harness, endpoint: dict[str, Any], **body: Any) -> dict[str, Any]:
    made = await harness.client.post(
        "/v1/subscriptions", json={"topic": "billing", "endpoint_id": endpoint["id"], **body}
    )
    assert made.status_code == 201, made.text
    found: dict[str, Any] = made.json()
    return found


async def test_an_occurrence_fans_out_to_each_matching_subscription_once(
    harness: Harness,
) -> None:
    assert (await harness.client.put("/v1/topics/billing", json={})).status_code == 201
    eu = await _endpoint(harness, "/eu")
    us = await _endpoint(harness, "/us")
    orders = await _endpoint(harness, "/orders")
    to_eu = await _subscribe(harness, eu, match={"region": ["eu", "uk"]})
    to_us = await _subscribe(harness, us, event_types=["invoice.*"], match={"region": "us"})
    await _subscribe(harness, orders, event_types=["order.*"])
    schedule = await harness.create(
        event_type="invoice.due",
        payload={"region": "eu", "n": 1},
        target={"type": "topic", "topic": "billing"},
    )
    await harness.step()
    (received,) = harness.receiver.on("/eu")
    assert harness.receiver.on("/us") == []
    assert harness.receiver.on("/orders") == []
    (occurrence,) = await harness.occurrences(schedule["id"])
    assert occurrence["status"] == "completed"
    expected = str(delivery_id(uuid.UUID(occurrence["occurrence_id"]), uuid.UUID(to_eu["id"])))
    assert received.headers["X-Occurrence-Id"] == occurrence["occurrence_id"]
    assert received.headers["webhook-id"] == expected == received.headers["Idempotency-Key"]
    assert Webhook(eu["signing_secrets"][0]["secret"]).verify(received.body, received.headers)
    assert json.loads(received.body) == {"region": "eu", "n": 1}
    read = await harness.get(f"/v1/occurrences/{occurrence['occurrence_id']}")
    (delivery,) = read["deliveries"]
    assert delivery == delivery | {
        "delivery_id": expected,
        "subscription_id": to_eu["id"],
        "endpoint_id": eu["id"],
        "status": "delivered",
        "attempts": 1,
    }
    assert (await harness.schedule_status(schedule["id"])) == "completed"
    assert to_us["id"] != to_eu["id"]


async def test_one_failing_subscriber_holds_back_none_of_the_others(harness: Harness) -> None:
    await harness.client.put("/v1/topics/billing", json={})
    harness.receiver.always("/down", Reply(503))
    endpoints = [await _endpoint(harness, f"/ok-{n}") for n in range(3)]
    down = await _endpoint(harness, "/down")
    for endpoint in [*endpoints, down]:
        await _subscribe(harness, endpoint)
    schedule = await harness.create(target={"type": "topic", "topic": "billing"}, max_attempts=2)
    await harness.step()
    for n in range(3):
        assert len(harness.receiver.on(f"/ok-{n}")) == 1
    await harness.step_until(lambda: _dead_lettered(harness, schedule["id"]))
    assert len(harness.receiver.on("/down")) == 2
    (occurrence,) = await harness.occurrences(schedule["id"])
    read = await harness.get(f"/v1/occurrences/{occurrence['occurrence_id']}")
    statuses = sorted(d["status"] for d in read["deliveries"])
    assert statuses == ["dead_lettered", "delivered", "delivered", "delivered"]
    # The dead letter names its delivery, subscription and endpoint, and replays by them.
    letters = await harness.get(f"/v1/dead-letters?endpoint_id={down['id']}")
    (letter,) = letters["items"]
    assert (letter["parent_id"], letter["endpoint_id"]) == (occurrence["occurrence_id"], down["id"])
    assert letter["delivery_id"] == letter["occurrence_id"]
    harness.receiver.always("/down", Reply(200))
    replayed = await harness.client.post(
        "/v1/dead-letters/replay", json={"subscription_id": letter["subscription_id"]}
    )
    assert (replayed.status_code, replayed.json()["replayed"]) == (202, 1), replayed.text
    await harness.step()
    assert len(harness.receiver.on("/down")) == 3
    for n in range(3):
        assert len(harness.receiver.on(f"/ok-{n}")) == 1  # none sent twice


async def _dead_lettered(harness: Harness, schedule_id: str) -> bool:
    letters = (await harness.get(f"/v1/dead-letters?schedule_id={schedule_id}"))["items"]
    return len(letters) == 1


async def test_a_topic_with_no_matching_subscription_completes_with_no_delivery(
    harness: Harness,
) -> None:
    await harness.client.put("/v1/topics/quiet", json={})
    schedule = await harness.create(target={"type": "topic", "topic": "quiet"})
    await harness.step()
    (occurrence,) = await harness.occurrences(schedule["id"])
    assert occurrence["status"] == "completed"
    read = await harness.get(f"/v1/occurrences/{occurrence['occurrence_id']}")
    assert read["deliveries"] == []
    assert await harness.schedule_status(schedule["id"]) == "completed"
    assert harness.receiver.requests == []


async def test_a_subscriber_that_holds_its_requests_holds_back_none_of_the_others(
    harness: Harness,
) -> None:
    # Each subscriber's stream of a schedule is a lane of its own: while the tarpit holds
    # its delivery of the first tick, the other subscriber gets every tick as it comes.
    settings = harness.settings.model_copy(
        update={"dispatch_timeout": 20.0, "lease": 60.0, "poll_interval": 0.05}
    )
    tarpit = Tarpit()
    async with tarpit.serving() as url, open_sinks(settings) as sinks:
        await harness.client.put("/v1/topics/billing", json={})
        held = await harness.client.post("/v1/endpoints", json={"url": url})
        assert held.status_code == 201, held.text
        await _subscribe(harness, held.json())
        await _subscribe(harness, await _endpoint(harness, "/fast"))
        await harness.create(
            target={"type": "topic", "topic": "billing"},
            trigger={"type": "interval", "every_seconds": 1},
        )
        dispatcher = Dispatcher(
            harness.database, sinks, settings, rng=random.Random(1), wakeups=harness.wakeups
        )
        async with dispatcher.started():
            await eventually(lambda: tarpit.held == 1, what="the tarpit's first delivery")
            await eventually(
                lambda: len(harness.receiver.on("/fast")) >= 3,
                within=30,
                what="three ticks at the other subscriber",
            )
            # Its own stream keeps its order: one at a time, the first still held.
            assert (tarpit.held, tarpit.answered) == (1, 0)
