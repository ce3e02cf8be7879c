"""Schedule persistence: insert with the first occurrence, snapshots, filtered keyset lists."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.claim_plan import pending_occurrence
from app.domain.destinations import destination_of
from app.domain.endpoints import delivery_key
from app.domain.errors import ConflictError
from app.domain.filters import FAILING_WINDOW, ScheduleAfter, ScheduleFilter, ScheduleSort
from app.domain.occurrence import NOT_FIRINGS, OccurrenceStatus, Origin
from app.domain.schedule import (
    DERIVED_FIELDS,
    RULE_FIELDS,
    Schedule,
    ScheduleDraft,
    ScheduleStatus,
    first_snapshot,
    flat_rules,
)
from app.domain.spelling import spellings
from app.domain.tenants import DEFAULT_TENANT, key_name_or_none, stored_key
from app.store.dialects import dialect_of, transaction_now
from app.store.schema import codec
from app.store.schema.rows import pending_row, rules_of_row
from app.store.schema.tables import occurrences, of_tenant, schedules, starts_with
from app.store.schema.types import UTCDateTime

# Between an API key's name and the client's key in a scoped idempotency key: no name holds
# it (names are [A-Za-z0-9_.-]), nor any key a client sends (a header holds no control
# character), so no scoped value equals another's or an unscoped one.
_SCOPE_SEPARATOR = "\x1f"


def idempotency_column(key: str, principal: str | None) -> str:
    """What `schedules.idempotency_key` holds for a client's Idempotency-Key sent with the
    API key named `principal`: keys are per API key, so that one client can neither replay
    nor block another's. The name and the SHA-256 of the key (at most 64 + 1 + 64
    characters, inside the column's 255 whatever the key's length); with no API keys set
    (`principal` None), the key itself, as rows were written before keys were scoped."""
    if principal is None:
        return key
    return f"{principal}{_SCOPE_SEPARATOR}{hashlib.sha256(key.encode()).hexdigest()}"


def _labels(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    # In key order, as they were written: the databases' JSON types reorder keys each
    # their own way.
    return {str(key): text for key, text in sorted(value.items()) if isinstance(text, str)}


# The row mapping follows the domain's fields: a field is the column of its name, read and
# written as it is unless named below. The exceptions, each named once:
# - columns no domain field holds, written by the statements that own them (the insert
#   writes a draft's idempotency key and traceparent);
STORE_ONLY_COLUMNS = frozenset({"idempotency_key", "paused_at", "traceparent"})
# - columns copied from a field, for filtering (column: the field, what is copied);
COPIED_COLUMNS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "target_type": ("target", lambda target: target.type),
    "destination": ("target", destination_of),
}
# - the rules, kept as their flat columns (`RULE_FIELDS`) and the tick count;
RULES_COLUMNS = frozenset({*RULE_FIELDS, "tick_count"})
# - fields in another form than their column's;
_READ: dict[str, Callable[[Any], Any]] = {
    "payload": codec.payload,
    "target": codec.target,
    "trigger": codec.trigger,
    "labels": _labels,
    "status": ScheduleStatus,
    "attempts": lambda value: value or 0,  # NULL: no occurrence attempted yet
    "retry": codec.retry,
    "on_failure": codec.optional_target,
    # A flow key is stored by its tenant and name (`app.domain.tenants.stored_key`).
    "flow_key": key_name_or_none,
}
_WRITE: dict[str, Callable[[Any], Any]] = {
    "target": codec.dump,
    "trigger": codec.dump,
    "retry": codec.dump_retry,
    "on_failure": codec.dump_optional,
}
# - and fields read from the schedule's occurrences (`_derived`), never written.
READ_FIELDS = tuple(f.name for f in fields(Schedule) if f.name != "rules")
STORED_FIELDS = tuple(name for name in READ_FIELDS if name not in DERIVED_FIELDS)


def _derived() -> list[Any]:
    """The fields a schedule's occurrences hold, each labelled with the field's name (its
    failure callbacks are none of its firings)."""
    o = occurrences.alias("o")
    pending = (
        sa.select(o.c.fire_at, o.c.occurrence_id)
        .where(
            o.c.schedule_id == schedules.c.id,
            o.c.status == OccurrenceStatus.PENDING,
            # Its failure callbacks and its topic occurrences' deliveries fire nothing.
            *(o.c.origin != origin.value for origin in sorted(NOT_FIRINGS)),
        )
        .order_by(o.c.fire_at)
        .limit(1)
        .correlate(schedules)
    )
    # A replayed dead letter has its attempts reset but keeps its last error, which the
    # snapshot shows until an attempt of it succeeds: the schedule is still failing.
    attempted = (
        sa.select(o.c.attempts, o.c.last_error)
        .where(
            o.c.schedule_id == schedules.c.id,
            (o.c.attempts > 0) | o.c.last_error.is_not(None),
            o.c.origin != Origin.CALLBACK,
        )
        .order_by(o.c.fire_at.desc())
        .limit(1)
        .correlate(schedules)
    )
    return [
        pending.with_only_columns(o.c.fire_at).scalar_subquery().label("next_fire_at"),
        pending.with_only_columns(o.c.occurrence_id).scalar_subquery().label("next_occurrence_id"),
        attempted.with_only_columns(o.c.attempts).scalar_subquery().label("attempts"),
        attempted.with_only_columns(o.c.last_error).scalar_subquery().label("last_error"),
    ]


def _columns() -> list[Any]:
    """A schedule's columns, with the payload as its stored text: the driver's JSON decoder
    would fail on a row nested too deep for it, and no read may fail on what a row holds."""
    return [
        sa.cast(column, sa.Text).label("payload") if column.name == "payload" else column
        for column in schedules.c
    ]


def _as_is(value: Any) -> Any:
    return value


def _to_schedule(row: Row[Any]) -> Schedule:
    values = row._mapping
    return Schedule(
        **{name: _READ.get(name, _as_is)(values[name]) for name in READ_FIELDS},
        rules=rules_of_row(row),
    )


def _written(changes: dict[str, Any]) -> dict[str, Any]:
    """Column values for domain values by field name (any subset of a row); a flow key is
    named in the row's own tenant."""
    values = {name: _WRITE.get(name, _as_is)(value) for name, value in changes.items()}
    for column, (name, copy) in COPIED_COLUMNS.items():
        if name in changes:
            values[column] = copy(changes[name])
    if "flow_key" in changes:
        # Named in the row's tenant; none is the tenant's own key (but the default's).
        name = changes["flow_key"]
        values["flow_key"] = sa.case(
            (
                sa.and_(sa.literal(name is None), schedules.c.tenant == DEFAULT_TENANT),
                sa.null(),
            ),
            else_=schedules.c.tenant + sa.literal(stored_key("", name or "")),
        )
    return values


# Each stored field with what writes it (None: as it is), for `_to_row`; a target or a
# trigger as its JSON text, written in one pass (every dialect takes a `codec.JsonText`).
_WRITERS = tuple(
    (name, codec.dump_text if write is codec.dump else write)
    for name, write in ((name, _WRITE.get(name)) for name in STORED_FIELDS)
)


def _to_row(
    schedule: Schedule, writers: tuple[tuple[str, Callable[[Any], Any] | None], ...] = _WRITERS
) -> dict[str, Any]:
    """The whole row of `schedule`, but for the store-only columns: `_written` of every
    stored field, spelled out (a batch builds a thousand rows)."""
    values: dict[str, Any] = {}
    for name, write in writers:
        value = getattr(schedule, name)
        values[name] = value if write is None else write(value)
    for column, (name, copy) in COPIED_COLUMNS.items():
        values[column] = copy(getattr(schedule, name))
    values["flow_key"] = delivery_key(schedule.tenant, schedule.flow_key, schedule.target)
    values.update(flat_rules(schedule.rules))
    values["tick_count"] = schedule.rules.fired
    return values


def _idempotency_key(draft: ScheduleDraft) -> str | None:
    # A draft's creator is the API key that sent its Idempotency-Key.
    if draft.idempotency_key is None:
        return None
    return idempotency_column(draft.idempotency_key, draft.created_by)


def _failing(now: datetime) -> sa.Select[Any]:
    """The ids of failing schedules at `now` (`FAILING_WINDOW`): those with failures in a
    row (a partial index holds just them) and those with a recent dead letter still waiting
    (the dead letters' index, by instant)."""
    in_a_row = sa.select(schedules.c.id).where(schedules.c.consecutive_failures > 0)
    recent = sa.select(occurrences.c.schedule_id).where(
        occurrences.c.status == OccurrenceStatus.DEAD_LETTERED,
        occurrences.c.dead_lettered_at >= sa.literal(now - FAILING_WINDOW, UTCDateTime()),
    )
    return sa.select(sa.union(in_a_row, recent).subquery().c[0])


def listing(
    where: ScheduleFilter, after: ScheduleAfter | None, now: datetime | None
) -> sa.Select[Any]:
    """The statement of a list of schedules (no limit yet); `now` is the database clock's
    reading, needed by the failing filter only."""
    chosen = sa.select(*_columns(), *_derived()).where(*of_tenant(where.tenant))
    if where.status is not None:
        chosen = chosen.where(schedules.c.status == where.status)
    if where.event_type is not None:
        chosen = chosen.where(schedules.c.event_type == where.event_type)
    if where.target_type is not None:
        chosen = chosen.where(schedules.c.target_type == where.target_type)
    # Names and labels are stored in NFC, but those stored before may not be: each matches
    # in either canonical spelling of what is given (app.domain.spelling).
    if where.name is not None:
        chosen = chosen.where(schedules.c.name.in_(spellings(where.name)))
    if where.name_prefix is not None:
        chosen = chosen.where(
            sa.or_(
                *(
                    sa.and_(*starts_with(schedules.c.name, prefix))
                    for prefix in spellings(where.name_prefix)
                )
            )
        )
    for key, value in where.labels.items():
        chosen = chosen.where(
            sa.or_(
                *(
                    schedules.c.labels[spelt].as_string().in_(spellings(value))
                    for spelt in spellings(key)
                )
            )
        )
    if where.flow_key is not None:
        chosen = chosen.where(schedules.c.flow_key == stored_key(where.tenant, where.flow_key))
    if where.failing:
        assert now is not None, "the failing filter reads the clock"
        chosen = chosen.where(schedules.c.id.in_(_failing(now)))
    if where.due_before is not None:
        chosen = chosen.where(
            sa.exists().where(
                occurrences.c.schedule_id == schedules.c.id,
                occurrences.c.status == OccurrenceStatus.PENDING,
                *(occurrences.c.origin != origin.value for origin in sorted(NOT_FIRINGS)),
                occurrences.c.fire_at <= sa.literal(where.due_before, UTCDateTime()),
            )
        )
    # Read through a subquery, so that the order and the page's bound can name what is
    # derived (next_fire_at) as they name a column.
    listed = chosen.subquery("listed")
    return _ordered(sa.select(listed), listed.c, where.sort, after)


def _ordered(
    statement: sa.Select[Any], c: Any, sort: ScheduleSort, after: ScheduleAfter | None
) -> sa.Select[Any]:
    """`statement` in the order of `sort`, from after `after` on (its sort is `sort`'s: the
    cursor's reader checks it)."""
    if sort is ScheduleSort.NEXT_FIRE_AT:
        # Nothing pending (NULL) last on every dialect, then by id.
        none_pending = sa.case((c.next_fire_at.is_(None), 1), else_=0)
        if after is not None:
            if after.next_fire_at is None:
                statement = statement.where(c.next_fire_at.is_(None), c.id > after.id)
            else:
                at = sa.literal(after.next_fire_at, UTCDateTime())
                statement = statement.where(
                    sa.or_(
                        c.next_fire_at.is_(None),
                        c.next_fire_at > at,
                        sa.and_(c.next_fire_at == at, c.id > after.id),
                    )
                )
        return statement.order_by(none_pending, c.next_fire_at, c.id)
    if sort is ScheduleSort.FAILURES:
        if after is not None:
            statement = statement.where(
                sa.or_(
                    c.consecutive_failures < after.failures,
                    sa.and_(c.consecutive_failures == after.failures, c.id < after.id),
                )
            )
        return statement.order_by(c.consecutive_failures.desc(), c.id.desc())
    if after is not None:
        statement = statement.where(c.id < after.id)
    return statement.order_by(c.id.desc())


class ScheduleStore:
    """Statements on `schedules`; every method runs inside the caller's transaction."""

    async def insert(
        self, conn: AsyncConnection, drafts: Sequence[ScheduleDraft], now: datetime
    ) -> list[Schedule]:
        """Store schedules with their first occurrence, in the caller's transaction; the
        schedules as stored."""
        # Each first occurrence once: its id is both its row's key and the snapshot's
        # next_occurrence_id.
        firsts = [
            pending_occurrence(
                d.id,
                d.first_fire_at,
                Origin.SCHEDULE,
                delay=d.first_delay,
                flow_key=delivery_key(d.tenant, d.flow_key, d.target),
            )
            for d in drafts
        ]
        stored = [
            first_snapshot(d, now, first.occurrence_id)
            for d, first in zip(drafts, firsts, strict=True)
        ]
        dialect = dialect_of(conn)
        rows = [
            _to_row(schedule)
            | {"idempotency_key": _idempotency_key(d), "traceparent": d.traceparent}
            for schedule, d in zip(stored, drafts, strict=True)
        ]
        try:
            await dialect.insert_rows(conn, schedules, rows)
        except IntegrityError:
            raise ConflictError(
                "a schedule with this name or Idempotency-Key already exists"
            ) from None
        # A plain insert: an occurrence's id derives from its schedule's, which the insert
        # above just proved new, and occurrences go with their schedule (ON DELETE CASCADE).
        await dialect.insert_rows(conn, occurrences, [pending_row(first, now) for first in firsts])
        return stored

    async def get(
        self, conn: AsyncConnection, id_: uuid.UUID, *, for_update: bool = False
    ) -> Schedule | None:
        statement = sa.select(*_columns(), *_derived()).where(schedules.c.id == id_)
        if for_update:
            statement = statement.with_for_update(of=schedules)
        row = (await conn.execute(statement)).first()
        return None if row is None else _to_schedule(row)

    async def find_by_idempotency_key(
        self, conn: AsyncConnection, tenant: str, key: str, principal: str | None
    ) -> Schedule | None:
        """The schedule of `tenant` created with this Idempotency-Key by the API key named
        `principal` (None: with no API keys set)."""
        column = idempotency_column(key, principal)
        row = (
            await conn.execute(
                sa.select(*_columns(), *_derived()).where(
                    schedules.c.tenant == tenant, schedules.c.idempotency_key == column
                )
            )
        ).first()
        return None if row is None else _to_schedule(row)

    async def name_taken(
        self, conn: AsyncConnection, tenant: str, names: Sequence[str]
    ) -> list[str]:
        """Those of `names` a schedule of `tenant` has, in either canonical spelling (one
        stored before names were kept in NFC may be spelt otherwise)."""
        if not names:
            return []
        spelt = {name: spellings(name) for name in names}
        every = sorted({s for forms in spelt.values() for s in forms})
        rows = await conn.execute(
            sa.select(schedules.c.name).where(
                schedules.c.tenant == tenant, schedules.c.name.in_(every)
            )
        )
        stored = {row.name for row in rows}
        return [name for name, forms in spelt.items() if stored.intersection(forms)]

    async def search(
        self,
        conn: AsyncConnection,
        where: ScheduleFilter,
        *,
        limit: int,
        after: ScheduleAfter | None,
    ) -> list[Schedule]:
        """Schedules in the order `where.sort` names, after `after` (a page's last one)."""
        now = await transaction_now(conn) if where.failing else None
        statement = listing(where, after, now).limit(limit)
        return [_to_schedule(row) for row in await conn.execute(statement)]

    async def paused_at(self, conn: AsyncConnection, id_: uuid.UUID) -> datetime | None:
        result = await conn.execute(sa.select(schedules.c.paused_at).where(schedules.c.id == id_))
        value: datetime | None = result.scalar_one_or_none()
        return value

    async def update(
        self, conn: AsyncConnection, id_: uuid.UUID, now: datetime, **changes: Any
    ) -> None:
        """A change a client or an operator makes: its `version` grows by one."""
        values = _written(changes)
        await conn.execute(
            schedules.update()
            .where(schedules.c.id == id_)
            .values(updated_at=now, version=schedules.c.version + 1, **values)
        )

    async def set_stored_key(
        self, conn: AsyncConnection, id_: uuid.UUID, stored: str | None
    ) -> None:
        """The flow key its deliveries count against, as stored (`delivery_key`)."""
        await conn.execute(schedules.update().where(schedules.c.id == id_).values(flow_key=stored))

    async def bump_version(self, conn: AsyncConnection, id_: uuid.UUID, now: datetime) -> None:
        """A change to the schedule that writes none of its columns (a trigger, a backfill)."""
        await self.update(conn, id_, now)
