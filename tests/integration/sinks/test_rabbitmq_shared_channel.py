"""Many publishes in flight on one channel: each failure still settles only its own delivery."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import aio_pika
import pytest
import sqlalchemy as sa

from app.store.schema.tables import schedules
from tests.conftest import EMBEDDED_ONLY
from tests.integration.conftest import Harness

pytestmark = [pytest.mark.rabbitmq, EMBEDDED_ONLY]

FINE = 20


def rabbitmq(routing_key: str, exchange: str = "") -> dict[str, Any]:
    return {"type": "rabbitmq", "exchange": exchange, "routing_key": routing_key}


async def _received(queue: aio_pika.abc.AbstractQueue, want: set[str]) -> set[str]:
    """Message ids from the queue until every wanted one arrived or 5 s passed (a message
    published again after a channel error may arrive twice: ids are compared as a set)."""
    seen: set[str] = set()
    deadline = time.monotonic() + 5
    while not want <= seen and time.monotonic() < deadline:
        message = await queue.get(no_ack=True, fail=False)
        if message is None:
            await asyncio.sleep(0.05)
        else:
            seen.add(str(message.message_id))
    return seen


async def _pending_with(harness: Harness, schedule_id: str, *words: str) -> None:
    (occurrence,) = await harness.occurrences(schedule_id)
    assert occurrence["status"] == "pending"
    for word in words:
        assert word in occurrence["last_error"]


async def test_a_return_and_a_nack_among_many_publishes_fail_only_their_own(
    amqp_harness: Harness,
    broker: aio_pika.abc.AbstractChannel,
    queue: aio_pika.abc.AbstractQueue,
) -> None:
    full = await broker.declare_queue(
        f"chronoq-test-full-{uuid.uuid4().hex[:10]}",
        arguments={"x-max-length": 0, "x-overflow": "reject-publish"},
    )
    try:
        fine = [await amqp_harness.create(target=rabbitmq(queue.name)) for _ in range(FINE // 2)]
        unroutable = await amqp_harness.create(
            target=rabbitmq(f"chronoq-test-nowhere-{uuid.uuid4().hex[:8]}")
        )
        nacked = await amqp_harness.create(target=rabbitmq(full.name))
        fine += [await amqp_harness.create(target=rabbitmq(queue.name)) for _ in range(FINE // 2)]

        assert await amqp_harness.step() == FINE + 2

        await _pending_with(amqp_harness, unroutable["id"], "unroutable", "NO_ROUTE")
        await _pending_with(amqp_harness, nacked["id"], "nack")
        for schedule in fine:
            assert await amqp_harness.schedule_status(schedule["id"]) == "completed"
        want = {s["next_occurrence_id"] for s in fine}
        assert await _received(queue, want) == want
    finally:
        await full.delete(if_unused=False, if_empty=False)


async def test_a_named_exchange_delivers_its_first_publishes_and_the_ones_after(
    amqp_harness: Harness,
    broker: aio_pika.abc.AbstractChannel,
    queue: aio_pika.abc.AbstractQueue,
) -> None:
    exchange = await broker.declare_exchange(f"chronoq-test-x-{uuid.uuid4().hex[:8]}")
    try:
        await queue.bind(exchange, routing_key="k")
        for _ in range(2):
            batch = [
                await amqp_harness.create(target=rabbitmq("k", exchange=exchange.name))
                for _ in range(FINE)
            ]

            assert await amqp_harness.step() == FINE

            for schedule in batch:
                assert await amqp_harness.schedule_status(schedule["id"]) == "completed"
            want = {s["next_occurrence_id"] for s in batch}
            assert await _received(queue, want) == want
    finally:
        await exchange.delete()


async def test_an_exchange_deleted_after_it_was_used_fails_only_the_deliveries_addressed_to_it(
    amqp_harness: Harness,
    broker: aio_pika.abc.AbstractChannel,
    queue: aio_pika.abc.AbstractQueue,
) -> None:
    exchange = await broker.declare_exchange(f"chronoq-test-gone-{uuid.uuid4().hex[:8]}")
    await queue.bind(exchange, routing_key="k")
    first = await amqp_harness.create(target=rabbitmq("k", exchange=exchange.name))
    assert await amqp_harness.step() == 1
    assert await amqp_harness.schedule_status(first["id"]) == "completed"
    await _received(queue, {first["next_occurrence_id"]})
    await exchange.delete()

    fine = [await amqp_harness.create(target=rabbitmq(queue.name)) for _ in range(FINE // 2)]
    gone = [
        await amqp_harness.create(target=rabbitmq("k", exchange=exchange.name)) for _ in range(2)
    ]
    fine += [await amqp_harness.create(target=rabbitmq(queue.name)) for _ in range(FINE // 2)]

    assert await amqp_harness.step() == FINE + 2

    for schedule in gone:
        await _pending_with(amqp_harness, schedule["id"], "channel error", "NOT_FOUND")
    for schedule in fine:
        assert await amqp_harness.schedule_status(schedule["id"]) == "completed"
    want = {s["next_occurrence_id"] for s in fine}
    assert await _received(queue, want) == want

    # Later deliveries are unaffected, and the exchange's own keep failing by themselves.
    later = await amqp_harness.create(target=rabbitmq(queue.name))
    await amqp_harness.step_until(lambda: _completed(amqp_harness, later["id"]))
    # What arrives now is the later one, and maybe second copies of the ones published again.
    got = await _received(queue, {later["next_occurrence_id"]})
    assert later["next_occurrence_id"] in got
    assert got <= want | {later["next_occurrence_id"]}
    for schedule in gone:
        (occurrence,) = await amqp_harness.occurrences(schedule["id"])
        assert occurrence["attempts"] >= 1
        assert "NOT_FOUND" in occurrence["last_error"]


async def _completed(harness: Harness, schedule_id: str) -> bool:
    return await harness.schedule_status(schedule_id) == "completed"


async def test_a_stored_cc_header_is_never_published_and_disturbs_no_other_publish(
    amqp_harness: Harness, queue: aio_pika.abc.AbstractQueue
) -> None:
    # Stored before the API refused it: a string CC makes the broker close the channel,
    # and every publish in flight on it was then sent again (and could arrive twice).
    fine = [await amqp_harness.create(target=rabbitmq(queue.name)) for _ in range(FINE)]
    routed = await amqp_harness.create(target=rabbitmq(queue.name))
    stored = {**rabbitmq(queue.name), "headers": {"CC": "elsewhere"}}
    async with amqp_harness.database.engine.begin() as conn:
        await conn.execute(
            sa.update(schedules)
            .where(schedules.c.id == uuid.UUID(routed["id"]))
            .values(target=stored)
        )

    assert await amqp_harness.step() == FINE + 1

    (dead,) = await amqp_harness.occurrences(routed["id"])
    assert dead["status"] == "dead_lettered"
    assert "'CC'" in dead["last_error"]
    want = [s["next_occurrence_id"] for s in fine]
    arrived: list[str] = []
    deadline = time.monotonic() + 5
    while len(arrived) < FINE and time.monotonic() < deadline:
        message = await queue.get(no_ack=True, fail=False)
        if message is None:
            await asyncio.sleep(0.05)
        else:
            arrived.append(str(message.message_id))
    await asyncio.sleep(0.2)
    while (extra := await queue.get(no_ack=True, fail=False)) is not None:
        arrived.append(str(extra.message_id))
    assert sorted(arrived) == sorted(want), "a publish was lost or sent twice"
