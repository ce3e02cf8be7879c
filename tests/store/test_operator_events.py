"""Operator events as stored, on every store: written with the change they tell (a change
rolled back leaves none), only for tenants with an events target, once per id; leased to one
sender at a time, and leased again once a sender that died lets its lease run out."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from app.domain.occurrence import OccurrenceStatus, Settlement
from app.domain.operator_events import NewOperatorEvent, OperatorEventKind, quota_event_id
from app.domain.target import WebhookTarget
from tests.store import ports
from tests.store.ports import Database

TARGET = WebhookTarget(type="webhook", url="http://127.0.0.1:9/events")


def _event(tenant: str = "acme", **data: object) -> NewOperatorEvent:
    return NewOperatorEvent(tenant, OperatorEventKind.QUOTA_EXCEEDED, dict(data))


async def test_an_event_is_stored_with_its_change_for_tenants_with_a_target_only(
    database: Database,
) -> None:
    await ports.put_tenant(database, "acme", events_target=TARGET)
    await ports.put_tenant(database, "zeta")
    await ports.record_events_rolled_back(database, [_event()])
    assert await ports.lease_events(database) == []
    assert await ports.record_events(database, [_event(), _event("zeta")]) == 1
    (leased,) = await ports.lease_events(database)
    assert (leased.tenant, leased.kind, leased.attempts) == ("acme", "quota.exceeded", 1)
    assert leased.target == TARGET


async def test_an_event_of_one_id_is_stored_once(database: Database) -> None:
    await ports.put_tenant(database, "acme", events_target=TARGET)
    now = datetime.now(UTC)
    once = NewOperatorEvent(
        "acme", OperatorEventKind.QUOTA_EXCEEDED, {}, id=quota_event_id("acme", "q", now)
    )
    assert await ports.record_events(database, [once]) == 1
    assert await ports.record_events(database, [once]) == 0


async def test_a_leased_event_goes_to_one_sender_until_its_lease_runs_out(
    database: Database, store_url: str
) -> None:
    await ports.put_tenant(database, "acme", events_target=TARGET)
    await ports.record_events(database, [_event(n=n) for n in range(10)])
    senders = [Database(store_url) for _ in range(3)]
    try:
        batches = await asyncio.gather(*(ports.lease_events(s, limit=4) for s in senders))
    finally:
        for sender in senders:
            await sender.close()
    ids = [e.id for batch in batches for e in batch]
    assert len(ids) == len(set(ids)) == 10
    assert await ports.lease_events(database) == []
    # The sender died with them: once the lease ends, each is leased again, a second
    # attempt; one told is gone for good.
    await ports.tell_events(database, ids[:3])
    ports.move_clock(database, timedelta(seconds=31))
    again = await ports.lease_events(database)
    assert {e.id for e in again} == set(ids[3:])
    assert {e.attempts for e in again} == {2}


async def test_a_dead_letter_is_stored_as_an_event_in_the_settle_that_makes_it(
    database: Database,
) -> None:
    await ports.put_tenant(database, "acme", events_target=TARGET)
    now = datetime.now(UTC)
    draft = ports.draft(ports.once(now - timedelta(seconds=1)), tenant="acme", max_attempts=1)
    await ports.insert_schedules(database, [draft])
    (delivery,) = await ports.claim(database, limit=1)
    await ports.settle(
        database, [Settlement(delivery, OccurrenceStatus.DEAD_LETTERED, error="HTTP 410")]
    )
    (leased,) = await ports.lease_events(database)
    assert leased.kind == "occurrence.dead_lettered"
    assert f'"occurrence_id":"{delivery.occurrence_id}"' in leased.body
    assert uuid.UUID(leased.body.split('"id":"')[1][:36]) == leased.id
