"""The claim's statements as each database plans them: through their partial indexes,
however much history sits beside the due rows. What a claim does (exclusive leases,
oldest first, token-guarded settles) is the store conformance suite's, run on every store
(tests/store/test_claims.py)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from app.store.engine.database import Database
from app.store.loop.claims import ClaimStore
from app.store.loop.sql import ClaimRows, queries, query
from app.store.schema.tables import occurrences
from tests.conftest import ALL_STORES
from tests.integration.conftest import Harness

pytestmark = ALL_STORES

CLAIMS = ClaimStore()

# The destinations a claim passes over, as the stepwise dialects bind them (a list).
_SKIP = sa.bindparam("skip", expanding=True, type_=sa.String())


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
            mysql_params = {"now": stamp, "ahead_until": stamp, "limit": 100, "skip": []}
            explain = sa.text("EXPLAIN " + statement).bindparams(_SKIP)
            plan = await conn.execute(explain, mysql_params)
            rows = [row._mapping for row in plan]
            return "\n".join(f"{row['table']} {row['type']} {row['key']}" for row in rows)
        await conn.execute(sa.text("ANALYZE"))
        # SQLite's claim selects the due rows first (the statement the index serves).
        statement = (
            query("claim", dialect, rows=which)
            if postgres
            else queries("claim", dialect, rows=which)[0]
        ).text
        # No destination passed over: the claim a replica makes with room for every one.
        params: dict[str, Any] = {"limit": 100, "owner": "t", "skip": []}
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
            explain = sa.text("EXPLAIN QUERY PLAN " + statement).bindparams(_SKIP)
            plan = await conn.execute(explain, params)
        return "\n".join(str(row[-1]) for row in plan)

    plan = await harness.database.run(fill_and_explain)

    if harness.database.dialect.name == "mysql":
        # One status-led claim index for both kinds there.
        assert "o range ix_occurrences_claim" in plan, plan
    else:
        assert index in plan, plan
    (delivery,) = await _claim(harness.database, 100)
    assert str(delivery.occurrence_id) == occurrence_id
