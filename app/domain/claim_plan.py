"""What a claim makes of the occurrences it leased: per row a delivery, a skipped tick, a
dead letter or a failed attempt, the occurrences its cadence writes, and the schedule
counters that change. Pure: the store reads the rows and writes the plan.

Invariant: each row is planned on its own. A row whose stored definition cannot be read
or planned fails alone, as an attempt that names the cause; the other rows go on.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from app.domain import misfire
from app.domain.ids import gap_entry_id, occurrence_id
from app.domain.misfire import Rules, SkipReason
from app.domain.occurrence import NOT_FIRINGS, Delivery, Origin
from app.domain.retry import RetrySpec
from app.domain.target import Target
from app.domain.tenants import DEFAULT_TENANT
from app.domain.trigger import Trigger, is_recurring


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A stored definition that could not be read back; planning its row raises `error`."""

    error: Exception


@dataclass(frozen=True, slots=True)
class LostLease:
    """The lease a claim replaced while its token was still set. A settle or a release
    clears the token, so this is an attempt that nobody settled: its replica died or
    stalled. `claimed_at` is when that lease's attempt could start (the occurrence's
    `leased_at`, which only a claim writes; None for a lease from before it was kept);
    `lease_until` is when the lease ended. `ahead`: it was claimed ahead of its instant and
    its replica never started it, so there is no attempt to record and none was charged."""

    owner: str | None
    claimed_at: datetime | None
    lease_until: datetime | None
    ahead: bool = False


@dataclass(frozen=True, slots=True)
class LostAttempt:
    """An attempt to record as `lease_expired`: the claim that takes its occurrence again
    writes it, since its own replica never did.

    Its start is the instant its claim leased it (the delivery itself began moments later,
    an instant no one recorded). Its duration is its lease's length: how long the
    occurrence was held with no result; the attempt ran at most that long, and 0 would
    read as an attempt that ended at once."""

    occurrence_id: uuid.UUID
    attempt: int
    started_at: datetime
    duration_ms: int
    replica: str | None


def lost_attempt(row: ClaimedRow) -> LostAttempt | None:
    """The attempt before this claim, when its lease ran out unsettled."""
    lost = row.lost
    previous = row.attempts - 1  # this claim counted its own attempt already
    if lost is None or lost.ahead or previous < 1:
        return None
    started_at = lost.claimed_at or lost.lease_until
    if started_at is None:
        return None
    held = (lost.lease_until - started_at) if lost.lease_until is not None else timedelta()
    return LostAttempt(
        occurrence_id=row.occurrence_id,
        attempt=previous,
        started_at=started_at,
        duration_ms=max(0, held // timedelta(milliseconds=1)),
        replica=lost.owner,
    )


@dataclass(frozen=True, slots=True)
class ClaimedRow:
    """A leased occurrence as the claim returns it, with its schedule's definition.
    `attempts` counts the attempt this claim starts; `rules` are known only for the
    schedules whose cadence this claim plans (`cadence_schedules`)."""

    occurrence_id: uuid.UUID
    schedule_id: uuid.UUID
    fire_at: datetime
    attempts: int
    max_attempts: int
    origin: Origin
    first_claim: bool
    event_type: str
    body: str | None
    target: Target | Unreadable
    trigger: Trigger | Unreadable
    jitter_seconds: float
    rules: Rules | None = None
    # Set when the previous attempt's lease ran out with no settle.
    lost: LostLease | None = None
    # When it became claimable before this claim (its jittered instant, its retry instant);
    # a release of an attempt that never started gives it back this instant.
    due_at: datetime | None = None
    # Its flow key, which the occurrences its cadence writes carry on.
    flow_key: str | None = None
    # Its schedule's own retry policy (None: the service's).
    retry: RetrySpec | None = None
    # Its schedule's stored W3C traceparent (None: none), which its delivery sends.
    traceparent: str | None = None
    # Its schedule's tenant, which its delivery names.
    tenant: str = DEFAULT_TENANT
    # A fan-out's delivery: the topic's occurrence it delivers.
    parent_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class PendingOccurrence:
    """A not-yet-fired occurrence to write; its id is derived, so writing it twice is a no-op."""

    occurrence_id: uuid.UUID
    schedule_id: uuid.UUID
    fire_at: datetime
    available_at: datetime
    origin: Origin
    flow_key: str | None = None


def pending_occurrence(
    schedule_id: uuid.UUID,
    fire_at: datetime,
    origin: Origin,
    *,
    delay: float = 0.0,
    flow_key: str | None = None,
) -> PendingOccurrence:
    """The firing of `schedule_id` at `fire_at`; `delay` is its jitter: it becomes
    claimable that much after its nominal instant."""
    return PendingOccurrence(
        occurrence_id=occurrence_id(schedule_id, fire_at),
        schedule_id=schedule_id,
        fire_at=fire_at,
        available_at=fire_at + timedelta(seconds=delay) if delay else fire_at,
        origin=origin,
        flow_key=flow_key,
    )


@dataclass(frozen=True, slots=True)
class SkipEntry:
    """The record of a tick that did not fire (`count` > 1: the rest of a gap)."""

    occurrence_id: uuid.UUID
    schedule_id: uuid.UUID
    fire_at: datetime
    reason: SkipReason
    count: int


def skip_entry(schedule_id: uuid.UUID, skip: misfire.Skip) -> SkipEntry:
    """A skipped real tick keeps its usual id (a backfill can still fire it); a DST gap
    entry gets an id of its own, since the instant the clocks jump may also be a real tick."""
    id_ = (
        gap_entry_id(schedule_id, skip.fire_at)
        if skip.reason == "dst_gap"
        else occurrence_id(schedule_id, skip.fire_at)
    )
    return SkipEntry(id_, schedule_id, skip.fire_at, skip.reason, skip.count)


@dataclass(frozen=True, slots=True)
class Unplannable:
    """A claimed row whose definition could not be read or planned: a failed attempt."""

    occurrence_id: uuid.UUID
    schedule_id: uuid.UUID
    attempt: int
    max_attempts: int
    first_claim: bool
    error: str

    @property
    def spent(self) -> bool:
        """Its attempt budget is spent: dead-lettered rather than retried."""
        return self.attempt >= self.max_attempts


@dataclass(frozen=True, slots=True)
class Tally:
    """One schedule's counter changes in a claim: ticks of its trigger fired (what
    max_occurrences bounds), firings counted at the claim that did not fire, skipped ticks
    and the reason of the last one."""

    ticks: int = 0
    unfired: int = 0
    skipped: int = 0
    reason: SkipReason | None = None


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    """Everything one claim writes, in the order its rows were planned."""

    deliveries: list[Delivery] = field(default_factory=list)
    # Catch-ups and next ticks, written unless they exist already.
    pending: list[PendingOccurrence] = field(default_factory=list)
    # Skipped ticks, written unless they exist already (`tallies_recorded` counts them).
    skips: list[SkipEntry] = field(default_factory=list)
    # Claimed occurrences that their misfire policy drops: recorded as skipped.
    unfired: list[uuid.UUID] = field(default_factory=list)
    # Claimed occurrences whose last allowed attempt's lease ran out: dead letters.
    exhausted: list[uuid.UUID] = field(default_factory=list)
    # Earlier attempts whose lease ran out unsettled, for the attempt log.
    lost: list[LostAttempt] = field(default_factory=list)
    failed: list[Unplannable] = field(default_factory=list)
    tallies: dict[uuid.UUID, Tally] = field(default_factory=dict)
    # Schedules that may be done once this claim commits (the check is guarded by
    # "nothing pending", so a schedule listed in vain costs only a statement).
    finished_one_shots: set[uuid.UUID] = field(default_factory=set)
    done_recurring: set[uuid.UUID] = field(default_factory=set)

    def tallies_recorded(self, recorded: Collection[uuid.UUID]) -> dict[uuid.UUID, Tally]:
        """The tallies with each skip entry counted where it was written (`recorded` ids):
        a tick that already has an entry (a backfill, or a DST gap an earlier plan
        recorded) is not counted twice."""
        tallies = dict(self.tallies)
        for entry in self.skips:
            if entry.occurrence_id in recorded:
                tally = tallies[entry.schedule_id]
                tallies[entry.schedule_id] = replace(
                    tally, skipped=tally.skipped + entry.count, reason=entry.reason
                )
        return tallies


def _plans_cadence(row: ClaimedRow) -> bool:
    """A cadence tick's first claim plans what follows it: catch-ups, skips, the next tick."""
    return row.first_claim and row.origin == Origin.SCHEDULE


def cadence_schedules(rows: Iterable[ClaimedRow]) -> set[uuid.UUID]:
    """The schedules whose rules this claim needs: those of recurring cadence ticks
    claimed for the first time (a row whose trigger cannot be read fails on its own)."""
    return {
        row.schedule_id
        for row in rows
        if _plans_cadence(row)
        and not isinstance(row.trigger, Unreadable)
        and is_recurring(row.trigger)
    }


def describe(exc: BaseException) -> str:
    """An exception as one line: its type and the start of its message."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


@dataclass
class _RowPlan:
    """What one row becomes, before it joins the claim's plan."""

    recurring: bool
    exhausted: bool = False  # its lease ran out on its last allowed attempt
    planned: bool = False  # its cadence was planned
    ticks: int = 0  # ticks of the trigger this claim fired
    unfired: bool = False  # its misfire policy drops it: recorded as skipped
    last: bool = True  # nothing may follow it: the schedule may be done
    pending: list[PendingOccurrence] = field(default_factory=list)
    skips: list[SkipEntry] = field(default_factory=list)
    delivery: Delivery | None = None


def _plan_row(
    row: ClaimedRow, now: datetime, lease_token: uuid.UUID, rng: random.Random
) -> _RowPlan:
    """A delivery, a skipped tick or a dead letter, and the occurrences its cadence writes.
    Raises on a row whose stored definition is not valid; the caller isolates it."""
    if isinstance(row.trigger, Unreadable):
        raise row.trigger.error
    trigger = row.trigger
    recurring = is_recurring(trigger)
    plan = _RowPlan(recurring=recurring)
    if row.attempts > row.max_attempts:
        # Its last attempt's lease ran out with no result: the budget is spent, so it
        # is dead-lettered rather than retried forever (a replica that crashes on it
        # every time must not keep the fleet busy).
        plan.exhausted = True
        return plan
    # Whether the schedule may be done once this settles: true for everything but a
    # cadence tick that planned its successor.
    last = True
    if _plans_cadence(row) and row.rules is not None:
        cadence = misfire.plan(trigger, row.rules, row.fire_at, now)
        plan.planned = True
        _materialize(row, cadence, rng, plan)
        last = cadence.upcoming is None
        if not cadence.fire:
            plan.unfired = True
            plan.last = last
            return plan
    if isinstance(row.target, Unreadable):
        raise row.target.error
    # A failure callback settles nothing of its schedule's: it is not the schedule's firing.
    # A fan-out's delivery is its topic occurrence's: its settle may end a one-shot, and
    # may end a recurring schedule whose last tick it delivers (checked at each settle).
    firing = row.origin is not Origin.CALLBACK
    fanout = row.origin is Origin.FANOUT
    plan.delivery = Delivery(
        occurrence_id=row.occurrence_id,
        schedule_id=row.schedule_id,
        fire_at=row.fire_at,
        attempt=row.attempts,
        max_attempts=row.max_attempts,
        lease_token=lease_token,
        event_type=row.event_type,
        body=(row.body or "null").encode(),
        target=row.target,
        one_shot=firing and not recurring,
        last=firing and recurring and (last or fanout),
        origin=row.origin,
        due_at=row.due_at,
        flow_key=row.flow_key,
        retry=row.retry,
        first=row.first_claim,
        traceparent=row.traceparent,
        tenant=row.tenant,
        parent_id=row.parent_id,
    )
    return plan


def _materialize(
    row: ClaimedRow, cadence: misfire.Plan, rng: random.Random, plan: _RowPlan
) -> None:
    """The occurrences a cadence claim writes: catch-ups, the next tick, skipped ticks
    (but for the claimed tick's own misfire: the claimed row itself records it)."""
    sid = row.schedule_id
    for tick in cadence.catch_up:
        plan.pending.append(pending_occurrence(sid, tick, Origin.CATCHUP, flow_key=row.flow_key))
    if cadence.upcoming is not None:
        delay = rng.uniform(0, row.jitter_seconds or 0.0)
        plan.pending.append(
            pending_occurrence(
                sid, cadence.upcoming, Origin.SCHEDULE, delay=delay, flow_key=row.flow_key
            )
        )
    for skip in cadence.skips:
        if skip.fire_at != row.fire_at or skip.reason == "dst_gap":
            plan.skips.append(skip_entry(sid, skip))
    plan.ticks = cadence.fired


class _Builder:
    """Gathers the row plans into the claim's plan."""

    def __init__(self) -> None:
        self.plan = ClaimPlan()

    def add(self, row: ClaimedRow, planned: _RowPlan) -> None:
        plan, sid = self.plan, row.schedule_id
        if planned.exhausted:
            plan.exhausted.append(row.occurrence_id)
            (plan.done_recurring if planned.recurring else plan.finished_one_shots).add(sid)
            return
        if planned.planned:
            tally = plan.tallies.get(sid, Tally())
            tally = replace(tally, ticks=tally.ticks + planned.ticks)
            if planned.unfired:  # the claimed occurrence itself is recorded as skipped
                tally = replace(
                    tally, unfired=tally.unfired + 1, skipped=tally.skipped + 1, reason="misfire"
                )
            plan.tallies[sid] = tally
        plan.pending.extend(planned.pending)
        plan.skips.extend(planned.skips)
        if planned.unfired:
            plan.unfired.append(row.occurrence_id)
            if planned.last:
                plan.done_recurring.add(sid)
            return
        assert planned.delivery is not None
        plan.deliveries.append(planned.delivery)

    def fail(self, row: ClaimedRow, error: str) -> None:
        """The row is settled as a failed attempt; it did not fire, so a first claim's
        firing is taken back (the claim counts every first claim as a firing, but for a
        failure callback's, which is none)."""
        failed = Unplannable(
            row.occurrence_id,
            row.schedule_id,
            row.attempts,
            row.max_attempts,
            row.first_claim,
            error,
        )
        self.plan.failed.append(failed)
        if failed.first_claim and row.origin not in NOT_FIRINGS:
            tally = self.plan.tallies.get(row.schedule_id, Tally())
            self.plan.tallies[row.schedule_id] = replace(tally, unfired=tally.unfired + 1)
        if failed.spent:
            self.plan.finished_one_shots.add(row.schedule_id)


def plan_claim(
    rows: Sequence[ClaimedRow], now: datetime, lease_token: uuid.UUID, rng: random.Random
) -> ClaimPlan:
    """The plan for the rows one claim leased at `now` under `lease_token`, in fire order;
    `rng` draws each next tick's jitter."""
    builder = _Builder()
    for row in sorted(rows, key=lambda r: (r.fire_at, r.occurrence_id)):
        if (lost := lost_attempt(row)) is not None:
            builder.plan.lost.append(lost)
        try:
            planned = _plan_row(row, now, lease_token, rng)
        except Exception as exc:  # isolated: this row fails, the claim goes on
            builder.fail(row, f"cannot plan this occurrence: {describe(exc)}")
            continue
        builder.add(row, planned)
    return builder.plan
