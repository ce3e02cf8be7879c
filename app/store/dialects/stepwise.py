"""The delivery loop's statements for a database without data-modifying CTEs (SQLite,
MySQL/MariaDB): the same operations as PostgreSQL's single statements, each in steps inside
the caller's transaction, over the dialect's named statements (app/store/loop/sql/).

The claim's steps are `claim.<dialect>.sql`, in order: the due rows, locked (with the lease
each replaces, its schedule and whether it is a first claim), the lease, and the read-back
of each row with its schedule's definition, misfire rules and tick count. Between the last
two the schedules' fire counters are bumped for first claims, as PostgreSQL's statement does
(`last_fired_at` the instant the attempt is sent, the lease's `leased_at`), so the claim
means the same on every database: it returns `CLAIM_COLUMNS`, `LOST_COLUMNS` and
`RULE_COLUMNS`, and counts its first firings.

The rest take the transaction's instant bound as `now`, and go one lease at a time where
PostgreSQL takes the pairs of occurrence and lease token as arrays: the start marks, the
attempt log's rows (the leases the settle holds read, then each attempt inserted), the
deliveries (then the restart of their schedules' failure counts), the finish of schedules
(read and locked, then changed by key, then their events) and the due flow keys.
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

from app.domain.ids import event_id
from app.domain.occurrence import NOT_FIRINGS, Delivery
from app.domain.schedule import EventKind
from app.store.dialects.base import Dialect
from app.store.dialects.claim_rows import (
    CLAIM_COLUMNS,
    DUE_KEY_COLUMNS,
    KEY_HEAD_COLUMNS,
    LOST_COLUMNS,
    NEVER_FAR,
    RULE_COLUMNS,
    with_lost,
)
from app.store.dialects.toolkit import by_lease_token
from app.store.loop.sql import ClaimRows, Finished, dialects_of, listed, queries, query, typed
from app.store.schema.tables import attempts, schedule_events
from app.store.schema.types import UUID, UTCDateTime

# Every parameter a step may take, typed once.
_PARAMETERS: dict[str, sa.BindParameter[Any]] = {
    "now": sa.bindparam("now", type_=UTCDateTime()),
    "ahead_until": sa.bindparam("ahead_until", type_=UTCDateTime()),
    "lease_until": sa.bindparam("lease_until", type_=UTCDateTime()),
    "ids": sa.bindparam("ids", expanding=True, type_=UUID),
    "keys": sa.bindparam("keys", expanding=True, type_=sa.String()),
    "skip": sa.bindparam("skip", expanding=True, type_=sa.String()),
    "token": sa.bindparam("token", type_=UUID),
    "unstarted": sa.bindparam("unstarted", type_=sa.Boolean()),
    "fired": sa.bindparam("fired", expanding=True, type_=UUID),
    "firsts": sa.bindparam("firsts", expanding=True, type_=UUID),
    "count": sa.bindparam("count", type_=sa.Integer()),
}

# The columns of a finished schedule's event the finish binds (named SQL `finish_event`).
_EVENT_COLUMNS = ("id", "schedule_id", "kind", "version", "actor", "fields")


def _typed(statement: sa.TextClause) -> sa.TextClause:
    present = [bind for name, bind in _PARAMETERS.items() if name in statement._bindparams]
    return statement.bindparams(*present)


class Stepwise(Dialect):
    """The delivery loop's operations in steps, over the dialect's named statements."""

    @cached_property
    def _count_fires(self) -> sa.TextClause:
        """First claims counted as firings (named SQL `count_fires`)."""
        return _typed(query("count_fires", self.name))

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
        skip: Sequence[str] = (),
    ) -> Sequence[Any]:
        due_step, lease_step, rows_step = self._claim_steps[rows]
        now = await self.transaction_now(conn)
        until = now + timedelta(seconds=ahead)
        params: dict[str, Any] = {
            "now": now,
            "ahead_until": until,
            "limit": limit,
            "skip": list(skip),
        }
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
        firsts = [row for row in due if row.first_claim and row.origin not in NOT_FIRINGS]
        await _count_fires(conn, self._count_fires, firsts, now)
        return with_lost((await conn.execute(rows_step, {"ids": ids, "now": now})).all(), due)

    async def mark_started(
        self, conn: AsyncConnection, deliveries: Sequence[Delivery]
    ) -> set[uuid.UUID]:
        marks = self._start_marks
        may_start: set[uuid.UUID] = set()
        for token, ids in by_lease_token(deliveries).items():
            params = {"ids": ids, "token": token}
            if len(marks) == 1:  # one statement marks and returns
                may_start.update(row[0] for row in await conn.execute(marks[0], params))
                continue
            mark, marked = marks
            if (await conn.execute(mark, params)).rowcount == len(ids):
                may_start.update(ids)
            else:  # some were stopped: which were marked
                may_start.update(row[0] for row in await conn.execute(marked, params))
        return may_start

    @cached_property
    def _start_marks(self) -> tuple[sa.Executable, ...]:
        """`start_mark`, with its parameters and the ids it returns typed: a statement that
        marks and returns, or one that marks and one that reads back."""
        params = (
            sa.bindparam("ids", expanding=True, type_=UUID),
            sa.bindparam("token", type_=UUID),
        )
        *marks, returning = queries("start_mark", self.name)
        return (
            *(mark.bindparams(*params) for mark in marks),
            returning.bindparams(*params).columns(occurrence_id=UUID),
        )

    async def record_attempts(self, conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        held_now, insert = self._record_attempts
        held = await conn.execute(held_now, {"ids": [row["occurrence_id"] for row in rows]})
        tokens = {found.occurrence_id: found.lease_token for found in held}
        current = [
            {k: v for k, v in row.items() if k != "lease_token"}
            for row in rows
            if tokens.get(row["occurrence_id"]) == row["lease_token"]
        ]
        if current:
            await conn.execute(insert, current)

    @cached_property
    def _record_attempts(self) -> tuple[sa.Executable, sa.Executable]:
        """The read of what the settle still holds (`settled_leases`), and the insert of
        one attempt (`record_attempt`), typed."""
        held_now, insert = query("settled_leases", self.name), query("record_attempt", self.name)
        columns = attempts.c
        return (
            held_now.bindparams(sa.bindparam("ids", expanding=True, type_=UUID)).columns(
                occurrence_id=UUID, lease_token=UUID
            ),
            insert.bindparams(
                *(
                    sa.bindparam(name, type_=columns[name].type)
                    for name in (
                        "id",
                        "occurrence_id",
                        "attempt",
                        "started_at",
                        "duration_ms",
                        "outcome",
                        "status_code",
                        "error",
                        "response_excerpt",
                        "replica",
                        "trace_id",
                        "endpoint_id",
                        "fire_at",
                        "tenant",
                        "flow_key",
                    )
                )
            ),
        )

    async def end_cancelled_leases(
        self, conn: AsyncConnection, deliveries: Sequence[Delivery]
    ) -> None:
        for token, ids in by_lease_token(deliveries).items():
            await conn.execute(self._end_cancelled_leases, {"ids": ids, "token": token})

    @cached_property
    def _end_cancelled_leases(self) -> sa.TextClause:
        return typed(
            query("end_cancelled_leases", self.name),
            listed("ids", self.name, UUID),
            sa.bindparam("token", type_=UUID),
        )

    async def mark_delivered(
        self, conn: AsyncConnection, deliveries: Sequence[Delivery], now: datetime
    ) -> None:
        delivered, restart = self._delivered
        by_token = by_lease_token(deliveries)
        for token, ids in by_token.items():
            await conn.execute(delivered, {"ids": ids, "token": token, "now": now})
        if by_token:
            params = {
                "touched": list({d.schedule_id for d in deliveries}),
                "delivered_ids": [d.occurrence_id for d in deliveries],
                "now": now,
            }
            await conn.execute(restart, params)

    @cached_property
    def _delivered(self) -> tuple[sa.TextClause, sa.TextClause]:
        params = (
            *(listed(name, self.name, UUID) for name in ("ids", "touched", "delivered_ids")),
            sa.bindparam("token", type_=UUID),
            sa.bindparam("now", type_=UTCDateTime()),
        )
        return (
            typed(query("delivered", self.name), *params),
            typed(query("restart_failures", self.name), *params),
        )

    async def finish_schedules(
        self,
        conn: AsyncConnection,
        finished: Finished,
        schedule_ids: Sequence[Any],
        now: datetime,
        actor: str | None,
    ) -> None:
        finishing, finish, event = self._finishing[finished]
        found = (await conn.execute(finishing, {"schedule_ids": list(schedule_ids)})).all()
        if not found:
            return
        by_status: dict[str, list[Any]] = defaultdict(list)
        for row in found:
            by_status[row.status].append(row.id)
        for status, changed in by_status.items():
            await conn.execute(finish, {"schedule_ids": changed, "b_status": status, "now": now})
        events = [
            {
                "id": event_id(now),
                "schedule_id": row.id,
                "kind": EventKind(row.status).value,
                "version": row.version,
                "actor": actor,
                "fields": None,
                "now": now,
            }
            for row in found
        ]
        await conn.execute(event, events)

    @cached_property
    def _finishing(self) -> dict[Finished, tuple[sa.TextualSelect, sa.TextClause, sa.TextClause]]:
        columns = schedule_events.c
        params = (
            listed("schedule_ids", self.name, UUID),
            sa.bindparam("b_status", type_=sa.String()),
            sa.bindparam("now", type_=UTCDateTime()),
            *(sa.bindparam(name, type_=columns[name].type) for name in _EVENT_COLUMNS),
        )
        finish = typed(query("finish", self.name), *params)
        event = typed(query("finish_event", self.name), *params)
        return {
            kind: (
                typed(query(f"finishing_{kind}", self.name), *params).columns(
                    id=UUID, version=sa.Integer(), status=sa.String()
                ),
                finish,
                event,
            )
            for kind in Finished
        }

    @cached_property
    def _due_keys(self) -> sa.TextualSelect:
        return (
            query("flow_due", self.name)
            .bindparams(
                sa.bindparam("now", type_=UTCDateTime()),
                sa.bindparam("until", type_=UTCDateTime()),
                sa.bindparam("far_at", type_=UTCDateTime()),
            )
            .columns(**DUE_KEY_COLUMNS)
        )

    @cached_property
    def _key_heads(self) -> sa.TextualSelect:
        return (
            query("key_heads", self.name)
            .bindparams(sa.bindparam("now", type_=UTCDateTime()))
            .columns(**KEY_HEAD_COLUMNS)
        )

    @cached_property
    def _due_window(self) -> sa.TextualSelect | None:
        if self.name not in dialects_of("flow_due_window"):
            return None
        return (
            query("flow_due_window", self.name)
            .bindparams(
                sa.bindparam("now", type_=UTCDateTime()), sa.bindparam("until", type_=UTCDateTime())
            )
            .columns(**DUE_KEY_COLUMNS, scanned=sa.Integer())
        )

    async def due_keys(
        self, conn: AsyncConnection, ahead: float = 0.0, far: float = NEVER_FAR
    ) -> Sequence[Any]:
        now = await self.transaction_now(conn)
        params = {
            "now": now,
            "until": now + timedelta(seconds=ahead),
            "far_at": now + timedelta(seconds=far),
        }
        return (await conn.execute(self._due_keys, params)).all()

    async def key_heads(self, conn: AsyncConnection, after: str, page: int) -> Sequence[Any]:
        now = await self.transaction_now(conn)
        params = {"now": now, "after": after, "page": page}
        return (await conn.execute(self._key_heads, params)).all()

    async def due_window(
        self, conn: AsyncConnection, ahead: float, window: int
    ) -> Sequence[Any] | None:
        if self._due_window is None:
            return None
        now = await self.transaction_now(conn)
        params = {"now": now, "until": now + timedelta(seconds=ahead), "window": window}
        return (await conn.execute(self._due_window, params)).all()


async def _count_fires(
    conn: AsyncConnection, statement: sa.TextClause, firsts: Sequence[Any], now: datetime
) -> None:
    """First claims counted as firings: one statement per distinct count (almost always
    one)."""
    fires = Counter(row.schedule_id for row in firsts)
    ids = [row.occurrence_id for row in firsts]
    by_count: dict[int, list[Any]] = defaultdict(list)
    for schedule_id, count in fires.items():
        by_count[count].append(schedule_id)
    for count, fired in by_count.items():
        await conn.execute(statement, {"fired": fired, "count": count, "now": now, "firsts": ids})
