"""What an operator alerts on, read from the database: the due backlog, dead letters
outstanding and schedules by status.

Every replica sees the same numbers (they are the installation's, not the replica's); the
metrics module caches them so that scrapes do not turn into load.

The status tests are literals, not bound parameters: a partial index serves a statement
only when the planner can see that its WHERE implies the index's (`status = 'pending'`),
which SQLite never concludes from a parameter and PostgreSQL does not from a generic plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.occurrence import OccurrenceStatus
from app.domain.schedule import ScheduleStatus
from app.domain.tenants import DEFAULT_TENANT
from app.store.dialects import dialect_of, transaction_now
from app.store.engine.database import Database
from app.store.schema.tables import CLAIM_SETS, KEYED, in_claim_set, occurrences, schedules
from app.store.schema.types import UTCDateTime


def _status_is(table: sa.Table, status: str) -> sa.ColumnElement[bool]:
    return table.c.status == sa.literal(status, literal_execute=True)


def _due(where: str) -> sa.Select[int, Any]:
    """Due and not held (a paused schedule's occurrences have no `available_at`), of one
    claim index (`CLAIM_SETS`): a range scan of it, partial on PostgreSQL and SQLite,
    status-led on MySQL; the oldest `available_at` is its first entry."""
    return sa.select(
        sa.func.count().label("due"),
        sa.func.min(occurrences.c.available_at).label("oldest"),
    ).where(
        in_claim_set(where),
        occurrences.c.available_at <= sa.bindparam("now", type_=UTCDateTime()),
    )


# Due of each claim index; of a flow key, claimed as the key allows, so the count is what
# waits on keys.
DUE = {where: _due(where) for where in CLAIM_SETS}

# Dead letters waiting for an operator: a count of the dead-letter index.
DEAD_LETTERS = sa.select(sa.func.count()).where(
    _status_is(occurrences, OccurrenceStatus.DEAD_LETTERED)
)

# Schedules by status: no index serves this GROUP BY, so it reads every schedule row (about
# 10 ms at 10^5 schedules); the cache in front of it keeps that to one read per replica
# every few seconds, whatever the number of scrapers.
SCHEDULES = sa.select(schedules.c.status, sa.func.count()).group_by(schedules.c.status)


@dataclass(frozen=True, slots=True)
class Backlog:
    """The installation's numbers at one instant of the database clock."""

    # Pending occurrences due now and not held, with or without a flow key.
    due: int
    # How long the oldest of them has been due (0 when none is).
    oldest_due_seconds: float
    dead_letters: int
    # Every schedule status, with 0 for a status no schedule has.
    schedules: dict[str, int]
    # Of `due`, those of a flow key: waiting for the key's limits (or about to start).
    keyed_due: int = 0
    # `due` by tenant, when asked for (`read_backlog`'s `by_tenant`); None otherwise.
    waiting_by_tenant: dict[str, int] | None = None


# A flow key's tenant, in each dialect's words (the stored key is "tenant/name").
_TENANT_OF_KEY = {
    "postgresql": "split_part(flow_key, '/', 1)",
    "sqlite": "substr(flow_key, 1, instr(flow_key, '/') - 1)",
    "mysql": "SUBSTRING_INDEX(flow_key, '/', 1)",
}


async def _due_by_tenant(conn: AsyncConnection, now: datetime, unkeyed: int) -> dict[str, int]:
    """Due rows by tenant: every other tenant's are keyed (`own_key`), grouped by the
    tenant of their key; the default tenant's unkeyed ones are `unkeyed`."""
    name = dialect_of(conn).name
    tenant: sa.ColumnElement[str] = sa.literal_column(
        _TENANT_OF_KEY["mysql" if name == "mariadb" else name]
    )
    statement = (
        sa.select(tenant.label("tenant"), sa.func.count())
        .where(
            in_claim_set(KEYED),
            occurrences.c.available_at <= sa.bindparam("now", type_=UTCDateTime()),
        )
        .group_by(tenant)
    )
    counts = {str(row[0]): int(row[1]) for row in await conn.execute(statement, {"now": now})}
    counts[DEFAULT_TENANT] = counts.get(DEFAULT_TENANT, 0) + unkeyed
    return counts


async def read_backlog(conn: AsyncConnection, by_tenant: bool = False) -> Backlog:
    """The backlog now; with `by_tenant`, what is due by tenant too (one more read, of the
    due keyed rows)."""
    now: datetime = await transaction_now(conn)
    due, keyed, oldest = 0, 0, None
    for where, statement in DUE.items():
        count, first = (await conn.execute(statement, {"now": now})).one()
        due += int(count)
        if where == KEYED:
            keyed = int(count)
        if first is not None and (oldest is None or first < oldest):
            oldest = first
    dead = (await conn.execute(DEAD_LETTERS)).scalar_one()
    by_status = {str(status): 0 for status in ScheduleStatus}
    for status, count in (await conn.execute(SCHEDULES)).all():
        by_status[str(status)] = int(count)
    age = 0.0 if oldest is None else max((now - oldest).total_seconds(), 0.0)
    return Backlog(
        due=due,
        oldest_due_seconds=age,
        dead_letters=int(dead),
        schedules=by_status,
        keyed_due=keyed,
        waiting_by_tenant=await _due_by_tenant(conn, now, due - keyed) if by_tenant else None,
    )


async def backlog(database: Database, by_tenant: bool = False) -> Backlog:
    """The backlog, read in one short transaction of its own."""
    return await database.run(lambda conn: read_backlog(conn, by_tenant), attempts=1)
