"""The loop's statements that find occurrences by id never read a partial index of pending
rows on PostgreSQL, even when the planner's picture of those rows is stale: a burst of
rows inserted since the table was last analysed (a bulk create right before its instant)
made it read the index of pending rows whole for each start mark and each settle, instead
of looking up the few ids they name (W1: 10,000 pending rows read per mark)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from app.domain.occurrence import Delivery
from app.domain.target import WebhookTarget
from app.store.dialects.postgresql import _DELIVERED_RESTARTING, _MARK_STARTED
from app.store.schema.tables import occurrences
from tests.conftest import STORES
from tests.integration.conftest import Harness

pytestmark = pytest.mark.parametrize("database_url", [STORES[1]], indirect=True)

BURST = 3000
ASKED = 60


async def _burst(conn: Any, schedule_id: uuid.UUID, token: uuid.UUID) -> list[Delivery]:
    """BURST pending occurrences leased unstarted by `token`, inserted after the table was
    analysed nearly empty; the deliveries of ASKED of them."""
    await conn.execute(sa.text("ANALYZE occurrences"))
    now = datetime.now(UTC)
    ids = [uuid.uuid4() for _ in range(BURST)]
    await conn.execute(
        occurrences.insert(),
        [
            {
                "occurrence_id": id_,
                "schedule_id": schedule_id,
                "fire_at": now,
                "available_at": now + timedelta(seconds=30),
                "status": "pending",
                "origin": "schedule",
                "attempts": 1,
                "lease_token": token,
                "lease_ahead": True,
                "first_attempt_at": now,
                "created_at": now,
                "updated_at": now,
            }
            for id_ in ids
        ],
    )
    target = WebhookTarget(type="webhook", url="http://127.0.0.1:9/")
    return [
        Delivery(id_, schedule_id, now, 1, 1, token, "e", b"{}", target, True)
        for id_ in ids[:ASKED]
    ]


async def _plan(conn: Any, statement: Any, params: dict[str, Any]) -> str:
    """The plan PostgreSQL would run `statement` with, for `params`."""
    compiled = statement.compile(dialect=conn.dialect)
    given = compiled.construct_params(params)
    values = tuple(given[name] for name in compiled.positiontup)
    rows = await conn.exec_driver_sql(f"EXPLAIN {compiled}", values)
    return "\n".join(str(row[0]) for row in rows)


async def test_start_marks_and_settles_look_their_rows_up_by_key(harness: Harness) -> None:
    created = await harness.create(trigger={"type": "interval", "every_seconds": 3600})
    token = uuid.uuid4()

    async def work(conn: Any) -> tuple[str, str]:
        deliveries = await _burst(conn, uuid.UUID(created["id"]), token)
        pairs = {
            "ids": [d.occurrence_id for d in deliveries],
            "tokens": [d.lease_token for d in deliveries],
        }
        return await _plan(conn, _MARK_STARTED, pairs), await _plan(
            conn, _DELIVERED_RESTARTING, pairs
        )

    for plan in await harness.database.run(work):
        # Neither reads an index of every pending row (or of every first attempt) to find
        # the sixty it names: with the rows fresh, that is each of them.
        assert "ix_occurrences_pending" not in plan, plan
        assert "ix_occurrences_claim" not in plan, plan
