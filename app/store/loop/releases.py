"""Claims handed back: an occurrence whose attempt never started, could not be sent, or was
cut off by a stopping replica goes back to pending, for any replica to claim again.

Invariant: only the holder of the current lease token can hand an occurrence back; an
attempt that never started is not counted, one cut off while running is counted and in
the attempt log (its outcome unknown, as after a crash).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.occurrence import AttemptOutcome, Delivery, OccurrenceStatus, Unsent
from app.store.dialects import dialect_of, transaction_now
from app.store.dialects.toolkit import by_lease_token
from app.store.loop.sql import query
from app.store.records.flow_key_holds import end_cancelled_leases, give_back_tokens
from app.store.schema.rows import attempt_id, truncate_error
from app.store.schema.tables import attempts, by_key, occurrences
from app.store.schema.types import UUID, UTCDateTime

# The error of a started attempt that a stopping replica handed back unfinished.
CUT_OFF_ERROR = (
    "the replica stopped before this attempt finished (its outcome is unknown); "
    "the occurrence was handed back"
)


class ReleaseStore:
    """Statements that hand claimed occurrences back; run inside the caller's transaction."""

    async def release(
        self,
        conn: AsyncConnection,
        deliveries: Iterable[Delivery],
        *,
        started: bool,
        unsent: Unsent | None = None,
    ) -> None:
        """Hand claimed occurrences back. One whose attempt never started is not counted,
        gives its flow key the token its claim took (`give_back_tokens`), and is due again
        at the instant it was due before its claim (its jitter, its retry instant, or a
        claim ahead's instant); one cut off while running is due now. An
        occurrence that a pause holds meanwhile stays held, with that instant to give back
        at the resume. `unsent`: they could not be sent (a local shortage); each is due
        again `unsent.retry_in` seconds from now at the soonest, and its `last_error` says
        why until it is."""
        now = await transaction_now(conn)
        items = list(deliveries)
        if not items:
            return
        if started:
            by_token = by_lease_token(items)
            await _record_cut_off(conn, by_token, now)
        else:
            await give_back_tokens(conn, items)
        soonest = now + timedelta(seconds=unsent.retry_in) if unsent is not None else now
        await conn.execute(
            _release_statement(dialect_of(conn).name),
            [
                {
                    "b_id": d.occurrence_id,
                    "b_token": d.lease_token,
                    "b_at": soonest if started or d.due_at is None else max(d.due_at, soonest),
                    "b_error": truncate_error(unsent.error) if unsent is not None else None,
                    "unsent": unsent is not None,
                    "uncounted": 0 if started else 1,
                    "now": now,
                }
                for d in items
            ],
        )
        await end_cancelled_leases(conn, items)


@cache
def _release_statement(dialect: str) -> sa.TextClause:
    return query("release", dialect).bindparams(
        sa.bindparam("b_id", type_=UUID),
        sa.bindparam("b_token", type_=UUID),
        sa.bindparam("b_at", type_=UTCDateTime()),
        sa.bindparam("b_error", type_=sa.Text()),
        sa.bindparam("unsent", type_=sa.Boolean()),
        sa.bindparam("uncounted", type_=sa.Integer()),
        sa.bindparam("now", type_=UTCDateTime()),
    )


async def _record_cut_off(
    conn: AsyncConnection, by_token: dict[uuid.UUID, list[uuid.UUID]], now: datetime
) -> None:
    """Started attempts handed back by a stopping replica go to the attempt log as
    lease_expired: their outcome is unknown, as after a crash. Each started at its claim
    (`leased_at`, which only a claim writes) and ran until now. Only at a stop."""
    rows: list[dict[str, Any]] = []
    for token, ids in by_token.items():
        held = await conn.execute(
            sa.select(
                occurrences.c.occurrence_id,
                occurrences.c.attempts,
                sa.func.coalesce(occurrences.c.leased_at, occurrences.c.updated_at).label(
                    "started_at"
                ),
                occurrences.c.lease_owner,
            ).where(
                occurrences.c.occurrence_id.in_(ids),
                occurrences.c.lease_token == token,
                by_key(occurrences.c.status) == OccurrenceStatus.PENDING,
            )
        )
        rows += [
            {
                "id": attempt_id(row.started_at),
                "occurrence_id": row.occurrence_id,
                "attempt": row.attempts,
                "started_at": row.started_at,
                "duration_ms": max(0, (now - row.started_at) // timedelta(milliseconds=1)),
                "outcome": AttemptOutcome.LEASE_EXPIRED.value,
                "status_code": None,
                "error": CUT_OFF_ERROR,
                "response_excerpt": None,
                "replica": row.lease_owner,
            }
            for row in held
            if row.attempts >= 1
        ]
    if rows:
        await conn.execute(attempts.insert().values(rows))
