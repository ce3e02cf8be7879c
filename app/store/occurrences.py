"""Occurrence persistence: claim under a lease, settle guarded by the lease token, dead letters.

Invariant: only the holder of the current lease token can settle or release an
occurrence; a replica whose lease ran out (and was re-claimed elsewhere) finds its
token replaced and its late settle matches no row.
"""

from __future__ import annotations

import random
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain import misfire
from app.domain.ids import gap_entry_id, occurrence_id
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
from app.domain.trigger import Trigger, is_recurring
from app.store import codec
from app.store.clock import transaction_now
from app.store.inserts import insert_ignoring_conflicts, insert_new
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
            first_claim=sa.Boolean(),
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
    finish_recurring: sa.Update


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
        # A recurring schedule has a pending cadence occurrence until its bounds are spent;
        # with nothing left pending it is complete (a dead letter does not fail it).
        finish_recurring=schedules.update()
        .where(
            _among(schedules.c.id, "schedule_ids", dialect),
            schedules.c.status == ScheduleStatus.PENDING,
            nothing_pending,
        )
        .values(status=ScheduleStatus.COMPLETED, updated_at=now),
    )


def _truncate(error: str | None) -> str | None:
    """An error as the store can hold it on every dialect: valid UTF-8 without NUL (a
    target's reply or an exception message may carry either), at most MAX_ERROR_LENGTH."""
    if error is None:
        return None
    if "\x00" in error or not error.isascii():
        error = error.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")
    if len(error) <= MAX_ERROR_LENGTH:
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
        skip_reason=row.skip_reason,
        skipped_count=row.skipped_count,
    )


def rules_of_row(row: Any) -> misfire.Rules:
    return misfire.Rules(
        policy=row.misfire_policy,
        grace_seconds=row.misfire_grace_seconds,
        max_catchup=row.max_catchup,
        max_occurrences=row.max_occurrences,
        fired=row.tick_count,
    )


def skipped_occurrence(schedule_id: uuid.UUID, skip: misfire.Skip, now: datetime) -> dict[str, Any]:
    """The row that records a tick that did not fire. A skipped real tick keeps its usual
    id (a backfill can still fire it); a DST gap entry gets an id of its own, since the
    instant the clocks jump may also be a real tick."""
    id_ = (
        gap_entry_id(schedule_id, skip.fire_at)
        if skip.reason == "dst_gap"
        else occurrence_id(schedule_id, skip.fire_at)
    )
    return {
        "occurrence_id": id_,
        "schedule_id": schedule_id,
        "fire_at": skip.fire_at,
        "available_at": None,
        "status": OccurrenceStatus.SKIPPED,
        "origin": Origin.SCHEDULE,
        "attempts": 0,
        "skip_reason": skip.reason,
        "skipped_count": skip.count,
        "created_at": now,
        "updated_at": now,
    }


@dataclass
class _Tally:
    """Per-schedule counter changes of one claim."""

    ticks: int = 0
    unfired: int = 0
    skipped: int = 0
    reason: str | None = None


@dataclass
class _RowPlan:
    """What one claimed row becomes, before it joins the claim's batch."""

    recurring: bool
    exhausted: bool = False  # its lease ran out on its last allowed attempt
    planned: bool = False  # its cadence was planned (a cadence tick's first claim)
    ticks: int = 0  # ticks of the trigger this claim fired
    unfired: bool = False  # its misfire policy drops it: recorded as skipped
    last: bool = True
    next_rows: list[dict[str, Any]] = field(default_factory=list)
    skipped_rows: list[dict[str, Any]] = field(default_factory=list)
    delivery: Delivery | None = None


@dataclass(frozen=True, slots=True)
class _Unplannable:
    """A claimed row whose definition could not be read or planned."""

    occurrence_id: uuid.UUID
    schedule_id: uuid.UUID
    attempt: int
    max_attempts: int
    first_claim: bool
    error: str

    @property
    def spent(self) -> bool:
        return self.attempt >= self.max_attempts


@dataclass
class _ClaimBatch:
    """Everything one claim writes, gathered row by row."""

    deliveries: list[Delivery] = field(default_factory=list)
    next_rows: list[dict[str, Any]] = field(default_factory=list)
    skipped_rows: list[dict[str, Any]] = field(default_factory=list)
    unfired: list[uuid.UUID] = field(default_factory=list)
    exhausted: list[uuid.UUID] = field(default_factory=list)
    failed: list[_Unplannable] = field(default_factory=list)
    tallies: dict[uuid.UUID, _Tally] = field(default_factory=dict)
    first_fires: dict[uuid.UUID, int] = field(default_factory=lambda: defaultdict(int))
    finished_one_shots: set[uuid.UUID] = field(default_factory=set)
    done_recurring: set[uuid.UUID] = field(default_factory=set)

    def add(self, row: Row[Any], plan: _RowPlan) -> None:
        sid = row.schedule_id
        if plan.exhausted:
            self.exhausted.append(row.occurrence_id)
            (self.done_recurring if plan.recurring else self.finished_one_shots).add(sid)
            return
        if row.first_claim:
            self.first_fires[sid] += 1
        if plan.planned:
            tally = self.tallies.setdefault(sid, _Tally())
            tally.ticks += plan.ticks
            if plan.unfired:  # the claimed occurrence itself is recorded as skipped
                tally.unfired += 1
                tally.skipped += 1
                tally.reason = "misfire"
        self.next_rows.extend(plan.next_rows)
        self.skipped_rows.extend(plan.skipped_rows)
        if plan.unfired:
            self.unfired.append(row.occurrence_id)
            if plan.last:
                self.done_recurring.add(sid)
            return
        assert plan.delivery is not None
        self.deliveries.append(plan.delivery)

    def fail(self, row: Row[Any], error: str) -> None:
        """The row is settled as a failed attempt; it did not fire, so a first claim's
        firing is not counted (PostgreSQL's claim statement has counted it already)."""
        failed = _Unplannable(
            row.occurrence_id,
            row.schedule_id,
            row.attempts,
            row.max_attempts,
            bool(row.first_claim),
            _truncate(error) or "",
        )
        self.failed.append(failed)
        if failed.first_claim:
            self.first_fires[row.schedule_id] += 1
            self.tallies.setdefault(row.schedule_id, _Tally()).unfired += 1
        if failed.spent:
            self.finished_one_shots.add(row.schedule_id)


def _describe(exc: BaseException) -> str:
    """An exception as one line: its type and the start of its message."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def _is_recurring_row(row: Row[Any]) -> bool:
    try:
        return is_recurring(codec.trigger(row.trigger))
    except Exception:  # an unreadable trigger fails its row in the claim loop
        return False


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
        self,
        conn: AsyncConnection,
        *,
        limit: int,
        lease: float,
        owner: str,
        backoff: Callable[[int], float] = lambda attempt: 1.0,
    ) -> list[Delivery]:
        """Lease due occurrences and materialize the next tick of each recurring schedule.

        The next tick is written in this same transaction, so a recurring schedule always
        has its future occurrence however long the current one keeps retrying.

        Each row is planned on its own: a row whose stored definition cannot be read or
        planned (an older version's data, a bug) does not fail the claim. Its attempt is
        settled here, as a failure that names the cause: retried after `backoff(attempt)`
        seconds, dead-lettered once its budget is spent. Every other row goes on as usual.
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
        batch = _ClaimBatch()
        rows = sorted(claimed, key=lambda r: (r.fire_at, r.occurrence_id))
        rules = await self._rules(conn, rows)
        for row in rows:
            try:
                planned = self._plan(row, rules.get(row.schedule_id), now, token)
            except Exception as exc:  # isolated: this row fails, the batch goes on
                batch.fail(row, f"cannot plan this occurrence: {_describe(exc)}")
                continue
            batch.add(row, planned)
        await insert_ignoring_conflicts(conn, occurrences, batch.next_rows, "occurrence_id")
        if batch.unfired:
            await self._skip_claimed(conn, token, batch.unfired, now)
        recorded = await insert_new(conn, occurrences, batch.skipped_rows, "occurrence_id")
        for skipped in batch.skipped_rows:
            # Counted only where recorded: a tick that already has an entry (a backfill,
            # or a DST gap an earlier plan recorded) is not counted twice.
            if skipped["occurrence_id"] in recorded:
                tally = batch.tallies[skipped["schedule_id"]]
                tally.skipped += skipped["skipped_count"]
                tally.reason = skipped["skip_reason"]
        if dialect != "postgresql":  # PostgreSQL's claim statement counts them itself
            # Before the tallies: they take back the firings that did not fire, and the
            # counter may never go below zero, even for a statement.
            await self._count_first_fires(conn, batch.first_fires, now)
        await self._apply_tallies(conn, batch.tallies)
        if batch.exhausted:
            await self._dead_letter_expired(conn, token, batch.exhausted, now)
        if batch.failed:
            await self._settle_unplannable(conn, token, batch.failed, now, backoff)
        await self.finish_one_shots(conn, batch.finished_one_shots, now)
        if batch.done_recurring:
            await self.finish_recurring(conn, batch.done_recurring, now)
        return batch.deliveries

    def _plan(
        self,
        row: Row[Any],
        rules: misfire.Rules | None,
        now: datetime,
        token: uuid.UUID,
    ) -> _RowPlan:
        """What one claimed row becomes: a delivery, a skipped tick or a dead letter, and
        the rows its cadence writes. Pure apart from the jitter draw; may raise on a row
        whose stored definition is not valid, which the caller isolates."""
        trigger: Trigger = codec.trigger(row.trigger)
        recurring = is_recurring(trigger)
        plan = _RowPlan(recurring=recurring)
        if row.attempts > row.max_attempts:
            # Its last attempt's lease ran out with no result: the budget is spent, so it
            # is dead-lettered rather than retried forever (a replica that crashes on it
            # every time must not keep the fleet busy).
            plan.exhausted = True
            return plan
        # Whether the schedule may be done once this settles: true for everything but a
        # cadence tick that planned its successor (the check itself is guarded by
        # "nothing pending", so it is only ever a wasted statement).
        last = True
        if row.first_claim and rules is not None and row.origin == Origin.SCHEDULE:
            cadence = misfire.plan(trigger, rules, row.fire_at, now)
            plan.planned = True
            self._materialize(row, cadence, now, plan)
            last = cadence.upcoming is None
            if not cadence.fire:
                plan.unfired = True
                plan.last = last
                return plan
        target: Target = codec.target(row.target)
        plan.delivery = Delivery(
            occurrence_id=row.occurrence_id,
            schedule_id=row.schedule_id,
            fire_at=row.fire_at,
            attempt=row.attempts,
            max_attempts=row.max_attempts,
            lease_token=token,
            event_type=row.event_type,
            body=(row.body or "null").encode(),
            target=target,
            one_shot=not recurring,
            last=recurring and last,
        )
        return plan

    async def _rules(
        self, conn: AsyncConnection, rows: Sequence[Row[Any]]
    ) -> dict[uuid.UUID, misfire.Rules]:
        """Misfire rules and tick counts of the schedules whose cadence fires in this claim
        (one extra read, and only when recurring schedules fire)."""
        ids = {
            row.schedule_id
            for row in rows
            if row.first_claim and row.origin == Origin.SCHEDULE and _is_recurring_row(row)
        }
        if not ids:
            return {}
        result = await conn.execute(
            sa.select(
                schedules.c.id,
                schedules.c.misfire_policy,
                schedules.c.misfire_grace_seconds,
                schedules.c.max_catchup,
                schedules.c.max_occurrences,
                schedules.c.tick_count,
            ).where(schedules.c.id.in_(ids))
        )
        return {r.id: rules_of_row(r) for r in result}

    def _materialize(
        self, row: Row[Any], cadence: misfire.Plan, now: datetime, plan: _RowPlan
    ) -> None:
        """The rows a cadence claim writes: catch-ups, skipped ticks, the next tick."""
        sid = row.schedule_id
        for tick in cadence.catch_up:
            plan.next_rows.append(new_occurrence(sid, tick, now, Origin.CATCHUP))
        if cadence.upcoming is not None:
            delay = self._rng.uniform(0, row.jitter_seconds or 0.0)
            plan.next_rows.append(
                new_occurrence(sid, cadence.upcoming, now, Origin.SCHEDULE, delay=delay)
            )
        for skip in cadence.skips:
            if skip.fire_at != row.fire_at or skip.reason == "dst_gap":
                plan.skipped_rows.append(skipped_occurrence(sid, skip, now))
        plan.ticks = cadence.fired

    async def _skip_claimed(
        self, conn: AsyncConnection, token: uuid.UUID, ids: list[uuid.UUID], now: datetime
    ) -> None:
        """Claimed cadence occurrences that their misfire policy drops: recorded as skipped,
        their attempt not counted."""
        await conn.execute(
            occurrences.update()
            .where(occurrences.c.occurrence_id.in_(ids), occurrences.c.lease_token == token)
            .values(
                status=OccurrenceStatus.SKIPPED,
                skip_reason="misfire",
                skipped_count=1,
                attempts=0,
                available_at=None,
                lease_token=None,
                updated_at=now,
            )
        )

    async def _apply_tallies(self, conn: AsyncConnection, tallies: dict[uuid.UUID, _Tally]) -> None:
        params = [
            {
                "s_id": sid,
                "s_ticks": t.ticks,
                "s_unfired": t.unfired,
                "s_skipped": t.skipped,
                "s_reason": t.reason,
            }
            for sid, t in tallies.items()
            if t.ticks != 1 or t.unfired or t.skipped
        ]
        plain = [
            sid for sid, t in tallies.items() if t.ticks == 1 and not t.unfired and not t.skipped
        ]
        if plain:  # the usual case: one tick fired on time, one statement for all
            await conn.execute(
                schedules.update()
                .where(schedules.c.id.in_(plain))
                .values(tick_count=schedules.c.tick_count + 1)
            )
        if params:
            await conn.execute(
                schedules.update()
                .where(schedules.c.id == sa.bindparam("s_id", type_=sa.Uuid()))
                .values(
                    tick_count=schedules.c.tick_count + sa.bindparam("s_ticks", type_=sa.Integer()),
                    fire_count=schedules.c.fire_count
                    - sa.bindparam("s_unfired", type_=sa.Integer()),
                    skipped_count=schedules.c.skipped_count
                    + sa.bindparam("s_skipped", type_=sa.Integer()),
                    last_skip_reason=sa.func.coalesce(
                        sa.bindparam("s_reason", type_=sa.String()), schedules.c.last_skip_reason
                    ),
                ),
                params,
            )

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

    async def _settle_unplannable(
        self,
        conn: AsyncConnection,
        token: uuid.UUID,
        failed: list[_Unplannable],
        now: datetime,
        backoff: Callable[[int], float],
    ) -> None:
        """Claimed rows that could not be planned: each a failed attempt, retried with the
        usual backoff or dead-lettered when its budget is spent. A first claim stays
        unplanned, so the retry plans it again (and a replay of the dead letter too)."""
        guard = (occurrences.c.occurrence_id == sa.bindparam("b_id", type_=sa.Uuid())) & (
            occurrences.c.lease_token == token
        )
        first_attempt = sa.case(
            (sa.bindparam("b_reset", type_=sa.Boolean()), sa.null()),
            else_=occurrences.c.first_attempt_at,
        )
        dead = [f for f in failed if f.spent]
        retry = [f for f in failed if not f.spent]
        if dead:
            await conn.execute(
                occurrences.update()
                .where(guard)
                .values(
                    status=OccurrenceStatus.DEAD_LETTERED,
                    dead_lettered_at=now,
                    available_at=None,
                    lease_token=None,
                    last_error=sa.bindparam("b_error"),
                    first_attempt_at=first_attempt,
                    updated_at=now,
                ),
                [{"b_id": f.occurrence_id, "b_error": f.error, "b_reset": True} for f in dead],
            )
        if retry:
            await conn.execute(
                occurrences.update()
                .where(guard)
                .values(
                    available_at=sa.bindparam("b_at", type_=UTCDateTime()),
                    lease_token=None,
                    last_error=sa.bindparam("b_error"),
                    first_attempt_at=first_attempt,
                    updated_at=now,
                ),
                [
                    {
                        "b_id": f.occurrence_id,
                        "b_error": f.error,
                        "b_reset": f.first_claim,
                        "b_at": now + timedelta(seconds=backoff(f.attempt)),
                    }
                    for f in retry
                ],
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
        if lasts:
            await conn.execute(
                statements.finish_recurring, {"schedule_ids": list(lasts), "now": now}
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

    async def finish_recurring(
        self, conn: AsyncConnection, schedule_ids: Iterable[uuid.UUID], now: datetime
    ) -> None:
        """A recurring schedule whose bounds are spent and that has nothing left pending is
        completed."""
        ids = list(schedule_ids)
        if ids:
            statement = _settle_statements(conn.dialect.name).finish_recurring
            await conn.execute(statement, {"schedule_ids": ids, "now": now})

    async def record_skips(
        self,
        conn: AsyncConnection,
        schedule_id: uuid.UUID,
        skips: Sequence[misfire.Skip],
        now: datetime,
    ) -> None:
        """Record ticks that did not fire, and count them on the schedule."""
        rows = [skipped_occurrence(schedule_id, skip, now) for skip in skips]
        recorded = await insert_new(conn, occurrences, rows, "occurrence_id")
        fresh = [row for row in rows if row["occurrence_id"] in recorded]
        if not fresh:
            return
        await conn.execute(
            schedules.update()
            .where(schedules.c.id == schedule_id)
            .values(
                skipped_count=schedules.c.skipped_count + sum(r["skipped_count"] for r in fresh),
                last_skip_reason=fresh[-1]["skip_reason"],
            )
        )

    async def skip_due_cadence(
        self, conn: AsyncConnection, schedule_id: uuid.UUID, now: datetime, reason: str
    ) -> int:
        """The schedule's own unfired occurrences already due (the loop had not reached
        them) are recorded as skipped; returns how many."""
        result = await conn.execute(
            occurrences.update()
            .where(
                occurrences.c.schedule_id == schedule_id,
                occurrences.c.status == OccurrenceStatus.PENDING,
                occurrences.c.origin == Origin.SCHEDULE,
                occurrences.c.attempts == 0,
                occurrences.c.fire_at <= now,
            )
            .values(
                status=OccurrenceStatus.SKIPPED,
                skip_reason=reason,
                skipped_count=1,
                available_at=None,
                updated_at=now,
            )
            .returning(occurrences.c.occurrence_id)
        )
        skipped = len(result.all())
        if skipped:
            await conn.execute(
                schedules.update()
                .where(schedules.c.id == schedule_id)
                .values(skipped_count=schedules.c.skipped_count + skipped, last_skip_reason=reason)
            )
        return skipped

    async def backfill(
        self,
        conn: AsyncConnection,
        schedule_id: uuid.UUID,
        ticks: Sequence[datetime],
        now: datetime,
        *,
        held: bool,
    ) -> list[uuid.UUID]:
        """One occurrence per tick, with its usual id; ticks that already have one are left
        as they are, except skipped ones, which become due. Returns the ids made due."""
        if not ticks:
            return []
        ids = [occurrence_id(schedule_id, tick) for tick in ticks]
        existing = {
            row.occurrence_id: row.status
            for row in await conn.execute(
                sa.select(occurrences.c.occurrence_id, occurrences.c.status).where(
                    occurrences.c.occurrence_id.in_(ids)
                )
            )
        }
        rows = []
        for tick, id_ in zip(ticks, ids, strict=True):
            if id_ not in existing:
                row = new_occurrence(schedule_id, tick, now, Origin.BACKFILL)
                if held:
                    row["available_at"] = None
                rows.append(row)
        revived = [id_ for id_, status in existing.items() if status == OccurrenceStatus.SKIPPED]
        await insert_ignoring_conflicts(conn, occurrences, rows, "occurrence_id")
        if revived:
            await conn.execute(
                occurrences.update()
                .where(
                    occurrences.c.occurrence_id.in_(revived),
                    occurrences.c.status == OccurrenceStatus.SKIPPED,
                )
                .values(
                    status=OccurrenceStatus.PENDING,
                    origin=Origin.BACKFILL,
                    skip_reason=None,
                    skipped_count=0,
                    available_at=None if held else occurrences.c.fire_at,
                    updated_at=now,
                )
            )
        made = {row["occurrence_id"] for row in rows} | set(revived)
        return [id_ for id_ in ids if id_ in made]

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
            .values(
                held_until=sa.func.coalesce(occurrences.c.available_at, occurrences.c.held_until),
                available_at=None,
                updated_at=now,
            )
        )

    async def unhold(self, conn: AsyncConnection, schedule_id: uuid.UUID, now: datetime) -> None:
        """Give each held occurrence back its own instant (its jittered fire instant, its
        retry instant or its lease's end); one held without an instant (a replay or a
        backfill made during the pause) is due now."""
        await conn.execute(
            occurrences.update()
            .where(
                occurrences.c.schedule_id == schedule_id,
                occurrences.c.status == OccurrenceStatus.PENDING,
                occurrences.c.available_at.is_(None),
            )
            .values(
                available_at=sa.func.coalesce(
                    occurrences.c.held_until, sa.literal(now, UTCDateTime())
                ),
                held_until=None,
                updated_at=now,
            )
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
            # As text: the driver's JSON decoder fails on what it can store (very deep
            # nesting, very long numbers); the codec reads it back safely.
            sa.cast(schedules.c.payload, sa.Text).label("payload"),
            schedules.c.target,
        ).join(schedules, schedules.c.id == occurrences.c.schedule_id)

    @staticmethod
    def _to_dead_letter(row: Row[Any]) -> DeadLetter:
        return DeadLetter(
            occurrence=to_occurrence(row),
            event_type=row.event_type,
            payload=codec.payload(row.payload),
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
