"""The claim: lease due occurrences and write what `app.domain.claim_plan` makes of them,
in one transaction.

Invariant: a claim leases each due occurrence to one replica at a time (SKIP LOCKED on the
servers, a single writer on SQLite), and a recurring schedule's next tick is written in the
same transaction, so it always has its future occurrence however long the current one retries.
"""

from __future__ import annotations

import functools
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.callbacks import CALLBACK_EVENT_TYPE
from app.domain.claim_plan import (
    ClaimedRow,
    LostAttempt,
    LostLease,
    Tally,
    Unplannable,
    Unreadable,
    cadence_schedules,
    plan_claim,
)
from app.domain.fair_share import interleave
from app.domain.occurrence import NOT_FIRINGS, AttemptOutcome, Delivery, Origin
from app.domain.operator_events import DeadLettered, failure_events
from app.domain.schedule import AutoPause
from app.domain.target import EndpointTarget, EndpointWebhook, Target, TopicTarget
from app.domain.tenants import endpoint_in_key
from app.store.dialects import dialect_of
from app.store.loop.claim_mix import ClaimMix
from app.store.loop.completion import finish_one_shots, finish_recurring
from app.store.loop.failures import record_dead_letters
from app.store.loop.fanout import fan_out
from app.store.loop.sql import query, typed
from app.store.records.endpoint_targets import resolve_endpoints
from app.store.records.operator_events import record_operator_events
from app.store.schema import codec
from app.store.schema.rows import attempt_id, pending_row, rules_of_row, skip_row, truncate_error
from app.store.schema.tables import attempts, occurrences
from app.store.schema.types import UUID, UTCDateTime

LEASE_EXPIRED_ERROR = (
    "the lease of the last attempt expired with no result recorded "
    "(its replica stopped or stalled); the attempt budget is spent"
)

# The error of an attempt recorded as lease_expired.
LOST_ATTEMPT_ERROR = (
    "the lease expired with no result recorded (its replica stopped or stalled before "
    "settling this attempt)"
)

_T = TypeVar("_T")


def _lost_lease(row: Any) -> LostLease | None:
    if row.lost_token is None:
        return None
    return LostLease(
        owner=row.lost_owner,
        claimed_at=row.lost_at,
        lease_until=row.lost_until,
        ahead=bool(row.lost_ahead),
    )


def _lost_row(lost: LostAttempt) -> dict[str, Any]:
    return {
        "id": attempt_id(lost.started_at),
        "occurrence_id": lost.occurrence_id,
        "attempt": lost.attempt,
        "started_at": lost.started_at,
        "duration_ms": lost.duration_ms,
        "outcome": AttemptOutcome.LEASE_EXPIRED.value,
        "status_code": None,
        "error": LOST_ATTEMPT_ERROR,
        "response_excerpt": None,
        "replica": lost.replica,
    }


@dataclass(frozen=True, slots=True)
class _Read:
    """A claimed row's origin and stored target (`_stored_target`), read once, and the
    endpoint it delivers to (`_endpoint_of`; None: none)."""

    origin: Origin
    stored: Target | Unreadable
    endpoint: uuid.UUID | None


def _claimed_row(
    row: Row[Any], read: _Read, endpoints: Mapping[uuid.UUID, EndpointWebhook]
) -> ClaimedRow:
    """A claimed row as the planner reads it; a definition that does not read back is
    handed over as such, to fail its own row only. A failure callback delivers its own
    body to its schedule's `on_failure` target; a row of an endpoint, what `endpoints`
    holds of it now, or fails as an unreadable definition does when it is gone."""
    origin, endpoint = read.origin, read.endpoint
    callback = origin is Origin.CALLBACK
    target = read.stored
    if endpoint is not None:
        found = endpoints.get(endpoint)
        target = (
            found
            if found is not None
            else Unreadable(ValueError(f"endpoint {endpoint} no longer exists"))
        )
    return ClaimedRow(
        occurrence_id=row.occurrence_id,
        schedule_id=row.schedule_id,
        fire_at=row.fire_at,
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        origin=origin,
        first_claim=bool(row.first_claim),
        event_type=CALLBACK_EVENT_TYPE if callback else row.event_type,
        body=row.callback_body if callback else row.body,
        target=target,
        trigger=_readable(codec.trigger, row.trigger),
        jitter_seconds=row.jitter_seconds,
        lost=_lost_lease(row),
        due_at=_due_at(row),
        flow_key=row.flow_key,
        retry=codec.retry(row.retry),
        traceparent=row.traceparent,
        tenant=row.tenant,
        parent_id=row.parent_id,
    )


def _on_failure(stored: Any) -> Target:
    """A callback's target: its schedule's `on_failure`, which a PATCH may have removed
    (and with it the callbacks still pending) since the callback was written."""
    if stored is None or stored == "null":  # SQL NULL, or JSON null
        raise ValueError("the schedule has no on_failure target any more")
    return codec.target(stored)


def _due_at(row: Any) -> datetime:
    """When a claimed row was due: before the lease, `lost_until` held its `available_at`
    (its jittered or retry instant, a lost lease's end), and a tick is never due before
    its own instant, even when a replica that claimed it ahead handed it back."""
    fire_at: datetime = row.fire_at
    return fire_at if row.lost_until is None else max(row.lost_until, fire_at)


def _readable(read: Callable[[Any], _T], stored: Any) -> _T | Unreadable:
    try:
        return read(stored)
    except Exception as exc:  # an unreadable definition fails its row in the plan
        return Unreadable(exc)


def _read(row: Row[Any]) -> _Read:
    """A claimed row's origin, its stored target (a failure callback's: its schedule's
    `on_failure`, never an endpoint) and the endpoint it delivers to: a fan-out delivery's,
    named by its key; a schedule's that targets one."""
    origin = Origin(row.origin)
    if origin is Origin.CALLBACK:
        return _Read(origin, _readable(_on_failure, row.on_failure), None)
    stored = _readable(codec.target, row.target)
    if origin is Origin.FANOUT:
        return _Read(origin, stored, endpoint_in_key(row.flow_key))
    endpoint = stored.endpoint_id if isinstance(stored, EndpointTarget) else None
    return _Read(origin, stored, endpoint)


async def _claimed_rows(conn: AsyncConnection, claimed: Sequence[Row[Any]]) -> list[ClaimedRow]:
    """The claimed rows as the planner reads them, each endpoint target replaced by what its
    attempt sends now: the endpoint's request and live secrets (one read for the claim,
    none when no row targets an endpoint)."""
    reads = [_read(row) for row in claimed]
    wanted = {read.endpoint for read in reads if read.endpoint is not None}
    found: Mapping[uuid.UUID, EndpointWebhook] = {}
    if wanted:
        found = await resolve_endpoints(conn, wanted, claimed[0].claimed_at)
    return [_claimed_row(row, read, found) for row, read in zip(claimed, reads, strict=True)]


def _tenant_of(delivery: Delivery) -> str:
    return delivery.tenant


def _error(failed: Unplannable) -> str:
    return truncate_error(failed.error) or ""


@dataclass(frozen=True, slots=True)
class Claimed:
    """What one claim leased, and how soon more may be claimed (None: not known): when it
    found nothing, the next occurrence's due instant or a held-back key's next token or
    back-off's end; when it found some, only the latter. `not_before`: the due instant of
    each delivery a claim ahead leased before it was due; it must not start earlier (a
    delivery not listed is due already). `more`: the claim stopped at its limit with more
    due, though it may have leased fewer than asked (room kept for keyed rows)."""

    deliveries: list[Delivery]
    due_in: float | None = None
    not_before: dict[uuid.UUID, datetime] = field(default_factory=dict)
    more: bool = False
    # Due flow keys the claim held back, by why and tenant (`KeyedClaim.held_back`).
    held_back: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # Schedules the claim's own dead letters paused (`record_dead_letters`).
    auto_paused: Sequence[AutoPause] = ()
    # Deliveries due now whose attempt has not started: the claim found more than could
    # start at once (its `start`). Each must be marked started (`Dialect.mark_started`)
    # before it is sent; a lease lost before that costs no attempt.
    unstarted: frozenset[uuid.UUID] = frozenset()
    # The database's instant of the claim (None: it leased nothing).
    claimed_at: datetime | None = None
    # A claim ahead's reading of the database's clock (`Leased.reading`): `not_before` is
    # read against that clock (`app.worker.database_clock`), never against the replica's,
    # which may run ahead of it.
    reading: tuple[datetime, float] | None = None


class ClaimStore:
    """The claim statement and the writes it plans; runs inside the caller's transaction."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()  # jitter draws
        self._mix = ClaimMix()

    @property
    def weights(self) -> dict[str, int]:
        """The tenants' weights as the claims last read them (a tenant not named: 1)."""
        return self._mix.weights

    async def claim(
        self,
        conn: AsyncConnection,
        *,
        limit: int,
        lease: float,
        owner: str,
        backoff: Callable[[int], float] = lambda attempt: 1.0,
        ahead: float = 0.0,
        start: int | None = None,
        skip: Sequence[str] = (),
    ) -> Claimed:
        """Lease due occurrences and materialize the next tick of each recurring schedule.

        With `ahead` > 0 it also leases occurrences due within that many seconds that no
        lease holds. Each delivery not due yet at the claim's instant has its due instant in
        `not_before`, and must not start before it. The loop claims a steady stream of ticks
        this way, so that a claim's round trips happen before the ticks are due, not after.

        `start` is how many attempts may start at once (the loop's free slots; None: all).
        A claim that finds more due rows than that starts none of them: they are listed in
        `unstarted`, charged only once marked started, so that a replica that dies with
        them waiting behind its deliveries in flight costs them no attempt.

        `skip` names destinations the loop has no room for (`Lanes.saturated`): their rows
        stay in the store for a replica that has, rather than wait in this one's lanes.

        The next tick is written in this same transaction, so a recurring schedule always
        has its future occurrence however long the current one keeps retrying.

        Each row is planned on its own: a row whose stored definition cannot be read or
        planned (an older version's data, a bug) does not fail the claim. Its attempt is
        settled here, as a failure that names the cause: retried after `backoff(attempt)`
        seconds, dead-lettered once its budget is spent. Every other row goes on as usual.
        """
        token = uuid.uuid4()
        dialect = dialect_of(conn)

        # First attempts first; retries, replays and keyed rows in the room they leave.
        leased = await self._mix.lease(
            conn,
            limit=limit,
            lease=lease,
            token=token,
            owner=owner,
            ahead=ahead,
            start=start,
            skip=skip,
        )
        claimed, more, keyed = leased.rows, leased.more, leased.keyed
        if not claimed:
            return Claimed(
                [], keyed.held_back_in, more=more, held_back=keyed.held_back, reading=leased.reading
            )
        now = claimed[0].claimed_at
        rows = await _claimed_rows(conn, claimed)
        not_before = {
            row.occurrence_id: row.due_at
            for row in rows
            if row.due_at is not None and row.due_at > now
        }
        unstarted = frozenset(
            row.occurrence_id
            for row in claimed
            if row.lease_ahead and row.occurrence_id not in not_before
        )
        cadence = cadence_schedules(rows)
        rules = {r.schedule_id: rules_of_row(r) for r in claimed if r.schedule_id in cadence}
        plan = plan_claim(
            [
                replace(row, rules=rules[row.schedule_id]) if row.schedule_id in rules else row
                for row in rows
            ],
            now,
            token,
            self._rng,
        )
        await dialect.insert_ignoring(
            conn, occurrences, [pending_row(o, now) for o in plan.pending], "occurrence_id"
        )
        if plan.unfired:
            await self._skip_claimed(conn, token, plan.unfired, now)
        recorded = await dialect.insert_new(
            conn, occurrences, [skip_row(entry, now) for entry in plan.skips], "occurrence_id"
        )
        await self._apply_tallies(conn, plan.tallies_recorded(recorded))
        if plan.lost:  # one statement; none at all in the usual claim
            await conn.execute(attempts.insert().values([_lost_row(a) for a in plan.lost]))
        if plan.exhausted:
            await self._dead_letter_expired(conn, token, plan.exhausted, now)
        if plan.failed:
            await self._settle_unplannable(conn, token, plan.failed, now, backoff, owner)
        # Dead letters the claim itself made count toward a schedule's auto-pause too.
        spent = {f.occurrence_id for f in plan.failed if f.spent} | set(plan.exhausted)
        dead = [
            (r.schedule_id, r.occurrence_id)
            for r in rows
            if r.occurrence_id in spent and r.origin not in NOT_FIRINGS
        ]
        auto_paused = await record_dead_letters(conn, dead, now)
        if dead:
            failed = {f.occurrence_id: f.error for f in plan.failed}
            told = [
                DeadLettered(
                    r.tenant,
                    r.occurrence_id,
                    r.schedule_id,
                    r.event_type,
                    r.attempts,
                    failed.get(r.occurrence_id, LEASE_EXPIRED_ERROR),
                )
                for r in rows
                if r.occurrence_id in spent and r.origin is not Origin.CALLBACK
            ]
            await record_operator_events(conn, failure_events(told, auto_paused), now)
        await finish_one_shots(conn, plan.finished_one_shots, now)
        if plan.done_recurring:
            await finish_recurring(conn, plan.done_recurring, now)
        # A topic's occurrences fan out here, in this transaction: their deliveries are
        # claimed next (`more`), each under its endpoint's key.
        topical = [d for d in plan.deliveries if isinstance(d.target, TopicTarget)]
        if topical:
            await fan_out(conn, topical, token, now)
            await finish_one_shots(conn, {d.schedule_id for d in topical if d.one_shot}, now)
            more = True
        # Each tenant's deliveries at its weight's pace (each tenant's in fire order), so
        # that the lanes start them so too: no tenant's backlog queues ahead of another's.
        deliveries = interleave(
            [d for d in plan.deliveries if not isinstance(d.target, TopicTarget)],
            _tenant_of,
            self._mix.weights,
        )
        return Claimed(
            deliveries,
            keyed.held_back_in,
            not_before,
            more,
            keyed.held_back,
            auto_paused,
            unstarted,
            claimed_at=now,
            reading=leased.reading,
        )

    async def _skip_claimed(
        self, conn: AsyncConnection, token: uuid.UUID, ids: list[uuid.UUID], now: datetime
    ) -> None:
        """Claimed cadence occurrences that their misfire policy drops: recorded as skipped,
        their attempt not counted (named SQL `skip_claimed`)."""
        statement = _named("skip_claimed", dialect_of(conn).name)
        await conn.execute(statement, {"ids": ids, "token": token, "now": now})

    async def _apply_tallies(self, conn: AsyncConnection, tallies: dict[uuid.UUID, Tally]) -> None:
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
        dialect = dialect_of(conn).name
        if plain:  # the usual case: one tick fired on time, one statement for all
            await conn.execute(_named("tick", dialect), {"ids": plain})
        if params:
            await conn.execute(_named("tally", dialect), params)

    async def _dead_letter_expired(
        self,
        conn: AsyncConnection,
        token: uuid.UUID,
        exhausted: list[uuid.UUID],
        now: datetime,
    ) -> None:
        await conn.execute(
            _named("dead_letter_expired", dialect_of(conn).name),
            {"ids": exhausted, "token": token, "now": now, "last_error": LEASE_EXPIRED_ERROR},
        )

    async def _settle_unplannable(
        self,
        conn: AsyncConnection,
        token: uuid.UUID,
        failed: list[Unplannable],
        now: datetime,
        backoff: Callable[[int], float],
        owner: str,
    ) -> None:
        """Claimed rows that could not be planned: each a failed attempt, retried with the
        usual backoff or dead-lettered when its budget is spent. A first claim stays
        unplanned, so the retry plans it again (and a replay of the dead letter too).
        Each is in the attempt log as well: made at the claim, in no time, with no reply."""
        dead = [f for f in failed if f.spent]
        retry = [f for f in failed if not f.spent]
        await conn.execute(
            attempts.insert().values(
                [
                    {
                        "id": attempt_id(now),
                        "occurrence_id": f.occurrence_id,
                        "attempt": f.attempt,
                        "started_at": now,
                        "duration_ms": 0,
                        "outcome": (
                            AttemptOutcome.DEAD_LETTERED if f.spent else AttemptOutcome.RETRY
                        ).value,
                        "status_code": None,
                        "error": _error(f),
                        "response_excerpt": None,
                        "replica": owner,
                    }
                    for f in failed
                ]
            )
        )
        dialect = dialect_of(conn).name
        if dead:
            await conn.execute(
                _named("unplannable_dead", dialect),
                [
                    {
                        "b_id": f.occurrence_id,
                        "token": token,
                        "b_error": _error(f),
                        "b_reset": True,
                        "now": now,
                    }
                    for f in dead
                ],
            )
        if retry:
            await conn.execute(
                _named("unplannable_retry", dialect),
                [
                    {
                        "b_id": f.occurrence_id,
                        "token": token,
                        "b_error": _error(f),
                        "b_reset": f.first_claim,
                        "b_at": now + timedelta(seconds=backoff(f.attempt)),
                        "now": now,
                    }
                    for f in retry
                ],
            )


# Every parameter of the claim's own named statements, typed once.
_PARAMETERS = (
    sa.bindparam("ids", expanding=True, type_=UUID),
    sa.bindparam("token", type_=UUID),
    sa.bindparam("now", type_=UTCDateTime()),
    sa.bindparam("last_error", type_=sa.String()),
    sa.bindparam("b_id", type_=UUID),
    sa.bindparam("b_error", type_=sa.String()),
    sa.bindparam("b_reset", type_=sa.Boolean()),
    sa.bindparam("b_at", type_=UTCDateTime()),
    sa.bindparam("s_id", type_=UUID),
    sa.bindparam("s_ticks", type_=sa.Integer()),
    sa.bindparam("s_unfired", type_=sa.Integer()),
    sa.bindparam("s_skipped", type_=sa.Integer()),
    sa.bindparam("s_reason", type_=sa.String()),
)


@functools.cache
def _named(name: str, dialect: str) -> sa.TextClause:
    """One of the claim's own named statements, beside the claim, typed."""
    return typed(query(name, dialect), *_PARAMETERS)
