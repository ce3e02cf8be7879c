"""Schedule use cases: create (idempotent), batch, read, change, pause, resume, cancel,
trigger, and the audit events each of them writes in its own transaction.

`actor` is who asks: the API key's name, "cli" from the operator CLI, or None when no keys
are set."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from typing import cast

from app.domain.addresses import AddressPolicy
from app.domain.errors import ConflictError, InvalidInputError, NotFoundError, PayloadTooLargeError
from app.domain.filters import ScheduleFilter
from app.domain.ids import format_instant, occurrence_id, uuid7
from app.domain.limits import MAX_BATCH
from app.domain.misfire import skipped_range
from app.domain.occurrence import Occurrence, OccurrenceStatus, Origin
from app.domain.placeholders import PlaceholderError, keep_stored_secrets
from app.domain.schedule import (
    MANUAL_PAUSE,
    NOT_NULLABLE,
    RULE_FIELDS,
    TERMINAL,
    EventKind,
    Schedule,
    ScheduleDraft,
    ScheduleEvent,
    SchedulePatch,
    ScheduleSpec,
    ScheduleStatus,
    check_patch,
    check_pause,
    check_resume,
    check_trigger,
    check_version,
    rules_of,
)
from app.domain.target import Target, WebhookTarget
from app.domain.trigger import (
    Trigger,
    check_cadence,
    first_fire_or_refuse,
    is_recurring,
    next_fire_after,
    resolve,
    ticks_between,
)
from app.service.addresses import HostResolver, TargetAddresses
from app.settings import Settings
from app.store import pausing, settlements
from app.store.cadence import CadenceStore
from app.store.clock import transaction_now
from app.store.database import Connection, Database
from app.store.events import EventStore, NewEvent
from app.store.rows import new_occurrence
from app.store.schedules import ScheduleStore
from app.store.wakeups import Wakeups

# json.dumps(value, separators=(",", ":"), ensure_ascii=False), its encoder made once.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
MAX_BACKFILL = 1000
# PATCH fields that may not be null (max_occurrences may: it lifts the bound).
# PATCH fields that change which ticks come, or when: the next occurrence is planned again.
RECOMPUTE = frozenset({"trigger", "jitter_seconds", "max_occurrences"})
# PATCH fields that change the cadence itself: refused once a schedule has finished.
SHAPE = frozenset({"trigger", "max_occurrences"})


def _planned(trigger: Trigger, now: datetime, pointer: str) -> tuple[Trigger, datetime]:
    """A new schedule's trigger pinned to `now`, and its first fire instant; a trigger too
    sparse, or whose bounds leave nothing to fire, is refused naming it (under `pointer`)."""
    check_cadence(trigger, pointer)
    resolved = resolve(trigger, now)
    return resolved, first_fire_or_refuse(resolved, now, pointer)


def _kept_secrets(new: Target, stored: Target | None, pointer: str) -> Target:
    """`new` with each redacted form a client sent back replaced by the stored secret
    (`app.domain.placeholders`); one that nothing stored stands for is refused."""
    try:
        return keep_stored_secrets(new, stored)
    except PlaceholderError as exc:
        raise InvalidInputError(str(exc), pointer=f"{pointer}/{exc.field}") from None


@dataclass(frozen=True, slots=True)
class Backfill:
    """Every tick in the range with its occurrence id, and the ids this call made due."""

    ticks: list[tuple[datetime, uuid.UUID]]
    created: list[uuid.UUID]


@dataclass(frozen=True, slots=True)
class Created:
    schedule: Schedule
    created: bool


def _due(draft: ScheduleDraft) -> datetime:
    """When a new schedule's first occurrence becomes claimable."""
    return draft.first_fire_at + timedelta(seconds=draft.first_delay)


def _stored_value(schedule: Schedule, field: str) -> object:
    """A schedule's value of a PATCH field, by the field's name."""
    if field in RULE_FIELDS:
        return getattr(schedule.rules, RULE_FIELDS[field])
    return getattr(schedule, field)


def _created(drafts: Sequence[ScheduleDraft], actor: str | None) -> list[NewEvent]:
    return [NewEvent(d.id, EventKind.CREATED, version=1, actor=actor) for d in drafts]


def _fingerprint(spec: ScheduleSpec) -> str:
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class ScheduleService:
    def __init__(
        self,
        database: Database,
        settings: Settings,
        *,
        rng: random.Random | None = None,
        wakeups: Wakeups | None = None,
        resolver: HostResolver | None = None,
    ) -> None:
        self._db = database
        self._wakeups = wakeups or Wakeups()
        self._settings = settings
        self._rng = rng or random.SystemRandom()
        self._schedules = ScheduleStore()
        self._occurrences = CadenceStore()
        self._events = EventStore()
        self._addresses = TargetAddresses(AddressPolicy.of(*settings.target_rules()), resolver)

    # -- create ---------------------------------------------------------------------

    def _check_payload(self, payload: object, pointer: str) -> None:
        size = len(_COMPACT(payload).encode())
        limit = self._settings.max_payload_bytes
        if size > limit:
            raise PayloadTooLargeError(
                f"payload is {size} bytes; the limit is {limit} (CHRONOQ_MAX_PAYLOAD_BYTES)",
                pointer=pointer,
            )

    def _check_target(self, spec: ScheduleSpec | SchedulePatch, pointer: str) -> None:
        if (
            spec.target is not None
            and spec.target.type == "rabbitmq"
            and not self._settings.amqp_url
        ):
            raise InvalidInputError(
                "a rabbitmq target needs AMQP_URL to be configured on the service", pointer=pointer
            )

    async def _check_urls(self, specs: Sequence[tuple[ScheduleSpec | SchedulePatch, str]]) -> None:
        """Webhook hosts that are, or resolve to, a denied address are refused (DESIGN 8);
        each (spec, pointer prefix) names its URL as `<prefix>/target/url`."""
        # A URL is judged by itself: each distinct one is checked once, at its first item
        # (the same refusal, at the same pointer, as checking every item in order).
        first: dict[str, tuple[WebhookTarget, str]] = {}
        for spec, prefix in specs:
            if isinstance(spec.target, WebhookTarget) and spec.target.url not in first:
                first[spec.target.url] = (spec.target, f"{prefix}/target/url")
        await self._addresses.check(first.values())

    def _draft(
        self,
        spec: ScheduleSpec,
        now: datetime,
        plan: tuple[Trigger, datetime],
        key: str | None = None,
        request_hash: str | None = None,
        created_by: str | None = None,
    ) -> ScheduleDraft:
        trigger, first = plan
        return ScheduleDraft(
            id=uuid7(now, self._rng.getrandbits(74)),
            name=spec.name,
            event_type=spec.event_type,
            payload=spec.payload,
            target=spec.target,
            trigger=trigger,
            max_attempts=spec.max_attempts or self._settings.max_attempts,
            labels=spec.labels,
            first_fire_at=first,
            jitter_seconds=spec.jitter_seconds,
            rules=rules_of(spec),
            pause_after_failures=spec.pause_after_failures,
            first_delay=self._jitter(spec.jitter_seconds),
            idempotency_key=key,
            request_hash=request_hash,
            created_by=created_by,
        )

    def _jitter(self, seconds: float) -> float:
        return self._rng.uniform(0, seconds) if seconds else 0.0

    async def _check_names(
        self, conn: Connection, specs: Sequence[ScheduleSpec], batch: bool
    ) -> None:
        names = [spec.name for spec in specs if spec.name is not None]
        taken = set(await self._schedules.name_taken(conn, names))
        seen: set[str] = set()
        for index, spec in enumerate(specs):
            pointer = f"#/items/{index}/name" if batch else "#/name"
            if spec.name is None:
                continue
            if spec.name in taken:
                raise ConflictError(
                    f"a schedule named {spec.name!r} already exists", pointer=pointer
                )
            if spec.name in seen:
                raise InvalidInputError(
                    f"name {spec.name!r} appears twice in the batch", pointer=pointer
                )
            seen.add(spec.name)

    async def create(
        self,
        spec: ScheduleSpec,
        idempotency_key: str | None = None,
        created_by: str | None = None,
    ) -> Created:
        """Store a schedule and its first occurrence. The same idempotency key with the same
        body returns the original; with another body it is a conflict. `created_by` is the
        name of the API key that asked (None: the API is open), and idempotency keys are its
        own: another API key's use of the same one is another schedule."""
        self._check_payload(spec.payload, "#/payload")
        self._check_target(spec, "#/target/type")
        await self._check_urls([(spec, "#")])
        _kept_secrets(spec.target, None, "#/target")
        request_hash = _fingerprint(spec) if idempotency_key else None

        async def replay_key(conn: Connection) -> Created | None:
            if idempotency_key is None:
                return None
            existing = await self._schedules.find_by_idempotency_key(
                conn, idempotency_key, created_by
            )
            if existing is None:
                return None
            if existing.request_hash != request_hash:
                raise ConflictError(
                    "this Idempotency-Key was already used with a different request body"
                )
            return Created(existing, created=False)

        async def work(conn: Connection) -> Created:
            if (earlier := await replay_key(conn)) is not None:
                return earlier
            await self._check_names(conn, [spec], batch=False)
            now = await transaction_now(conn)
            plan = _planned(spec.trigger, now, "#")
            draft = self._draft(
                spec, now, plan, idempotency_key, request_hash, created_by=created_by
            )
            (stored,) = await self._schedules.insert(conn, [draft], now)
            await self._events.record(conn, _created([draft], created_by), now)
            await self._wakeups.announce(conn, _due(draft))
            return Created(stored, created=True)

        try:
            return await self._db.run(work)
        except ConflictError:
            if idempotency_key is None:
                raise
            # Two requests raced with the same key: the loser answers like a replay.
            earlier = await self._db.run(replay_key)
            if earlier is None:
                raise
            return earlier

    async def create_many(
        self, specs: Sequence[ScheduleSpec], created_by: str | None = None
    ) -> list[Schedule]:
        """All or nothing, in one transaction."""
        if len(specs) > MAX_BATCH:
            raise InvalidInputError(f"a batch holds at most {MAX_BATCH} items", pointer="#/items")
        for index, spec in enumerate(specs):
            self._check_payload(spec.payload, f"#/items/{index}/payload")
            self._check_target(spec, f"#/items/{index}/target/type")
            _kept_secrets(spec.target, None, f"#/items/{index}/target")
        await self._check_urls([(spec, f"#/items/{index}") for index, spec in enumerate(specs)])

        async def work(conn: Connection) -> list[Schedule]:
            await self._check_names(conn, specs, batch=True)
            now = await transaction_now(conn)
            # A thousand triggers are a thousand walks of the calendar (croniter's): off
            # the event loop, which serves every other request meanwhile.
            plans = await asyncio.to_thread(
                lambda: [
                    _planned(spec.trigger, now, f"#/items/{index}")
                    for index, spec in enumerate(specs)
                ]
            )
            drafts = [
                self._draft(spec, now, plan, created_by=created_by)
                for spec, plan in zip(specs, plans, strict=True)
            ]
            stored = await self._schedules.insert(conn, drafts, now)
            await self._events.record(conn, _created(drafts, created_by), now)
            await self._wakeups.announce(conn, min(map(_due, drafts), default=None))
            return stored

        return await self._db.run(work)

    # -- read -----------------------------------------------------------------------

    async def get(self, schedule_id: uuid.UUID) -> Schedule:
        async def work(conn: Connection) -> Schedule:
            return await self._require(conn, schedule_id)

        return await self._db.run(work)

    async def _require(
        self, conn: Connection, schedule_id: uuid.UUID, *, for_update: bool = False
    ) -> Schedule:
        schedule = await self._schedules.get(conn, schedule_id, for_update=for_update)
        if schedule is None:
            raise NotFoundError(f"schedule {schedule_id} does not exist")
        return schedule

    async def list_schedules(
        self, where: ScheduleFilter, *, limit: int, after: uuid.UUID | None
    ) -> list[Schedule]:
        return await self._db.run(
            lambda conn: self._schedules.search(conn, where, limit=limit, after=after)
        )

    async def history(
        self,
        schedule_id: uuid.UUID,
        *,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None,
        status: OccurrenceStatus | None = None,
    ) -> list[Occurrence]:
        async def work(conn: Connection) -> list[Occurrence]:
            await self._require(conn, schedule_id)
            return await self._occurrences.history(
                conn, schedule_id, limit=limit, after=after, status=status
            )

        return await self._db.run(work)

    async def events(
        self, schedule_id: uuid.UUID, *, limit: int, after: uuid.UUID | None
    ) -> list[ScheduleEvent]:
        """The schedule's audit events, oldest first."""

        async def work(conn: Connection) -> list[ScheduleEvent]:
            await self._require(conn, schedule_id)
            return await self._events.history(conn, schedule_id, limit=limit, after=after)

        return await self._db.run(work)

    async def _record(
        self,
        conn: Connection,
        current: Schedule,
        kind: EventKind,
        now: datetime,
        actor: str | None,
        fields: list[str] | None = None,
    ) -> None:
        """The event of a change that moved `current` on by one version."""
        event = NewEvent(current.id, kind, version=current.version + 1, actor=actor, fields=fields)
        await self._events.record(conn, [event], now)

    # -- change ---------------------------------------------------------------------

    async def _locked(
        self, conn: Connection, schedule_id: uuid.UUID, if_match: frozenset[int] | None
    ) -> Schedule:
        """The schedule, locked for a change, at one of the versions `if_match` names."""
        # Occurrences first, then the schedule: the same order as the claim.
        await self._occurrences.lock_pending(conn, schedule_id)
        current = await self._require(conn, schedule_id, for_update=True)
        check_version(current.version, if_match)
        return current

    async def patch(
        self,
        schedule_id: uuid.UUID,
        patch: SchedulePatch,
        if_match: frozenset[int] | None = None,
        actor: str | None = None,
    ) -> Schedule:
        changes = patch.model_dump(exclude_unset=True)
        if "payload" in changes:
            self._check_payload(patch.payload, "#/payload")
        self._check_target(patch, "#/target/type")
        await self._check_urls([(patch, "#")])
        if patch.trigger is not None:
            check_cadence(patch.trigger)
        for field in NOT_NULLABLE:
            if field in changes and changes[field] is None:
                raise InvalidInputError(f"{field} cannot be null", pointer=f"#/{field}")
        recompute = bool(RECOMPUTE & changes.keys())

        async def work(conn: Connection) -> Schedule:
            current = await self._locked(conn, schedule_id, if_match)
            check_patch(current.status, changes_trigger=bool(SHAPE & changes.keys()))
            now = await transaction_now(conn)
            values: dict[str, object] = {
                field: getattr(patch, field) for field in changes if field != "trigger"
            }
            if patch.target is not None:
                values["target"] = _kept_secrets(patch.target, current.target, "#/target")
            if patch.trigger is not None:
                if not is_recurring(current.trigger) and current.fire_count > 0:
                    raise ConflictError("this one-shot schedule has already fired")
                values["trigger"] = resolve(patch.trigger, now)
            if recompute:
                # The not-yet-fired next occurrence is replaced: its instant, its jitter
                # draw or whether it comes at all changes (one already fired keeps its own).
                await self._replan(conn, current, values, now)
            await self._schedules.update(conn, schedule_id, now, **values)
            # What the PATCH changed; a PATCH that changes nothing still makes a version.
            changed = sorted(
                field for field, value in values.items() if value != _stored_value(current, field)
            )
            await self._record(conn, current, EventKind.UPDATED, now, actor, fields=changed)
            if recompute and current.status is ScheduleStatus.PENDING:
                await settlements.finish_recurring(conn, [schedule_id], now, actor)
            return await self._require(conn, schedule_id)

        return await self._db.run(work)

    async def _replan(
        self, conn: Connection, current: Schedule, values: dict[str, object], now: datetime
    ) -> None:
        trigger = cast(Trigger, values.get("trigger", current.trigger))
        first = first_fire_or_refuse(trigger, now)
        await self._occurrences.drop_unfired_cadence(conn, current.id)
        recurring = is_recurring(trigger)
        budget = values.get("max_occurrences", current.rules.max_occurrences)
        if recurring and isinstance(budget, int) and current.rules.fired >= budget:
            return  # the new bound is already spent: the schedule completes
        paused = current.status is ScheduleStatus.PAUSED
        if paused and recurring:
            return  # resume plans the next tick
        jitter = cast(float, values.get("jitter_seconds", current.jitter_seconds))
        row = new_occurrence(current.id, first, now, Origin.SCHEDULE, delay=self._jitter(jitter))
        if paused:  # held: resume gives it back its instant
            row["held_until"], row["available_at"] = row["available_at"], None
        await self._occurrences.insert(conn, [row])
        await self._wakeups.announce(conn, row["available_at"])

    async def pause(
        self,
        schedule_id: uuid.UUID,
        if_match: frozenset[int] | None = None,
        actor: str | None = None,
    ) -> Schedule:
        """Nothing fires while paused; the schedule's ticks in the pause are recorded as
        skipped (reason `paused`) when it resumes."""

        async def work(conn: Connection) -> Schedule:
            current = await self._locked(conn, schedule_id, if_match)
            check_pause(current.status)
            if current.status is ScheduleStatus.PAUSED:
                return current
            now = await transaction_now(conn)
            recurring = is_recurring(current.trigger)
            await pausing.pause(conn, schedule_id, now, recurring=recurring, reason=MANUAL_PAUSE)
            await self._record(conn, current, EventKind.PAUSED, now, actor)
            return await self._require(conn, schedule_id)

        return await self._db.run(work)

    async def resume(
        self,
        schedule_id: uuid.UUID,
        if_match: frozenset[int] | None = None,
        actor: str | None = None,
    ) -> Schedule:
        """Pause is not a misfire: the ticks that fell inside the pause are recorded as
        skipped and the schedule realigns to its next strictly future tick."""

        async def work(conn: Connection) -> Schedule:
            current = await self._locked(conn, schedule_id, if_match)
            check_resume(current.status)
            if current.status is ScheduleStatus.PENDING:
                return current
            now = await transaction_now(conn)
            paused_at = await self._schedules.paused_at(conn, schedule_id)
            # The count of dead letters in a row starts again: a resumed schedule gets
            # its full `pause_after_failures` before it pauses itself again.
            await self._schedules.update(
                conn,
                schedule_id,
                now,
                status=ScheduleStatus.PENDING,
                paused_at=None,
                pause_reason=None,
                consecutive_failures=0,
            )
            await self._record(conn, current, EventKind.RESUMED, now, actor)
            await self._occurrences.unhold(conn, schedule_id, now)
            await self._wakeups.announce(conn, now)
            trigger = current.trigger
            if is_recurring(trigger):
                if paused_at is not None:
                    skips = skipped_range(
                        trigger, paused_at, now, "paused", current.rules.max_catchup
                    )
                    await self._occurrences.record_skips(conn, schedule_id, skips, now)
                upcoming = next_fire_after(trigger, now)
                if upcoming is not None and current.rules.budget != 0:
                    row = new_occurrence(
                        schedule_id,
                        upcoming,
                        now,
                        Origin.SCHEDULE,
                        delay=self._jitter(current.jitter_seconds),
                    )
                    await self._occurrences.insert(conn, [row])
                    await self._wakeups.announce(conn, row["available_at"])
                await settlements.finish_recurring(conn, [schedule_id], now, actor)
            else:
                await settlements.finish_one_shots(conn, [schedule_id], now, actor)
            return await self._require(conn, schedule_id)

        return await self._db.run(work)

    async def backfill(
        self,
        schedule_id: uuid.UUID,
        start: datetime,
        end: datetime,
        if_match: frozenset[int] | None = None,
        actor: str | None = None,
    ) -> Backfill:
        """One occurrence per tick of the trigger in [start, end], each with its usual id:
        a second call creates nothing new. Only past ticks: the future is the cadence's."""
        if end < start:
            raise InvalidInputError("'to' is before 'from'", pointer="#/to")

        async def work(conn: Connection) -> Backfill:
            current = await self._locked(conn, schedule_id, if_match)
            if current.status is ScheduleStatus.CANCELLED:
                raise ConflictError("a cancelled schedule cannot be backfilled")
            if not is_recurring(current.trigger):
                raise ConflictError("a one-shot schedule has no ticks to backfill")
            now = await transaction_now(conn)
            if end > now:
                raise InvalidInputError(
                    "'to' is in the future: a backfill covers past ticks only", pointer="#/to"
                )
            ticks = list(
                islice(
                    ticks_between(current.trigger, start - timedelta(microseconds=1), end),
                    MAX_BACKFILL + 1,
                )
            )
            if len(ticks) > MAX_BACKFILL:
                raise InvalidInputError(
                    f"the range holds more than {MAX_BACKFILL} ticks; the last one a call "
                    f"may cover is {format_instant(ticks[MAX_BACKFILL - 1])}",
                    pointer="#/to",
                )
            made = await self._occurrences.backfill(
                conn,
                schedule_id,
                ticks,
                now,
                held=current.status is ScheduleStatus.PAUSED,
            )
            if made:  # a backfill that creates nothing changes nothing
                await self._schedules.bump_version(conn, schedule_id, now)
                await self._record(conn, current, EventKind.BACKFILLED, now, actor)
                if current.status is not ScheduleStatus.PAUSED:
                    await self._wakeups.announce(conn, now)
            return Backfill(
                ticks=[(tick, occurrence_id(schedule_id, tick)) for tick in ticks],
                created=made,
            )

        return await self._db.run(work)

    async def cancel(
        self,
        schedule_id: uuid.UUID,
        if_match: frozenset[int] | None = None,
        actor: str | None = None,
    ) -> Schedule:
        """Idempotent; a terminal schedule stays as it is."""

        async def work(conn: Connection) -> Schedule:
            current = await self._locked(conn, schedule_id, if_match)
            if current.status in TERMINAL:
                return current
            now = await transaction_now(conn)
            await self._schedules.update(
                conn, schedule_id, now, status=ScheduleStatus.CANCELLED, pause_reason=None
            )
            await self._record(conn, current, EventKind.CANCELLED, now, actor)
            await self._occurrences.cancel_pending(conn, schedule_id, now)
            return await self._require(conn, schedule_id)

        return await self._db.run(work)

    async def trigger(
        self,
        schedule_id: uuid.UUID,
        if_match: frozenset[int] | None = None,
        actor: str | None = None,
    ) -> Occurrence:
        """An extra occurrence due now; the regular cadence is left alone."""

        async def work(conn: Connection) -> Occurrence:
            current = await self._require(conn, schedule_id, for_update=True)
            check_version(current.version, if_match)
            check_trigger(current.status)
            now = await transaction_now(conn)
            row = new_occurrence(schedule_id, now, now, Origin.TRIGGER)
            await self._occurrences.insert(conn, [row])
            await self._schedules.bump_version(conn, schedule_id, now)
            await self._record(conn, current, EventKind.TRIGGERED, now, actor)
            await self._wakeups.announce(conn, now)
            return Occurrence(
                occurrence_id=row["occurrence_id"],
                schedule_id=schedule_id,
                fire_at=now,
                available_at=now,
                status=OccurrenceStatus.PENDING,
                origin=Origin.TRIGGER,
                attempts=0,
                last_error=None,
                delivered_at=None,
                dead_lettered_at=None,
                created_at=now,
                updated_at=now,
            )

        return await self._db.run(work)
