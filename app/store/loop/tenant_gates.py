"""Tenants' gates in the keyed claim (DESIGN section 14): a tenant's pause and delivery quotas
are its own key's row (`own_key`), which bounds every key of the tenant together. The claim
reads the gates of the tenants it finds due (`read_gates`), counts each gated tenant's
attempts in flight under the gate's lock (`tenants_in_flight`), and sets aside the due rows
of a paused tenant's keys (`shelve_for_paused_tenants`), which the tenant's resume puts back
(`unshelve_tenant`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.flow import FlowLimits
from app.domain.tenants import DEFAULT_TENANT, own_key, tenant_of_key
from app.store.dialects import dialect_of
from app.store.records.flow_key_holds import lock_keys, row_limits, shelve_for_tenant
from app.store.schema.tables import flow_keys, occurrences, starts_with


@dataclass(frozen=True, slots=True)
class Gate:
    """A tenant's own key's row as a claim read it: the limits that hold back every
    delivery of the tenant, each of its keys' included (its pause, its delivery quotas)."""

    limits: FlowLimits
    row: Any


_f = flow_keys.c
# The gates' rows, read with no lock, as the keyed claim reads a due key's.
_GATE_ROWS = sa.select(
    _f.key.label("flow_key"),
    _f.rate,
    _f.period_seconds,
    _f.burst,
    _f.parallelism,
    _f.ordering,
    _f.paused,
    _f.tokens,
    _f.refilled_at,
    _f.backoff_until,
).where(_f.key.in_(sa.bindparam("keys", expanding=True)))


async def read_gates(conn: AsyncConnection, due: Sequence[Any]) -> dict[str, Gate]:
    """The gates of the tenants of `due` keys (rows of `DUE_KEY_COLUMNS`) that have one, by
    tenant: their own keys' rows, from `due` where the own key is due itself, else read
    (no lock)."""
    rows = {row.flow_key: row for row in due}
    tenants = {tenant_of_key(row.flow_key) for row in due}
    wanted = {own_key(t) for t in tenants if t != DEFAULT_TENANT}
    missing = sorted(key for key in wanted if key not in rows)
    if missing:
        found = await conn.execute(_GATE_ROWS, {"keys": missing})
        rows.update({row.flow_key: row for row in found})
    gates: dict[str, Gate] = {}
    for key in wanted:
        row = rows.get(key)
        limits = None if row is None else row_limits(row)
        if limits is not None and limits.limited:
            gates[tenant_of_key(key)] = Gate(limits, row)
    return gates


async def tenants_in_flight(
    conn: AsyncConnection, tenant_ids: Sequence[str], now: datetime
) -> Counter[str]:
    """Per tenant of `tenant_ids`, its attempts in flight at `now`: the live leases of its
    keys (its own key's among them), read from the index of keyed leases (FLOW_LEASED),
    which holds what is in flight and no more."""
    if not tenant_ids:
        return Counter()
    o = occurrences.c
    statement = (
        sa.select(o.flow_key, sa.func.count().label("in_flight"))
        .where(
            o.flow_key.is_not(None),
            o.lease_token.is_not(None),
            o.lease_until > now,
            sa.or_(*(sa.and_(*starts_with(o.flow_key, own_key(t))) for t in tenant_ids)),
        )
        .group_by(o.flow_key)
    )
    counts: Counter[str] = Counter()
    for row in await conn.execute(statement):
        counts[tenant_of_key(row.flow_key)] += row.in_flight
    return counts


async def shelve_for_paused_tenants(conn: AsyncConnection, keys: Sequence[str]) -> None:
    """Shelve the rows of due `keys` whose tenant is paused, under the lock of the tenant's
    own key (a tenant another claim holds is left to it): its resume, which takes that
    lock, unshelves them all, so that 10^4 keys of paused tenants cost a claim nothing once
    one claim has found them so."""
    if not keys:
        return
    gates = sorted({own_key(tenant_of_key(key)) for key in keys})
    locked = (await conn.execute(lock_keys(dialect_of(conn).name), {"keys": gates})).all()
    paused = {tenant_of_key(row.flow_key) for row in locked if row.paused}
    held = [key for key in keys if tenant_of_key(key) in paused]
    if held:
        await shelve_for_tenant(conn, held)
