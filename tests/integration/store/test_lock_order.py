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
from app.store.database import Database
from app.store.queue import DeliveryQueue
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
    caplog.set_level(logging.INFO, logger="app.store.database")
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
