"""Operator events as stored (`app.domain.operator_events`): written in the transaction of
the change they tell, for the tenants that have an `events_target`; leased by the replica
that sends them, and removed once told or given up.

Invariant: an event row is inserted by the statements of its change, never after their
commit, and removed only by the sender that told it (or gave it up): a replica that dies
while telling one leaves it leased until `lease_until`, when another takes it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.ids import event_id
from app.domain.operator_events import NewOperatorEvent, event_body
from app.domain.target import Target
from app.store.dialects import dialect_of
from app.store.schema import codec
from app.store.schema.tables import operator_events, tenants

_o = operator_events.c


async def record_operator_events(
    conn: AsyncConnection, events: Sequence[NewOperatorEvent], now: datetime
) -> int:
    """Store those of `events` whose tenant has an events target (one read of the tenants,
    none when there are no events); one whose id is stored already is left (an event told
    once per window). How many were new."""
    if not events:
        return 0
    named = sorted({event.tenant for event in events})
    found = await conn.execute(
        sa.select(tenants.c.id).where(tenants.c.id.in_(named), tenants.c.events_target.is_not(None))
    )
    told = set(found.scalars())
    rows = []
    for event in events:
        if event.tenant not in told:
            continue
        made = event.id or event_id(now)
        rows.append(
            {
                "id": made,
                "tenant": event.tenant,
                "kind": event.kind.value,
                "body": event_body(made, event.kind.value, event.tenant, now, event.data),
                "created_at": now,
                "available_at": now,
                "attempts": 0,
            }
        )
    if not rows:
        return 0
    return len(await dialect_of(conn).insert_new(conn, operator_events, rows, "id"))


@dataclass(frozen=True, slots=True)
class LeasedEvent:
    """An event this sender holds until `lease_until`, with its tenant's target now."""

    id: uuid.UUID
    tenant: str
    kind: str
    body: str
    created_at: datetime
    attempts: int
    target: Target | None


async def lease_operator_events(
    conn: AsyncConnection, *, limit: int, lease: float, now: datetime
) -> list[LeasedEvent]:
    """Up to `limit` events due, oldest first, that no lease holds (SKIP LOCKED on the
    servers), each leased for `lease` seconds and counted as attempted."""
    due = (
        sa.select(_o.id)
        .where(_o.available_at <= now, sa.or_(_o.lease_until.is_(None), _o.lease_until <= now))
        .order_by(_o.available_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    ids = list((await conn.execute(due)).scalars())
    if not ids:
        return []
    await conn.execute(
        operator_events.update()
        .where(_o.id.in_(ids))
        .values(lease_until=now + timedelta(seconds=lease), attempts=_o.attempts + 1)
    )
    rows = await conn.execute(
        sa.select(operator_events, tenants.c.events_target)
        .select_from(operator_events.outerjoin(tenants, tenants.c.id == _o.tenant))
        .where(_o.id.in_(ids))
        .order_by(_o.available_at)
    )
    return [
        LeasedEvent(
            id=row.id,
            tenant=row.tenant,
            kind=row.kind,
            body=row.body,
            created_at=row.created_at,
            attempts=row.attempts,
            target=_target(row.events_target),
        )
        for row in rows
    ]


def _target(stored: Any) -> Target | None:
    try:
        return codec.optional_target(stored)
    except ValueError:
        return None  # unreadable: the event is given up, as one with no target is


async def told(conn: AsyncConnection, ids: Sequence[uuid.UUID]) -> None:
    """Remove events told (or given up)."""
    if ids:
        await conn.execute(operator_events.delete().where(_o.id.in_(list(ids))))


async def retry_later(
    conn: AsyncConnection, retries: Sequence[tuple[uuid.UUID, float, str]], now: datetime
) -> None:
    """Events whose attempt failed: each due again after its delay, its lease ended."""
    for event, delay, error in retries:
        await conn.execute(
            operator_events.update()
            .where(_o.id == event)
            .values(
                available_at=now + timedelta(seconds=delay),
                lease_until=None,
                last_error=error[:1000],
            )
        )


async def waiting_events(conn: AsyncConnection) -> int:
    """How many events wait to be told."""
    return int(
        (await conn.execute(sa.select(sa.func.count()).select_from(operator_events))).scalar_one()
    )
