"""Fan-out in the claim, on every store (DESIGN section 15): a topic's occurrence, as it is
claimed, becomes one delivery per matching subscription in the same transaction, each under
its endpoint's key; concurrent claimers fan it out once; a rolled-back claim leaves it to be
fanned out again, into the same deliveries."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from app.domain.occurrence import Delivery, OccurrenceStatus, Origin, Settlement
from app.domain.target import EndpointWebhook
from app.domain.topics import delivery_id
from tests.store import ports
from tests.store.ports import Database


async def _topic_with_subscribers(database: Database, count: int) -> list[uuid.UUID]:
    await ports.make_topic(database, "billing")
    endpoints = [await ports.make_endpoint(database) for _ in range(count)]
    for endpoint in endpoints:
        await ports.subscribe(database, "billing", endpoint)
    return endpoints


async def _fire(database: Database, count: int = 1) -> list[uuid.UUID]:
    now = datetime.now(UTC)
    drafts = [
        ports.draft(
            ports.once(now - timedelta(seconds=5 - k)), target=ports.topic_target("billing")
        )
        for k in range(count)
    ]
    await ports.insert_schedules(database, drafts)
    return [d.id for d in drafts]


async def test_a_claim_fans_an_occurrence_out_to_one_delivery_per_subscriber(
    database: Database,
) -> None:
    endpoints = await _topic_with_subscribers(database, 3)
    (schedule,) = await _fire(database)
    assert await ports.claim(database, limit=10) == []  # the claim that fanned it out
    deliveries = await ports.claim(database, limit=10)
    assert len(deliveries) == 3
    assert {
        d.target.endpoint_id for d in deliveries if isinstance(d.target, EndpointWebhook)
    } == set(endpoints)
    rows = await ports.read_occurrence_rows(database, schedule)
    (parent,) = [r for r in rows if r.origin is not Origin.FANOUT]
    assert parent.status is OccurrenceStatus.COMPLETED
    assert {d.parent_id for d in deliveries} == {parent.occurrence_id}
    await ports.settle(database, [Settlement(d, OccurrenceStatus.DELIVERED) for d in deliveries])
    assert await ports.read_schedule_status(database, schedule) == "completed"


async def test_concurrent_claimers_fan_each_occurrence_out_once(
    database: Database, store_url: str
) -> None:
    await _topic_with_subscribers(database, 4)
    await _fire(database, 5)
    claimers = [Database(store_url) for _ in range(3)]
    seen: list[Delivery] = []
    try:
        for _ in range(6):
            rounds = await asyncio.gather(
                *(ports.claim(c, limit=50, owner=f"replica-{n}") for n, c in enumerate(claimers))
            )
            seen += [d for batch in rounds for d in batch]
    finally:
        for claimer in claimers:
            await claimer.close()
    ids = [d.occurrence_id for d in seen]
    assert len(ids) == len(set(ids)) == 20
    rows = await ports.read_occurrence_rows(database)
    assert sum(r.origin is Origin.FANOUT for r in rows) == 20
    for d in seen:
        assert d.parent_id is not None
        assert (
            d.occurrence_id in {delivery_id(d.parent_id, uuid.UUID(int=0)) for _ in [0]}
            or d.occurrence_id != d.parent_id
        )


async def test_a_claim_rolled_back_leaves_the_occurrence_to_fan_out_again_alike(
    database: Database,
) -> None:
    await _topic_with_subscribers(database, 2)
    await _fire(database)
    await ports.claim_rolled_back(database, limit=10)
    assert await ports.fanout_rows(database) == []
    assert await ports.claim(database, limit=10) == []
    first = sorted(await ports.fanout_rows(database))
    assert len(first) == 2
    # A claim taken again (its replica died after it committed) makes no delivery twice.
    assert len(await ports.claim(database, limit=10)) == 2
    assert sorted(await ports.fanout_rows(database)) == first
