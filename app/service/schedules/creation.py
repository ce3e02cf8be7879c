"""Creating schedules: one, idempotent under an Idempotency-Key, or a batch, all or nothing;
each stored with its first occurrence and its `created` event in one transaction."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from app.domain.errors import ConflictError, InvalidInputError, QuotaExceededError
from app.domain.ids import uuid7
from app.domain.limits import MAX_BATCH
from app.domain.operator_events import NewOperatorEvent, OperatorEventKind, quota_event_id
from app.domain.schedule import EventKind, Schedule, ScheduleDraft, ScheduleSpec, rules_of
from app.domain.tenants import Caller
from app.domain.trigger import Trigger, check_cadence, first_fire_or_refuse, resolve
from app.service.endpoints import hold_endpoint_targets
from app.service.schedules.checks import BodyChecks, no_redacted_secrets
from app.service.schedules.steps import ScheduleSteps
from app.service.topics import hold_topic_targets
from app.settings import Settings
from app.store.dialects import announce, transaction_now
from app.store.engine.database import Connection, Database
from app.store.engine.wakeups import Wakeups
from app.store.records.events import NewEvent
from app.store.records.operator_events import record_operator_events
from app.store.records.tenants import TenantStore

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Created:
    schedule: Schedule
    created: bool  # False: the replay of an earlier create with the same key and body


def _planned(trigger: Trigger, now: datetime, pointer: str) -> tuple[Trigger, datetime]:
    """A new schedule's trigger pinned to `now`, and its first fire instant; a trigger too
    sparse, or whose bounds leave nothing to fire, is refused naming it (under `pointer`)."""
    check_cadence(trigger, pointer)
    resolved = resolve(trigger, now)
    return resolved, first_fire_or_refuse(resolved, now, pointer)


def _due(draft: ScheduleDraft) -> datetime:
    """When a new schedule's first occurrence becomes claimable."""
    return draft.first_fire_at + timedelta(seconds=draft.first_delay)


def _created(drafts: Sequence[ScheduleDraft], actor: str | None) -> list[NewEvent]:
    return [NewEvent(d.id, EventKind.CREATED, version=1, actor=actor) for d in drafts]


async def _tell_quota(conn: Connection, tenant: str, refused: QuotaExceededError) -> None:
    now = await transaction_now(conn)
    event = NewOperatorEvent(
        tenant,
        OperatorEventKind.QUOTA_EXCEEDED,
        {"quota": refused.quota, "limit": refused.limit, "used": refused.used},
        id=quota_event_id(tenant, refused.quota, now),
    )
    await record_operator_events(conn, [event], now)


def _fingerprint(spec: ScheduleSpec) -> str:
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class ScheduleCreation:
    def __init__(
        self,
        database: Database,
        settings: Settings,
        steps: ScheduleSteps,
        checks: BodyChecks,
        wakeups: Wakeups,
        rng: random.Random,
    ) -> None:
        self._db = database
        self._settings = settings
        self._steps = steps
        self._checks = checks
        self._wakeups = wakeups
        self._rng = rng
        self._tenants = TenantStore()

    def _draft(
        self,
        spec: ScheduleSpec,
        now: datetime,
        plan: tuple[Trigger, datetime],
        caller: Caller,
        key: str | None = None,
        request_hash: str | None = None,
        traceparent: str | None = None,
    ) -> ScheduleDraft:
        trigger, first = plan
        return ScheduleDraft(
            id=uuid7(now, self._rng.getrandbits(74)),
            tenant=caller.tenant,
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
            flow_key=spec.flow_key,
            retry=spec.retry,
            on_failure=spec.on_failure,
            first_delay=self._steps.jitter(spec.jitter_seconds),
            idempotency_key=key,
            request_hash=request_hash,
            created_by=caller.actor,
            traceparent=traceparent,
        )

    async def _plans(
        self, specs: Sequence[ScheduleSpec], pointers: Sequence[str]
    ) -> tuple[datetime, list[tuple[Trigger, datetime]]]:
        """Each spec's trigger pinned to the database clock's reading now, and its first
        fire instant (the reading, then the plans). Made before the write transaction
        opens: a thousand triggers are a thousand walks of the calendar (croniter's), which
        must not hold SQLite's one write lock (nor any row's) meanwhile; and off the event
        loop, which serves every other request meanwhile. The schedules are stamped as
        created at the reading; a tick that falls between it and the insert is due at once,
        as a tick missed by a moment is."""
        now = await self._db.run(transaction_now)
        plans = await asyncio.to_thread(
            lambda: [
                _planned(spec.trigger, now, pointer)
                for spec, pointer in zip(specs, pointers, strict=True)
            ]
        )
        return now, plans

    async def _check_names(
        self, conn: Connection, tenant: str, specs: Sequence[ScheduleSpec], batch: bool
    ) -> None:
        names = [spec.name for spec in specs if spec.name is not None]
        taken = set(await self._steps.schedules.name_taken(conn, tenant, names))
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
        idempotency_key: str | None,
        caller: Caller,
        traceparent: str | None = None,
    ) -> Created:
        """Store a schedule and its first occurrence in the caller's tenant. The same
        idempotency key with the same body returns the original; with another body it is a
        conflict. The caller's actor is the name of the API key that asked (None: the API
        is open), and idempotency keys are its own: another API key's use of the same one
        is another schedule. `traceparent` (a valid W3C one, or None) is stored with it and
        sent on each of its deliveries."""
        created_by = caller.actor
        self._checks.payload(spec.payload, "#/payload")
        self._checks.retry(spec.retry, "#/retry")
        self._checks.targets(spec, "#")
        await self._checks.urls([(spec, "#")])
        no_redacted_secrets(spec, "#")
        request_hash = _fingerprint(spec) if idempotency_key else None

        async def replay_key(conn: Connection) -> Created | None:
            if idempotency_key is None:
                return None
            existing = await self._steps.schedules.find_by_idempotency_key(
                conn, caller.tenant, idempotency_key, created_by
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
                return earlier  # a replay makes nothing: no quota is charged
            now = await transaction_now(conn)
            await self._tenants.admit(conn, caller.tenant, 1, now)
            await self._check_names(conn, caller.tenant, [spec], batch=False)
            await hold_endpoint_targets(conn, caller.tenant, [(spec.target, "#/target")])
            await hold_topic_targets(conn, caller.tenant, [(spec.target, "#/target")])
            # One walk of a calendar (a batch's thousand are made before its transaction).
            plan = _planned(spec.trigger, now, "#")
            draft = self._draft(
                spec, now, plan, caller, idempotency_key, request_hash, traceparent=traceparent
            )
            (stored,) = await self._steps.schedules.insert(conn, [draft], now)
            await self._steps.events.record(conn, _created([draft], created_by), now)
            await announce(conn, self._wakeups, _due(draft))
            return Created(stored, created=True)

        try:
            return await self._admitted(caller.tenant, work)
        except ConflictError:
            if idempotency_key is None:
                raise
            # Two requests raced with the same key: the loser answers like a replay.
            earlier = await self._db.run(replay_key)
            if earlier is None:
                raise
            return earlier

    async def _admitted(self, tenant: str, work: Callable[[Connection], Awaitable[T]]) -> T:
        """`work` in its transaction; a refusal by a quota is told to the tenant too
        (`quota.exceeded`, once a quota a minute), in a transaction of its own, since the
        refused one stores nothing."""
        try:
            return await self._db.run(work)
        except QuotaExceededError as refused:
            told = refused

            async def tell(conn: Connection) -> None:
                await _tell_quota(conn, tenant, told)

            await self._db.run(tell)
            raise

    async def create_many(
        self,
        specs: Sequence[ScheduleSpec],
        caller: Caller,
        traceparent: str | None = None,
    ) -> list[Schedule]:
        """All or nothing, in one transaction, in the caller's tenant; each schedule stores
        `traceparent`."""
        if len(specs) > MAX_BATCH:
            raise InvalidInputError(f"a batch holds at most {MAX_BATCH} items", pointer="#/items")
        for index, spec in enumerate(specs):
            self._checks.payload(spec.payload, f"#/items/{index}/payload")
            self._checks.retry(spec.retry, f"#/items/{index}/retry")
            self._checks.targets(spec, f"#/items/{index}")
            no_redacted_secrets(spec, f"#/items/{index}")
        await self._checks.urls([(spec, f"#/items/{index}") for index, spec in enumerate(specs)])

        planned_at, plans = await self._plans(
            specs, [f"#/items/{index}" for index in range(len(specs))]
        )

        async def work(conn: Connection) -> list[Schedule]:
            await self._tenants.admit(conn, caller.tenant, len(specs), await transaction_now(conn))
            await self._check_names(conn, caller.tenant, specs, batch=True)
            targets = [(s.target, f"#/items/{index}/target") for index, s in enumerate(specs)]
            await hold_endpoint_targets(conn, caller.tenant, targets)
            await hold_topic_targets(conn, caller.tenant, targets)
            # Stamped as created at the reading its plans count from (a delay, an
            # interval's start).
            now = planned_at
            drafts = [
                self._draft(spec, now, plan, caller, traceparent=traceparent)
                for spec, plan in zip(specs, plans, strict=True)
            ]
            stored = await self._steps.schedules.insert(conn, drafts, now)
            await self._steps.events.record(conn, _created(drafts, caller.actor), now)
            await announce(conn, self._wakeups, min(map(_due, drafts), default=None))
            return stored

        return await self._admitted(caller.tenant, work)
