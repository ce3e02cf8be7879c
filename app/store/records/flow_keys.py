"""Flow keys as operators keep them: limits put, read with live figures, removed, listed,
and a destination's back-off cleared. What the delivery loop and the pauses do to a key's
rows (shelving, locks, back-offs, give-backs) is `flow_key_holds`.

Invariant: what is in flight or waiting is counted from the occurrences when read, never
stored; a key's row holds only what an operator or a destination said (limits, back-off)
and the bucket the claim spends from.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.flow import FlowKey, FlowLimits
from app.domain.occurrence import Occurrence, OccurrenceStatus
from app.domain.schedule import check_version
from app.domain.tenants import ENDPOINT_KEY_MARK
from app.store.dialects import dialect_of
from app.store.records.flow_key_holds import in_flight, stored_limits, unshelve_keys
from app.store.schema.rows import OCCURRENCE_COLUMNS, to_occurrence
from app.store.schema.tables import flow_keys, occurrences, schedules, starts_with
from app.store.schema.types import UUID, UTCDateTime

_o = occurrences.c
_f = flow_keys.c
_PENDING = sa.literal(OccurrenceStatus.PENDING.value, literal_execute=True)
_NOW = sa.bindparam("now", type_=UTCDateTime())
_KEYS: sa.BindParameter[str] = sa.bindparam("keys", expanding=True)


def _count(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
    """How many rows of the group meet `condition` (MySQL has no FILTER clause)."""
    return sa.func.coalesce(sa.func.sum(sa.case((condition, 1), else_=0)), 0)


# Per key: occurrences due and not started.
_WAITING = (
    sa.select(_o.flow_key, _count(_o.available_at <= _NOW).label("waiting"))
    .where(_o.status == _PENDING, _o.flow_key.is_not(None), _o.flow_key.in_(_KEYS))
    .group_by(_o.flow_key)
)


def _limit_values(limits: FlowLimits) -> dict[str, Any]:
    return {
        "rate": limits.rate,
        "period_seconds": limits.period_seconds,
        "burst": limits.burst,
        "parallelism": limits.parallelism,
        "ordering": limits.ordering.value,
        "paused": limits.paused,
    }


class FlowKeyStore:
    """Reads and writes of `flow_keys`, inside the caller's transaction."""

    async def waiting(
        self,
        conn: AsyncConnection,
        key: str,
        *,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None,
    ) -> list[Occurrence]:
        """The key's pending occurrences in the order a fifo key starts them (fire
        instant, then id), after `after`: one range of the key's index of those
        (`ix_occurrences_flow_order`), however many other keys wait."""
        o = occurrences.c
        statement = sa.select(*OCCURRENCE_COLUMNS).where(
            o.status == _PENDING, o.flow_key.is_not(None), o.flow_key == key
        )
        if after is not None:
            statement = statement.where(
                sa.tuple_(o.fire_at, o.occurrence_id)
                > sa.tuple_(sa.literal(after[0], UTCDateTime()), sa.literal(after[1], UUID))
            )
        statement = statement.order_by(o.fire_at, o.occurrence_id).limit(limit)
        return [to_occurrence(row) for row in await conn.execute(statement)]

    async def get(self, conn: AsyncConnection, key: str, now: datetime) -> FlowKey:
        """The key as it stands; a key never PUT is answered too (no limits)."""
        row = (await conn.execute(sa.select(flow_keys).where(_f.key == key))).one_or_none()
        (found,) = await self.with_figures(conn, [key], {key: row} if row else {}, now)
        return found

    async def put(
        self,
        conn: AsyncConnection,
        key: str,
        limits: FlowLimits,
        if_match: frozenset[int] | None,
        now: datetime,
    ) -> tuple[FlowKey, bool]:
        """Create or replace the key's limits; True when the key had none. A client's
        `if_match` names the versions it expects (a key with no limits is at none). The
        bucket keeps its tokens, up to the new capacity: new limits are no new burst."""
        dialect = dialect_of(conn)
        fresh = {
            "key": key,
            "limits_set": False,
            "version": 1,
            "created_at": now,
            "updated_at": now,
        }
        await dialect.insert_ignoring(conn, flow_keys, [fresh], "key")
        row = (
            await conn.execute(sa.select(flow_keys).where(_f.key == key).with_for_update())
        ).one()
        created = not row.limits_set
        if if_match is not None:
            if created:
                check_version(0, if_match, "the flow key has no limits yet")
            else:
                check_version(row.version, if_match, f"the flow key is at version {row.version}")
        capacity = limits.capacity
        tokens = None if capacity is None or row.tokens is None else min(row.tokens, capacity)
        values = {
            **_limit_values(limits),
            "limits_set": True,
            "version": 1 if created else row.version + 1,
            "tokens": tokens,
            "refilled_at": None if tokens is None else row.refilled_at,
            "updated_at": now,
        }
        await conn.execute(flow_keys.update().where(_f.key == key).values(**values))
        backing_off = row.backoff_until is not None and row.backoff_until > now
        if not limits.paused and not backing_off:
            await unshelve_keys(conn, [key])  # what a pause shelved starts as limits allow
        return await self.get(conn, key, now), created

    async def clear_backoff(self, conn: AsyncConnection, key: str, now: datetime) -> FlowKey:
        """End the key's back-off now: what waits on it starts as its limits allow. Its
        limits and version stay (a back-off is a destination's, not an operator's
        change); a row that only the back-off made goes with it. The key as it then is."""
        await conn.execute(
            flow_keys.update()
            .where(_f.key == key, _f.backoff_until.is_not(None))
            .values(backoff_until=None)
        )
        await conn.execute(flow_keys.delete().where(_f.key == key, _f.limits_set.is_(False)))
        paused = (await conn.execute(sa.select(_f.paused).where(_f.key == key))).scalar()
        if not paused:
            await unshelve_keys(conn, [key])
        return await self.get(conn, key, now)

    async def delete(
        self, conn: AsyncConnection, key: str, if_match: frozenset[int] | None
    ) -> bool:
        """Remove the key's limits and back-off (its schedules keep the name and run
        unlimited); False when it had none."""
        row = (
            await conn.execute(
                sa.select(_f.version, _f.limits_set).where(_f.key == key).with_for_update()
            )
        ).one_or_none()
        if row is None or not row.limits_set:
            if if_match is not None:
                check_version(0, if_match, "the flow key has no limits")
            if row is not None:
                await conn.execute(flow_keys.delete().where(_f.key == key))
                await unshelve_keys(conn, [key])
            return False
        if if_match is not None:
            check_version(row.version, if_match, f"the flow key is at version {row.version}")
        await conn.execute(flow_keys.delete().where(_f.key == key))
        await unshelve_keys(conn, [key])  # no limits, no pause: nothing shelves its rows
        return True

    async def page(
        self,
        conn: AsyncConnection,
        *,
        prefix: str,
        after: str | None,
        limit: int,
        now: datetime,
    ) -> list[FlowKey]:
        """Keys that start with `prefix` (a tenant's), in name order after `after`: those
        with a row and those only schedules name (each schedule's key is in its own
        index)."""
        # Not the tenant's own key (`own_key`, the prefix itself): no request names it.
        # Nor an endpoint's (`endpoint_key`): its limits and figures are the endpoint's.
        endpoint = prefix + ENDPOINT_KEY_MARK
        named = sa.select(schedules.c.flow_key.label("key")).where(
            schedules.c.flow_key.is_not(None),
            *starts_with(schedules.c.flow_key, prefix),
            schedules.c.flow_key != prefix,
            sa.not_(sa.and_(*starts_with(schedules.c.flow_key, endpoint))),
        )
        stored = sa.select(_f.key.label("key")).where(
            *starts_with(_f.key, prefix),
            _f.key != prefix,
            sa.not_(sa.and_(*starts_with(_f.key, endpoint))),
        )
        if after is not None:
            named = named.where(schedules.c.flow_key > after)
            stored = stored.where(_f.key > after)
        both = sa.union(named, stored).subquery()
        keys = list(
            (await conn.execute(sa.select(both.c.key).order_by(both.c.key).limit(limit))).scalars()
        )
        if not keys:
            return []
        rows = {
            row.key: row for row in await conn.execute(sa.select(flow_keys).where(_f.key.in_(keys)))
        }
        return await self.with_figures(conn, keys, rows, now)

    async def with_figures(
        self, conn: AsyncConnection, keys: Sequence[str], rows: dict[str, Any], now: datetime
    ) -> list[FlowKey]:
        params = {"keys": list(keys), "now": now}
        counted = await conn.execute(in_flight(dialect_of(conn).name), params)
        flying = {row.flow_key: row.in_flight for row in counted}
        waiting = {row.flow_key: row.waiting for row in await conn.execute(_WAITING, params)}
        found = []
        for key in keys:
            row = rows.get(key)
            backoff = None if row is None else row.backoff_until
            found.append(
                FlowKey(
                    key=key,
                    limits=stored_limits(row) if row is not None and row.limits_set else None,
                    version=row.version if row is not None and row.limits_set else None,
                    in_flight=flying.get(key, 0),
                    waiting=waiting.get(key, 0),
                    backoff_until=backoff if backoff is not None and backoff > now else None,
                    created_at=None if row is None else row.created_at,
                    updated_at=None if row is None else row.updated_at,
                )
            )
        return found
