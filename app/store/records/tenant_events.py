"""Tenant events: the audit trail of a tenant and of its keys, written in the transaction of
each change, and read oldest first.

Invariant: an event is inserted by the statement sequence that makes its change, never after
the commit, so a change refused or rolled back leaves no event, and one committed always
has its own. Ids are UUIDv7 from `event_id`: the events one transaction writes at one
instant read back in the order they were written. Nothing deletes a tenant's events, its
removal neither (`app.domain.tenant_events`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.ids import event_id
from app.domain.tenant_events import TenantEvent, TenantEventKind
from app.store.dialects import dialect_of
from app.store.schema.tables import tenant_events

_e = tenant_events.c


@dataclass(frozen=True, slots=True, kw_only=True)
class NewTenantEvent:
    """An event about to be written; its instant is the transaction's."""

    tenant: str
    kind: TenantEventKind
    actor: str | None
    version: int | None = None
    fields: list[str] | None = None
    key_id: uuid.UUID | None = None
    key_name: str | None = None


def _event(row: Row[Any]) -> TenantEvent:
    return TenantEvent(
        id=row.id,
        tenant=row.tenant,
        kind=TenantEventKind(row.kind),
        at=row.at,
        actor=row.actor,
        version=row.version,
        fields=None if row.fields is None else [str(name) for name in row.fields],
        key_id=row.key_id,
        key_name=row.key_name,
    )


class TenantEventStore:
    """Statements on `tenant_events`; every method runs inside the caller's transaction."""

    async def record(
        self, conn: AsyncConnection, events: Sequence[NewTenantEvent], now: datetime
    ) -> None:
        """Write `events`, in order, at the transaction's instant `now`. On a database whose
        statements read the clock themselves, `at` is that clock too."""
        if not events:
            return
        await dialect_of(conn).insert_rows(
            conn,
            tenant_events,
            [
                {
                    "id": event_id(now),
                    "tenant": e.tenant,
                    "kind": e.kind.value,
                    "actor": e.actor,
                    "version": e.version,
                    "fields": e.fields,
                    "key_id": e.key_id,
                    "key_name": e.key_name,
                    "now": now,
                }
                for e in events
            ],
            now_columns=("at",),
        )

    async def history(
        self, conn: AsyncConnection, tenant: str, *, limit: int, after: uuid.UUID | None
    ) -> list[TenantEvent]:
        """The tenant's events, oldest first (ids sort by creation), after the id `after`:
        a range of `ix_tenant_events_tenant_id`."""
        statement = sa.select(tenant_events).where(_e.tenant == tenant)
        if after is not None:
            statement = statement.where(_e.id > after)
        rows = await conn.execute(statement.order_by(_e.id).limit(limit))
        return [_event(row) for row in rows]

    async def any(self, conn: AsyncConnection, tenant: str) -> bool:
        """Whether the tenant has any event (a tenant removed keeps its own)."""
        found = await conn.execute(sa.select(_e.id).where(_e.tenant == tenant).limit(1))
        return found.first() is not None
