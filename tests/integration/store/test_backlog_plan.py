"""The backlog's statements read indexes, not the history: the due count and its oldest
instant range-scan the claim index, the dead-letter count the dead-letter index, whatever
the number of finished occurrences kept."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from app.store.records.backlog import DEAD_LETTERS, DUE
from app.store.schema.tables import KEYED, UNKEYED_AGAIN, UNKEYED_FRESH, occurrences
from tests.conftest import ALL_STORES
from tests.integration.conftest import Harness

# Each database's own query plans.
pytestmark = ALL_STORES


def _explain(conn: Any, statement: sa.Select[Any]) -> str:
    sql = str(statement.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    return "EXPLAIN QUERY PLAN " + sql if conn.dialect.name == "sqlite" else "EXPLAIN " + sql


@pytest.mark.parametrize(
    ("statement", "index"),
    [
        (DUE[UNKEYED_FRESH], "ix_occurrences_claim"),
        (DUE[UNKEYED_AGAIN], "ix_occurrences_claim_again"),
        (DUE[KEYED], "ix_occurrences_flow_due"),
        (DEAD_LETTERS, "ix_occurrences_dead_letters"),
    ],
    ids=["due", "due_again", "due_keyed", "dead_letters"],
)
async def test_backlog_statements_use_their_index_whatever_the_history(
    harness: Harness, statement: sa.Select[Any], index: str
) -> None:
    created = await harness.create(trigger={"type": "immediate"})
    now = datetime.now(UTC)

    async def fill_and_explain(conn: Any) -> str:
        history = [
            {
                "occurrence_id": uuid.uuid4(),
                "schedule_id": uuid.UUID(created["id"]),
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
        # Pending occurrences that are not due yet: the due range of the claim index
        # leaves them out, a scan of the pending ones would not.
        later = [
            {
                "occurrence_id": uuid.uuid4(),
                "schedule_id": uuid.UUID(created["id"]),
                "fire_at": now + timedelta(hours=1, seconds=k),
                "available_at": now + timedelta(hours=1, seconds=k),
                "status": "pending",
                "origin": "backfill",
                "attempts": 0,
                # Of no flow key and of one: each due count reads its own index.
                "flow_key": "customer-1" if k % 2 else None,
                "created_at": now,
                "updated_at": now,
            }
            for k in range(500)
        ]
        await conn.execute(occurrences.insert(), later)
        await conn.execute(occurrences.insert(), history)
        analyze = "ANALYZE TABLE occurrences" if conn.dialect.name == "mysql" else "ANALYZE"
        await conn.execute(sa.text(analyze))
        plan = await conn.execute(sa.text(_explain(conn, statement.params(now=now))))
        if conn.dialect.name == "mysql":
            rows = [row._mapping for row in plan]
            return "\n".join(f"{row['table']} {row['type']} {row['key']}" for row in rows)
        return "\n".join(str(row[-1]) for row in plan)

    plan = await harness.database.run(fill_and_explain)

    if harness.database.dialect.name == "mysql":
        # Status-led indexes: a range or a lookup of the leading status, never a scan (for
        # the dead-letter count either status-led index is as good).
        # The claim index serves all three due counts there.
        usable = {index, "ix_occurrences_claim"}
        assert {f"occurrences {way} {key}" for way in ("range", "ref") for key in usable} & {
            plan.strip()
        }, plan
    else:
        assert index in plan, plan
