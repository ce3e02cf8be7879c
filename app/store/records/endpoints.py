"""Endpoints as stored: made, read, listed, changed, removed, their secrets rotated and
their circuit enabled. What an attempt sends to one is read apart (`endpoint_targets`).

Invariants:
- An endpoint's flow limits and circuit are its key's row (`endpoint_key`), made with the
  endpoint and removed with it. A write that changes both locks the key's row first, then
  the endpoint's: flow keys come first in the lock order, as the settle takes them.
- Every change writes its audit event in its own transaction, after every check that may
  refuse it.
- A secret's value is read only by `resolve_endpoints` (for an attempt, `endpoint_targets`)
  and answered only by the create and the rotation that made it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.endpoints import (
    MAX_LIVE_SECRETS,
    Endpoint,
    EndpointEvent,
    EndpointSpec,
    SecretInfo,
    enabled,
    missing_endpoint,
)
from app.domain.errors import ConflictError, InvalidInputError
from app.domain.flow import FlowLimits
from app.domain.ids import event_id
from app.domain.schedule import ScheduleStatus, check_version
from app.domain.secrets import redacted_secret
from app.domain.tenants import endpoint_key
from app.store.dialects import dialect_of
from app.store.records.endpoint_circuits import circuit_of, circuit_values, settings_of
from app.store.records.endpoint_events import (
    NewEndpointEvent,
    endpoint_history,
    record_endpoint_events,
)
from app.store.records.endpoint_targets import secret_live
from app.store.records.flow_key_holds import unshelve_keys
from app.store.records.flow_keys import FlowKeyStore
from app.store.schema.tables import (
    endpoint_secrets,
    endpoints,
    flow_keys,
    schedules,
    subscriptions,
)

_e = endpoints.c
_s = endpoint_secrets.c
_f = flow_keys.c
_LIVE = (ScheduleStatus.PENDING.value, ScheduleStatus.PAUSED.value)
# The fields of an endpoint a PATCH may name, in the order `updated` lists them.
PATCH_FIELDS = (
    "name",
    "url",
    "method",
    "headers",
    "timeout_seconds",
    "description",
    "flow",
    "circuit",
)


def _spec(row: Any, limits: FlowLimits | None) -> EndpointSpec:
    return EndpointSpec(
        name=row.name,
        url=row.url,
        method=row.method,
        headers=dict(row.headers or {}),
        timeout_seconds=row.timeout_seconds,
        description=row.description,
        flow=limits,
        circuit=settings_of(row),
    )


def _limit_columns(limits: FlowLimits | None) -> dict[str, Any]:
    if limits is None:
        return {
            "rate": None,
            "period_seconds": 1.0,
            "burst": None,
            "parallelism": None,
            "ordering": "none",
            "limits_set": False,
        }
    return {
        "rate": limits.rate,
        "period_seconds": limits.period_seconds,
        "burst": limits.burst,
        "parallelism": limits.parallelism,
        "ordering": limits.ordering.value,
        "limits_set": True,
    }


def _endpoint_values(spec: EndpointSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "url": spec.url,
        "method": spec.method,
        "headers": spec.headers,
        "timeout_seconds": spec.timeout_seconds,
        "description": spec.description,
        "failure_threshold": spec.circuit.failure_threshold,
        "cooldown_seconds": spec.circuit.cooldown_seconds,
        "max_cooldown_seconds": spec.circuit.max_cooldown_seconds,
        "disable_after_seconds": spec.circuit.disable_after_seconds,
    }


class EndpointStore:
    """Statements on `endpoints` and their secrets; every method runs inside the caller's
    transaction."""

    def __init__(self) -> None:
        self._keys = FlowKeyStore()

    async def _name_free(
        self, conn: AsyncConnection, tenant: str, name: str | None, but: uuid.UUID | None
    ) -> None:
        if name is None:
            return
        taken = sa.select(_e.id).where(_e.tenant == tenant, _e.name == name)
        if but is not None:
            taken = taken.where(_e.id != but)
        if (await conn.execute(taken)).first() is not None:
            raise ConflictError(f"the tenant has an endpoint named {name!r} already")

    async def create(
        self,
        conn: AsyncConnection,
        tenant: str,
        spec: EndpointSpec,
        secret: str,
        now: datetime,
        *,
        actor: str | None,
    ) -> Endpoint:
        """A new endpoint with its first secret and its key's row."""
        await self._name_free(conn, tenant, spec.name, None)
        endpoint_id = event_id(now)
        key = endpoint_key(tenant, endpoint_id)
        dialect = dialect_of(conn)
        await dialect.insert_ignoring(
            conn,
            flow_keys,
            [
                {
                    "key": key,
                    **_limit_columns(spec.flow),
                    "version": 1,
                    "created_at": now,
                    "updated_at": now,
                }
            ],
            "key",
        )
        try:
            await conn.execute(
                endpoints.insert().values(
                    id=endpoint_id,
                    tenant=tenant,
                    **_endpoint_values(spec),
                    version=1,
                    created_by=actor,
                    created_at=now,
                    updated_at=now,
                )
            )
        except IntegrityError:  # another request took the name since `_name_free`
            raise ConflictError(f"the tenant has an endpoint named {spec.name!r} already") from None
        await conn.execute(
            endpoint_secrets.insert().values(
                id=event_id(now), endpoint_id=endpoint_id, secret=secret, created_at=now
            )
        )
        await record_endpoint_events(
            conn,
            [NewEndpointEvent(endpoint_id=endpoint_id, tenant=tenant, kind="created", actor=actor)],
            now,
        )
        return await self.get(conn, tenant, endpoint_id, now)

    async def _row(
        self, conn: AsyncConnection, tenant: str, endpoint_id: uuid.UUID, *, lock: bool = False
    ) -> Row[Any]:
        statement = sa.select(endpoints).where(_e.id == endpoint_id, _e.tenant == tenant)
        if lock:
            statement = statement.with_for_update()
        row = (await conn.execute(statement)).one_or_none()
        if row is None:
            raise missing_endpoint(endpoint_id)
        return row

    async def hold(
        self, conn: AsyncConnection, tenant: str, ids: Iterable[uuid.UUID]
    ) -> set[uuid.UUID]:
        """Those of `ids` that are endpoints of `tenant`, each held until the transaction
        ends (a shared lock: a removal waits for it, and then finds what it stored)."""
        wanted = sorted(set(ids))
        if not wanted:
            return set()
        found = await conn.execute(
            sa.select(_e.id)
            .where(_e.id.in_(wanted), _e.tenant == tenant)
            .order_by(_e.id)
            .with_for_update(read=True)
        )
        return set(found.scalars())

    async def exists(self, conn: AsyncConnection, tenant: str, endpoint_id: uuid.UUID) -> bool:
        found = sa.select(_e.id).where(_e.id == endpoint_id, _e.tenant == tenant)
        return (await conn.execute(found)).first() is not None

    async def get(
        self, conn: AsyncConnection, tenant: str, endpoint_id: uuid.UUID, now: datetime
    ) -> Endpoint:
        row = await self._row(conn, tenant, endpoint_id)
        (found,) = await self._read(conn, [row], now)
        return found

    async def page(
        self,
        conn: AsyncConnection,
        tenant: str,
        *,
        after: uuid.UUID | None,
        limit: int,
        now: datetime,
    ) -> list[Endpoint]:
        """The tenant's endpoints, oldest first, after the id `after`."""
        statement = sa.select(endpoints).where(_e.tenant == tenant)
        if after is not None:
            statement = statement.where(_e.id > after)
        rows = list(await conn.execute(statement.order_by(_e.id).limit(limit)))
        return await self._read(conn, rows, now)

    async def _read(
        self, conn: AsyncConnection, rows: Sequence[Row[Any]], now: datetime
    ) -> list[Endpoint]:
        if not rows:
            return []
        keys = {row.id: endpoint_key(row.tenant, row.id) for row in rows}
        key_rows = {
            r.key: r
            for r in await conn.execute(sa.select(flow_keys).where(_f.key.in_(list(keys.values()))))
        }
        figures = {
            f.key: f
            for f in await self._keys.with_figures(conn, list(keys.values()), key_rows, now)
        }
        secrets: dict[uuid.UUID, list[SecretInfo]] = {row.id: [] for row in rows}
        found = await conn.execute(
            sa.select(_s.id, _s.endpoint_id, _s.secret, _s.created_at, _s.expires_at)
            .where(_s.endpoint_id.in_(list(secrets)), secret_live(now))
            .order_by(_s.id)
        )
        for s in found:
            secrets[s.endpoint_id].append(
                SecretInfo(s.id, s.created_at, s.expires_at, redacted_secret(s.secret))
            )
        endpoints_read = []
        for row in rows:
            key = keys[row.id]
            figure = figures[key]
            circuit = circuit_of(key_rows.get(key))
            endpoints_read.append(
                Endpoint(
                    id=row.id,
                    tenant=row.tenant,
                    spec=_spec(row, figure.limits),
                    version=row.version,
                    created_at=row.created_at,
                    updated_at=row.updated_at,
                    circuit=circuit,
                    state=circuit.shown(now),
                    secrets=tuple(secrets[row.id]),
                    in_flight=figure.in_flight,
                    waiting=figure.waiting,
                    backoff_until=figure.backoff_until,
                )
            )
        return endpoints_read

    async def update(
        self,
        conn: AsyncConnection,
        tenant: str,
        endpoint_id: uuid.UUID,
        spec: EndpointSpec,
        changed: list[str],
        if_match: frozenset[int] | None,
        now: datetime,
        *,
        actor: str | None,
    ) -> Endpoint:
        """Replace the endpoint with `spec` (its current values with a PATCH's applied);
        `changed` names the fields whose value changed."""
        key = endpoint_key(tenant, endpoint_id)
        await conn.execute(sa.select(_f.key).where(_f.key == key).with_for_update())
        row = await self._row(conn, tenant, endpoint_id, lock=True)
        if if_match is not None:
            check_version(row.version, if_match, f"the endpoint is at version {row.version}")
        await self._name_free(conn, tenant, spec.name, endpoint_id)
        try:
            await conn.execute(
                endpoints.update()
                .where(_e.id == endpoint_id)
                .values(**_endpoint_values(spec), version=row.version + 1, updated_at=now)
            )
        except IntegrityError:  # another request took the name since `_name_free`
            raise ConflictError(f"the tenant has an endpoint named {spec.name!r} already") from None
        if "flow" in changed:
            await conn.execute(
                flow_keys.update()
                .where(_f.key == key)
                .values(**_limit_columns(spec.flow), tokens=None, refilled_at=None, updated_at=now)
            )
        await record_endpoint_events(
            conn,
            [
                NewEndpointEvent(
                    endpoint_id=endpoint_id,
                    tenant=tenant,
                    kind="updated",
                    actor=actor,
                    detail={"fields": [name for name in PATCH_FIELDS if name in changed]},
                )
            ],
            now,
        )
        return await self.get(conn, tenant, endpoint_id, now)

    async def delete(
        self,
        conn: AsyncConnection,
        tenant: str,
        endpoint_id: uuid.UUID,
        if_match: frozenset[int] | None,
        now: datetime,
        *,
        actor: str | None,
    ) -> None:
        """Remove the endpoint, its secrets and its key's row: refused while a live
        schedule targets it."""
        key = endpoint_key(tenant, endpoint_id)
        await conn.execute(sa.select(_f.key).where(_f.key == key).with_for_update())
        row = await self._row(conn, tenant, endpoint_id, lock=True)
        if if_match is not None:
            check_version(row.version, if_match, f"the endpoint is at version {row.version}")
        named = await conn.execute(
            sa.select(schedules.c.id)
            .where(schedules.c.flow_key == key, schedules.c.status.in_(_LIVE))
            .limit(1)
        )
        if (first := named.first()) is not None:
            raise ConflictError(
                f"schedule {first.id} targets the endpoint: cancel it or move it to another "
                "target first"
            )
        subscribed = await conn.execute(
            sa.select(subscriptions.c.id).where(subscriptions.c.endpoint_id == endpoint_id).limit(1)
        )
        if (subscription := subscribed.scalar()) is not None:
            raise ConflictError(f"subscription {subscription} names the endpoint: delete it first")
        await conn.execute(endpoint_secrets.delete().where(_s.endpoint_id == endpoint_id))
        await conn.execute(endpoints.delete().where(_e.id == endpoint_id))
        await conn.execute(flow_keys.delete().where(_f.key == key))
        await record_endpoint_events(
            conn,
            [NewEndpointEvent(endpoint_id=endpoint_id, tenant=tenant, kind="deleted", actor=actor)],
            now,
        )

    async def rotate(
        self,
        conn: AsyncConnection,
        tenant: str,
        endpoint_id: uuid.UUID,
        secret: str,
        overlap_seconds: int,
        if_match: frozenset[int] | None,
        now: datetime,
        *,
        actor: str | None,
    ) -> Endpoint:
        """Add `secret` as the newest and let the live ones expire after the overlap (one
        that expires sooner keeps its instant); the expired ones are removed. A rotation is
        a change of the endpoint: its version grows, and `if_match` may name the one
        expected (a form sent twice rotates once)."""
        row = await self._row(conn, tenant, endpoint_id, lock=True)
        if if_match is not None:
            check_version(row.version, if_match, f"the endpoint is at version {row.version}")
        await conn.execute(
            endpoints.update()
            .where(_e.id == endpoint_id)
            .values(version=row.version + 1, updated_at=now)
        )
        await conn.execute(
            endpoint_secrets.delete().where(
                _s.endpoint_id == endpoint_id, _s.expires_at.is_not(None), _s.expires_at <= now
            )
        )
        live = (
            await conn.execute(sa.select(sa.func.count()).where(_s.endpoint_id == endpoint_id))
        ).scalar_one()
        if live >= MAX_LIVE_SECRETS:
            raise InvalidInputError(
                f"the endpoint has {live} live secrets, the most it holds: wait until one "
                "expires, or rotate with a shorter overlap_seconds",
                pointer="#/overlap_seconds",
            )
        until = now + timedelta(seconds=overlap_seconds)
        await conn.execute(
            endpoint_secrets.update()
            .where(
                _s.endpoint_id == endpoint_id,
                sa.or_(_s.expires_at.is_(None), _s.expires_at > until),
            )
            .values(expires_at=until)
        )
        await conn.execute(
            endpoint_secrets.insert().values(
                id=event_id(now), endpoint_id=endpoint_id, secret=secret, created_at=now
            )
        )
        await record_endpoint_events(
            conn,
            [
                NewEndpointEvent(
                    endpoint_id=endpoint_id,
                    tenant=tenant,
                    kind="secret_rotated",
                    actor=actor,
                    detail={"overlap_seconds": overlap_seconds},
                )
            ],
            now,
        )
        return await self.get(conn, tenant, endpoint_id, now)

    async def enable(
        self,
        conn: AsyncConnection,
        tenant: str,
        endpoint_id: uuid.UUID,
        now: datetime,
        *,
        actor: str | None,
    ) -> Endpoint:
        """Close the endpoint's circuit, whatever its state: what waits flows again."""
        key = endpoint_key(tenant, endpoint_id)
        key_row = (
            await conn.execute(sa.select(flow_keys).where(_f.key == key).with_for_update())
        ).one_or_none()
        await self._row(conn, tenant, endpoint_id)
        change = enabled(circuit_of(key_row), now)
        if change.events:
            await conn.execute(
                flow_keys.update()
                .where(_f.key == key)
                .values(**circuit_values(change.circuit), backoff_until=None)
            )
            await unshelve_keys(conn, [key])
            await record_endpoint_events(
                conn,
                [
                    NewEndpointEvent(
                        endpoint_id=endpoint_id, tenant=tenant, kind=event.value, actor=actor
                    )
                    for event in change.events
                ],
                now,
            )
        return await self.get(conn, tenant, endpoint_id, now)

    async def history(
        self,
        conn: AsyncConnection,
        tenant: str,
        endpoint_id: uuid.UUID,
        *,
        after: uuid.UUID | None,
        limit: int,
    ) -> list[EndpointEvent]:
        """The endpoint's events, oldest first (a removed endpoint's too)."""
        return await endpoint_history(conn, tenant, endpoint_id, after=after, limit=limit)
