"""Tenant keys as stored: made, listed, revoked, and found by the digest of a presented key.

Invariant: a key made and a key revoked are each recorded as its tenant's event
(`key_created`, `key_revoked`) in the transaction that makes the change; a revocation that
changes nothing (the key was revoked already) records none.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.errors import ConflictError
from app.domain.tenant_events import TenantEventKind
from app.domain.tenant_keys import LAST_USED_EVERY_SECONDS, KeyRole, TenantKey
from app.store.records.tenant_events import NewTenantEvent, TenantEventStore
from app.store.schema.tables import tenant_keys

_k = tenant_keys.c


def _key(row: Row[Any]) -> TenantKey:
    return TenantKey(
        id=row.id,
        tenant=row.tenant,
        name=row.name,
        role=KeyRole(row.role),
        prefix=row.prefix,
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        last_used_at=row.last_used_at,
    )


class TenantKeyStore:
    """Statements on `tenant_keys`; every method runs inside the caller's transaction."""

    async def insert(
        self, conn: AsyncConnection, key: TenantKey, digest: str, *, actor: str | None
    ) -> None:
        """Store `key` (made at its `created_at`, the transaction's instant), and its
        `key_created` event by `actor`."""
        try:
            await conn.execute(
                tenant_keys.insert().values(
                    id=key.id,
                    tenant=key.tenant,
                    name=key.name,
                    role=key.role.value,
                    digest=digest,
                    prefix=key.prefix,
                    created_at=key.created_at,
                    expires_at=key.expires_at,
                )
            )
        except IntegrityError:
            raise ConflictError(
                f"tenant {key.tenant} has a key named {key.name!r} already", pointer="#/name"
            ) from None
        made = NewTenantEvent(
            tenant=key.tenant,
            kind=TenantEventKind.KEY_CREATED,
            actor=actor,
            key_id=key.id,
            key_name=key.name,
        )
        await TenantEventStore().record(conn, [made], key.created_at)

    async def of_tenant(
        self, conn: AsyncConnection, tenant: str, *, after: uuid.UUID | None, limit: int
    ) -> list[TenantKey]:
        """The tenant's keys, revoked ones too, oldest first (ids are UUIDv7s: in the
        order they were made), after the key `after`."""
        statement = sa.select(tenant_keys).where(_k.tenant == tenant)
        if after is not None:
            statement = statement.where(_k.id > after)
        rows = await conn.execute(statement.order_by(_k.id).limit(limit))
        return [_key(row) for row in rows]

    async def revoke(
        self,
        conn: AsyncConnection,
        tenant: str,
        id_: uuid.UUID,
        now: datetime,
        *,
        actor: str | None,
    ) -> bool:
        """Revoke the tenant's key `id_`, recording `key_revoked` by `actor` (one revoked
        already stays as it was, and records nothing); False when the tenant has no such
        key."""
        found = await conn.execute(
            sa.select(_k.name, _k.revoked_at)
            .where(_k.tenant == tenant, _k.id == id_)
            .with_for_update()
        )
        row = found.first()
        if row is None:
            return False
        if row.revoked_at is None:
            await conn.execute(tenant_keys.update().where(_k.id == id_).values(revoked_at=now))
            revoked = NewTenantEvent(
                tenant=tenant,
                kind=TenantEventKind.KEY_REVOKED,
                actor=actor,
                key_id=id_,
                key_name=row.name,
            )
            await TenantEventStore().record(conn, [revoked], now)
        return True

    async def by_digest(self, conn: AsyncConnection, digest: str) -> TenantKey | None:
        row = (await conn.execute(sa.select(tenant_keys).where(_k.digest == digest))).first()
        return None if row is None else _key(row)

    async def used(self, conn: AsyncConnection, id_: uuid.UUID, now: datetime) -> None:
        """Note that key `id_` was used at `now`, unless it was within the last minute."""
        recent = now - timedelta(seconds=LAST_USED_EVERY_SECONDS)
        await conn.execute(
            tenant_keys.update()
            .where(_k.id == id_, sa.or_(_k.last_used_at.is_(None), _k.last_used_at < recent))
            .values(last_used_at=now)
        )

    async def forget_tenant(self, conn: AsyncConnection, tenant: str) -> None:
        """Remove every key of the tenant (which is being removed)."""
        await conn.execute(tenant_keys.delete().where(_k.tenant == tenant))
