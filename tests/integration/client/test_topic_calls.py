"""The topic and subscription calls of the client against the app: a topic put (made, then
replaced), read, listed page after page and removed under its version, its removal refused
while a schedule targets it; an endpoint subscribed to it, read, listed by topic, changed
and removed under its version, a subscription naming a topic or an endpoint the tenant does
not have refused naming the field; the dead letters of a fan-out found and replayed by
subscription, endpoint and time; the synchronous client over HTTP as well."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.client import (
    AsyncClient,
    Client,
    ConflictError,
    DeliveryOut,
    EndpointOut,
    NotFoundError,
    PreconditionFailedError,
    SubscriptionIn,
    SubscriptionOut,
    SubscriptionPatch,
    TopicIn,
    TopicOut,
    ValidationError,
    calls,
)
from tests.integration.client.test_endpoint_calls import endpoint, served
from tests.integration.conftest import Harness
from tests.receiver import Reply

ELSEWHERE = uuid.UUID("0b8a3b0e-8a58-4bb5-9c8e-0f8f3a1c2d4e")


@pytest.fixture
async def chronoq(harness: Harness) -> AsyncIterator[AsyncClient]:
    async with AsyncClient("http://localhost", transport=harness.transport) as client:
        yield client


def aimed_at(topic: str, **extra: Any) -> dict[str, Any]:
    """A schedule whose occurrences fan out to `topic`'s subscriptions."""
    return {
        "event_type": "invoice.due",
        "payload": {"region": "eu"},
        "target": {"type": "topic", "topic": topic},
        "trigger": {"type": "once", "delay_seconds": 3600},
        **extra,
    }


async def test_a_topic_is_put_read_listed_and_replaced_under_its_version(
    chronoq: AsyncClient,
) -> None:
    made = await chronoq.put_topic("billing", TopicIn(description="Billing events"))
    assert isinstance(made, TopicOut)
    assert (made.name, made.description, made.subscriptions, made.version) == (
        "billing",
        "Billing events",
        0,
        1,
    )
    assert await chronoq.get_topic("billing") == made
    # Without a body: a topic with no description.
    other = await chronoq.put_topic("alerts")
    assert (other.description, other.version) == (None, 1)

    page = await chronoq.list_topics(limit=1)
    assert ([t.name for t in page.items], page.next_cursor is not None) == (["alerts"], True)
    rest = await chronoq.list_topics(limit=1, cursor=page.next_cursor)
    assert ([t.name for t in rest.items], rest.next_cursor) == (["billing"], None)
    assert [t.name async for t in chronoq.iter_topics(limit=1)] == ["alerts", "billing"]

    with pytest.raises(PreconditionFailedError) as stale:
        await chronoq.put_topic("billing", {"description": "x"}, if_match=made.version + 1)
    assert stale.value.status == 412
    replaced = await chronoq.put_topic("billing", {}, if_match=made.version)
    assert (replaced.description, replaced.version) == (None, 2)
    assert replaced.created_at == made.created_at

    with pytest.raises(ValidationError) as refused:
        await chronoq.put_topic("billing", {"description": "two\nlines"})
    assert [e.pointer for e in refused.value.errors] == ["#/description"]
    with pytest.raises(NotFoundError):
        await chronoq.get_topic("missing")

    with pytest.raises(PreconditionFailedError):
        await chronoq.delete_topic("billing", if_match=1)
    await chronoq.delete_topic("billing", if_match=2)
    with pytest.raises(NotFoundError):
        await chronoq.get_topic("billing")
    with pytest.raises(NotFoundError):
        await chronoq.delete_topic("billing")


async def test_a_subscription_is_made_read_listed_changed_and_removed(
    harness: Harness, chronoq: AsyncClient
) -> None:
    target = await chronoq.create_endpoint(endpoint(harness))
    await chronoq.put_topic("billing")
    await chronoq.put_topic("alerts")

    made = await chronoq.create_subscription(
        SubscriptionIn(
            topic="billing",
            endpoint_id=target.id,
            event_types=["invoice.*"],
            match={"region": ["eu", "us"], "tier": "gold", "count": 5},
        )
    )
    assert isinstance(made, SubscriptionOut)
    assert (made.topic, made.endpoint_id, made.event_types, made.version) == (
        "billing",
        target.id,
        ["invoice.*"],
        1,
    )
    assert made.match == {"region": ["eu", "us"], "tier": "gold", "count": 5}
    assert await chronoq.get_subscription(made.id) == made
    assert (await chronoq.get_topic("billing")).subscriptions == 1
    # A mapping is sent as it is: every event type, any payload.
    other = await chronoq.create_subscription({"topic": "alerts", "endpoint_id": str(target.id)})
    assert (other.event_types, other.match) == (None, None)

    page = await chronoq.list_subscriptions(limit=1)
    assert ([s.id for s in page.items], page.next_cursor is not None) == ([made.id], True)
    assert [s.id async for s in chronoq.iter_subscriptions(limit=1)] == [made.id, other.id]
    assert [s.id async for s in chronoq.iter_subscriptions(topic="alerts")] == [other.id]
    assert (await chronoq.list_subscriptions(topic="none")).items == []

    with pytest.raises(PreconditionFailedError) as stale:
        await chronoq.patch_subscription(made.id, {"topic": "alerts"}, if_match=made.version + 1)
    assert stale.value.status == 412
    # A null the patch sets is sent: every event type again; the match stays.
    patched = await chronoq.patch_subscription(
        made.id, SubscriptionPatch(topic="alerts", event_types=None), if_match=made.version
    )
    assert (patched.topic, patched.event_types, patched.version) == ("alerts", None, 2)
    assert patched.match == made.match
    cleared = await chronoq.patch_subscription(made.id, {"match": None})
    assert (cleared.match, cleared.version) == (None, 3)
    with pytest.raises(ValidationError) as refused:
        await chronoq.patch_subscription(made.id, {"topic": None})
    assert [e.pointer for e in refused.value.errors] == ["#/topic"]

    with pytest.raises(PreconditionFailedError):
        await chronoq.delete_subscription(made.id, if_match=2)
    await chronoq.delete_subscription(made.id, if_match=3)
    with pytest.raises(NotFoundError):
        await chronoq.get_subscription(made.id)
    with pytest.raises(NotFoundError):
        await chronoq.delete_subscription(made.id)
    assert [s.id async for s in chronoq.iter_subscriptions()] == [other.id]


async def test_a_subscription_naming_a_missing_topic_or_endpoint_is_refused(
    harness: Harness, chronoq: AsyncClient
) -> None:
    target = await chronoq.create_endpoint(endpoint(harness))
    await chronoq.put_topic("billing")

    with pytest.raises(ValidationError) as no_topic:
        await chronoq.create_subscription({"topic": "missing", "endpoint_id": str(target.id)})
    assert no_topic.value.status == 422
    assert [e.pointer for e in no_topic.value.errors] == ["#/topic"]
    with pytest.raises(ValidationError) as no_endpoint:
        await chronoq.create_subscription({"topic": "billing", "endpoint_id": str(ELSEWHERE)})
    assert [e.pointer for e in no_endpoint.value.errors] == ["#/endpoint_id"]
    with pytest.raises(ValidationError) as bad_glob:
        await chronoq.create_subscription(
            {"topic": "billing", "endpoint_id": str(target.id), "event_types": ["a["]}
        )
    assert [e.pointer for e in bad_glob.value.errors] == ["#/event_types"]
    made = await chronoq.create_subscription({"topic": "billing", "endpoint_id": str(target.id)})
    with pytest.raises(ValidationError) as moved:
        await chronoq.patch_subscription(made.id, {"endpoint_id": str(ELSEWHERE)})
    assert [e.pointer for e in moved.value.errors] == ["#/endpoint_id"]
    assert (await chronoq.get_subscription(made.id)).version == 1
    assert [s.id async for s in chronoq.iter_subscriptions()] == [made.id]


async def test_a_topic_is_removed_only_once_no_live_schedule_targets_it(
    harness: Harness, chronoq: AsyncClient
) -> None:
    target = await chronoq.create_endpoint(endpoint(harness))
    made = await chronoq.put_topic("billing")
    subscription = await chronoq.create_subscription(
        {"topic": "billing", "endpoint_id": str(target.id)}
    )
    schedule = await chronoq.create_schedule(aimed_at("billing"))
    assert schedule.target.model_dump() == {"type": "topic", "topic": "billing"}

    with pytest.raises(ConflictError) as refused:
        await chronoq.delete_topic("billing")
    assert refused.value.status == 409
    assert str(schedule.id) in refused.value.detail
    assert (await chronoq.get_topic("billing")).subscriptions == 1

    await chronoq.cancel_schedule(schedule.id)
    await chronoq.delete_topic("billing", if_match=made.version)
    # Its subscriptions went with it.
    with pytest.raises(NotFoundError):
        await chronoq.get_subscription(subscription.id)
    assert (await chronoq.list_topics()).items == []


async def dead_deliveries(
    harness: Harness, chronoq: AsyncClient
) -> tuple[EndpointOut, SubscriptionOut, SubscriptionOut, uuid.UUID]:
    """Two subscriptions of one topic to an endpoint that answers 503, and the occurrence
    of a schedule of the topic whose two deliveries were dead-lettered."""
    harness.receiver.always("/down", Reply(503))
    down = await chronoq.create_endpoint(endpoint(harness, "/down"))
    await chronoq.put_topic("billing")
    first = await chronoq.create_subscription({"topic": "billing", "endpoint_id": str(down.id)})
    second = await chronoq.create_subscription(
        {"topic": "billing", "endpoint_id": str(down.id), "match": {"region": "eu"}}
    )
    schedule = await chronoq.create_schedule(
        aimed_at("billing", trigger={"type": "immediate"}, max_attempts=1)
    )
    assert schedule.next_occurrence_id is not None
    occurrence_id = schedule.next_occurrence_id

    async def dead() -> bool:
        found = await chronoq.get_occurrence(occurrence_id)
        deliveries = found.deliveries or []
        return len(deliveries) == 2 and all(d.status == "dead_lettered" for d in deliveries)

    await harness.step_until(dead)
    return down, first, second, occurrence_id


async def test_a_fan_outs_dead_letters_are_found_and_replayed_by_subscription_and_endpoint(
    harness: Harness, chronoq: AsyncClient
) -> None:
    before = datetime.now(UTC) - timedelta(minutes=1)
    down, first, second, occurrence_id = await dead_deliveries(harness, chronoq)
    fanned = await chronoq.get_occurrence(occurrence_id)
    assert fanned.deliveries is not None
    assert all(isinstance(d, DeliveryOut) for d in fanned.deliveries)
    assert {d.subscription_id for d in fanned.deliveries} == {first.id, second.id}

    of_first = [d async for d in chronoq.iter_dead_letters(subscription_id=first.id)]
    assert len(of_first) == 1
    delivery = await chronoq.get_occurrence(of_first[0].occurrence_id)
    assert (delivery.parent_id, delivery.subscription_id, delivery.endpoint_id) == (
        occurrence_id,
        first.id,
        down.id,
    )
    assert delivery.delivery_id == delivery.occurrence_id
    of_endpoint = await chronoq.list_dead_letters(endpoint_id=down.id)
    assert len(of_endpoint.items) == 2
    assert (await chronoq.list_dead_letters(endpoint_id=ELSEWHERE)).items == []
    since = await chronoq.list_dead_letters(endpoint_id=down.id, dead_lettered_after=before)
    assert len(since.items) == 2
    later = datetime.now(UTC) + timedelta(hours=1)
    assert (await chronoq.list_dead_letters(dead_lettered_after=later)).items == []

    nothing = await chronoq.replay_dead_letters(endpoint_id=down.id, dead_lettered_after=later)
    assert nothing.replayed == 0
    replayed = await chronoq.replay_dead_letters(subscription_id=second.id)
    assert replayed.replayed == 1
    assert [d.occurrence_id async for d in chronoq.iter_dead_letters(endpoint_id=down.id)] == [
        of_first[0].occurrence_id
    ]


async def test_the_synchronous_client_has_the_same_calls(harness: Harness) -> None:
    async with served(harness) as url:

        def use() -> tuple[TopicOut, SubscriptionOut, list[str], list[str], list[str]]:
            with Client(url, trust_env=False) as chronoq:
                target = chronoq.create_endpoint({"url": harness.receiver.url("/endpoint")})
                chronoq.put_topic("billing", {"description": "Billing"})
                topic = chronoq.put_topic("billing", {"description": "Billing, EU"}, if_match=1)
                made = chronoq.create_subscription(
                    {"topic": "billing", "endpoint_id": str(target.id)}
                )
                changed = chronoq.patch_subscription(
                    made.id, {"event_types": ["invoice.*"]}, if_match=made.version
                )
                topics = [t.name for t in chronoq.iter_topics()]
                listed = [str(s.id) for s in chronoq.iter_subscriptions(topic="billing")]
                chronoq.delete_subscription(made.id)
                with pytest.raises(NotFoundError):
                    chronoq.get_subscription(made.id)
                chronoq.delete_topic("billing")
                left = [t.name for t in chronoq.list_topics().items]
                return topic, changed, topics, listed, left

        topic, changed, topics, listed, left = await asyncio.to_thread(use)

    assert (topic.description, topic.version) == ("Billing, EU", 2)
    assert (changed.event_types, changed.version) == (["invoice.*"], 2)
    assert (topics, listed, left) == (["billing"], [str(changed.id)], [])


def test_only_the_topic_calls_a_repeat_cannot_double_are_tried_again() -> None:
    some = uuid.uuid4()
    # A repeat of a create would make a second subscription.
    assert not calls.create_subscription({"topic": "t", "endpoint_id": str(some)}).repeatable
    assert not calls.patch_subscription(some, {"match": None}).repeatable
    assert calls.patch_subscription(some, {"match": None}, if_match=2).repeatable
    assert calls.patch_subscription(some, {}, if_match=2).headers == {"If-Match": '"2"'}
    assert calls.put_topic("billing").repeatable
    assert calls.put_topic("billing").body == {}
    assert calls.put_topic("a b", if_match="*").path == "/v1/topics/a%20b"
    assert calls.delete_topic("billing", if_match=4).headers == {"If-Match": '"4"'}
    assert calls.delete_subscription(some).repeatable
    assert calls.list_subscriptions(topic="billing", limit=5, cursor="c").params == (
        ("topic", "billing"),
        ("limit", "5"),
        ("cursor", "c"),
    )
    at = datetime(2026, 12, 7, 9, tzinfo=UTC)
    assert calls.list_dead_letters(
        subscription_id=some, endpoint_id=some, dead_lettered_after=at
    ).params == (
        ("subscription_id", str(some)),
        ("endpoint_id", str(some)),
        ("dead_lettered_after", "2026-12-07T09:00:00+00:00"),
    )
    assert calls.replay_dead_letters(endpoint_id=some, dead_lettered_after=at).body == {
        "endpoint_id": str(some),
        "dead_lettered_after": "2026-12-07T09:00:00+00:00",
    }
