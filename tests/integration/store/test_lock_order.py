"""Lock order on the database servers: a settle that pauses a schedule by itself and a
manual pause of the same schedule take their locks in one order, so neither waits for
the other while holding what the other waits for (no deadlock, no stalled settle)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from app.domain.occurrence import Delivery, OccurrenceStatus, Settlement
from app.store.engine.database import Database
from app.store.loop.queue import DeliveryQueue
from tests.conftest import STORES
from tests.integration.conftest import Harness
from tests.waiting import eventually

SERVERS = pytest.mark.parametrize("database_url", STORES[1:], indirect=True)

# What a lock wait looks like to each server, from another session.
_WAITING = {
    "postgresql": "SELECT wait_event_type FROM pg_stat_activity",
    "mysql": "SELECT trx_state FROM information_schema.innodb_trx",
}
_LOCK_TIMEOUT = {
    "postgresql": "SET LOCAL lock_timeout = '5s'",
    "mysql": "SET SESSION innodb_lock_wait_timeout = 5",
}


async def _claim_one(harness: Harness) -> Delivery:
    deadline = time.monotonic() + 10
    while not (claimed := await harness.dispatcher.claim(10)).deliveries:
        assert time.monotonic() < deadline, "nothing came due"
        await asyncio.sleep(0.02)
    (delivery,) = claimed.deliveries
    return delivery


async def _failing_tick(harness: Harness) -> tuple[Delivery, Delivery]:
    """A schedule that pauses itself at its first dead letter, with an older tick waiting
    for a retry (first in the order a manual pause locks them) and a newer one claimed,
    about to be dead-lettered."""
    start = (datetime.now(UTC) + timedelta(seconds=0.1)).isoformat().replace("+00:00", "Z")
    await harness.create(
        trigger={"type": "interval", "every_seconds": 1, "start_at": start},
        pause_after_failures=1,
    )
    older = await _claim_one(harness)
    queue = DeliveryQueue(harness.database, harness.wakeups)
    await queue.settle(
        [Settlement(older, OccurrenceStatus.PENDING, error="HTTP 503", retry_in=3600)]
    )
    newer = await _claim_one(harness)
    assert newer.fire_at > older.fire_at
    return older, newer


@SERVERS
async def test_a_settle_that_pauses_a_schedule_does_not_deadlock_with_a_manual_pause(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.store.engine.database")
    older, delivery = await _failing_tick(harness)
    dialect = harness.database.dialect.name
    # Sessions of their own, beside the pool the settle uses.
    other = Database(harness.settings.database_url)
    occurrence = "SELECT occurrence_id FROM occurrences WHERE occurrence_id = :id FOR UPDATE"
    schedule = "SELECT id FROM schedules WHERE id = :id FOR UPDATE"
    try:
        async with other.engine.connect() as pause, other.engine.connect() as observer:
            # A manual pause, half way: it has locked the schedule's first pending
            # occurrence (in fire order) and goes on to the next.
            await pause.execute(sa.text(_LOCK_TIMEOUT[dialect]))
            await pause.execute(sa.text(occurrence), {"id": _bind(dialect, older.occurrence_id)})
            dead = Settlement(delivery, OccurrenceStatus.DEAD_LETTERED, error="HTTP 410")
            queue = DeliveryQueue(harness.database, harness.wakeups)
            settle = asyncio.create_task(queue.settle([dead]))
            await _until_waiting(observer, dialect)
            # The settle waits for the pause without holding what the pause needs next
            # (before, it held the dead letter's row and the schedule's: a deadlock).
            await pause.execute(sa.text(occurrence), {"id": _bind(dialect, delivery.occurrence_id)})
            await pause.execute(sa.text(schedule), {"id": _bind(dialect, delivery.schedule_id)})
            await pause.commit()
            await asyncio.wait_for(settle, timeout=10)
    finally:
        await other.close()

    # Neither side was picked as a deadlock's victim (the settle would have been retried).
    assert not [r for r in caplog.records if "transaction conflict" in r.getMessage()]
    snapshot = await harness.get(f"/v1/schedules/{delivery.schedule_id}")
    assert (snapshot["status"], snapshot["pause_reason"]) == ("paused", "failures")
    events = await harness.get(f"/v1/schedules/{delivery.schedule_id}/events")
    assert "auto_paused" in [event["kind"] for event in events["items"]]


def _bind(dialect: str, value: uuid.UUID) -> Any:
    """A uuid as each server's column holds it in a text statement."""
    return str(value) if dialect == "postgresql" else value.hex


async def _until_waiting(observer: Any, dialect: str, within: float = 10.0) -> None:
    async def waiting() -> bool:
        states = (await observer.execute(sa.text(_WAITING[dialect]))).scalars().all()
        await observer.commit()
        return "Lock" in states or "LOCK WAIT" in states

    # MariaDB refreshes innodb_trx only for a read 0.1 s after the one before.
    await eventually(waiting, within=within, every=0.15, what="the settle waiting for the pause")


async def _claim_each(harness: Harness, *schedule_ids: str) -> list[Delivery]:
    """One claimed delivery of each of the schedules, in that order."""
    deadline = time.monotonic() + 10
    found: dict[str, Delivery] = {}
    while len(found) < len(schedule_ids):
        assert time.monotonic() < deadline, "nothing came due"
        for delivery in (await harness.dispatcher.claim(10)).deliveries:
            found[str(delivery.schedule_id)] = delivery
        await asyncio.sleep(0.02)
    return [found[schedule_id] for schedule_id in schedule_ids]


@SERVERS
async def test_a_settle_that_backs_a_key_off_does_not_deadlock_with_a_claim_of_the_key(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.store.engine.database")
    dialect = harness.database.dialect.name
    response = await harness.client.put("/v1/flow-keys/flapping", json={"parallelism": 10})
    assert response.status_code == 201, response.text
    # A flapping destination: a keyed recurring schedule with failures in a row, whose
    # delivery now succeeds (its settle restarts the schedule's count), and another
    # delivery of the key answered 429 with a Retry-After in the same settle.
    recurring = await harness.create(
        trigger={"type": "interval", "every_seconds": 3600}, flow_key="flapping"
    )
    other = await harness.create(flow_key="flapping")
    delivered, asked = await _claim_each(harness, recurring["id"], other["id"])
    schedule_id = _bind(dialect, delivered.schedule_id)
    async with harness.database.engine.begin() as conn:
        await conn.execute(
            sa.text("UPDATE schedules SET consecutive_failures = 3 WHERE id = :id"),
            {"id": schedule_id},
        )
    settlements = [
        Settlement(delivered, OccurrenceStatus.DELIVERED),
        Settlement(asked, OccurrenceStatus.PENDING, error="HTTP 429", retry_in=60, key_backoff=60),
    ]

    other_db = Database(harness.settings.database_url)
    try:
        async with other_db.engine.connect() as claim, other_db.engine.connect() as observer:
            # A claim, half way: it holds the key (its first lock; stored by tenant and
            # name) and goes on to lease a row of the recurring schedule, which writes the
            # schedule's fire count.
            await claim.execute(sa.text(_LOCK_TIMEOUT[dialect]))
            locked = await claim.execute(
                sa.text(
                    "SELECT `key` FROM flow_keys WHERE `key` = 'default/flapping' "
                    "FOR UPDATE SKIP LOCKED"
                )
                if dialect == "mysql"
                else sa.text(
                    "SELECT key FROM flow_keys WHERE key = 'default/flapping' "
                    "FOR UPDATE SKIP LOCKED"
                )
            )
            assert locked.scalars().all() == ["default/flapping"]
            queue = DeliveryQueue(harness.database, harness.wakeups)
            settle = asyncio.create_task(queue.settle(settlements))
            await _until_waiting(observer, dialect)
            # The settle waits for the key without holding the schedule (before, it had
            # locked the schedule to restart its count, then waited for the key: each
            # side waited for the other, a deadlock).
            await claim.execute(
                sa.text("UPDATE schedules SET fire_count = fire_count + 1 WHERE id = :id"),
                {"id": schedule_id},
            )
            await claim.commit()
            await asyncio.wait_for(settle, timeout=10)
    finally:
        await other_db.close()

    assert not [r for r in caplog.records if "transaction conflict" in r.getMessage()]
    key = await harness.get("/v1/flow-keys/flapping")
    assert key["backoff_until"] is not None
    snapshot = await harness.get(f"/v1/schedules/{recurring['id']}")
    assert snapshot["consecutive_failures"] == 0
