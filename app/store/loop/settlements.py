"""Settlements: finished attempts recorded, guarded by the lease token.

Invariants:
- only the holder of the current lease token can settle an occurrence; a replica whose
  lease ran out (and was re-claimed elsewhere) finds its token replaced and its late settle
  matches no row, and writes no attempt;
- a settle locks in the order every waiting transaction keeps (docs/architecture.md, "Lock
  order"): the flow keys it backs off or whose circuit it moves (in key order, in one
  statement), then occurrences, then schedules. The claim holds a
  key while it writes schedules; a settle that held a schedule while waiting for that key
  would deadlock with it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.occurrence import NOT_FIRINGS, OccurrenceStatus, Origin, Settlement
from app.domain.operator_events import DeadLettered, failure_events
from app.domain.settled import Settled
from app.domain.target import endpoint_of
from app.domain.traces import trace_id
from app.store.dialects import dialect_of
from app.store.loop.circuits import (
    circuit_outcomes,
    lock_settled_keys,
    moving_circuits,
    record_circuits,
)
from app.store.loop.completion import finish_one_shots, finish_recurring
from app.store.loop.failures import lock_before_pausing, record_dead_letters
from app.store.loop.sql import query, typed
from app.store.records.flow_key_holds import back_off_keys, backing_off, end_cancelled_leases
from app.store.records.operator_events import record_operator_events
from app.store.schema.rows import attempt_id, truncate_error
from app.store.schema.types import UUID, UTCDateTime


def _attempt_row(item: Settlement, now: datetime) -> dict[str, Any]:
    """The attempt log's row of a settled attempt, with what the activity roll-up groups it
    by (its occurrence's instant, tenant and flow key) copied in."""
    started_at = item.started_at or now
    return {
        "id": attempt_id(started_at),
        "occurrence_id": item.delivery.occurrence_id,
        "attempt": item.delivery.attempt,
        "started_at": started_at,
        "duration_ms": item.duration_ms,
        "outcome": item.outcome.value,
        "status_code": item.status_code,
        "error": truncate_error(item.error),
        "response_excerpt": item.response_excerpt,
        "replica": item.replica,
        "trace_id": trace_id(item.delivery.traceparent),
        "endpoint_id": endpoint_of(item.delivery.target),
        "fire_at": item.delivery.fire_at,
        "tenant": item.delivery.tenant,
        "flow_key": item.delivery.flow_key,
        "lease_token": item.delivery.lease_token,  # the guard, not a column
    }


@cache
def _statements(dialect: str) -> tuple[sa.TextClause, sa.TextClause]:
    """An attempt that failed: due again after its backoff (named SQL `retry`), or
    dead-lettered (`dead`)."""
    params = (
        sa.bindparam("b_id", type_=UUID),
        sa.bindparam("b_token", type_=UUID),
        sa.bindparam("b_error", type_=sa.String()),
        sa.bindparam("b_delay", type_=sa.Float()),
        sa.bindparam("b_available_at", type_=UTCDateTime()),
        sa.bindparam("now", type_=UTCDateTime()),
    )
    return typed(query("retry", dialect), *params), typed(query("dead", dialect), *params)


class SettlementStore:
    """Statements that end an attempt; run inside the caller's transaction."""

    async def settle(self, conn: AsyncConnection, settlements: Sequence[Settlement]) -> Settled:
        """Record finished attempts; each update matches only while its lease token is current.
        Each current one is also written to the attempt log, one insert for the batch.
        Returns the schedules the batch's dead letters paused (`record_dead_letters`) and
        the endpoints whose circuit its attempts moved (`record_circuits`)."""
        dialect = dialect_of(conn)
        retry, dead_lettered = _statements(dialect.name)
        now = await dialect.bound_now(conn)
        # Flow keys first, then occurrences, then schedules (the module's invariant); the
        # keys a back-off or a circuit writes in one pass, in key order.
        outcomes = circuit_outcomes(settlements)
        moving = await moving_circuits(conn, outcomes)
        await lock_settled_keys(conn, [*moving, *backing_off(settlements)])
        await back_off_keys(conn, settlements, now)
        circuits = await record_circuits(conn, outcomes, moving, now)
        await lock_before_pausing(conn, settlements)
        await dialect.record_attempts(conn, [_attempt_row(item, now) for item in settlements])
        delivered = []
        retries: list[dict[str, Any]] = []
        dead: list[dict[str, Any]] = []
        one_shots: set[uuid.UUID] = set()
        lasts: set[uuid.UUID] = set()
        for item in settlements:
            d = item.delivery
            if d.one_shot:
                one_shots.add(d.schedule_id)
            elif d.last:
                lasts.add(d.schedule_id)
            if item.status is OccurrenceStatus.DELIVERED:
                delivered.append(d)
                continue
            row: dict[str, Any] = {
                "b_id": d.occurrence_id,
                "b_token": d.lease_token,
                "b_error": truncate_error(item.error),
                "now": now,
            }
            if item.status is OccurrenceStatus.DEAD_LETTERED:
                dead.append(row)
            else:
                assert item.retry_in is not None
                row["b_delay"] = item.retry_in
                row["b_available_at"] = now + timedelta(seconds=item.retry_in)
                retries.append(row)
        # Deliveries count as earlier than the batch's dead letters: they restart the
        # schedules' counts, the dead letters then add to them.
        if delivered:
            await dialect.mark_delivered(conn, delivered, now)
        if retries:
            await conn.execute(retry, retries)
        if dead:
            await conn.execute(dead_lettered, dead)
        await end_cancelled_leases(conn, [item.delivery for item in settlements])
        await finish_one_shots(conn, one_shots, now)
        await finish_recurring(conn, lasts, now)
        paused = await record_dead_letters(
            conn,
            [
                (item.delivery.schedule_id, item.delivery.occurrence_id)
                for item in settlements
                if item.status is OccurrenceStatus.DEAD_LETTERED
                and item.delivery.origin not in NOT_FIRINGS
            ],
            now,
        )
        dead_letters = [
            DeadLettered(
                d.tenant, d.occurrence_id, d.schedule_id, d.event_type, d.attempt, item.error
            )
            for item in settlements
            if item.status is OccurrenceStatus.DEAD_LETTERED
            and (d := item.delivery).origin is not Origin.CALLBACK
        ]
        await record_operator_events(conn, failure_events(dead_letters, paused), now)
        return Settled(paused, circuits)
