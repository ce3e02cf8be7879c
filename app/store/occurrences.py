"""Occurrence persistence: claim under a lease, settle guarded by the lease token, dead letters.

Invariant: only the holder of the current lease token can settle or release an
occurrence; a replica whose lease ran out (and was re-claimed elsewhere) finds its
token replaced and its late settle matches no row.
"""

from __future__ import annotations

import random
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.ids import occurrence_id
from app.domain.occurrence import (
    DeadLetter,
    Delivery,
    Occurrence,
    OccurrenceStatus,
    Origin,
    Settlement,
)
from app.domain.schedule import ScheduleStatus
from app.domain.target import Target
from app.domain.trigger import Trigger, is_recurring, next_after_firing
from app.store import codec
from app.store.clock import transaction_now
from app.store.inserts import insert_ignoring_conflicts
from app.store.sql import query
from app.store.tables import UTCDateTime, occurrences, schedules

MAX_ERROR_LENGTH = 2000
LEASE_EXPIRED_ERROR = (
    "the lease of the last attempt expired with no result recorded "
    "(its replica stopped or stalled); the attempt budget is spent"
)


@cache
def _claim_statement(dialect: str) -> sa.TextualSelect:
    return (
        query("claim", dialect)
        .bindparams(
            sa.bindparam("token", type_=sa.Uuid()),
            *(
                sa.bindparam(name, type_=UTCDateTime())
                for name in ("now", "lease_until")
                if dialect == "sqlite"
            ),
        )
        .columns(
            occurrence_id=sa.Uuid(),
            schedule_id=sa.Uuid(),
            fire_at=UTCDateTime(),
            attempts=sa.Integer(),
            origin=sa.String(),
            claimed_at=UTCDateTime(),
            event_type=sa.String(),
            max_attempts=sa.Integer(),
            jitter_seconds=sa.Float(),
            body=sa.Text(),
            target=sa.Text(),
            trigger=sa.Text(),
        )
    )


def _now(dialect: str) -> sa.ColumnElement[datetime]:
    """The transaction's instant inside a statement: now() on PostgreSQL, bound on SQLite."""
    if dialect == "postgresql":
        return sa.func.now(type_=UTCDateTime())
    return sa.bindparam("now", type_=UTCDateTime())


def _among(column: sa.ColumnElement[Any], name: str, dialect: str) -> sa.ColumnElement[bool]:
    """`column` is one of the list bound as `name`: one array parameter on PostgreSQL
    (no per-element bind rendering), an expanding IN on SQLite."""
    if dialect == "postgresql":
        return column == sa.any_(sa.bindparam(name, type_=postgresql.ARRAY(sa.Uuid())))
    return column.in_(sa.bindparam(name, expanding=True, type_=sa.Uuid()))


@dataclass(frozen=True)
class _SettleStatements:
    """The settle path's statements, built once per dialect and executed many times."""

    delivered: sa.Update
    retry: sa.Update
    dead: sa.Update
    finish_one_shots: sa.Update


@cache
def _settle_statements(dialect: str) -> _SettleStatements:
    now = _now(dialect)
    guard = (
        (occurrences.c.occurrence_id == sa.bindparam("b_id", type_=sa.Uuid()))
        & (occurrences.c.lease_token == sa.bindparam("b_token", type_=sa.Uuid()))
        & (occurrences.c.status == OccurrenceStatus.PENDING)
    )
    if dialect == "postgresql":
        retry_at: sa.ColumnElement[datetime] = now + sa.func.make_interval(
            0, 0, 0, 0, 0, 0, sa.bindparam("b_delay", type_=sa.Float())
        )
    else:
        retry_at = sa.bindparam("b_available_at", type_=UTCDateTime())
    o = occurrences.alias("o")
    nothing_pending = ~sa.exists().where(
        o.c.schedule_id == schedules.c.id, o.c.status == OccurrenceStatus.PENDING
    )
    dead_lettered = sa.exists().where(
        o.c.schedule_id == schedules.c.id,
        o.c.origin == Origin.SCHEDULE,
        o.c.status == OccurrenceStatus.DEAD_LETTERED,
    )
    return _SettleStatements(
        delivered=occurrences.update()
        .where(
            _among(occurrences.c.occurrence_id, "ids", dialect),
            occurrences.c.lease_token == sa.bindparam("token", type_=sa.Uuid()),
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
        finish_one_shots=schedules.update()
        .where(
            _among(schedules.c.id, "schedule_ids", dialect),
            schedules.c.status.in_([ScheduleStatus.PENDING, ScheduleStatus.FAILED]),
            nothing_pending,
        )
        .values(
            status=sa.case((dead_lettered, ScheduleStatus.FAILED), else_=ScheduleStatus.COMPLETED),
            updated_at=now,
        ),
    )


def _truncate(error: str | None) -> str | None:
    if error is None or len(error) <= MAX_ERROR_LENGTH:
        return error
    return error[: MAX_ERROR_LENGTH - 1] + "…"


def to_occurrence(row: Row[Any]) -> Occurrence:
    return Occurrence(
        occurrence_id=row.occurrence_id,
        schedule_id=row.schedule_id,
        fire_at=row.fire_at,
        available_at=row.available_at,
        status=OccurrenceStatus(row.status),
        origin=Origin(row.origin),
        attempts=row.attempts,
        last_error=row.last_error,
        delivered_at=row.delivered_at,
        dead_lettered_at=row.dead_lettered_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def new_occurrence(
    schedule_id: uuid.UUID,
    fire_at: datetime,
    now: datetime,
    origin: Origin,
    *,
    delay: float = 0.0,
) -> dict[str, Any]:
    """The row of a not-yet-fired occurrence; its id is derived, so inserting twice is a no-op.
    `delay` is its jitter: it becomes claimable that much after its nominal instant."""
    return {
        "occurrence_id": occurrence_id(schedule_id, fire_at),
        "schedule_id": schedule_id,
        "fire_at": fire_at,
        "available_at": fire_at + timedelta(seconds=delay) if delay else fire_at,
        "status": OccurrenceStatus.PENDING,
        "origin": origin,
        "attempts": 0,
        "created_at": now,
        "updated_at": now,
    }


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    schedule_id: uuid.UUID | None = None
    event_type: str | None = None


class OccurrenceStore:
    """Statements on `occurrences`; every method runs inside the caller's transaction."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()  # jitter draws

    # -- the delivery loop -------------------------------------------------------------

    async def claim_due(
        self, conn: AsyncConnection, *, limit: int, lease: float, owner: str
    ) -> list[Delivery]:
        """Lease due occurrences and materialize the next tick of each recurring schedule.

        The next tick is written in this same transaction, so a recurring schedule always
        has its future occurrence however long the current one keeps retrying.
        """
        token = uuid.uuid4()
        dialect = conn.dialect.name
        now = datetime.now(UTC)  # used by SQLite only; PostgreSQL reads now() itself
        params = {
            "limit": limit,
            "lease": lease,
            "token": token,
            "owner": owner,
            "now": now,
            "lease_until": now + timedelta(seconds=lease),
        }
        claimed = (await conn.execute(_claim_statement(dialect), params)).all()
        if not claimed:
            return []
        now = claimed[0].claimed_at
        first_fires: dict[uuid.UUID, int] = defaultdict(int)
        next_rows: list[dict[str, Any]] = []
        deliveries: list[Delivery] = []
        exhausted: list[uuid.UUID] = []
        exhausted_one_shots: set[uuid.UUID] = set()
        for row in sorted(claimed, key=lambda r: (r.fire_at, r.occurrence_id)):
            trigger: Trigger = codec.trigger(row.trigger)
            if row.attempts > row.max_attempts:
                # Its last attempt's lease ran out with no result: the budget is spent, so
                # it is dead-lettered rather than retried forever (a replica that crashes on
                # it every time must not keep the fleet busy).
                exhausted.append(row.occurrence_id)
                if not is_recurring(trigger):
                    exhausted_one_shots.add(row.schedule_id)
                continue
            if row.attempts == 1:
                first_fires[row.schedule_id] += 1
                if row.origin == Origin.SCHEDULE and is_recurring(trigger):
                    upcoming = next_after_firing(trigger, row.fire_at, now)
                    if upcoming is not None:
                        delay = self._rng.uniform(0, row.jitter_seconds or 0.0)
                        next_rows.append(
                            new_occurrence(
                                row.schedule_id, upcoming, now, Origin.SCHEDULE, delay=delay
                            )
                        )
            target: Target = codec.target(row.target)
            deliveries.append(
                Delivery(
                    occurrence_id=row.occurrence_id,
                    schedule_id=row.schedule_id,
                    fire_at=row.fire_at,
                    attempt=row.attempts,
                    max_attempts=row.max_attempts,
                    lease_token=token,
                    event_type=row.event_type,
                    body=(row.body or "null").encode(),
                    target=target,
                    one_shot=not is_recurring(trigger),
                )
            )
        await insert_ignoring_conflicts(conn, occurrences, next_rows, "occurrence_id")
        if exhausted:
            await self._dead_letter_expired(conn, token, exhausted, now)
            await self.finish_one_shots(conn, exhausted_one_shots, now)
        if dialect != "postgresql":  # PostgreSQL's claim statement counts them itself
            await self._count_first_fires(conn, first_fires, now)
        return deliveries

    async def _count_first_fires(
        self, conn: AsyncConnection, first_fires: dict[uuid.UUID, int], now: datetime
    ) -> None:
        by_count: dict[int, list[uuid.UUID]] = defaultdict(list)
        for schedule_id, count in first_fires.items():
            by_count[count].append(schedule_id)
        for count, ids in by_count.items():
            await conn.execute(
                schedules.update()
                .where(schedules.c.id.in_(ids))
                .values(fire_count=schedules.c.fire_count + count, last_fired_at=now)
            )

    async def _dead_letter_expired(
        self,
        conn: AsyncConnection,
        token: uuid.UUID,
        exhausted: list[uuid.UUID],
        now: datetime,
    ) -> None:
        await conn.execute(
            occurrences.update()
            .where(
                occurrences.c.occurrence_id.in_(exhausted),
                occurrences.c.lease_token == token,
            )
            .values(
                status=OccurrenceStatus.DEAD_LETTERED,
                attempts=occurrences.c.attempts - 1,
                dead_lettered_at=now,
                available_at=None,
                lease_token=None,
                last_error=LEASE_EXPIRED_ERROR,
                updated_at=now,
            )
        )

    async def settle(self, conn: AsyncConnection, settlements: Sequence[Settlement]) -> None:
        """Record finished attempts; each update matches only while its lease token is current."""
        dialect = conn.dialect.name
        statements = _settle_statements(dialect)
        now = datetime.now(UTC)  # bound on SQLite only; PostgreSQL uses now()
        delivered: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
        retries: list[dict[str, Any]] = []
        dead: list[dict[str, Any]] = []
        one_shots: set[uuid.UUID] = set()
        for item in settlements:
            d = item.delivery
            if d.one_shot:
                one_shots.add(d.schedule_id)
            if item.status is OccurrenceStatus.DELIVERED:
                delivered[d.lease_token].append(d.occurrence_id)
                continue
            row: dict[str, Any] = {
                "b_id": d.occurrence_id,
                "b_token": d.lease_token,
                "b_error": _truncate(item.error),
                "now": now,
            }
            if item.status is OccurrenceStatus.DEAD_LETTERED:
                dead.append(row)
            else:
                assert item.retry_in is not None
                row["b_delay"] = item.retry_in
                row["b_available_at"] = now + timedelta(seconds=item.retry_in)
                retries.append(row)
        for token, ids in delivered.items():
            await conn.execute(statements.delivered, {"ids": ids, "token": token, "now": now})
        if retries:
            await conn.execute(statements.retry, retries)
        if dead:
            await conn.execute(statements.dead, dead)
        if one_shots:
            await conn.execute(
                statements.finish_one_shots, {"schedule_ids": list(one_shots), "now": now}
            )

    async def release(
        self, conn: AsyncConnection, deliveries: Iterable[Delivery], *, started: bool
    ) -> None:
        """Hand claimed occurrences back, due now; an attempt that never started is not counted."""
        now = await transaction_now(conn)
        by_token: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
        for d in deliveries:
            by_token[d.lease_token].append(d.occurrence_id)
        attempts = occurrences.c.attempts if started else occurrences.c.attempts - 1
        for token, ids in by_token.items():
            await conn.execute(
                occurrences.update()
                .where(
                    occurrences.c.occurrence_id.in_(ids),
                    occurrences.c.lease_token == token,
                    occurrences.c.status == OccurrenceStatus.PENDING,
                )
                .values(available_at=now, attempts=attempts, lease_token=None, updated_at=now)
            )

    async def finish_one_shots(
        self, conn: AsyncConnection, schedule_ids: Iterable[uuid.UUID], now: datetime
    ) -> None:
        """A one-shot schedule with nothing left pending is completed, or failed if its firing
        was dead-lettered. A replay that later delivers it turns failed into completed."""
        ids = list(schedule_ids)
        if ids:
            statement = _settle_statements(conn.dialect.name).finish_one_shots
            await conn.execute(statement, {"schedule_ids": ids, "now": now})

    # -- schedule lifecycle -----------------------------------------------------------

    async def insert(self, conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
        await insert_ignoring_conflicts(conn, occurrences, rows, "occurrence_id")

    async def lock_pending(self, conn: AsyncConnection, schedule_id: uuid.UUID) -> None:
        """Lock a schedule's pending occurrences before its row: the claim locks in this
        order too, so the two cannot deadlock."""
        await conn.execute(
            sa.select(occurrences.c.occurrence_id)
            .where(
                occurrences.c.schedule_id == schedule_id,
                occurrences.c.status == OccurrenceStatus.PENDING,
            )
            .with_for_update()
        )

    async def drop_unfired_cadence(self, conn: AsyncConnection, schedule_id: uuid.UUID) -> None:
        """Remove the schedule's own future occurrences that no attempt has touched yet."""
        await conn.execute(
            occurrences.delete().where(
                occurrences.c.schedule_id == schedule_id,
                occurrences.c.status == OccurrenceStatus.PENDING,
                occurrences.c.origin == Origin.SCHEDULE,
                occurrences.c.attempts == 0,
            )
        )

    async def hold(self, conn: AsyncConnection, schedule_id: uuid.UUID, now: datetime) -> None:
        """Make the schedule's pending occurrences unclaimable (paused)."""
        await conn.execute(
            occurrences.update()
            .where(
                occurrences.c.schedule_id == schedule_id,
                occurrences.c.status == OccurrenceStatus.PENDING,
            )
            .values(available_at=None, updated_at=now)
        )

    async def unhold(self, conn: AsyncConnection, schedule_id: uuid.UUID, now: datetime) -> None:
        await conn.execute(
            occurrences.update()
            .where(
                occurrences.c.schedule_id == schedule_id,
                occurrences.c.status == OccurrenceStatus.PENDING,
                occurrences.c.available_at.is_(None),
            )
            .values(available_at=now, updated_at=now)
        )

    async def cancel_pending(
        self, conn: AsyncConnection, schedule_id: uuid.UUID, now: datetime
    ) -> None:
        await conn.execute(
            occurrences.update()
            .where(
                occurrences.c.schedule_id == schedule_id,
                occurrences.c.status == OccurrenceStatus.PENDING,
            )
            .values(
                status=OccurrenceStatus.CANCELLED,
                available_at=None,
                lease_token=None,
                updated_at=now,
            )
        )

    async def history(
        self,
        conn: AsyncConnection,
        schedule_id: uuid.UUID,
        *,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None,
        status: OccurrenceStatus | None = None,
    ) -> list[Occurrence]:
        """A schedule's occurrences, latest fire instant first."""
        statement = sa.select(occurrences).where(occurrences.c.schedule_id == schedule_id)
        if status is not None:
            statement = statement.where(occurrences.c.status == status)
        if after is not None:
            statement = statement.where(
                sa.tuple_(occurrences.c.fire_at, occurrences.c.occurrence_id)
                < sa.tuple_(sa.literal(after[0], UTCDateTime()), sa.literal(after[1], sa.Uuid()))
            )
        statement = statement.order_by(
            occurrences.c.fire_at.desc(), occurrences.c.occurrence_id.desc()
        ).limit(limit)
        return [to_occurrence(row) for row in await conn.execute(statement)]

    # -- dead letters -----------------------------------------------------------------

    def _dead_letters(self) -> sa.Select[Any]:
        return sa.select(
            occurrences,
            schedules.c.event_type,
            schedules.c.payload,
            schedules.c.target,
        ).join(schedules, schedules.c.id == occurrences.c.schedule_id)

    @staticmethod
    def _to_dead_letter(row: Row[Any]) -> DeadLetter:
        return DeadLetter(
            occurrence=to_occurrence(row),
            event_type=row.event_type,
            payload=row.payload,
            target=codec.target(row.target),
        )

    @staticmethod
    def _filtered(statement: Any, where: DeadLetterFilter) -> Any:
        if where.schedule_id is not None:
            statement = statement.where(occurrences.c.schedule_id == where.schedule_id)
        if where.event_type is not None:
            statement = statement.where(
                occurrences.c.schedule_id.in_(
                    sa.select(schedules.c.id).where(schedules.c.event_type == where.event_type)
                )
            )
        return statement

    async def list_dead_letters(
        self,
        conn: AsyncConnection,
        where: DeadLetterFilter,
        *,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None,
    ) -> list[DeadLetter]:
        """Dead letters, most recently dead-lettered first."""
        statement = self._filtered(
            self._dead_letters().where(occurrences.c.status == OccurrenceStatus.DEAD_LETTERED),
            where,
        )
        if after is not None:
            statement = statement.where(
                sa.tuple_(occurrences.c.dead_lettered_at, occurrences.c.occurrence_id)
                < sa.tuple_(sa.literal(after[0], UTCDateTime()), sa.literal(after[1], sa.Uuid()))
            )
        statement = statement.order_by(
            occurrences.c.dead_lettered_at.desc(), occurrences.c.occurrence_id.desc()
        ).limit(limit)
        return [self._to_dead_letter(row) for row in await conn.execute(statement)]

    async def get_with_definition(
        self, conn: AsyncConnection, id_: uuid.UUID, *, for_update: bool = False
    ) -> DeadLetter | None:
        statement = self._dead_letters().where(occurrences.c.occurrence_id == id_)
        if for_update:
            statement = statement.with_for_update(of=occurrences)
        row = (await conn.execute(statement)).first()
        return None if row is None else self._to_dead_letter(row)

    async def replay(
        self,
        conn: AsyncConnection,
        now: datetime,
        *,
        ids: Sequence[uuid.UUID] | None = None,
        where: DeadLetterFilter | None = None,
    ) -> list[uuid.UUID]:
        """Dead letters back to pending, attempts reset, due now (held if the schedule is
        paused). The occurrence id stays, so consumers still dedupe on it."""
        paused = sa.exists().where(
            schedules.c.id == occurrences.c.schedule_id,
            schedules.c.status == ScheduleStatus.PAUSED,
        )
        statement = occurrences.update().where(
            occurrences.c.status == OccurrenceStatus.DEAD_LETTERED
        )
        if ids is not None:
            statement = statement.where(occurrences.c.occurrence_id.in_(list(ids)))
        if where is not None:
            statement = self._filtered(statement, where)
        statement = statement.values(
            status=OccurrenceStatus.PENDING,
            attempts=0,
            available_at=sa.case((paused, sa.null()), else_=sa.literal(now, UTCDateTime())),
            dead_lettered_at=None,
            lease_token=None,
            updated_at=now,
        ).returning(occurrences.c.occurrence_id)
        return [row.occurrence_id for row in await conn.execute(statement)]

    async def discard(self, conn: AsyncConnection, id_: uuid.UUID, now: datetime) -> bool:
        result = await conn.execute(
            occurrences.update()
            .where(
                occurrences.c.occurrence_id == id_,
                occurrences.c.status == OccurrenceStatus.DEAD_LETTERED,
            )
            .values(status=OccurrenceStatus.CANCELLED, updated_at=now)
            .returning(occurrences.c.occurrence_id)
        )
        return result.first() is not None
