"""What the delivery loop and the pauses do to a flow key's rows, and the statements on keys
they share with the operators' side (`flow_keys`): rows shelved while their key is paused
or backing off and unshelved when it may start again, the keys a claim locks, the back-off
a destination asks for, and what a settle or a hand-back gives back to a key (a cancelled
attempt's slot, an unstarted attempt's token).

Invariant: what is in flight or waiting is counted from the occurrences when read, never
stored (in flight: from the lease's end and token, which only claims, settles and
releases write); a key's row holds only what an operator or a destination said (limits,
back-off) and the bucket the claim spends from.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.flow import FlowLimits, Ordering
from app.domain.occurrence import Delivery, OccurrenceStatus, Settlement
from app.domain.tenants import own_key
from app.store.dialects import dialect_of
from app.store.dialects.claim_rows import DUE_KEY_COLUMNS
from app.store.dialects.toolkit import by_lease_token
from app.store.loop.sql import query, typed
from app.store.schema.tables import flow_keys, occurrences, starts_with
from app.store.schema.types import UUID, UTCDateTime

_o = occurrences.c
_f = flow_keys.c
_PENDING = sa.literal(OccurrenceStatus.PENDING.value, literal_execute=True)
_NOW = sa.bindparam("now", type_=UTCDateTime())
_KEYS: sa.BindParameter[str] = sa.bindparam("keys", expanding=True)


# Every parameter of the named statements on flow keys, typed once.
_PARAMETERS = (
    _KEYS,
    _NOW,
    sa.bindparam("ids", expanding=True, type_=UUID),
    sa.bindparam("token", type_=UUID),
    sa.bindparam("b_key", type_=sa.String()),
    sa.bindparam("b_until", type_=UTCDateTime()),
    sa.bindparam("b_count", type_=sa.Float()),
    sa.bindparam("b_tokens", type_=sa.Float()),
    sa.bindparam("b_at", type_=UTCDateTime()),
)


@functools.cache
def named(name: str, dialect: str) -> sa.TextClause:
    """The named statement `name` of `dialect` on flow keys, typed."""
    return typed(query(name, dialect), *_PARAMETERS)


@functools.cache
def in_flight(dialect: str) -> sa.TextualSelect:
    """Per flow key of `keys`, its attempts in flight at `now` (named SQL `in_flight`)."""
    return named("in_flight", dialect).columns(flow_key=sa.String(), in_flight=sa.Integer())


async def shelve_keys(conn: AsyncConnection, keys: Sequence[str]) -> None:
    """Shelve the pending rows that no lease holds of keys that are paused or backing off,
    locked by the caller: they leave the keyed claim's index until the key may start again
    (named SQL `shelve_keys`), and each key is marked as shelving some."""
    await conn.execute(named("shelve_keys", dialect_of(conn).name), {"keys": list(keys)})
    await _mark_shelving(conn, keys, shelving=True)


async def shelve_for_tenant(conn: AsyncConnection, keys: Sequence[str]) -> None:
    """Shelve the pending rows that no lease holds of keys whose tenant is paused, its own
    key locked by the caller (named SQL `shelve_keys`). The keys are not marked: the
    tenant's resume unshelves them (`unshelve_tenant`), not the end of a key's own hold."""
    await conn.execute(named("shelve_keys", dialect_of(conn).name), {"keys": list(keys)})


async def unshelve_keys(conn: AsyncConnection, keys: Sequence[str]) -> None:
    """Unshelve the rows of keys that may start again (resumed, their back-off over, or
    gone): they are claimable again, each at its own instant (named SQL `unshelve_keys`)."""
    await conn.execute(named("unshelve_keys", dialect_of(conn).name), {"keys": list(keys)})
    await _mark_shelving(conn, keys, shelving=False)


async def unshelve_tenant(conn: AsyncConnection, tenant: str) -> None:
    """Unshelve the rows of every key of `tenant` (its own key's and its named keys'): what
    its pause held starts as each key allows, and a key paused itself holds its rows again
    at the claim that finds them due."""
    await conn.execute(
        occurrences.update()
        .where(
            *starts_with(_o.flow_key, own_key(tenant)),
            _o.status == _PENDING,
            _o.shelved.is_(True),
        )
        .values(shelved=False)
    )


async def _mark_shelving(conn: AsyncConnection, keys: Sequence[str], *, shelving: bool) -> None:
    await conn.execute(
        flow_keys.update()
        .where(_f.key.in_(list(keys)), _f.shelving.is_not(shelving))
        .values(shelving=shelving)
    )


@functools.cache
def _unshelving(dialect: str) -> sa.TextualSelect:
    return named("unshelving_keys", dialect).columns(flow_key=sa.String())


# A key's row as the keyed claim reads it under its lock (named SQL `lock_keys`).
_KEY_COLUMNS: dict[str, Any] = {
    name: type_ for name, type_ in DUE_KEY_COLUMNS.items() if name not in ("first_at", "now")
}


@functools.cache
def lock_keys(dialect: str) -> sa.TextualSelect:
    """The rows of the keys that may start something, locked; a key another claim holds
    is not among them (named SQL `lock_keys`)."""
    return named("lock_keys", dialect).columns(**_KEY_COLUMNS)


def row_limits(row: Any) -> FlowLimits | None:
    """A key's stored limits, from a row that has a key's columns (None: the key has no
    row)."""
    return None if row.period_seconds is None else stored_limits(row)


async def unshelving_keys(conn: AsyncConnection, now: datetime) -> list[str]:
    """The keys shelving rows that may start again at `now`, locked (a key another claim
    holds is left to it; named SQL `unshelving_keys`)."""
    return list((await conn.execute(_unshelving(dialect_of(conn).name), {"now": now})).scalars())


@functools.cache
def _next_unshelve(dialect: str) -> sa.TextualSelect:
    return named("next_unshelve", dialect).columns(until=UTCDateTime())


async def next_unshelve_in(conn: AsyncConnection, now: datetime) -> float | None:
    """Seconds until the soonest back-off of a key shelving rows ends (None: none will;
    named SQL `next_unshelve`)."""
    until = (await conn.execute(_next_unshelve(dialect_of(conn).name), {"now": now})).scalar()
    return None if until is None else (until - now).total_seconds()


def _fresh_row(key: str, now: datetime) -> dict[str, Any]:
    """A key's row before any limits are put (a PUT then counts as new)."""
    return {"key": key, "limits_set": False, "version": 1, "created_at": now, "updated_at": now}


def backing_off(settlements: Sequence[Settlement]) -> list[str]:
    """The keys whose destination asked `settlements` for a back-off."""
    return [
        item.delivery.flow_key
        for item in settlements
        if item.delivery.flow_key is not None and item.key_backoff is not None
    ]


async def back_off_keys(
    conn: AsyncConnection, settlements: Sequence[Settlement], now: datetime
) -> None:
    """Hold each flow key whose destination asked for it (`Settlement.key_backoff`) until
    then (named SQL `back_off`): a key with no row gets one, with no limits, for its
    back-off."""
    until: dict[str, datetime] = {}
    for item in settlements:
        key, seconds = item.delivery.flow_key, item.key_backoff
        if key is None or seconds is None:
            continue
        at = now + timedelta(seconds=seconds)
        until[key] = max(at, until.get(key, at))
    if not until:
        return
    dialect = dialect_of(conn)
    fresh = [_fresh_row(key, now) for key in sorted(until)]
    await dialect.insert_ignoring(conn, flow_keys, fresh, "key")
    await conn.execute(
        named("back_off", dialect.name),
        [{"b_key": key, "b_until": at} for key, at in sorted(until.items())],
    )


async def end_cancelled_leases(conn: AsyncConnection, deliveries: Sequence[Delivery]) -> None:
    """End the leases of those of `deliveries` (settled or handed back) whose occurrence
    was cancelled while they ran, so that each frees its key's slot now rather than when
    its lease runs out (named SQL `end_cancelled_leases`). Only keyed ones: nothing counts
    the others."""
    keyed = [d for d in deliveries if d.flow_key is not None]
    if keyed:
        await dialect_of(conn).end_cancelled_leases(conn, keyed)


async def give_back_tokens(conn: AsyncConnection, deliveries: Sequence[Delivery]) -> None:
    """Put back in each key's bucket the tokens that `deliveries` took at their claim:
    they are handed back unstarted, and an attempt that was never made spends nothing.
    Only those whose lease still holds them (a lease taken over was spent by its new
    claim); first in the hand-back, as flow keys come first in the lock order (named SQL
    `still_held`, then `give_back_tokens`)."""
    keyed = [d for d in deliveries if d.flow_key is not None]
    if not keyed:
        return
    dialect = dialect_of(conn).name
    still_held = named("still_held", dialect).columns(occurrence_id=UUID)
    held: set[Any] = set()
    for token, ids in by_lease_token(keyed).items():
        found = await conn.execute(still_held, {"ids": ids, "token": token})
        held.update(found.scalars())
    counts = Counter(d.flow_key for d in keyed if d.occurrence_id in held)
    if counts:
        await conn.execute(
            named("give_back_tokens", dialect),
            [{"b_key": key, "b_count": n} for key, n in sorted(counts.items())],
        )


def stored_limits(row: Any) -> FlowLimits:
    """The limits a key's row holds (written from a validated PUT)."""
    return FlowLimits(
        rate=row.rate,
        period_seconds=row.period_seconds,
        burst=row.burst,
        parallelism=row.parallelism,
        ordering=Ordering(row.ordering),
        paused=bool(row.paused),
    )
