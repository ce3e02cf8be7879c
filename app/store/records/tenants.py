"""Tenants as stored: put, read, listed, removed, and held for the length of a transaction
that creates schedules in one (a removal waits for it, and a create waits for a removal).

Invariant: a put and a removal write their audit events (`TenantEventStore`) in their own
transaction, after every check that may refuse them: a refused change records nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.errors import ConflictError, QuotaExceededError
from app.domain.occurrence import OccurrenceStatus
from app.domain.schedule import ScheduleStatus, check_version
from app.domain.tenant_events import TenantEventKind, put_changes
from app.domain.tenants import (
    DEFAULT_TENANT,
    Quotas,
    Tenant,
    TenantSpec,
    Usage,
    key_prefix,
    missing_tenant,
    own_key,
    refilled,
    wait_for,
)
from app.store.dialects import dialect_of
from app.store.records.flow_key_holds import unshelve_tenant
from app.store.records.flow_keys import FlowKeyStore
from app.store.records.tenant_events import NewTenantEvent, TenantEventStore
from app.store.records.tenant_keys import TenantKeyStore
from app.store.schema import codec
from app.store.schema.tables import (
    flow_keys,
    occurrences,
    of_tenant,
    schedules,
    starts_with,
    tenants,
)

_LIVE = (ScheduleStatus.PENDING, ScheduleStatus.PAUSED)


# Usage counts stop here: a count at the cap is at least that many (each is a bounded read,
# however much a tenant holds).
USAGE_CAP = 100_000


def _tenant(row: Row[Any], usage: Usage | None = None) -> Tenant:
    return Tenant(
        id=row.id,
        display_name=row.display_name,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
        quotas=Quotas(
            row.max_schedules,
            row.max_creates_per_minute,
            row.max_deliveries_per_second,
            row.max_in_flight,
        ),
        weight=row.weight,
        paused=bool(row.paused),
        retention_seconds=row.retention_seconds,
        usage=usage,
        events_target=codec.optional_target(row.events_target),
    )


def _capped(statement: sa.Select[Any]) -> sa.Select[Any]:
    """How many rows `statement` finds, up to USAGE_CAP."""
    found = statement.limit(USAGE_CAP).subquery()
    return sa.select(sa.func.count()).select_from(found)


_t = tenants.c


class TenantStore:
    """Statements on `tenants`; every method runs inside the caller's transaction."""

    async def hold(self, conn: AsyncConnection, tenant: str) -> None:
        """`tenant` exists, and goes on existing until the transaction ends (a shared lock
        on its row: a removal waits for the transaction, which then stores nothing in a
        tenant that is gone). `default` always exists."""
        if tenant == DEFAULT_TENANT:
            return
        held = await conn.execute(
            sa.select(tenants.c.id).where(tenants.c.id == tenant).with_for_update(read=True)
        )
        if held.first() is None:
            raise missing_tenant(tenant)

    async def admit(self, conn: AsyncConnection, tenant: str, creates: int, now: datetime) -> None:
        """`creates` schedules may be made in `tenant` now (its quotas allow them), and it
        goes on existing until the transaction ends; the creates are charged to its bucket.
        A tenant without quotas is only held (a shared lock; none for `default`, which is
        never removed); one with quotas is locked for the transaction, so that creates in
        it count and charge one after the other."""
        read = sa.select(_t.max_schedules, _t.max_creates_per_minute).where(_t.id == tenant)
        row = (await conn.execute(read)).first()
        if row is None:
            if tenant == DEFAULT_TENANT:
                return  # it always exists; a row made by no migration has no quotas
            raise missing_tenant(tenant)
        if row.max_schedules is None and row.max_creates_per_minute is None:
            if tenant == DEFAULT_TENANT:
                return  # never removed: nothing to hold
            shared = (await conn.execute(read.with_for_update(read=True))).first()
            if shared is None:
                raise missing_tenant(tenant)
            if shared.max_schedules is None and shared.max_creates_per_minute is None:
                return
            # Quotas were put meanwhile: they count this create, under the row's lock.
        locked = (
            await conn.execute(sa.select(tenants).where(_t.id == tenant).with_for_update())
        ).first()
        if locked is None:
            raise missing_tenant(tenant)
        if locked.max_schedules is not None:
            await self._check_live(conn, tenant, locked.max_schedules, creates)
        per_minute = locked.max_creates_per_minute
        if per_minute is not None:
            elapsed = (
                0.0
                if locked.create_refilled_at is None
                else (now - locked.create_refilled_at).total_seconds()
            )
            tokens = refilled(locked.create_tokens, elapsed, per_minute)
            if tokens < creates:
                raise QuotaExceededError(
                    f"tenant {tenant} may make {per_minute} schedules a minute; "
                    f"{creates} asked, {int(tokens)} left now",
                    quota="max_creates_per_minute",
                    limit=per_minute,
                    used=per_minute - int(tokens),
                    retry_after=wait_for(tokens, creates, per_minute),
                )
            await conn.execute(
                tenants.update()
                .where(_t.id == tenant)
                .values(create_tokens=tokens - creates, create_refilled_at=now)
            )

    async def _check_live(
        self, conn: AsyncConnection, tenant: str, most: int, creates: int
    ) -> None:
        """Refuse `creates` more schedules past `most` live ones: the live ones are counted
        up to the quota only (`ix_schedules_live`), however many there are."""
        live = (
            sa.select(sa.literal(1))
            .where(*of_tenant(tenant), schedules.c.status.in_(_LIVE))
            .limit(most + 1)
            .subquery()
        )
        used = int((await conn.execute(sa.select(sa.func.count()).select_from(live))).scalar_one())
        if used + creates > most:
            raise QuotaExceededError(
                f"tenant {tenant} may have {most} pending or paused schedules; it has {used}, "
                f"and {creates} more were asked",
                quota="max_schedules",
                limit=most,
                used=used,
            )

    async def exists(self, conn: AsyncConnection, tenant: str) -> bool:
        if tenant == DEFAULT_TENANT:
            return True
        found = await conn.execute(sa.select(tenants.c.id).where(tenants.c.id == tenant))
        return found.first() is not None

    async def get(
        self, conn: AsyncConnection, tenant: str, now: datetime | None = None
    ) -> Tenant | None:
        """The tenant; with its usage as of `now` when given."""
        row = (await conn.execute(sa.select(tenants).where(tenants.c.id == tenant))).first()
        if row is None:
            return None
        return _tenant(row, None if now is None else await self.usage(conn, tenant, now))

    async def put(
        self,
        conn: AsyncConnection,
        tenant: str,
        spec: TenantSpec,
        if_match: frozenset[int] | None,
        now: datetime,
        *,
        actor: str | None,
    ) -> tuple[Tenant, bool]:
        """Create or replace `tenant`; True when it is new. `if_match` names the versions
        the client expects (a tenant that does not exist is at none). Its delivery quotas
        and pause go to its own flow key's row in the same transaction: a pause holds its
        deliveries from this commit on, a resume releases them. Its events (`put_changes`)
        are written at its new version, naming `actor`."""
        spec.check(tenant)
        fresh = {"id": tenant, "version": 1, "created_at": now, "updated_at": now}
        created = bool(await dialect_of(conn).insert_new(conn, tenants, [fresh], "id"))
        row = (
            await conn.execute(sa.select(tenants).where(tenants.c.id == tenant).with_for_update())
        ).one()
        if if_match is not None:
            current = 0 if created else row.version
            check_version(current, if_match, f"the tenant is at version {current}")
        quotas = spec.quotas
        await conn.execute(
            tenants.update()
            .where(tenants.c.id == tenant)
            .values(
                display_name=spec.display_name,
                weight=spec.weight,
                paused=spec.paused,
                max_schedules=quotas.max_schedules,
                max_creates_per_minute=quotas.max_creates_per_minute,
                max_deliveries_per_second=quotas.max_deliveries_per_second,
                max_in_flight=quotas.max_in_flight,
                retention_seconds=spec.retention_seconds,
                events_target=(
                    sa.null() if spec.events_target is None else codec.dump(spec.events_target)
                ),
                # A new or changed rate starts full: a quota is no debt.
                create_tokens=(
                    row.create_tokens
                    if quotas.max_creates_per_minute == row.max_creates_per_minute
                    else None
                ),
                version=1 if created else row.version + 1,
                updated_at=now,
            )
        )
        if tenant != DEFAULT_TENANT:
            limits = spec.delivery_limits()
            keys = FlowKeyStore()
            if limits is None:
                await keys.delete(conn, own_key(tenant), None)
            else:
                await keys.put(conn, own_key(tenant), limits, None, now)
            if row.paused and not spec.paused:
                await unshelve_tenant(conn, tenant)  # what its pause held on its named keys
        found = await self.get(conn, tenant)
        assert found is not None
        events = [
            NewTenantEvent(
                tenant=tenant,
                kind=change.kind,
                actor=actor,
                version=found.version,
                fields=change.fields,
            )
            for change in put_changes(None if created else _tenant(row), spec)
        ]
        await TenantEventStore().record(conn, events, now)
        return found, created

    async def usage(self, conn: AsyncConnection, tenant: str, now: datetime) -> Usage:
        """What the tenant holds now, each count up to USAGE_CAP."""
        live = sa.select(sa.literal(1)).where(*of_tenant(tenant), schedules.c.status.in_(_LIVE))
        ids = sa.select(schedules.c.id).where(*of_tenant(tenant)).scalar_subquery()
        _o = occurrences.c
        pending = sa.select(_o.available_at, _o.lease_token, _o.lease_until).where(
            _o.schedule_id.in_(ids), _o.status == OccurrenceStatus.PENDING
        )
        rows = pending.limit(USAGE_CAP).subquery()
        leased = sa.and_(rows.c.lease_token.is_not(None), rows.c.lease_until > now)
        due = sa.and_(rows.c.lease_token.is_(None), rows.c.available_at <= now)
        figures = (
            await conn.execute(
                sa.select(
                    sa.func.count(),
                    sa.func.coalesce(sa.func.sum(sa.case((leased, 1), else_=0)), 0),
                    sa.func.coalesce(sa.func.sum(sa.case((due, 1), else_=0)), 0),
                ).select_from(rows)
            )
        ).one()
        dead = sa.select(sa.literal(1)).where(
            _o.schedule_id.in_(ids), _o.status == OccurrenceStatus.DEAD_LETTERED
        )
        return Usage(
            schedules=int((await conn.execute(_capped(live))).scalar_one()),
            pending_occurrences=int(figures[0]),
            in_flight=int(figures[1]),
            waiting=int(figures[2]),
            dead_letters=int((await conn.execute(_capped(dead))).scalar_one()),
        )

    async def page(
        self, conn: AsyncConnection, *, after: str | None, limit: int, now: datetime | None
    ) -> list[Tenant]:
        """Tenants in id order, after `after`, each with its usage as of `now` (None: none,
        one statement for the page)."""
        statement = sa.select(tenants).order_by(tenants.c.id).limit(limit)
        if after is not None:
            statement = statement.where(tenants.c.id > after)
        rows = (await conn.execute(statement)).all()
        if now is None:
            return [_tenant(row) for row in rows]
        return [_tenant(row, await self.usage(conn, row.id, now)) for row in rows]

    async def delete(
        self,
        conn: AsyncConnection,
        tenant: str,
        if_match: frozenset[int] | None,
        now: datetime,
        *,
        actor: str | None,
    ) -> None:
        """Remove `tenant` with everything it holds: refused for `default` and while any
        of its schedules is live (pending or paused), whose deliveries would be lost.
        Its ended schedules go (with their occurrences, attempts and events), its flow
        keys' rows and its keys; its own events stay, ending with `deleted` by `actor`."""
        if tenant == DEFAULT_TENANT:
            raise ConflictError("the default tenant cannot be deleted")
        row = (
            await conn.execute(
                sa.select(tenants.c.version).where(tenants.c.id == tenant).with_for_update()
            )
        ).first()
        if row is None:
            raise missing_tenant(tenant)
        check_version(row.version, if_match, f"the tenant is at version {row.version}")
        live = await conn.execute(
            sa.select(sa.func.count())
            .select_from(schedules)
            .where(schedules.c.tenant == tenant, schedules.c.status.in_(_LIVE))
        )
        count = int(live.scalar_one())
        if count:
            raise ConflictError(
                f"tenant {tenant} has {count} pending or paused schedules; cancel them first"
            )
        await conn.execute(schedules.delete().where(schedules.c.tenant == tenant))
        keys = starts_with(flow_keys.c.key, key_prefix(tenant))
        await conn.execute(flow_keys.delete().where(*keys))
        await TenantKeyStore().forget_tenant(conn, tenant)
        await conn.execute(tenants.delete().where(tenants.c.id == tenant))
        deleted = NewTenantEvent(tenant=tenant, kind=TenantEventKind.DELETED, actor=actor)
        await TenantEventStore().record(conn, [deleted], now)
