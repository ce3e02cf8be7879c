"""The store as the conformance suite sees it: every call into the store's modules is here.

The tests import this module and the domain types only, so a store reshaped inside (its
modules split, a dialect layer added) changes the imports below and nothing else. Each
function is one transaction through `Database.run`, as the service and the delivery loop
use the store.
"""

from __future__ import annotations

import functools
import random
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from alembic import command
from app.domain.activity import Minute, Scope, every_minute
from app.domain.endpoints import CircuitSettings, Endpoint, EndpointSpec, new_signing_secret
from app.domain.filters import DeadLetterFilter, ScheduleAfter, ScheduleFilter
from app.domain.flow import FlowKey, FlowLimits
from app.domain.ids import uuid7
from app.domain.misfire import Rules, Skip, SkipReason
from app.domain.occurrence import (
    DeadLetter,
    Delivery,
    OccurrenceStatus,
    Origin,
    Settlement,
    Unsent,
)
from app.domain.operator_events import NewOperatorEvent
from app.domain.schedule import Schedule, ScheduleDraft, ScheduleStatus
from app.domain.settled import Settled
from app.domain.target import EndpointTarget, Target, TopicTarget, WebhookTarget
from app.domain.tenant_events import TenantEvent
from app.domain.tenant_keys import KeyRole, TenantKey
from app.domain.tenants import (
    DEFAULT_TENANT,
    Quotas,
    Tenant,
    TenantSpec,
    Usage,
    key_name,
    key_prefix,
    stored_key,
    stored_key_or_none,
)
from app.domain.topics import SubscriptionSpec
from app.domain.trigger import (
    CronTrigger,
    ImmediateTrigger,
    IntervalTrigger,
    OnceTrigger,
    Trigger,
    first_fire_at,
    resolve,
)
from app.store.dialects import dialect_of, transaction_now
from app.store.dialects.claim_rows import NEVER_FAR
from app.store.engine.database import Connection, Database
from app.store.engine.ddl import schema_ddl
from app.store.engine.migrations import alembic_config, is_at_head, upgrade_to_head
from app.store.engine.wakeups import Wakeups
from app.store.loop.claims import Claimed, ClaimStore
from app.store.loop.flow_claims import keys_with_work_due
from app.store.loop.queue import DeliveryQueue
from app.store.records import activity as activity_records
from app.store.records import history, retention
from app.store.records.dead_letters import DeadLetterStore
from app.store.records.endpoints import EndpointStore
from app.store.records.flow_keys import FlowKeyStore
from app.store.records.lifecycle import LifecycleStore
from app.store.records.operator_events import (
    LeasedEvent,
    lease_operator_events,
    record_operator_events,
    told,
)
from app.store.records.schedules import ScheduleStore
from app.store.records.tenant_events import TenantEventStore
from app.store.records.tenant_keys import TenantKeyStore
from app.store.records.tenants import TenantStore
from app.store.records.topics import TopicStore
from app.store.schema.partitions import HISTORY, PARTITIONED
from app.store.schema.tables import (
    attempts,
    endpoint_secrets,
    endpoints,
    flow_key_sleeps,
    occurrences,
    schedule_events,
    schedules,
)
from app.store.schema.tables import flow_keys as flow_keys_table

__all__ = [
    "Database",
    "OccurrenceRow",
    "backfill",
    "build_from_ddl",
    "cancel",
    "claim",
    "claim_ahead",
    "claim_rolled_back",
    "claimed",
    "clear_flow_key_backoff",
    "cron",
    "database_now",
    "dead_letters",
    "delete_flow_key",
    "draft",
    "drop_history",
    "due_in",
    "enable_endpoint",
    "endpoint_event_kinds",
    "endpoint_target",
    "every_page",
    "fanout_rows",
    "find_by_idempotency_key",
    "flow_keys",
    "forget_destinations",
    "history_partitions",
    "hold",
    "holding_pruning_lock",
    "immediate",
    "insert_schedules",
    "interval",
    "is_at_head",
    "key_backoffs",
    "lease_events",
    "make_endpoint",
    "make_history_days",
    "make_topic",
    "migrate_to",
    "move_clock",
    "move_clock_past",
    "move_to_key",
    "once",
    "opened",
    "prune",
    "put_flow_key",
    "queue",
    "read_attempt_log",
    "read_destinations",
    "read_endpoint",
    "read_flow_key",
    "read_idempotency_column",
    "read_lease",
    "read_occurrence_rows",
    "read_schedule_status",
    "read_sql_clock",
    "record_events",
    "record_events_rolled_back",
    "record_skipped_tick",
    "release",
    "remove_endpoint_row",
    "remove_on_failure",
    "replay",
    "replay_matching",
    "run_out_lease",
    "search_schedules",
    "set_failures",
    "settle",
    "settled",
    "skip_due_ticks",
    "start_ahead",
    "subscribe",
    "sweep_history",
    "tell_events",
    "tenant_exists",
    "topic_target",
    "unhold",
    "update_schedule",
    "upgrade_to_head",
    "visited_keys",
    "write_retry_text",
]

OWNER = "conformance"
_RNG = random.Random(20240305)
_TARGET = WebhookTarget(type="webhook", url="http://127.0.0.1:9/hook")


# -- building schedules ----------------------------------------------------------------


def once(at: datetime) -> OnceTrigger:
    return OnceTrigger(type="once", at=at)


def immediate() -> ImmediateTrigger:
    return ImmediateTrigger(type="immediate")


def interval(every_seconds: float, start_at: datetime | None = None) -> IntervalTrigger:
    return IntervalTrigger(type="interval", every_seconds=every_seconds, start_at=start_at)


def cron(expression: str) -> CronTrigger:
    return CronTrigger(type="cron", expression=expression)


def draft(
    trigger: Trigger,
    *,
    fire_at: datetime | None = None,
    max_attempts: int = 5,
    payload: Any = None,
    rules: Rules | None = None,
    jitter_seconds: float = 0.0,
    flow_key: str | None = None,
    on_failure: Target | None = None,
    pause_after_failures: int | None = None,
    name: str | None = None,
    traceparent: str | None = None,
    target: Target | None = None,
    tenant: str = DEFAULT_TENANT,
    idempotency_key: str | None = None,
) -> ScheduleDraft:
    """A schedule about to be stored, as the service builds one. Its first occurrence is
    the trigger's first instant from now, or `fire_at` (a tick already past, as a
    schedule that was behind would have)."""
    now = datetime.now(UTC)
    resolved = resolve(trigger, now)
    first = fire_at or first_fire_at(resolved, now)
    assert first is not None, "the trigger has nothing to fire"
    return ScheduleDraft(
        id=uuid7(now, _RNG.getrandbits(74)),
        tenant=tenant,
        name=name,
        event_type="conformance.test",
        payload={"n": 1} if payload is None else payload,
        target=target or _TARGET,
        trigger=resolved,
        max_attempts=max_attempts,
        labels={},
        first_fire_at=first,
        jitter_seconds=jitter_seconds,
        rules=rules or Rules(),
        flow_key=flow_key,
        on_failure=on_failure,
        pause_after_failures=pause_after_failures,
        traceparent=traceparent,
        idempotency_key=idempotency_key,
    )


async def insert_schedules(database: Database, drafts: Sequence[ScheduleDraft]) -> None:
    """Store the schedules with their first occurrences, in one transaction."""

    async def work(conn: Connection) -> None:
        await ScheduleStore().insert(conn, drafts, await transaction_now(conn))

    await database.run(work)


async def find_by_idempotency_key(
    database: Database, key: str, principal: str | None, tenant: str = DEFAULT_TENANT
) -> Schedule | None:
    """The schedule the API key named `principal` created with this Idempotency-Key."""

    async def work(conn: Connection) -> Schedule | None:
        return await ScheduleStore().find_by_idempotency_key(conn, tenant, key, principal)

    return await database.run(work)


async def put_tenant(
    database: Database,
    tenant: str,
    quotas: Quotas | None = None,
    *,
    actor: str | None = None,
    if_match: frozenset[int] | None = None,
    **fields: Any,
) -> None:
    """Put `tenant` whole, as `actor`: its `quotas` and the other fields of `TenantSpec`
    given."""
    spec = TenantSpec(quotas=quotas or Quotas(), **fields)

    async def work(conn: Connection) -> None:
        now = await transaction_now(conn)
        await TenantStore().put(conn, tenant, spec, if_match, now, actor=actor)

    await database.run(work)


class RolledBackError(Exception):
    """Raised inside a transaction to roll it back."""


async def put_tenant_rolled_back(database: Database, tenant: str, **fields: Any) -> None:
    """Put `tenant` in a transaction that then fails, and is rolled back whole."""

    async def work(conn: Connection) -> None:
        now = await transaction_now(conn)
        await TenantStore().put(conn, tenant, TenantSpec(**fields), None, now, actor="cli")
        raise RolledBackError

    with suppress(RolledBackError):
        await database.run(work)


async def make_tenant_key(
    database: Database, tenant: str, name: str, *, actor: str | None
) -> TenantKey:
    """Store a new write key of `tenant` (its digest made up: no request presents it)."""

    async def work(conn: Connection) -> TenantKey:
        now = await transaction_now(conn)
        key = TenantKey(
            id=uuid7(now, _RNG.getrandbits(74)),
            tenant=tenant,
            name=name,
            role=KeyRole.WRITE,
            prefix="cq_conform",
            created_at=now,
            expires_at=None,
            revoked_at=None,
            last_used_at=None,
        )
        await TenantKeyStore().insert(conn, key, uuid.uuid4().hex * 2, actor=actor)
        return key

    return await database.run(work)


async def revoke_tenant_key(
    database: Database, tenant: str, key_id: uuid.UUID, *, actor: str | None
) -> bool:
    async def work(conn: Connection) -> bool:
        now = await transaction_now(conn)
        return await TenantKeyStore().revoke(conn, tenant, key_id, now, actor=actor)

    return await database.run(work)


async def tenant_events(
    database: Database, tenant: str, *, after: uuid.UUID | None = None, limit: int = 100
) -> list[TenantEvent]:
    """The tenant's audit events, oldest first, after the event `after`."""
    return await database.run(
        lambda conn: TenantEventStore().history(conn, tenant, limit=limit, after=after)
    )


async def has_tenant_events(database: Database, tenant: str) -> bool:
    return await database.run(lambda conn: TenantEventStore().any(conn, tenant))


async def tenant_exists(database: Database, tenant: str) -> bool:
    """Whether the tenant's row is there (read by its id alone, as every version has it)."""
    return await database.run(lambda conn: TenantStore().exists(conn, tenant))


async def read_tenant(database: Database, tenant: str) -> Tenant | None:
    return await database.run(lambda conn: TenantStore().get(conn, tenant))


async def tenant_usage(database: Database, tenant: str) -> Usage:
    async def work(conn: Connection) -> Usage:
        return await TenantStore().usage(conn, tenant, await transaction_now(conn))

    return await database.run(work)


async def admit(database: Database, tenant: str, creates: int) -> None:
    """What a create of `creates` schedules in `tenant` asks of its quotas, in a transaction
    of its own (charged when it commits)."""

    async def work(conn: Connection) -> None:
        await TenantStore().admit(conn, tenant, creates, await transaction_now(conn))

    await database.run(work)


async def delete_tenant(
    database: Database,
    tenant: str,
    *,
    actor: str | None = None,
    if_match: frozenset[int] | None = None,
) -> None:
    async def work(conn: Connection) -> None:
        now = await transaction_now(conn)
        await TenantStore().delete(conn, tenant, if_match, now, actor=actor)

    await database.run(work)


async def names_taken(database: Database, tenant: str, names: Sequence[str]) -> list[str]:
    return await database.run(lambda conn: ScheduleStore().name_taken(conn, tenant, names))


async def stored_flow_keys(database: Database) -> dict[str, list[str | None]]:
    """Each table's flow key column as stored, sorted (NULL first)."""

    async def work(conn: Connection) -> dict[str, list[str | None]]:
        read = {
            "schedules": schedules.c.flow_key,
            "occurrences": occurrences.c.flow_key,
            "flow_keys": flow_keys_table.c.key,
        }
        return {
            name: sorted(
                (await conn.execute(sa.select(column))).scalars(),
                key=lambda key: (key is not None, key or ""),
            )
            for name, column in read.items()
        }

    return await database.run(work)


async def read_tenants(database: Database) -> dict[uuid.UUID, str]:
    """Each schedule's tenant."""

    async def work(conn: Connection) -> dict[uuid.UUID, str]:
        rows = await conn.execute(sa.select(schedules.c.id, schedules.c.tenant))
        return {row.id: row.tenant for row in rows}

    return await database.run(work)


async def read_destinations(database: Database) -> dict[uuid.UUID, str | None]:
    """Each schedule's stored destination (`schedules.destination`)."""

    async def work(conn: Connection) -> dict[uuid.UUID, str | None]:
        rows = await conn.execute(sa.select(schedules.c.id, schedules.c.destination))
        return {row.id: row.destination for row in rows}

    return await database.run(work)


async def forget_destinations(database: Database) -> None:
    """Clear every stored destination, as rows written before the column have none."""

    async def work(conn: Connection) -> None:
        await conn.execute(sa.update(schedules).values(destination=None))

    await database.run(work)


async def migrate_to(database: Database, revision: str) -> None:
    """Move the schema to `revision` (up or down), as `alembic upgrade|downgrade` would."""

    def move(connection: sa.Connection) -> None:
        config = alembic_config()
        config.attributes["connection"] = connection
        config.attributes["schema"] = database.schema
        current = MigrationContext.configure(connection).get_current_revision()
        scripts = ScriptDirectory.from_config(config)
        ahead = current is not None and revision in {
            script.revision for script in scripts.iterate_revisions(current, "base")
        }
        (command.downgrade if ahead else command.upgrade)(config, revision)

    async with (
        database.connect() as conn,
        database.dialect.migrating(conn, database.schema, session=not database.pooled),
    ):
        await conn.run_sync(move)
        await conn.commit()


async def read_idempotency_column(database: Database, schedule_id: uuid.UUID) -> str | None:
    """What the schedule's row holds as its idempotency key."""

    async def work(conn: Connection) -> str | None:
        statement = sa.select(schedules.c.idempotency_key).where(schedules.c.id == schedule_id)
        value: str | None = (await conn.execute(statement)).scalar_one()
        return value

    return await database.run(work)


async def read_schedule(database: Database, schedule_id: uuid.UUID) -> Schedule:
    """The schedule as the store reads it back (its definition and counters)."""

    async def work(conn: Connection) -> Schedule:
        found = await ScheduleStore().get(conn, schedule_id)
        assert found is not None
        return found

    return await database.run(work)


# -- the delivery loop's port ------------------------------------------------------------


def _queue(database: Database) -> DeliveryQueue:
    return DeliveryQueue(database, Wakeups())


def queue(database: Database) -> DeliveryQueue:
    """The delivery loop's port, kept from claim to claim as a replica keeps it (what one
    claim found shapes the next: the room kept for retries, replays and keyed rows)."""
    return _queue(database)


async def claim(
    database: Database, *, limit: int, lease: float = 30.0, owner: str = OWNER
) -> list[Delivery]:
    """Lease up to `limit` due occurrences; a row whose definition cannot be planned is
    retried one second later."""
    claimed = await _queue(database).claim(
        limit=limit, lease=lease, owner=owner, backoff=lambda _attempt: 1.0
    )
    return claimed.deliveries


async def claimed(
    database: Database,
    *,
    limit: int,
    lease: float = 30.0,
    owner: str = OWNER,
    start: int | None = None,
    ahead: float = 0.0,
    skip: Sequence[str] = (),
) -> Claimed:
    """A claim as the loop sees it: what it leased, whether it stopped at its limit with
    more due (`more`), and how soon more may be claimed (`due_in`); with `start`, the
    loop's free slots: a claim that finds more due now leases them unstarted (`unstarted`);
    with `ahead`, what falls due that soon too (`not_before`)."""
    return await _queue(database).claim(
        limit=limit,
        lease=lease,
        owner=owner,
        backoff=lambda _attempt: 1.0,
        start=start,
        ahead=ahead,
        skip=skip,
    )


async def due_in(database: Database) -> float | None:
    """A claim that must find nothing due: how soon, in seconds, the next occurrence is
    (None: none is scheduled), which is how long an idle delivery loop sleeps."""
    claimed = await _queue(database).claim(
        limit=1, lease=30.0, owner=OWNER, backoff=lambda _attempt: 1.0
    )
    assert claimed.deliveries == [], "the claim found something due"
    return claimed.due_in


async def settle(database: Database, settlements: Sequence[Settlement]) -> None:
    await _queue(database).settle(settlements)


async def release(
    database: Database,
    deliveries: Sequence[Delivery],
    *,
    started: bool,
    unsent: Unsent | None = None,
) -> None:
    await _queue(database).release(deliveries, started=started, unsent=unsent)


async def claim_ahead(
    database: Database, *, limit: int, ahead: float, lease: float = 30.0, owner: str = OWNER
) -> Claimed:
    """Lease what is due and what falls due within `ahead` seconds, as the loop claims a
    steady stream: `not_before` has the instant of each one not due yet."""
    return await _queue(database).claim(
        limit=limit, lease=lease, owner=owner, backoff=lambda _attempt: 1.0, ahead=ahead
    )


async def start_ahead(database: Database, deliveries: Sequence[Delivery]) -> set[uuid.UUID]:
    """Unstarted deliveries (claimed ahead, at their instant; or beyond the free slots, as
    they leave the lanes) marked started: the ids of those that may start."""
    return await _queue(database).start_ahead(deliveries)


@dataclass(frozen=True)
class AttemptRow:
    """An attempt-log entry as stored."""

    attempt: int
    outcome: str
    started_at: datetime
    duration_ms: int
    error: str | None
    replica: str | None
    trace_id: str | None = None


async def read_attempt_log(database: Database, occurrence_id: uuid.UUID) -> list[AttemptRow]:
    """The attempt log of one occurrence, oldest first."""
    statement = (
        sa.select(*(attempts.c[field] for field in AttemptRow.__dataclass_fields__))
        .where(attempts.c.occurrence_id == occurrence_id)
        .order_by(attempts.c.attempt, attempts.c.id)
    )

    async def work(conn: Connection) -> list[AttemptRow]:
        return [AttemptRow(**row._mapping) for row in await conn.execute(statement)]

    return await database.run(work)


@dataclass(frozen=True)
class LeaseRow:
    """What an occurrence's row says of its lease and its hold."""

    available_at: datetime | None
    held_until: datetime | None
    leased_at: datetime | None
    lease_ahead: bool
    lease_token: uuid.UUID | None
    attempts: int
    status: OccurrenceStatus
    last_error: str | None


async def read_lease(database: Database, occurrence_id: uuid.UUID) -> LeaseRow:
    statement = sa.select(*(occurrences.c[field] for field in LeaseRow.__dataclass_fields__)).where(
        occurrences.c.occurrence_id == occurrence_id
    )

    async def work(conn: Connection) -> LeaseRow:
        row = (await conn.execute(statement)).one()
        fields = {**row._mapping, "lease_ahead": bool(row.lease_ahead)}
        return LeaseRow(**{**fields, "status": OccurrenceStatus(row.status)})

    return await database.run(work)


# -- schedule lifecycle ------------------------------------------------------------------


async def hold(database: Database, schedule_id: uuid.UUID) -> None:
    """Pause the schedule: its pending occurrences are held (unclaimable)."""

    async def work(conn: Connection) -> None:
        now = await transaction_now(conn)
        await ScheduleStore().update(
            conn, schedule_id, now, status=ScheduleStatus.PAUSED, paused_at=now
        )
        await LifecycleStore().hold(conn, schedule_id, now)

    await database.run(work)


async def unhold(database: Database, schedule_id: uuid.UUID) -> None:
    """Resume the schedule: each held occurrence gets its own instant back."""

    async def work(conn: Connection) -> None:
        now = await transaction_now(conn)
        await ScheduleStore().update(
            conn, schedule_id, now, status=ScheduleStatus.PENDING, paused_at=None
        )
        await LifecycleStore().unhold(conn, schedule_id, now)

    await database.run(work)


async def update_schedule(database: Database, schedule_id: uuid.UUID, **changes: Any) -> None:
    """A change of the schedule's fields, as a PATCH writes it (its occurrences as they are)."""

    async def work(conn: Connection) -> None:
        await ScheduleStore().update(conn, schedule_id, await transaction_now(conn), **changes)

    await database.run(work)


async def remove_on_failure(database: Database, schedule_id: uuid.UUID) -> None:
    """What a PATCH of `on_failure` to null writes: no target, its callbacks cancelled."""

    async def work(conn: Connection) -> None:
        now = await transaction_now(conn)
        await ScheduleStore().update(conn, schedule_id, now, on_failure=None)
        await LifecycleStore().cancel_callbacks(conn, schedule_id, now)

    await database.run(work)


async def cancel(database: Database, schedule_id: uuid.UUID) -> None:
    """Cancel the schedule's pending occurrences."""

    async def work(conn: Connection) -> None:
        await LifecycleStore().cancel_pending(conn, schedule_id, await transaction_now(conn))

    await database.run(work)


async def record_skipped_tick(
    database: Database, schedule_id: uuid.UUID, fire_at: datetime, reason: SkipReason
) -> None:
    """Record that the schedule's tick at `fire_at` did not fire (what a resume writes for
    the ticks inside the pause)."""

    async def work(conn: Connection) -> None:
        now = await transaction_now(conn)
        await LifecycleStore().record_skips(conn, schedule_id, [Skip(fire_at, reason)], now)

    await database.run(work)


async def skip_due_ticks(database: Database, schedule_id: uuid.UUID) -> int:
    """Record the schedule's own due, never attempted occurrences as skipped (what a pause
    does to a recurring schedule's due tick); returns how many."""

    async def work(conn: Connection) -> int:
        now = await transaction_now(conn)
        return await LifecycleStore().skip_due_cadence(conn, schedule_id, now, "paused")

    return await database.run(work)


async def backfill(
    database: Database,
    schedule_id: uuid.UUID,
    ticks: Sequence[datetime],
    *,
    flow_key: str | None = None,
) -> list[uuid.UUID]:
    """What a backfill of the schedule's `ticks` writes (its flow key named as a request
    names it, in the default tenant): the ids it made due, new or revived from skipped."""

    async def work(conn: Connection) -> list[uuid.UUID]:
        now = await transaction_now(conn)
        key = None if flow_key is None else stored_key(DEFAULT_TENANT, flow_key)
        return await LifecycleStore().backfill(
            conn, schedule_id, ticks, now, held=False, flow_key=key
        )

    return await database.run(work)


# -- lists of schedules ----------------------------------------------------------------


async def search_schedules(
    database: Database,
    where: ScheduleFilter | None = None,
    *,
    limit: int = 100,
    after: ScheduleAfter | None = None,
) -> list[Schedule]:
    """One page of schedules, as the list of the API reads it."""
    chosen = where or ScheduleFilter()
    return await database.run(
        lambda conn: ScheduleStore().search(conn, chosen, limit=limit, after=after)
    )


async def every_page(database: Database, where: ScheduleFilter, *, limit: int) -> list[Schedule]:
    """Every schedule `where` lists, read `limit` at a time, each page after the last
    schedule of the one before in the terms of its sort, as a cursor carries it."""
    found: list[Schedule] = []
    after: ScheduleAfter | None = None
    while True:
        page = await search_schedules(database, where, limit=limit, after=after)
        assert len(page) <= limit
        found += page
        if len(page) < limit:
            return found
        last = page[-1]
        after = ScheduleAfter(
            where.sort, last.id, next_fire_at=last.next_fire_at, failures=last.consecutive_failures
        )


async def set_failures(database: Database, schedule_id: uuid.UUID, count: int) -> None:
    """The schedule's failures in a row set to `count`, as that many dead letters leave it."""

    async def work(conn: Connection) -> None:
        await conn.execute(
            schedules.update()
            .where(schedules.c.id == schedule_id)
            .values(consecutive_failures=count)
        )

    await database.run(work)


# -- dead letters ------------------------------------------------------------------------


async def dead_letters(database: Database, *, limit: int = 100) -> list[DeadLetter]:
    """Every dead letter, most recently dead-lettered first."""
    return await database.run(
        lambda conn: DeadLetterStore().list_dead_letters(
            conn, DeadLetterFilter(), limit=limit, after=None
        )
    )


async def replay(database: Database, occurrence_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    """Dead letters back to pending, due now; returns the ids replayed."""

    async def work(conn: Connection) -> list[uuid.UUID]:
        now = await transaction_now(conn)
        return await DeadLetterStore().replay(conn, now, occurrence_ids)

    return await database.run(work)


async def replay_matching(
    database: Database,
    where: DeadLetterFilter,
    *,
    limit: int,
    dead_lettered_by: datetime | None = None,
) -> list[uuid.UUID]:
    """One batch of a replay by filter: up to `limit` of the dead letters matching `where`
    that were dead-lettered by `dead_lettered_by` (default: the transaction's instant), the
    longest dead first; returns the ids replayed."""

    async def work(conn: Connection) -> list[uuid.UUID]:
        now = await transaction_now(conn)
        return await DeadLetterStore().replay_matching(
            conn, now, where, limit=limit, dead_lettered_by=dead_lettered_by or now
        )

    return await database.run(work)


# -- retention ---------------------------------------------------------------------------


async def prune(database: Database, *, older_than: datetime, limit: int) -> int:
    return await database.run(
        lambda conn: retention.prune(conn, older_than=older_than, limit=limit)
    )


async def drop_history(database: Database, *, older_than: datetime) -> list[str]:
    """What the pruner does to history (attempts, schedule events) on PostgreSQL: drop every
    day that ended by `older_than`, a partition a transaction, and sweep the default
    partitions of rows whose owner is gone; the partitions dropped (none elsewhere, where
    history goes with its owner)."""
    if not database.dialect.partitioned_history:
        return []
    dropped = []
    for table in HISTORY:
        while name := await database.run(
            functools.partial(history.drop_expired, history=table, cutoff=older_than)
        ):
            dropped.append(name)
        await sweep_history(database, table.name)
    return dropped


async def make_history_days(database: Database, today: date) -> list[str]:
    """The pruner's making of the days ahead of `today`, for both history tables; the
    partitions made."""
    made = []
    for table in HISTORY:
        made += await database.run(
            functools.partial(history.make_ahead, history=table, today=today)
        )
    return made


async def sweep_history(database: Database, table: str, limit: int = 1000) -> int:
    """Sweep the default partition of `table` once through; the rows deleted."""
    swept = 0
    after = None
    while True:
        deleted, after = await database.run(
            functools.partial(
                history.sweep_kept, history=PARTITIONED[table], after=after, limit=limit
            )
        )
        swept += deleted
        if after is None:
            return swept


async def history_partitions(database: Database, table: str) -> dict[str, int]:
    """The partitions of `table` (PostgreSQL), each with the rows it holds."""

    async def work(conn: Connection) -> dict[str, int]:
        rows = await conn.execute(
            sa.text(
                "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c"
                " ON c.oid = i.inhrelid WHERE i.inhparent = CAST(:t AS regclass)"
            ),
            {"t": table},
        )
        names = [str(name) for name in rows.scalars()]
        return {
            name: int((await conn.execute(sa.text(f'SELECT count(*) FROM "{name}"'))).scalar_one())
            for name in names
        }

    return await database.run(work)


async def prune_schedules(
    database: Database,
    *,
    older_than: datetime,
    limit: int,
    kept: Sequence[str] = (),
    only: Sequence[str] | None = None,
) -> int:
    return await database.run(
        lambda conn: retention.prune_schedules(
            conn, older_than=older_than, limit=limit, kept=kept, only=only
        )
    )


async def end_schedule(database: Database, schedule_id: uuid.UUID, status: ScheduleStatus) -> None:
    """The schedule set to `status` now, as a cancel or its last settle leaves it."""

    async def work(conn: Connection) -> None:
        await conn.execute(
            schedules.update()
            .where(schedules.c.id == schedule_id)
            .values(status=status, updated_at=await transaction_now(conn))
        )

    await database.run(work)


@asynccontextmanager
async def opened(url: str) -> AsyncIterator[Database]:
    """A `Database` of `url`, closed when the block ends."""
    database = Database(url)
    try:
        yield database
    finally:
        await database.close()


async def count_rows(database: Database, table: str) -> int:
    async with database.engine.connect() as conn:
        return int((await conn.execute(sa.text(f"SELECT count(*) FROM {table}"))).scalar_one())


@asynccontextmanager
async def holding_pruning_lock(database: Database) -> AsyncIterator[bool]:
    """An open transaction that tried to take the pruning lock, as `prune` does; yields
    whether it got it. The lock is released when the block ends."""
    async with (
        database.engine.begin() as conn,
        dialect_of(conn).exclusive(conn, "prune") as held,
    ):
        yield held


# -- schema ------------------------------------------------------------------------------


def ddl_statements(dialect: str) -> list[str]:
    """The statements of `chronoq schema --dialect <dialect>`, one by one, without the
    script's comments and its BEGIN and COMMIT."""
    statements: list[str] = []
    lines: list[str] = []
    for line in schema_ddl(dialect).splitlines():
        if not lines and (not line.strip() or line.startswith("--")):
            continue
        lines.append(line)
        if line.endswith(";"):
            statement = "\n".join(lines)[:-1]
            lines = []
            if statement not in ("BEGIN", "COMMIT"):
                statements.append(statement)
    assert not lines, "the DDL ends inside a statement"
    return statements


async def build_from_ddl(database: Database) -> None:
    """Build the schema in an empty database from the DDL, as an operator would run it."""
    async with database.engine.begin() as conn:
        for statement in ddl_statements(conn.dialect.name):
            await conn.exec_driver_sql(statement)


# -- reading back ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OccurrenceRow:
    """An `occurrences` row as stored."""

    occurrence_id: uuid.UUID
    schedule_id: uuid.UUID
    fire_at: datetime
    available_at: datetime | None
    status: OccurrenceStatus
    origin: Origin
    attempts: int
    lease_token: uuid.UUID | None
    last_error: str | None
    skip_reason: str | None
    delivered_at: datetime | None
    dead_lettered_at: datetime | None
    updated_at: datetime
    callback_of: uuid.UUID | None
    shelved: bool


async def read_occurrence_rows(
    database: Database, schedule_id: uuid.UUID | None = None
) -> list[OccurrenceRow]:
    """The occurrences of `schedule_id` (None: all of them), by fire instant then id."""
    statement = sa.select(
        *(occurrences.c[field] for field in OccurrenceRow.__dataclass_fields__)
    ).order_by(occurrences.c.fire_at, occurrences.c.occurrence_id)
    if schedule_id is not None:
        statement = statement.where(occurrences.c.schedule_id == schedule_id)

    async def work(conn: Connection) -> list[OccurrenceRow]:
        rows = (await conn.execute(statement)).mappings().all()
        return [
            OccurrenceRow(
                **{
                    **row,
                    "status": OccurrenceStatus(row["status"]),
                    "origin": Origin(row["origin"]),
                }
            )
            for row in rows
        ]

    return await database.run(work)


async def write_payload_text(database: Database, schedule_id: uuid.UUID, text: str) -> None:
    """Store `text` as a schedule's payload as plain SQL would, past the column's type: as
    a row written by an earlier version of the store looks."""

    async def work(conn: Connection) -> None:
        statement = sa.text("UPDATE schedules SET payload = :text WHERE id = :id").bindparams(
            sa.bindparam("id", type_=schedules.c.id.type)
        )
        await conn.execute(statement, {"text": text, "id": schedule_id})

    await database.run(work)


async def write_retry_text(database: Database, schedule_id: uuid.UUID, text: str) -> None:
    """Store `text` as a schedule's own retry policy, past the API's bounds: as a policy
    stored before a bound came in looks."""

    async def work(conn: Connection) -> None:
        statement = sa.text("UPDATE schedules SET retry = :text WHERE id = :id").bindparams(
            sa.bindparam("id", type_=schedules.c.id.type)
        )
        await conn.execute(statement, {"text": text, "id": schedule_id})

    await database.run(work)


async def read_schedule_status(database: Database, schedule_id: uuid.UUID) -> ScheduleStatus:
    async def work(conn: Connection) -> ScheduleStatus:
        statement = sa.select(schedules.c.status).where(schedules.c.id == schedule_id)
        return ScheduleStatus((await conn.execute(statement)).scalar_one())

    return await database.run(work)


async def schedule_exists(database: Database, schedule_id: uuid.UUID) -> bool:
    async def work(conn: Connection) -> bool:
        statement = sa.select(schedules.c.id).where(schedules.c.id == schedule_id)
        return (await conn.execute(statement)).first() is not None

    return await database.run(work)


async def read_events(database: Database, schedule_id: uuid.UUID) -> list[str]:
    """The kinds of the schedule's audit events, oldest first."""

    async def work(conn: Connection) -> list[str]:
        statement = (
            sa.select(schedule_events.c.kind)
            .where(schedule_events.c.schedule_id == schedule_id)
            .order_by(schedule_events.c.id)
        )
        return [str(kind) for kind in (await conn.execute(statement)).scalars()]

    return await database.run(work)


async def database_now(database: Database) -> datetime:
    """The database clock, read in a transaction of its own."""
    return await database.run(transaction_now)


def move_clock(database: Database, by: timedelta) -> None:
    """Move the database clock forward by `by`, at once: every read of it after this, by
    this `Database` and by every other one of its store in the process (the API's pool,
    the delivery loop's), is `by` later. How a case lets ticks go by, a pause last or a
    lease run out without waiting for it. The `database` fixture and the API harness put
    the clock back when the case ends."""
    database.clock.move(by)


async def move_clock_past(database: Database, instant: datetime) -> datetime:
    """Move the database clock just past `instant` (a millisecond; not at all when it is
    past already), as though the time until then had gone by; returns the clock's reading
    after the move."""
    now = await database_now(database)
    if now <= instant:
        database.clock.move(instant - now + timedelta(milliseconds=1))
    after = await database_now(database)
    assert after > instant, f"the database clock reads {after}, not past {instant}"
    return after


async def run_out_lease(database: Database, occurrence_id: uuid.UUID) -> datetime:
    """Let the occurrence's lease run out, as though the time until its end had gone by:
    the database clock moved just past it (its `available_at`). Returns the clock's reading
    after the move."""
    end = (await read_lease(database, occurrence_id)).available_at
    assert end is not None, "the occurrence has no lease to run out (paused, or finished)"
    return await move_clock_past(database, end)


async def read_sql_clock(database: Database, expression: str) -> Any:
    """`SELECT expression` in a transaction of its own: SQL that reads a clock itself."""

    async def work(conn: Connection) -> Any:
        return (await conn.execute(sa.text(f"SELECT {expression}"))).scalar_one()

    return await database.run(work)


# -- flow keys ----------------------------------------------------------------------------
# By name, in `tenant` (default: `default`): the store names a key by its tenant and name
# (`app.domain.tenants.stored_key`); what these answer names it as its tenant does.


def _named(found: FlowKey) -> FlowKey:
    return replace(found, key=key_name(found.key))


async def put_flow_key(
    database: Database,
    key: str,
    limits: FlowLimits,
    if_match: frozenset[int] | None = None,
    tenant: str = DEFAULT_TENANT,
) -> tuple[FlowKey, bool]:
    """Create or replace a key's limits: the key as it then stands, and whether it is new."""

    async def work(conn: Connection) -> tuple[FlowKey, bool]:
        now = await transaction_now(conn)
        return await FlowKeyStore().put(conn, stored_key(tenant, key), limits, if_match, now)

    found, created = await database.run(work)
    return _named(found), created


async def visited_keys(database: Database) -> list[str]:
    """The flow keys the keyed claim looks at now: those with rows due that no key holds."""

    async def work(conn: Connection) -> list[str]:
        return [key_name(row.flow_key) for row in (await keys_with_work_due(conn, 0.0))[0]]

    return await database.run(work)


async def walked_keys(database: Database) -> list[str]:
    """The flow keys a walk of the keys visits (named SQL `flow_due`): every key with rows
    awake, whenever they are due."""

    async def work(conn: Connection) -> list[str]:
        rows = await dialect_of(conn).due_keys(conn, NEVER_FAR / 2)
        return sorted(key_name(row.flow_key) for row in rows)

    return await database.run(work)


async def sleeping_keys(database: Database) -> dict[str, datetime]:
    """The keys asleep (`flow_key_sleeps`), each with the instant its rows wake by."""

    async def work(conn: Connection) -> dict[str, datetime]:
        found = await conn.execute(sa.select(flow_key_sleeps.c.key, flow_key_sleeps.c.next_at))
        return {key_name(row.key): row.next_at for row in found}

    return await database.run(work)


async def move_to_key(database: Database, schedule_id: uuid.UUID, key: str | None) -> None:
    """What a PATCH of the schedule's flow key writes: the key, and its rows moved to it."""

    async def work(conn: Connection) -> None:
        await ScheduleStore().update(conn, schedule_id, await transaction_now(conn), flow_key=key)
        stored = stored_key_or_none(DEFAULT_TENANT, key)
        await LifecycleStore().move_to_key(conn, schedule_id, stored)

    await database.run(work)


async def read_flow_key(database: Database, key: str, tenant: str = DEFAULT_TENANT) -> FlowKey:
    async def work(conn: Connection) -> FlowKey:
        return await FlowKeyStore().get(conn, stored_key(tenant, key), await transaction_now(conn))

    return _named(await database.run(work))


async def clear_flow_key_backoff(database: Database, key: str) -> FlowKey:
    """End a destination's back-off of the key: the key as it then stands."""

    async def work(conn: Connection) -> FlowKey:
        stored = stored_key(DEFAULT_TENANT, key)
        return await FlowKeyStore().clear_backoff(conn, stored, await transaction_now(conn))

    return _named(await database.run(work))


async def delete_flow_key(
    database: Database, key: str, if_match: frozenset[int] | None = None
) -> bool:
    async def work(conn: Connection) -> bool:
        return await FlowKeyStore().delete(conn, stored_key(DEFAULT_TENANT, key), if_match)

    return await database.run(work)


async def flow_keys(
    database: Database,
    *,
    after: str | None = None,
    limit: int = 100,
    tenant: str = DEFAULT_TENANT,
) -> list[FlowKey]:
    async def work(conn: Connection) -> list[FlowKey]:
        return await FlowKeyStore().page(
            conn,
            prefix=key_prefix(tenant),
            after=None if after is None else stored_key(tenant, after),
            limit=limit,
            now=await transaction_now(conn),
        )

    return [_named(found) for found in await database.run(work)]


# -- endpoints ------------------------------------------------------------------------


async def make_endpoint(
    database: Database,
    *,
    tenant: str = DEFAULT_TENANT,
    circuit: CircuitSettings | None = None,
    flow: FlowLimits | None = None,
) -> uuid.UUID:
    """An endpoint of `tenant` (its URL nothing listens on: deliveries are settled by
    hand), with a circuit of `circuit`'s settings; its id."""
    spec = EndpointSpec(url=_TARGET.url, flow=flow, circuit=circuit or CircuitSettings())

    async def work(conn: Connection) -> uuid.UUID:
        now = await transaction_now(conn)
        made = await EndpointStore().create(
            conn, tenant, spec, new_signing_secret(), now, actor=None
        )
        return made.id

    return await database.run(work)


def endpoint_target(endpoint_id: uuid.UUID) -> EndpointTarget:
    return EndpointTarget(type="endpoint", endpoint_id=endpoint_id)


async def read_endpoint(
    database: Database, endpoint_id: uuid.UUID, tenant: str = DEFAULT_TENANT
) -> Endpoint:
    async def work(conn: Connection) -> Endpoint:
        return await EndpointStore().get(conn, tenant, endpoint_id, await transaction_now(conn))

    return await database.run(work)


async def enable_endpoint(
    database: Database, endpoint_id: uuid.UUID, tenant: str = DEFAULT_TENANT
) -> Endpoint:
    async def work(conn: Connection) -> Endpoint:
        now = await transaction_now(conn)
        return await EndpointStore().enable(conn, tenant, endpoint_id, now, actor="cli")

    return await database.run(work)


async def endpoint_event_kinds(
    database: Database, endpoint_id: uuid.UUID, tenant: str = DEFAULT_TENANT
) -> list[str]:
    async def work(conn: Connection) -> list[str]:
        found = await EndpointStore().history(conn, tenant, endpoint_id, after=None, limit=100)
        return [event.kind for event in found]

    return await database.run(work)


async def settled(database: Database, settlements: Sequence[Settlement]) -> Settled:
    """A settle, with what it changed beyond its occurrences (dead letters' auto-pauses,
    endpoints' circuits)."""
    return await _queue(database).settle(settlements)


async def key_backoffs(database: Database) -> dict[str, datetime]:
    """The keys backing off until a later instant than now, by key (read with the columns
    every version has)."""

    async def work(conn: Connection) -> dict[str, datetime]:
        now = await transaction_now(conn)
        found = await conn.execute(
            sa.select(flow_keys_table.c.key, flow_keys_table.c.backoff_until).where(
                flow_keys_table.c.backoff_until > now
            )
        )
        return {row.key: row.backoff_until for row in found}

    return await database.run(work)


# -- operator events ------------------------------------------------------------------


async def lease_events(
    database: Database, *, limit: int = 50, lease: float = 30.0
) -> list[LeasedEvent]:
    """The operator events due, leased to the caller for `lease` seconds."""

    async def work(conn: Connection) -> list[LeasedEvent]:
        now = await transaction_now(conn)
        return await lease_operator_events(conn, limit=limit, lease=lease, now=now)

    return await database.run(work)


async def tell_events(database: Database, ids: Sequence[uuid.UUID]) -> None:
    await database.run(lambda conn: told(conn, ids))


async def record_events_rolled_back(database: Database, events: Sequence[NewOperatorEvent]) -> None:
    """Record `events` in a transaction that then fails, and is rolled back whole."""

    async def work(conn: Connection) -> None:
        await record_operator_events(conn, events, await transaction_now(conn))
        raise RolledBackError

    with suppress(RolledBackError):
        await database.run(work)


async def record_events(database: Database, events: Sequence[NewOperatorEvent]) -> int:
    async def work(conn: Connection) -> int:
        return await record_operator_events(conn, events, await transaction_now(conn))

    return await database.run(work)


async def remove_endpoint_row(database: Database, endpoint_id: uuid.UUID) -> None:
    """Remove an endpoint's row as no request can while a schedule targets it (a restore
    from an older backup, an operator's SQL): what its schedules then attempt must fail as
    an unreadable target does, not fail the claim."""

    async def work(conn: Connection) -> None:
        await conn.execute(
            endpoint_secrets.delete().where(endpoint_secrets.c.endpoint_id == endpoint_id)
        )
        await conn.execute(endpoints.delete().where(endpoints.c.id == endpoint_id))

    await database.run(work)


# -- topics -----------------------------------------------------------------------------


async def make_topic(database: Database, name: str, tenant: str = DEFAULT_TENANT) -> None:
    async def work(conn: Connection) -> None:
        await TopicStore().put(conn, tenant, name, None, None, await transaction_now(conn))

    await database.run(work)


async def subscribe(
    database: Database,
    topic: str,
    endpoint_id: uuid.UUID,
    *,
    tenant: str = DEFAULT_TENANT,
    event_types: tuple[str, ...] | None = None,
    match: dict[str, Any] | None = None,
) -> uuid.UUID:
    spec = SubscriptionSpec(
        topic=topic, endpoint_id=endpoint_id, event_types=event_types, match=match
    )

    async def work(conn: Connection) -> uuid.UUID:
        made = await TopicStore().subscribe(conn, tenant, spec, await transaction_now(conn))
        return made.id

    return await database.run(work)


def topic_target(topic: str) -> TopicTarget:
    return TopicTarget(type="topic", topic=topic)


async def fanout_rows(database: Database) -> list[tuple[uuid.UUID, uuid.UUID, uuid.UUID]]:
    """Each fan-out delivery's (id, topic occurrence, subscription)."""
    o = occurrences.c

    async def work(conn: Connection) -> list[tuple[uuid.UUID, uuid.UUID, uuid.UUID]]:
        found = await conn.execute(
            sa.select(o.occurrence_id, o.parent_id, o.subscription_id).where(o.origin == "fanout")
        )
        return [(row[0], row[1], row[2]) for row in found]

    return await database.run(work)


async def claim_rolled_back(database: Database, *, limit: int) -> None:
    """A claim whose transaction then fails (its replica died before the commit)."""

    async def work(conn: Connection) -> None:
        await ClaimStore().claim(conn, limit=limit, lease=30.0, owner=OWNER)
        raise RolledBackError

    with suppress(RolledBackError):
        await database.run(work)


async def roll_up_activity(database: Database, since: datetime, until: datetime) -> int:
    """Recompute the activity minutes from `since` to `until` from the attempt log."""

    async def work(conn: Connection) -> int:
        return await activity_records.roll_up(conn, since, until, await transaction_now(conn))

    return await database.run(work)


async def activity(
    database: Database, scope: Scope, subject: str, since: datetime, until: datetime
) -> tuple[Minute, ...]:
    """Every minute of one subject's rolled-up figures from `since` to `until`."""

    async def work(conn: Connection) -> tuple[Minute, ...]:
        found, _ = await activity_records.rolled_minutes(conn, scope, subject, since, until)
        return every_minute(since, until, found)

    return await database.run(work)


async def schedule_activity(
    database: Database, schedule_id: uuid.UUID, since: datetime, until: datetime
) -> tuple[Minute, ...]:
    """Every minute of a schedule's figures, read from its attempt log."""

    async def work(conn: Connection) -> tuple[Minute, ...]:
        found = await activity_records.schedule_minutes(
            conn, schedule_id, since, until, fired=since - timedelta(days=1)
        )
        return every_minute(since, until, found)

    return await database.run(work)


async def prune_activity(database: Database, before: datetime) -> int:
    return await database.run(lambda conn: activity_records.prune_activity(conn, before))


async def activity_rolled_to(database: Database) -> datetime | None:
    """The latest minute the fleet's activity is rolled up for."""
    return await database.run(activity_records.rolled_to)


def _attempts_of(schedule_id: uuid.UUID) -> sa.ColumnElement[bool]:
    return attempts.c.occurrence_id.in_(
        sa.select(occurrences.c.occurrence_id).where(occurrences.c.schedule_id == schedule_id)
    )


async def attempt_copies(
    database: Database, schedule_id: uuid.UUID
) -> list[tuple[datetime | None, str | None, str | None]]:
    """The instant, tenant and flow key each attempt of a schedule's occurrences carries."""
    statement = sa.select(attempts.c.fire_at, attempts.c.tenant, attempts.c.flow_key).where(
        _attempts_of(schedule_id)
    )

    async def work(conn: Connection) -> list[tuple[datetime | None, str | None, str | None]]:
        return [tuple(row) for row in await conn.execute(statement)]

    return await database.run(work)


async def forget_attempt_copies(database: Database, schedule_ids: Sequence[uuid.UUID]) -> None:
    """Clear what the attempts of these schedules carry of their occurrence and schedule, as
    the log held attempts before they carried it."""

    async def work(conn: Connection) -> None:
        for schedule_id in schedule_ids:
            await conn.execute(
                attempts.update()
                .where(_attempts_of(schedule_id))
                .values(fire_at=None, tenant=None, flow_key=None)
            )

    await database.run(work)
