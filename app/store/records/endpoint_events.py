"""An endpoint's audit events (its writes, its rotations and its circuit's changes of
state), written in the transaction of each change and read oldest first. Like a tenant's,
an endpoint's trail outlives it: nothing holds the events to its row."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.endpoints import EndpointEvent
from app.domain.ids import event_id
from app.store.dialects import dialect_of
from app.store.schema.tables import endpoint_events


@dataclass(frozen=True, slots=True, kw_only=True)
class NewEndpointEvent:
    endpoint_id: uuid.UUID
    tenant: str
    kind: str
    actor: str | None
    detail: dict[str, Any] | None = None


async def record_endpoint_events(
    conn: AsyncConnection, events: Sequence[NewEndpointEvent], now: datetime
) -> None:
    """Write `events`, in order, at the transaction's instant."""
    if not events:
        return
    await dialect_of(conn).insert_rows(
        conn,
        endpoint_events,
        [
            {
                "id": event_id(now),
                "endpoint_id": e.endpoint_id,
                "tenant": e.tenant,
                "kind": e.kind,
                "actor": e.actor,
                "detail": e.detail,
                "now": now,
            }
            for e in events
        ],
        now_columns=("at",),
    )


async def endpoint_history(
    conn: AsyncConnection,
    tenant: str,
    endpoint_id: uuid.UUID,
    *,
    after: uuid.UUID | None,
    limit: int,
) -> list[EndpointEvent]:
    """The endpoint's events, oldest first (a removed endpoint's too)."""
    e = endpoint_events.c
    statement = sa.select(endpoint_events).where(e.endpoint_id == endpoint_id, e.tenant == tenant)
    if after is not None:
        statement = statement.where(e.id > after)
    rows = await conn.execute(statement.order_by(e.id).limit(limit))
    return [
        EndpointEvent(
            id=row.id,
            endpoint_id=row.endpoint_id,
            kind=row.kind,
            at=row.at,
            actor=row.actor,
            detail=row.detail,
        )
        for row in rows
    ]
