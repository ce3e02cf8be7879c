"""The failing filter reads indexes, not the fleet: on PostgreSQL with thousands of healthy
schedules and their history, it finds the failing ones through the partial index of
failures in a row and the dead letters' index, and reads no schedule by a scan."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from app.domain.filters import ScheduleFilter, ScheduleSort
from app.store.records.schedules import listing
from app.store.schema.tables import occurrences, schedules
from tests.conftest import STORES
from tests.integration.conftest import Harness

pytestmark = pytest.mark.parametrize("database_url", [STORES[1]], indirect=True)

FLEET = 5000


async def _fill(conn: Any, template: uuid.UUID, now: datetime) -> None:
    """FLEET schedules like `template`, 20 of them failing in a row, 10 with a recent dead
    letter, each with a delivered occurrence of history."""
    row = dict(
        (await conn.execute(sa.select(schedules).where(schedules.c.id == template))).one()._mapping
    )
    fleet = [uuid.uuid4() for _ in range(FLEET)]
    await conn.execute(
        schedules.insert(),
        [
            row
            | {
                "id": id_,
                "name": f"fleet-{k}",
                "idempotency_key": None,
                "consecutive_failures": 3 if k % 250 == 0 else 0,
            }
            for k, id_ in enumerate(fleet)
        ],
    )
    await conn.execute(
        occurrences.insert(),
        [
            {
                "occurrence_id": uuid.uuid4(),
                "schedule_id": id_,
                "fire_at": now - timedelta(minutes=1),
                "available_at": now - timedelta(minutes=1),
                "status": "dead_lettered" if k % 500 == 1 else "delivered",
                "origin": "schedule",
                "attempts": 1,
                "delivered_at": None if k % 500 == 1 else now,
                "dead_lettered_at": now if k % 500 == 1 else None,
                "created_at": now,
                "updated_at": now,
            }
            for k, id_ in enumerate(fleet)
        ],
    )
    await conn.execute(sa.text("ANALYZE"))


@pytest.mark.parametrize("sort", list(ScheduleSort))
async def test_the_failing_filter_reads_its_indexes_not_every_schedule(
    harness: Harness, sort: ScheduleSort
) -> None:
    created = await harness.create(trigger={"type": "interval", "every_seconds": 60})
    now = datetime.now(UTC)

    async def work(conn: Any) -> tuple[str, int]:
        await _fill(conn, uuid.UUID(created["id"]), now)
        statement = listing(ScheduleFilter(failing=True, sort=sort), None, now).limit(51)
        sql = statement.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
        plan = "\n".join(str(r[0]) for r in await conn.execute(sa.text(f"EXPLAIN {sql}")))
        found = len((await conn.execute(statement)).all())
        return plan, found

    plan, found = await harness.database.run(work)

    assert found == 30
    assert "ix_schedules_failing" in plan, plan
    assert "ix_occurrences_dead_letters" in plan, plan
    assert "Seq Scan on schedules" not in plan, plan


async def test_another_tenants_list_reads_its_index_whatever_tenant_is_bound(
    harness: Harness,
) -> None:
    # Thousands of the default tenant's schedules and a few of another's: the other's list,
    # planned once for any tenant (a generic plan, as a prepared statement gets), reads the
    # tenant index, which holds no default row, not the fleet.
    created = await harness.create(trigger={"type": "interval", "every_seconds": 60})
    now = datetime.now(UTC)

    async def work(conn: Any) -> tuple[str, int]:
        await _fill(conn, uuid.UUID(created["id"]), now)
        await conn.execute(
            schedules.update()
            .where(schedules.c.name.in_([f"fleet-{k}" for k in range(5)]))
            .values(tenant="acme")
        )
        await conn.execute(sa.text("ANALYZE schedules"))
        statement = listing(ScheduleFilter(tenant="acme"), None, now).limit(51)
        compiled = statement.compile(dialect=conn.dialect)
        values = [compiled.params[name] for name in compiled.positiontup or ()]
        literals = ", ".join(f"'{v}'" if isinstance(v, str) else str(v) for v in values)
        await conn.execute(sa.text("SET plan_cache_mode = force_generic_plan"))
        await conn.exec_driver_sql(f"PREPARE tenant_list AS {compiled}")
        plan = "\n".join(
            str(r[0])
            for r in await conn.exec_driver_sql(f"EXPLAIN EXECUTE tenant_list({literals})")
        )
        await conn.exec_driver_sql("DEALLOCATE tenant_list")
        await conn.execute(sa.text("RESET plan_cache_mode"))
        found = len((await conn.execute(statement)).all())
        return plan, found

    plan, found = await harness.database.run(work)

    assert found == 5
    assert "ix_schedules_tenant_id" in plan, plan
    assert "Seq Scan on schedules" not in plan, plan
