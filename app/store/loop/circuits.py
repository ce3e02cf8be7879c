"""Endpoints' circuit breakers, moved by the attempts a settle records (DESIGN section 15).

Invariant: a circuit changes only under its key's row lock, in the transaction that records
the attempts that move it, from the outcomes in the order the batch settles them: replicas
settling attempts of one endpoint at once take turns, and each sees the other's count. An
open circuit is its key's back-off until the probe may start, and the claim then reads the
key's parallelism as 1 (named SQL `lock_keys`), so one attempt fleet-wide is the probe;
a disabled one pauses its key. A settle of healthy endpoints (closed, no failure in a row,
every attempt a 2xx) reads their rows and writes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.endpoints import CircuitChanged, CircuitState, circuit_after
from app.domain.occurrence import OccurrenceStatus, Settlement
from app.domain.operator_events import CIRCUIT_KINDS, NewOperatorEvent
from app.domain.target import EndpointWebhook
from app.domain.tenants import tenant_of_key
from app.store.records.endpoint_circuits import circuit_of, circuit_values, endpoint_settings
from app.store.records.endpoint_events import NewEndpointEvent, record_endpoint_events
from app.store.records.operator_events import record_operator_events
from app.store.schema.tables import flow_keys

_f = flow_keys.c
# The actor of a circuit's events.
_SYSTEM = "system"


def circuit_outcomes(
    settlements: Sequence[Settlement],
) -> dict[str, tuple[uuid.UUID, list[bool]]]:
    """Each endpoint key's attempts in the batch, in settle order (True: a 2xx)."""
    found: dict[str, tuple[uuid.UUID, list[bool]]] = {}
    for item in settlements:
        target, key = item.delivery.target, item.delivery.flow_key
        if not isinstance(target, EndpointWebhook) or key is None:
            continue
        entry = found.setdefault(key, (target.endpoint_id, []))
        entry[1].append(item.status is OccurrenceStatus.DELIVERED)
    return found


def _healthy(row: object, outcomes: list[bool]) -> bool:
    return (
        getattr(row, "circuit", None) is None
        and not getattr(row, "failures_in_a_row", 0)
        and all(outcomes)
    )


async def moving_circuits(
    conn: AsyncConnection, outcomes: dict[str, tuple[uuid.UUID, list[bool]]]
) -> set[str]:
    """The keys of `outcomes` whose circuit the batch may move: all but those of healthy
    endpoints (closed, no failure in a row, every attempt a 2xx), read without a lock. A
    healthy one is left unwritten and unlocked, so that its claims never wait for its
    settles; a failure settled meanwhile by another replica counts as settled after this
    batch's successes."""
    if not outcomes:
        return set()
    columns = (_f.key, _f.circuit, _f.failures_in_a_row)
    rows = await conn.execute(sa.select(*columns).where(_f.key.in_(sorted(outcomes))))
    return {row.key for row in rows if not _healthy(row, outcomes[row.key][1])}


async def record_circuits(
    conn: AsyncConnection,
    outcomes: dict[str, tuple[uuid.UUID, list[bool]]],
    moving: set[str],
    now: datetime,
) -> list[CircuitChanged]:
    """Move the circuits of the keys `moving` (locked already, `lock_settled_keys`) by the
    batch's `outcomes`, write their events, and say what changed state."""
    if not moving:
        return []
    rows = {
        row.key: row
        for row in await conn.execute(sa.select(flow_keys).where(_f.key.in_(sorted(moving))))
    }
    settings = await endpoint_settings(conn, (outcomes[key][0] for key in rows))
    changed: list[CircuitChanged] = []
    events: list[NewEndpointEvent] = []
    for key in sorted(rows):
        endpoint_id, seen = outcomes[key]
        if endpoint_id not in settings:
            continue  # removed since the attempt started
        before = circuit_of(rows[key])
        after = circuit_after(before, seen, settings[endpoint_id], now)
        if after.circuit == before:
            continue
        values = circuit_values(after.circuit)
        if after.circuit.state is not CircuitState.OPEN and before.state is CircuitState.OPEN:
            values["backoff_until"] = None  # the probe's wait is over
        await conn.execute(flow_keys.update().where(_f.key == key).values(**values))
        tenant = tenant_of_key(key)
        for event in after.events:
            events.append(
                NewEndpointEvent(
                    endpoint_id=endpoint_id,
                    tenant=tenant,
                    kind=event.value,
                    actor=_SYSTEM,
                    detail={
                        "failures": after.circuit.failures,
                        "cooldown_seconds": after.circuit.cooldown,
                    },
                )
            )
            changed.append(
                CircuitChanged(
                    endpoint_id, tenant, event, after.circuit.failures, after.circuit.cooldown
                )
            )
    await record_endpoint_events(conn, events, now)
    await record_operator_events(
        conn,
        [
            NewOperatorEvent(
                change.tenant,
                CIRCUIT_KINDS[change.event],
                {
                    "endpoint_id": str(change.endpoint_id),
                    "consecutive_failures": change.failures,
                    "cooldown_seconds": change.cooldown,
                },
            )
            for change in changed
            if change.event in CIRCUIT_KINDS
        ],
        now,
    )
    return changed


async def lock_settled_keys(conn: AsyncConnection, keys: Sequence[str]) -> None:
    """Lock the rows of `keys` in key order before a settle writes any of them (a back-off,
    a circuit), so that settles writing several keys take them in one order."""
    if keys:
        await conn.execute(
            sa.select(_f.key)
            .where(_f.key.in_(sorted(set(keys))))
            .order_by(_f.key)
            .with_for_update()
        )
