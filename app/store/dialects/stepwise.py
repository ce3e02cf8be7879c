"""The claim for a database without data-modifying CTEs (SQLite, MySQL/MariaDB): the same
operation as PostgreSQL's single statement, in steps inside one transaction.

The steps are the dialect's named statements `claim.<dialect>.sql` (app/store/loop/sql/), in
order: the due rows, locked (with the lease each replaces, its schedule and whether it is a
first claim), the lease, and the read-back of each row with its schedule's definition,
misfire rules and tick count. Between the last two the schedules' fire counters are
bumped for first claims, as PostgreSQL's statement does (`last_fired_at` the instant the
attempt is sent, the lease's `leased_at`), so the claim means the same on every database:
it returns `CLAIM_COLUMNS`, `LOST_COLUMNS` and `RULE_COLUMNS`, and counts its first
firings.
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.occurrence import Origin
from app.store.dialects.base import Dialect
from app.store.dialects.claim_rows import CLAIM_COLUMNS, LOST_COLUMNS, RULE_COLUMNS, with_lost
from app.store.loop.sql import ClaimRows, queries
from app.store.schema.tables import occurrences, schedules
from app.store.schema.types import UUID, UTCDateTime

# Every parameter a step may take, typed once.
_PARAMETERS: dict[str, sa.BindParameter[Any]] = {
    "now": sa.bindparam("now", type_=UTCDateTime()),
    "ahead_until": sa.bindparam("ahead_until", type_=UTCDateTime()),
    "lease_until": sa.bindparam("lease_until", type_=UTCDateTime()),
    "ids": sa.bindparam("ids", expanding=True, type_=UUID),
    "keys": sa.bindparam("keys", expanding=True, type_=sa.String()),
    "token": sa.bindparam("token", type_=UUID),
    "unstarted": sa.bindparam("unstarted", type_=sa.Boolean()),
}

_FIRST = occurrences.alias("fired")
# When a schedule's latest first claim is sent (`leased_at`: now, or the due instant of one
# claimed ahead), read once the lease is written: not the claim's own instant.
_SENT_AT = (
    sa.select(sa.func.max(_FIRST.c.leased_at))
    .where(
        _FIRST.c.schedule_id == schedules.c.id,
        _FIRST.c.occurrence_id.in_(sa.bindparam("firsts", expanding=True, type_=UUID)),
    )
    .scalar_subquery()
)
# First claims counted as firings: one statement per distinct count (almost always one).
_COUNT_FIRES = (
    schedules.update()
    .where(schedules.c.id.in_(sa.bindparam("fired", expanding=True, type_=UUID)))
    .values(
        fire_count=schedules.c.fire_count + sa.bindparam("count", type_=sa.Integer()),
        last_fired_at=sa.func.coalesce(_SENT_AT, sa.bindparam("now", type_=UTCDateTime())),
    )
)


def _typed(statement: sa.TextClause) -> sa.TextClause:
    present = [bind for name, bind in _PARAMETERS.items() if name in statement._bindparams]
    return statement.bindparams(*present)


class StepwiseClaim(Dialect):
    """`Dialect.claim` as the steps of `claim.<name>.sql`: due rows, lease, read-back."""

    @cached_property
    def _claim_steps(
        self,
    ) -> dict[ClaimRows, tuple[sa.TextualSelect, sa.TextClause, sa.TextualSelect]]:
        return {rows: self._steps(rows) for rows in ClaimRows}

    def _steps(self, which: ClaimRows) -> tuple[sa.TextualSelect, sa.TextClause, sa.TextualSelect]:
        due, lease, rows = (_typed(step) for step in queries("claim", self.name, rows=which))
        return (
            due.columns(
                sa.column("occurrence_id", UUID),
                sa.column("schedule_id", UUID),
                sa.column("origin", sa.String()),
                sa.column("first_claim", sa.Boolean()),
                **LOST_COLUMNS,
                due_now=sa.Boolean(),
            ),
            lease,
            rows.columns(**CLAIM_COLUMNS, **RULE_COLUMNS),
        )

    async def claim(
        self,
        conn: AsyncConnection,
        *,
        limit: int,
        lease: float,
        token: uuid.UUID,
        owner: str,
        ahead: float = 0.0,
        rows: ClaimRows = ClaimRows.FRESH,
        ids: Sequence[Any] | None = None,
        keys: Sequence[str] | None = None,
        start: int | None = None,
    ) -> Sequence[Any]:
        due_step, lease_step, rows_step = self._claim_steps[rows]
        now = await self.transaction_now(conn)
        until = now + timedelta(seconds=ahead)
        params: dict[str, Any] = {"now": now, "ahead_until": until, "limit": limit}
        if rows is ClaimRows.CHOSEN:
            params["ids"] = list(ids or ())
        if rows is ClaimRows.FREE:
            params["keys"] = list(keys or ())
        due = (await conn.execute(due_step, params)).all()
        if not due:
            return []
        ids = [row.occurrence_id for row in due]
        await conn.execute(
            lease_step,
            {
                "ids": ids,
                "token": token,
                "owner": owner,
                "now": now,
                "lease_until": now + timedelta(seconds=lease),
                "unstarted": start is not None and sum(bool(row.due_now) for row in due) > start,
            },
        )
        firsts = [row for row in due if row.first_claim and row.origin != Origin.CALLBACK]
        await _count_fires(conn, firsts, now)
        return with_lost((await conn.execute(rows_step, {"ids": ids, "now": now})).all(), due)


async def _count_fires(conn: AsyncConnection, firsts: Sequence[Any], now: datetime) -> None:
    fires = Counter(row.schedule_id for row in firsts)
    ids = [row.occurrence_id for row in firsts]
    by_count: dict[int, list[Any]] = defaultdict(list)
    for schedule_id, count in fires.items():
        by_count[count].append(schedule_id)
    for count, fired in by_count.items():
        await conn.execute(
            _COUNT_FIRES, {"fired": fired, "count": count, "now": now, "firsts": ids}
        )
