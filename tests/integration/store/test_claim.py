"""The claim and settle statements on both dialects: exclusive leases, token-guarded settles."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from app.domain.occurrence import OccurrenceStatus, Settlement
from app.store.engine.database import Database
from app.store.loop.claims import ClaimStore
from app.store.loop.releases import ReleaseStore
from app.store.loop.settlements import SettlementStore
from app.store.loop.sql import ClaimRows, queries, query
from app.store.schema.tables import occurrences
from tests.conftest import ALL_STORES
from tests.integration.conftest import Harness

# The claim's own statements, as each database runs them.
pytestmark = ALL_STORES

CLAIMS = ClaimStore()
RELEASES = ReleaseStore()
SETTLEMENTS = SettlementStore()


async def _immediate(harness: Harness, count: int) -> list[str]:
    items = [
        {"event_type": "bulk", "target": harness.webhook(), "trigger": {"type": "immediate"}}
        for _ in range(count)
    ]
    response = await harness.client.post("/v1/schedules/batch", json={"items": items})
    assert response.status_code == 201, response.text
    return [item["next_occurrence_id"] for item in response.json()["items"]]


async def _claim(database: Database, limit: int, lease: float = 30.0) -> list[Any]:
    found = await database.run(lambda conn: CLAIMS.claim(conn, limit=limit, lease=lease, owner="t"))
    return list(found.deliveries)


async def test_concurrent_claimers_never_share_an_occurrence(harness: Harness) -> None:
    expected = set(await _immediate(harness, 300))
    databases = [Database(harness.settings.database_url) for _ in range(4)]

    async def drain(database: Database) -> list[str]:
        mine: list[str] = []
        while batch := await _claim(database, 25):
            mine += [str(d.occurrence_id) for d in batch]
        return mine

    try:
        results = await asyncio.gather(*(drain(db) for db in databases))
    finally:
        for database in databases:
            await database.close()

    counts = Counter(i for claimed in results for i in claimed)
    assert set(counts) == expected
    assert max(counts.values()) == 1


async def test_claim_takes_due_rows_in_available_order_and_counts_the_attempt(
    harness: Harness,
) -> None:
    now = datetime.now(UTC)
    # Created newest first: the claim must still hand out the oldest due first.
    items = [
        {
            "event_type": "ordered",
            "target": harness.webhook(),
            "trigger": {"type": "once", "at": (now - timedelta(seconds=k)).isoformat()},
        }
        for k in range(1, 6)
    ]
    response = await harness.client.post("/v1/schedules/batch", json={"items": items})
    ids = [item["next_occurrence_id"] for item in response.json()["items"]]

    batch = await _claim(harness.database, 3)

    assert [str(d.occurrence_id) for d in batch] == ids[::-1][:3]
    assert {d.attempt for d in batch} == {1}
    assert len(await _claim(harness.database, 10)) == 2


async def test_an_expired_lease_is_claimed_again_and_the_stale_settle_is_ignored(
    harness: Harness,
) -> None:
    (occurrence_id,) = await _immediate(harness, 1)
    (first,) = await _claim(harness.database, 1, lease=0.2)
    assert await _claim(harness.database, 1) == []

    await asyncio.sleep(0.3)
    (second,) = await _claim(harness.database, 1)
    assert second.attempt == 2
    assert second.lease_token != first.lease_token

    stale = Settlement(first, OccurrenceStatus.DEAD_LETTERED, error="late")
    await harness.database.run(lambda conn: SETTLEMENTS.settle(conn, [stale]))
    (row,) = await harness.occurrences(str(first.schedule_id))
    assert row["status"] == "pending"

    await harness.database.run(
        lambda conn: SETTLEMENTS.settle(conn, [Settlement(second, OccurrenceStatus.DELIVERED)])
    )
    (row,) = await harness.occurrences(str(first.schedule_id))
    assert row["status"] == "delivered"
    assert row["occurrence_id"] == occurrence_id


async def test_release_of_an_unstarted_claim_makes_it_due_now_without_counting(
    harness: Harness,
) -> None:
    await _immediate(harness, 2)
    batch = await _claim(harness.database, 2)

    await harness.database.run(lambda conn: RELEASES.release(conn, batch, started=False))

    again = await _claim(harness.database, 2)
    assert sorted(d.occurrence_id for d in again) == sorted(d.occurrence_id for d in batch)
    assert {d.attempt for d in again} == {1}


@pytest.mark.parametrize(
    ("which", "index"),
    [
        (ClaimRows.FRESH, "ix_occurrences_claim"),
        (ClaimRows.AGAIN, "ix_occurrences_claim_again"),
    ],
    ids=["first attempts", "again"],
)
async def test_claim_uses_the_partial_index_whatever_the_history(
    harness: Harness, which: ClaimRows, index: str
) -> None:
    (occurrence_id,) = await _immediate(harness, 1)
    postgres = harness.database.dialect.name == "postgresql"

    async def fill_and_explain(conn: Any) -> str:
        schedule_id = (
            await conn.execute(
                sa.select(occurrences.c.schedule_id).where(
                    occurrences.c.occurrence_id == uuid.UUID(occurrence_id)
                )
            )
        ).scalar_one()
        now = datetime.now(UTC)
        history = [
            {
                "occurrence_id": uuid.uuid4(),
                "schedule_id": schedule_id,
                "fire_at": now - timedelta(seconds=k),
                "available_at": now - timedelta(seconds=k),
                "status": "delivered",
                "origin": "schedule",
                "attempts": 1,
                "delivered_at": now,
                "created_at": now,
                "updated_at": now,
            }
            for k in range(1, 10001)
        ]
        await conn.execute(occurrences.insert(), history)
        dialect = conn.dialect.name
        if dialect == "mysql":
            # No partial index: the claim's locking read must range-scan the status-led
            # index, not the rows (the UPDATE and the read-back go by primary key).
            await conn.execute(sa.text("ANALYZE TABLE occurrences"))
            statement = queries("claim", "mysql", rows=which)[0].text
            stamp = now.strftime("%Y-%m-%d %H:%M:%S.%f")
            mysql_params = {"now": stamp, "ahead_until": stamp, "limit": 100}
            plan = await conn.execute(sa.text("EXPLAIN " + statement), mysql_params)
            rows = [row._mapping for row in plan]
            return "\n".join(f"{row['table']} {row['type']} {row['key']}" for row in rows)
        await conn.execute(sa.text("ANALYZE"))
        # SQLite's claim selects the due rows first (the statement the index serves).
        statement = (
            query("claim", dialect, rows=which)
            if postgres
            else queries("claim", dialect, rows=which)[0]
        ).text
        params: dict[str, Any] = {"limit": 100, "owner": "t"}
        if postgres:
            params |= {"lease": 30.0, "token": uuid.uuid4(), "ahead": 0.0, "start": 100}
            plan = await conn.execute(sa.text("EXPLAIN " + statement), params)
        else:
            stamp = now.strftime("%Y-%m-%d %H:%M:%S.%f")
            params |= {
                "now": stamp,
                "ahead_until": stamp,
                "lease_until": stamp,
                "token": uuid.uuid4().hex,
            }
            plan = await conn.execute(sa.text("EXPLAIN QUERY PLAN " + statement), params)
        return "\n".join(str(row[-1]) for row in plan)

    plan = await harness.database.run(fill_and_explain)

    if harness.database.dialect.name == "mysql":
        # One status-led claim index for both kinds there.
        assert "o range ix_occurrences_claim" in plan, plan
    else:
        assert index in plan, plan
    (delivery,) = await _claim(harness.database, 100)
    assert str(delivery.occurrence_id) == occurrence_id


async def test_an_occurrence_whose_last_lease_expired_is_dead_lettered_not_retried(
    harness: Harness,
) -> None:
    response = await harness.client.post(
        "/v1/schedules",
        json={
            "event_type": "x",
            "target": harness.webhook(),
            "trigger": {"type": "immediate"},
            "max_attempts": 2,
        },
    )
    schedule_id = response.json()["id"]
    for _ in range(2):
        assert len(await _claim(harness.database, 1, lease=0.1)) == 1
        await asyncio.sleep(0.2)

    assert await _claim(harness.database, 1) == []

    (row,) = await harness.occurrences(schedule_id)
    assert row["status"] == "dead_lettered"
    assert row["attempts"] == 2
    assert "lease" in row["last_error"]
    assert await harness.schedule_status(schedule_id) == "failed"
