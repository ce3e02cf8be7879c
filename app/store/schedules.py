"""Schedule persistence: insert with the first occurrence, snapshots, filtered keyset lists."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.errors import ConflictError
from app.domain.occurrence import OccurrenceStatus, Origin
from app.domain.schedule import Schedule, ScheduleDraft, ScheduleStatus
from app.store import codec
from app.store.inserts import insert_ignoring_conflicts
from app.store.rows import new_occurrence, rules_of_row
from app.store.tables import occurrences, schedules


@dataclass(frozen=True, slots=True)
class ScheduleFilter:
    status: ScheduleStatus | None = None
    event_type: str | None = None
    target_type: str | None = None
    name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


def _derived() -> list[Any]:
    o = occurrences.alias("o")
    pending = (
        sa.select(o.c.fire_at, o.c.occurrence_id)
        .where(o.c.schedule_id == schedules.c.id, o.c.status == OccurrenceStatus.PENDING)
        .order_by(o.c.fire_at)
        .limit(1)
        .correlate(schedules)
    )
    attempted = (
        sa.select(o.c.attempts, o.c.last_error)
        .where(o.c.schedule_id == schedules.c.id, o.c.attempts > 0)
        .order_by(o.c.fire_at.desc())
        .limit(1)
        .correlate(schedules)
    )
    return [
        pending.with_only_columns(o.c.fire_at).scalar_subquery().label("next_fire_at"),
        pending.with_only_columns(o.c.occurrence_id).scalar_subquery().label("next_occurrence_id"),
        attempted.with_only_columns(o.c.attempts).scalar_subquery().label("last_attempts"),
        attempted.with_only_columns(o.c.last_error).scalar_subquery().label("last_error"),
    ]


def _columns() -> list[Any]:
    """A schedule's columns, with the payload as its stored text: the driver's JSON decoder
    would fail on a row nested too deep for it, and no read may fail on what a row holds."""
    return [
        sa.cast(column, sa.Text).label("payload") if column.name == "payload" else column
        for column in schedules.c
    ]


def _labels(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(key): text for key, text in value.items() if isinstance(text, str)}


def _to_schedule(row: Row[Any]) -> Schedule:
    return Schedule(
        id=row.id,
        name=row.name,
        event_type=row.event_type,
        payload=codec.payload(row.payload),
        target=codec.target(row.target),
        trigger=codec.trigger(row.trigger),
        max_attempts=row.max_attempts,
        jitter_seconds=row.jitter_seconds,
        rules=rules_of_row(row),
        labels=_labels(row.labels),
        status=ScheduleStatus(row.status),
        fire_count=row.fire_count,
        skipped_count=row.skipped_count,
        last_skip_reason=row.last_skip_reason,
        last_fired_at=row.last_fired_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
        next_fire_at=row.next_fire_at,
        next_occurrence_id=row.next_occurrence_id,
        attempts=row.last_attempts or 0,
        last_error=row.last_error,
        request_hash=row.request_hash,
        version=row.version,
        created_by=row.created_by,
    )


class ScheduleStore:
    """Statements on `schedules`; every method runs inside the caller's transaction."""

    async def insert(
        self, conn: AsyncConnection, drafts: Sequence[ScheduleDraft], now: datetime
    ) -> None:
        """Store schedules with their first occurrence, in the caller's transaction."""
        statement = schedules.insert()
        rows = [
            {
                "id": d.id,
                "name": d.name,
                "event_type": d.event_type,
                "payload": d.payload,
                "target": codec.dump(d.target),
                "target_type": d.target.type,
                "trigger": codec.dump(d.trigger),
                "max_attempts": d.max_attempts,
                "jitter_seconds": d.jitter_seconds,
                "misfire_policy": d.rules.policy,
                "misfire_grace_seconds": d.rules.grace_seconds,
                "max_catchup": d.rules.max_catchup,
                "max_occurrences": d.rules.max_occurrences,
                "tick_count": 0,
                "skipped_count": 0,
                "labels": d.labels,
                "status": ScheduleStatus.PENDING,
                "fire_count": 0,
                "idempotency_key": d.idempotency_key,
                "request_hash": d.request_hash,
                "created_by": d.created_by,
                "version": 1,
                "created_at": now,
                "updated_at": now,
            }
            for d in drafts
        ]
        try:
            await conn.execute(statement, rows)
        except IntegrityError:
            raise ConflictError(
                "a schedule with this name or Idempotency-Key already exists"
            ) from None
        await insert_ignoring_conflicts(
            conn,
            occurrences,
            [
                new_occurrence(d.id, d.first_fire_at, now, Origin.SCHEDULE, delay=d.first_delay)
                for d in drafts
            ],
            "occurrence_id",
        )

    async def get(
        self, conn: AsyncConnection, id_: uuid.UUID, *, for_update: bool = False
    ) -> Schedule | None:
        statement = sa.select(*_columns(), *_derived()).where(schedules.c.id == id_)
        if for_update:
            statement = statement.with_for_update(of=schedules)
        row = (await conn.execute(statement)).first()
        return None if row is None else _to_schedule(row)

    async def find_by_idempotency_key(self, conn: AsyncConnection, key: str) -> Schedule | None:
        row = (
            await conn.execute(
                sa.select(*_columns(), *_derived()).where(schedules.c.idempotency_key == key)
            )
        ).first()
        return None if row is None else _to_schedule(row)

    async def name_taken(self, conn: AsyncConnection, names: Sequence[str]) -> list[str]:
        if not names:
            return []
        rows = await conn.execute(sa.select(schedules.c.name).where(schedules.c.name.in_(names)))
        return [row.name for row in rows]

    async def search(
        self,
        conn: AsyncConnection,
        where: ScheduleFilter,
        *,
        limit: int,
        after: uuid.UUID | None,
    ) -> list[Schedule]:
        """Schedules newest first (UUIDv7 ids sort by creation)."""
        statement = sa.select(*_columns(), *_derived())
        if where.status is not None:
            statement = statement.where(schedules.c.status == where.status)
        if where.event_type is not None:
            statement = statement.where(schedules.c.event_type == where.event_type)
        if where.target_type is not None:
            statement = statement.where(schedules.c.target_type == where.target_type)
        if where.name is not None:
            statement = statement.where(schedules.c.name == where.name)
        for key, value in where.labels.items():
            statement = statement.where(schedules.c.labels[key].as_string() == value)
        if after is not None:
            statement = statement.where(schedules.c.id < after)
        statement = statement.order_by(schedules.c.id.desc()).limit(limit)
        return [_to_schedule(row) for row in await conn.execute(statement)]

    async def paused_at(self, conn: AsyncConnection, id_: uuid.UUID) -> datetime | None:
        result = await conn.execute(sa.select(schedules.c.paused_at).where(schedules.c.id == id_))
        value: datetime | None = result.scalar_one_or_none()
        return value

    async def update(
        self, conn: AsyncConnection, id_: uuid.UUID, now: datetime, **changes: Any
    ) -> None:
        """A change a client or an operator makes: its `version` grows by one."""
        values = dict(changes)
        if "target" in values:
            values["target_type"] = values["target"].type
            values["target"] = codec.dump(values["target"])
        if "trigger" in values:
            values["trigger"] = codec.dump(values["trigger"])
        await conn.execute(
            schedules.update()
            .where(schedules.c.id == id_)
            .values(updated_at=now, version=schedules.c.version + 1, **values)
        )

    async def bump_version(self, conn: AsyncConnection, id_: uuid.UUID, now: datetime) -> None:
        """A change to the schedule that writes none of its columns (a trigger, a backfill)."""
        await self.update(conn, id_, now)
