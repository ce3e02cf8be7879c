"""The claim: lease due occurrences and plan what each becomes, in one transaction.

Invariant: a claim leases each due occurrence to one replica at a time (SKIP LOCKED on the
servers, a single writer on SQLite), and a recurring schedule's next tick is written in the
same transaction, so it always has its future occurrence however long the current one retries.
"""

from __future__ import annotations

import random
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain import misfire
from app.domain.occurrence import (
    Delivery,
    OccurrenceStatus,
    Origin,
)
from app.domain.target import Target
from app.domain.trigger import Trigger, is_recurring
from app.store import codec
from app.store.dialects import dialect_of
from app.store.rows import new_occurrence, rules_of_row, skipped_occurrence, truncate_error
from app.store.settlements import finish_one_shots, finish_recurring
from app.store.tables import UUID, UTCDateTime, occurrences, schedules

LEASE_EXPIRED_ERROR = (
    "the lease of the last attempt expired with no result recorded "
    "(its replica stopped or stalled); the attempt budget is spent"
)


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
        firing is not counted (a claim statement that counts firings has counted it already)."""
        failed = _Unplannable(
            row.occurrence_id,
            row.schedule_id,
            row.attempts,
            row.max_attempts,
            bool(row.first_claim),
            truncate_error(error) or "",
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


class ClaimStore:
    """The claim statement and the writes it plans; runs inside the caller's transaction."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()  # jitter draws

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
        dialect = dialect_of(conn)
        claimed = await dialect.claim(conn, limit=limit, lease=lease, token=token, owner=owner)
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
        await dialect.insert_ignoring(conn, occurrences, batch.next_rows, "occurrence_id")
        if batch.unfired:
            await self._skip_claimed(conn, token, batch.unfired, now)
        recorded = await dialect.insert_new(conn, occurrences, batch.skipped_rows, "occurrence_id")
        for skipped in batch.skipped_rows:
            # Counted only where recorded: a tick that already has an entry (a backfill,
            # or a DST gap an earlier plan recorded) is not counted twice.
            if skipped["occurrence_id"] in recorded:
                tally = batch.tallies[skipped["schedule_id"]]
                tally.skipped += skipped["skipped_count"]
                tally.reason = skipped["skip_reason"]
        if not dialect.claim_counts_fires:
            # Before the tallies: they take back the firings that did not fire, and the
            # counter may never go below zero, even for a statement.
            await self._count_first_fires(conn, batch.first_fires, now)
        await self._apply_tallies(conn, batch.tallies)
        if batch.exhausted:
            await self._dead_letter_expired(conn, token, batch.exhausted, now)
        if batch.failed:
            await self._settle_unplannable(conn, token, batch.failed, now, backoff)
        await finish_one_shots(conn, batch.finished_one_shots, now)
        if batch.done_recurring:
            await finish_recurring(conn, batch.done_recurring, now)
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
                .where(schedules.c.id == sa.bindparam("s_id", type_=UUID))
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
        guard = (occurrences.c.occurrence_id == sa.bindparam("b_id", type_=UUID)) & (
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
