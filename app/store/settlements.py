"""Settlements: finished attempts recorded, guarded by the lease token; claims handed back.

Invariant: only the holder of the current lease token can settle or release an
occurrence; a replica whose lease ran out (and was re-claimed elsewhere) finds its
token replaced and its late settle matches no row.
"""

from __future__ import annotations

import random
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.ids import uuid7
from app.domain.occurrence import (
    AttemptOutcome,
    Delivery,
    OccurrenceStatus,
    Origin,
    Settlement,
    Unsent,
)
from app.domain.schedule import (
    SYSTEM_ACTOR,
    EventKind,
    ScheduleStatus,
)
from app.store.clock import transaction_now
from app.store.dialects import dialect_of
from app.store.dialects.base import Dialect
from app.store.events import EventStore, NewEvent, event_id
from app.store.pausing import count_failures, lock_before_pausing
from app.store.rows import truncate_error
from app.store.tables import UUID, UTCDateTime, attempts, occurrences, schedule_events, schedules

# The error of a started attempt that a stopping replica handed back unfinished.
CUT_OFF_ERROR = (
    "the replica stopped before this attempt finished (its outcome is unknown); "
    "the occurrence was handed back"
)


def attempt_id(started_at: datetime) -> uuid.UUID:
    """An attempt's id: UUIDv7 of its start, so ids sort in the order attempts started."""
    return uuid7(started_at, random.getrandbits(74))


def _attempt_row(item: Settlement, now: datetime) -> dict[str, Any]:
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
        "lease_token": item.delivery.lease_token,  # the guard, not a column
    }


@dataclass(frozen=True)
class _SettleStatements:
    """The settle path's statements, built once per dialect and executed many times."""

    delivered: sa.Update
    retry: sa.Update
    dead: sa.Update
    finishing_one_shots: sa.Select[Any]
    finishing_recurring: sa.Select[Any]
    finish: sa.Update
    # With writable CTEs (PostgreSQL): the delivered update that also restarts each
    # delivered schedule's count of dead letters in a row, and each finish (the locked read,
    # the update by key and the events) as one statement.
    delivered_resetting: sa.Update | None = None
    finish_one_shots: sa.Insert | None = None
    finish_recurring: sa.Insert | None = None


def _resetting(delivered: sa.Update) -> sa.Update:
    """`delivered`, then a restart from 0 of the failure count of each schedule it delivered
    (only those counting: most schedules never fail, and are not written)."""
    done = delivered.returning(occurrences.c.schedule_id).cte("delivered")
    return (
        schedules.update()
        .where(
            schedules.c.id.in_(sa.select(done.c.schedule_id)),
            schedules.c.consecutive_failures > 0,
        )
        .values(consecutive_failures=0)
    )


def _finishing_with_events(finishing: sa.Select[Any], now: sa.ColumnElement[Any]) -> sa.Insert:
    """The schedules `finishing` reads (and locks) set to their new status, and each one's
    event, in one statement. Event ids come as an array beside `schedule_ids`, one for each
    candidate (those that do not finish leave theirs unused)."""
    found = finishing.cte("finishing")
    changed = (
        schedules.update()
        .where(schedules.c.id == found.c.id)
        .values(status=found.c.status, updated_at=now)
        .returning(schedules.c.id, found.c.version, found.c.status)
        .cte("finished")
    )
    ids = (
        sa.func.unnest(
            sa.bindparam("schedule_ids", type_=postgresql.ARRAY(sa.Uuid())),
            sa.bindparam("event_ids", type_=postgresql.ARRAY(sa.Uuid())),
        )
        .table_valued("schedule_id", "event_id")
        .render_derived(name="e")
    )
    # Finishing is no change a client makes: the version stays.
    rows = sa.select(
        ids.c.event_id,
        changed.c.id,
        changed.c.status,
        changed.c.version,
        sa.bindparam("actor", type_=sa.String()),
        now,
    ).select_from(changed.join(ids, ids.c.schedule_id == changed.c.id))
    return schedule_events.insert().from_select(
        ["id", "schedule_id", "kind", "version", "actor", "at"], rows
    )


@cache
def _settle_statements(dialect: Dialect) -> _SettleStatements:
    now = dialect.now()
    guard = (
        (occurrences.c.occurrence_id == sa.bindparam("b_id", type_=UUID))
        & (occurrences.c.lease_token == sa.bindparam("b_token", type_=UUID))
        & (occurrences.c.status == OccurrenceStatus.PENDING)
    )
    retry_at = dialect.retry_at()
    o = occurrences.alias("o")
    nothing_pending = ~sa.exists().where(
        o.c.schedule_id == schedules.c.id, o.c.status == OccurrenceStatus.PENDING
    )
    dead_lettered = sa.exists().where(
        o.c.schedule_id == schedules.c.id,
        o.c.origin == Origin.SCHEDULE,
        o.c.status == OccurrenceStatus.DEAD_LETTERED,
    )
    statements = _SettleStatements(
        delivered=occurrences.update()
        .where(
            dialect.among(occurrences.c.occurrence_id, "ids"),
            occurrences.c.lease_token == sa.bindparam("token", type_=UUID),
            occurrences.c.status == OccurrenceStatus.PENDING,
        )
        .values(
            status=OccurrenceStatus.DELIVERED,
            delivered_at=now,
            available_at=None,
            updated_at=now,
            lease_token=None,
            last_error=None,
        ),
        # A retry due while the schedule was paused stays set; the claim skips paused
        # schedules, so it waits for resume.
        retry=occurrences.update()
        .where(guard)
        .values(
            available_at=retry_at,
            last_error=sa.bindparam("b_error"),
            lease_token=None,
            updated_at=now,
        ),
        dead=occurrences.update()
        .where(guard)
        .values(
            status=OccurrenceStatus.DEAD_LETTERED,
            dead_lettered_at=now,
            available_at=None,
            last_error=sa.bindparam("b_error"),
            lease_token=None,
            updated_at=now,
        ),
        # The schedules a finish changes, read and locked under the finish's guard, then
        # changed by key (`finish`): every database then knows which rows changed, so
        # each gets its event, MySQL too (no UPDATE ... RETURNING there). Under READ
        # COMMITTED the update by key applies what the locked read decided, rather than
        # a second look at the guard that could see another transaction's commit and
        # disagree with the events.
        finishing_one_shots=sa.select(
            schedules.c.id,
            schedules.c.version,
            sa.case((dead_lettered, ScheduleStatus.FAILED), else_=ScheduleStatus.COMPLETED).label(
                "status"
            ),
        )
        .where(
            dialect.among(schedules.c.id, "schedule_ids"),
            schedules.c.status.in_([ScheduleStatus.PENDING, ScheduleStatus.FAILED]),
            nothing_pending,
            # A failed one that stays failed is no change.
            (schedules.c.status == ScheduleStatus.PENDING) | ~dead_lettered,
        )
        .with_for_update(of=schedules),
        # A recurring schedule has a pending cadence occurrence until its bounds are spent;
        # with nothing left pending it is complete (a dead letter does not fail it).
        finishing_recurring=sa.select(
            schedules.c.id,
            schedules.c.version,
            sa.literal(ScheduleStatus.COMPLETED.value, sa.String()).label("status"),
        )
        .where(
            dialect.among(schedules.c.id, "schedule_ids"),
            schedules.c.status == ScheduleStatus.PENDING,
            nothing_pending,
        )
        .with_for_update(of=schedules),
        finish=schedules.update()
        .where(dialect.among(schedules.c.id, "schedule_ids"))
        .values(status=sa.bindparam("b_status", type_=sa.String()), updated_at=now),
    )
    if not dialect.writable_ctes:
        return statements
    return replace(
        statements,
        delivered_resetting=_resetting(statements.delivered),
        finish_one_shots=_finishing_with_events(statements.finishing_one_shots, now),
        finish_recurring=_finishing_with_events(statements.finishing_recurring, now),
    )


class SettlementStore:
    """Statements that end or hand back an attempt; run inside the caller's transaction."""

    async def settle(self, conn: AsyncConnection, settlements: Sequence[Settlement]) -> None:
        """Record finished attempts; each update matches only while its lease token is current.
        Each current one is also written to the attempt log, one insert for the batch."""
        dialect = dialect_of(conn)
        statements = _settle_statements(dialect)
        now = await dialect.bound_now(conn)
        await lock_before_pausing(conn, settlements)
        await dialect.record_attempts(conn, [_attempt_row(item, now) for item in settlements])
        delivered: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
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
                delivered[d.lease_token].append(d.occurrence_id)
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
        delivering = statements.delivered_resetting
        restarted = delivering is not None
        if delivering is None:
            delivering = statements.delivered
        for token, ids in delivered.items():
            await conn.execute(delivering, {"ids": ids, "token": token, "now": now})
        if retries:
            await conn.execute(statements.retry, retries)
        if dead:
            await conn.execute(statements.dead, dead)
        await finish_one_shots(conn, one_shots, now)
        await finish_recurring(conn, lasts, now)
        # Deliveries count as earlier than the batch's dead letters: a delivered update that
        # restarted the counts already leaves only the dead letters to add.
        await count_failures(conn, settlements, now, deliveries_counted=restarted)

    async def release(
        self,
        conn: AsyncConnection,
        deliveries: Iterable[Delivery],
        *,
        started: bool,
        unsent: Unsent | None = None,
    ) -> None:
        """Hand claimed occurrences back. One whose attempt never started is not counted and
        is due again at the instant it was due before its claim (its jitter, its retry
        instant, or a claim ahead's instant); one cut off while running is due now. An
        occurrence that a pause holds meanwhile stays held, with that instant to give back
        at the resume. `unsent`: they could not be sent (a local shortage); each is due
        again `unsent.retry_in` seconds from now at the soonest, and its `last_error` says
        why until it is."""
        now = await transaction_now(conn)
        items = list(deliveries)
        if not items:
            return
        if started:
            by_token: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
            for d in items:
                by_token[d.lease_token].append(d.occurrence_id)
            await _record_cut_off(conn, by_token, now)
        soonest = now + timedelta(seconds=unsent.retry_in) if unsent is not None else now
        await conn.execute(
            _release_statement(started, unsent is not None),
            [
                {
                    "b_id": d.occurrence_id,
                    "b_token": d.lease_token,
                    "b_at": soonest if started or d.due_at is None else max(d.due_at, soonest),
                    "b_error": truncate_error(unsent.error) if unsent is not None else None,
                    "now": now,
                }
                for d in items
            ],
        )


@cache
def _release_statement(started: bool, unsent: bool) -> sa.Update:
    held = occurrences.c.available_at.is_(None)
    due = sa.bindparam("b_at", type_=UTCDateTime())
    error = sa.bindparam("b_error", type_=sa.Text()) if unsent else occurrences.c.last_error
    return (
        occurrences.update()
        .where(
            occurrences.c.occurrence_id == sa.bindparam("b_id", type_=UUID),
            occurrences.c.lease_token == sa.bindparam("b_token", type_=UUID),
            occurrences.c.status == OccurrenceStatus.PENDING,
        )
        # In this order: MySQL assigns left to right, each assignment seeing the ones
        # before it, so whether it is held is read before `available_at` changes.
        .ordered_values(
            (occurrences.c.held_until, sa.case((held, due), else_=occurrences.c.held_until)),
            (occurrences.c.available_at, sa.case((held, sa.null()), else_=due)),
            (
                occurrences.c.attempts,
                occurrences.c.attempts if started else occurrences.c.attempts - 1,
            ),
            (occurrences.c.lease_ahead, False),
            (occurrences.c.last_error, error),
            (occurrences.c.lease_token, None),
            (occurrences.c.updated_at, sa.bindparam("now", type_=UTCDateTime())),
        )
    )


async def _finish(
    conn: AsyncConnection,
    statement: sa.Select[Any],
    schedule_ids: Iterable[uuid.UUID],
    now: datetime,
    actor: str | None,
    in_one: sa.Insert | None,
) -> None:
    ids = list(schedule_ids)
    if not ids:
        return
    if in_one is not None:
        event_ids = [event_id(now) for _ in ids]
        params = {"schedule_ids": ids, "event_ids": event_ids, "actor": actor, "now": now}
        await conn.execute(in_one, params)
        return
    statements = _settle_statements(dialect_of(conn))
    finishing = (await conn.execute(statement, {"schedule_ids": ids})).all()
    by_status: dict[str, list[uuid.UUID]] = defaultdict(list)
    for row in finishing:
        by_status[row.status].append(row.id)
    for status, changed in by_status.items():
        await conn.execute(
            statements.finish, {"schedule_ids": changed, "b_status": status, "now": now}
        )
    # Finishing is no change a client makes: the version stays.
    await EventStore().record(
        conn,
        [
            NewEvent(row.id, EventKind(row.status), version=row.version, actor=actor)
            for row in finishing
        ],
        now,
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
                occurrences.c.status == OccurrenceStatus.PENDING,
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


async def finish_one_shots(
    conn: AsyncConnection,
    schedule_ids: Iterable[uuid.UUID],
    now: datetime,
    actor: str | None = SYSTEM_ACTOR,
) -> None:
    """A one-shot schedule with nothing left pending is completed, or failed if its firing
    was dead-lettered. A replay that later delivers it turns failed into completed. Each
    schedule that changes gets its `completed` or `failed` event, by `actor`."""
    statements = _settle_statements(dialect_of(conn))
    await _finish(
        conn, statements.finishing_one_shots, schedule_ids, now, actor, statements.finish_one_shots
    )


async def finish_recurring(
    conn: AsyncConnection,
    schedule_ids: Iterable[uuid.UUID],
    now: datetime,
    actor: str | None = SYSTEM_ACTOR,
) -> None:
    """A recurring schedule whose bounds are spent and that has nothing left pending is
    completed (with its `completed` event, by `actor`)."""
    statements = _settle_statements(dialect_of(conn))
    await _finish(
        conn, statements.finishing_recurring, schedule_ids, now, actor, statements.finish_recurring
    )
