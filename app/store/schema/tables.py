"""Table shapes and indexes; alembic migrations are written against this metadata.

Invariant: a pending occurrence is claimable when `available_at <= now`; the partial
index `ix_occurrences_claim` holds only pending rows, so a claim costs the same however
much delivered history the table keeps.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from app.domain.destinations import MAX_DESTINATION
from app.domain.tenants import (
    DEFAULT_TENANT,
    DEFAULT_WEIGHT,
    MAX_DISPLAY_NAME,
    MAX_TENANT,
    MAX_WEIGHT,
    MIN_WEIGHT,
    STORED_KEY_LENGTH,
)
from app.store.schema.types import DOUBLE, LONG_TEXT, PAYLOAD, UUID, JSONType, UTCDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "%(table_name)s_%(column_0_name)s_key",
    "ck": "%(table_name)s_%(constraint_name)s_check",
    "fk": "%(table_name)s_%(column_0_name)s_fkey",
    "pk": "%(table_name)s_pkey",
}

SQLModel.metadata.naming_convention = NAMING_CONVENTION
metadata = SQLModel.metadata


# MySQL tables: InnoDB, and a binary collation, so that names, event types and keys
# compare as they do elsewhere (case and accents count).
MYSQL_TABLE = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}

SCHEDULE_STATUSES = ("pending", "paused", "completed", "cancelled", "failed")
OCCURRENCE_STATUSES = (
    "pending",
    "delivered",
    "dead_lettered",
    "cancelled",
    "skipped",
    "completed",
)
ORIGINS = ("schedule", "trigger", "catchup", "backfill", "callback", "fanout")
MISFIRE_POLICIES = ("fire_once", "skip", "fire_all")
SKIP_REASONS = ("misfire", "paused", "dst_gap")
PAUSE_REASONS = ("manual", "failures")
ATTEMPT_OUTCOMES = ("delivered", "retry", "dead_lettered", "lease_expired")
EVENT_KINDS = (
    "created",
    "updated",
    "paused",
    "resumed",
    "triggered",
    "cancelled",
    "backfilled",
    "completed",
    "failed",
    "auto_paused",
    "dead_letter_replayed",
    "dead_letter_discarded",
)
# Finished occurrences that retention deletes; pending and dead-lettered ones are kept.
PRUNABLE_STATUSES = ("delivered", "cancelled", "skipped", "completed")
# Schedules that have ended, which schedule retention deletes with all they hold.
ENDED_STATUSES = ("completed", "cancelled", "failed")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


# The pruning statement repeats this text, so that both dialects prove the index usable.
PRUNABLE = _in("status", PRUNABLE_STATUSES)
ENDED = _in("status", ENDED_STATUSES)
LIVE = _in("status", ("pending", "paused"))
# The rows of every tenant but `default`, which the tenant indexes hold: a single-team
# installation (every row the default tenant's) keeps none of them up to date, and a list or
# a count in the default tenant reads the schedules themselves. A statement in another
# tenant repeats this text, so that it proves the index usable whatever tenant it binds.
NOT_DEFAULT = f"tenant <> '{DEFAULT_TENANT}'"
# The pending rows each claim index holds (`CLAIM_SETS`): of no flow key never attempted
# (first attempts), of no flow key attempted before (retries, replays, leases lost), and of
# a flow key. The claims repeat these texts, so each proves its index usable.
UNKEYED_FRESH = "status = 'pending' AND flow_key IS NULL AND first_attempt_at IS NULL"
UNKEYED_AGAIN = "status = 'pending' AND flow_key IS NULL AND first_attempt_at IS NOT NULL"
KEYED = "status = 'pending' AND flow_key IS NOT NULL"
# Of those, the rows no paused or backing-off key has shelved (`occurrences.shelved`): the
# keys the keyed claim visits, so that however many keys hold work back, it never sees them.
KEYED_OPEN = KEYED + " AND NOT shelved"
# Keys with rows shelved although the key may start again (resumed, or its back-off
# over): the claim unshelves them. A paused key is none of them, however many are.
UNSHELVING = "shelving AND NOT paused"
# The keyed rows put to sleep (`flow_key_sleeps`): shelved although their key may start,
# because nothing of the key is due for a while; woken by key and instant.
KEYED_ASLEEP = KEYED + " AND shelved"
CLAIM_SETS = (UNKEYED_FRESH, UNKEYED_AGAIN, KEYED)
# The rows of a flow key whose lease may still hold, whatever their status: a pause or a
# cancel does not end an attempt in flight. The count of a key's attempts in flight repeats
# this text, so it proves the index usable.
FLOW_LEASED = "flow_key IS NOT NULL AND lease_token IS NOT NULL"


def by_key(status: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
    """An occurrence's status as a statement that finds its rows by key (occurrence ids)
    tests it: as an expression no partial index of pending rows is defined on, so that
    PostgreSQL never reads one of those indexes to find the rows. Its estimate of such an
    index lags a burst of inserts (rows added since the table was analysed count for
    nothing), and a start mark of 60 ids then read all 10^4 pending rows of a W1 burst:
    5 ms, against 0.3 ms by key, and growing with what is pending."""
    return sa.func.coalesce(status, "")


def starts_with(column: Any, prefix: str) -> tuple[Any, ...]:
    """`column` starts with `prefix`, character for character: LIKE (escaped, so a `%` or a
    `_` is that character) lets an index serve where one can, and the equal substring keeps
    case apart on SQLite too, whose LIKE ignores it."""
    return (
        column.startswith(prefix, autoescape=True),
        sa.func.substr(column, 1, len(prefix)) == prefix,
    )


# Who acted: an API key's name (64), "cli" or "system", or a tenant key's tenant and name.
ACTOR_LENGTH = MAX_TENANT + 1 + 64
ORDERINGS = ("none", "fifo")
# A flow key column holds the key as the store names it, its tenant's id first
# (`app.domain.tenants.stored_key`).
FLOW_KEY_LENGTH = STORED_KEY_LENGTH

_PARTIAL_DIALECTS = ("postgresql", "sqlite")
_MYSQL_DIALECTS = ("mysql", "mariadb")


def _partial(
    name: str,
    *columns: str,
    where: str,
    mysql: tuple[str, ...] | None,
    unique: bool = False,
) -> list[sa.Index]:
    """An index over `columns` of the rows `where` selects: partial on PostgreSQL and
    SQLite, so its size follows the rows that matter, not the history kept. MySQL has no
    partial indexes; there the index is over `mysql`, which leads or ends with the columns
    `where` tests, so each lookup is still a range scan of the index (None: another MySQL
    index serves already). Both carry the dialects they belong to (`info`); DDL takes a
    table's indexes from `table_indexes`."""
    partial = sa.Index(
        name,
        *columns,
        unique=unique,
        postgresql_where=sa.text(where),
        sqlite_where=sa.text(where),
        info={"dialects": _PARTIAL_DIALECTS},
    )
    if mysql is None:
        return [partial]
    return [partial, sa.Index(name, *mysql, unique=unique, info={"dialects": _MYSQL_DIALECTS})]


def table_indexes(table: sa.Table, dialect: str) -> list[sa.Index]:
    """The indexes `table` has on `dialect`, by name."""
    return sorted(
        (i for i in table.indexes if dialect in i.info.get("dialects", (dialect,))),
        key=lambda index: str(index.name),
    )


class ScheduleRow(SQLModel, table=True):
    __tablename__ = "schedules"
    __table_args__ = (
        sa.CheckConstraint(_in("status", SCHEDULE_STATUSES), name="status"),
        sa.CheckConstraint("max_attempts >= 1", name="max_attempts"),
        sa.CheckConstraint("fire_count >= 0", name="fire_count"),
        sa.CheckConstraint("version >= 1", name="version"),
        sa.CheckConstraint("jitter_seconds >= 0", name="jitter_seconds"),
        sa.CheckConstraint(_in("misfire_policy", MISFIRE_POLICIES), name="misfire_policy"),
        sa.CheckConstraint("misfire_grace_seconds >= 0", name="misfire_grace_seconds"),
        sa.CheckConstraint("max_catchup >= 1", name="max_catchup"),
        sa.CheckConstraint(
            "max_occurrences IS NULL OR max_occurrences >= 1", name="max_occurrences"
        ),
        sa.CheckConstraint(
            "last_skip_reason IS NULL OR " + _in("last_skip_reason", SKIP_REASONS),
            name="last_skip_reason",
        ),
        sa.CheckConstraint(
            "pause_after_failures IS NULL OR pause_after_failures BETWEEN 1 AND 1000",
            name="pause_after_failures",
        ),
        sa.CheckConstraint(
            "pause_reason IS NULL OR " + _in("pause_reason", PAUSE_REASONS), name="pause_reason"
        ),
        sa.CheckConstraint("consecutive_failures >= 0", name="consecutive_failures"),
        # The claim skips paused schedules; this keeps that check off a scan of every schedule.
        *_partial("ix_schedules_paused", "id", where="status = 'paused'", mysql=("status", "id")),
        # Schedule retention: ended schedules, oldest change first (MySQL: all of them, by
        # that instant, with the status read inside the index).
        *_partial("ix_schedules_ended", "updated_at", where=ENDED, mysql=("updated_at", "status")),
        # Failing schedules (a list's `failing` filter): only those with failures in a row.
        *_partial(
            "ix_schedules_failing",
            "id",
            where="consecutive_failures > 0",
            mysql=("consecutive_failures", "id"),
        ),
        # The keys schedules name (the list of keys, a PATCH of the key).
        *_partial(
            "ix_schedules_flow_key", "flow_key", where="flow_key IS NOT NULL", mysql=("flow_key",)
        ),
        # Names and Idempotency-Keys are unique per tenant: indexes of the schedules that
        # have one (most have neither, and cost neither index anything; MySQL: every row,
        # where NULLs never collide).
        *_partial(
            "ix_schedules_name",
            "tenant",
            "name",
            where="name IS NOT NULL",
            mysql=("tenant", "name"),
            unique=True,
        ),
        *_partial(
            "ix_schedules_idempotency_key",
            "tenant",
            "idempotency_key",
            where="idempotency_key IS NOT NULL",
            mysql=("tenant", "idempotency_key"),
            unique=True,
        ),
        # Another tenant's list, newest first (MySQL: every tenant's).
        *_partial(
            "ix_schedules_tenant_id", "tenant", "id", where=NOT_DEFAULT, mysql=("tenant", "id")
        ),
        # Another tenant's live schedules, counted against its `max_schedules` up to the
        # quota (MySQL: every tenant's).
        *_partial(
            "ix_schedules_live",
            "tenant",
            where=f"{LIVE} AND {NOT_DEFAULT}",
            mysql=("tenant", "status"),
        ),
        MYSQL_TABLE,
    )

    id: uuid.UUID = Field(sa_column=sa.Column(UUID, primary_key=True))
    # The tenant it belongs to (`app.domain.tenants`), and all it holds with it.
    tenant: str = Field(
        default=DEFAULT_TENANT,
        sa_column=sa.Column(sa.String(MAX_TENANT), nullable=False, server_default=DEFAULT_TENANT),
    )
    name: str | None = Field(default=None, sa_column=sa.Column(sa.String(200)))
    event_type: str = Field(sa_column=sa.Column(sa.String(200), nullable=False))
    # Plain JSON, not JSONB: the stored text is the payload as given, sent byte for byte.
    payload: Any = Field(sa_column=sa.Column(PAYLOAD, nullable=True))
    target: dict[str, Any] = Field(sa_column=sa.Column(JSONType, nullable=False))
    target_type: str = Field(sa_column=sa.Column(sa.String(20), nullable=False))
    # Where its target delivers (`app.domain.destinations`): a claim passes over the rows of
    # a destination the replica has no room for. NULL (never so since it was added): none
    # is passed over.
    destination: str | None = Field(
        default=None, sa_column=sa.Column(sa.String(MAX_DESTINATION), nullable=True)
    )
    trigger: dict[str, Any] = Field(sa_column=sa.Column(JSONType, nullable=False))
    max_attempts: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    jitter_seconds: float = Field(
        default=0.0, sa_column=sa.Column(DOUBLE, nullable=False, server_default="0")
    )
    misfire_policy: str = Field(
        default="fire_once",
        sa_column=sa.Column(sa.String(20), nullable=False, server_default="fire_once"),
    )
    misfire_grace_seconds: float = Field(
        default=60.0, sa_column=sa.Column(DOUBLE, nullable=False, server_default="60")
    )
    max_catchup: int = Field(
        default=100, sa_column=sa.Column(sa.Integer, nullable=False, server_default="100")
    )
    max_occurrences: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    labels: dict[str, str] = Field(sa_column=sa.Column(JSONType, nullable=False))
    status: str = Field(sa_column=sa.Column(sa.String(20), nullable=False))
    fire_count: int = Field(sa_column=sa.Column(sa.Integer, nullable=False, server_default="0"))
    # Ticks of the trigger that fired (or were planned to fire, for catch-ups): what
    # max_occurrences bounds. Manual triggers and backfills are not counted.
    tick_count: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    skipped_count: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    last_skip_reason: str | None = Field(default=None, sa_column=sa.Column(sa.String(20)))
    # Set while paused: the ticks between it and the resume are recorded as skipped.
    paused_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    last_fired_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    idempotency_key: str | None = Field(default=None, sa_column=sa.Column(sa.String(255)))
    request_hash: str | None = Field(default=None, sa_column=sa.Column(sa.String(64)))
    created_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    updated_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    # +1 on every change a client or operator makes; deliveries leave it alone.
    version: int = Field(
        default=1, sa_column=sa.Column(sa.Integer, nullable=False, server_default="1")
    )
    # The API key's name (or "cli") that created it; NULL when no keys are set.
    created_by: str | None = Field(default=None, sa_column=sa.Column(sa.String(ACTOR_LENGTH)))
    # NULL: never pause by itself; else pause after this many dead letters in a row.
    pause_after_failures: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    # Set while paused: "manual" (API, CLI) or "failures" (auto-pause).
    pause_reason: str | None = Field(default=None, sa_column=sa.Column(sa.String(20)))
    # Occurrences dead-lettered in a row; a delivery sets it back to 0.
    consecutive_failures: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    # The flow key whose limits its deliveries share (NULL: none).
    flow_key: str | None = Field(
        default=None, sa_column=sa.Column(sa.String(FLOW_KEY_LENGTH), nullable=True)
    )
    # Its own retry policy over the service's (NULL: the service's), as JSON.
    retry: dict[str, Any] | None = Field(default=None, sa_column=sa.Column(JSONType, nullable=True))
    # The target told of each of its occurrences dead-lettered (NULL: none), as JSON.
    on_failure: dict[str, Any] | None = Field(
        default=None, sa_column=sa.Column(JSONType, nullable=True)
    )
    # The W3C traceparent of the request that created it (NULL: none), sent on every
    # delivery of its occurrences (docs/tracing.md).
    traceparent: str | None = Field(default=None, sa_column=sa.Column(sa.String(55)))


class OccurrenceRow(SQLModel, table=True):
    __tablename__ = "occurrences"
    __table_args__ = (
        sa.CheckConstraint(_in("status", OCCURRENCE_STATUSES), name="status"),
        sa.CheckConstraint(_in("origin", ORIGINS), name="origin"),
        sa.CheckConstraint("attempts >= 0", name="attempts"),
        sa.CheckConstraint(
            "status <> 'delivered' OR delivered_at IS NOT NULL", name="delivered_at"
        ),
        sa.CheckConstraint(
            "status <> 'dead_lettered' OR dead_lettered_at IS NOT NULL", name="dead_lettered_at"
        ),
        sa.CheckConstraint("(status = 'skipped') = (skip_reason IS NOT NULL)", name="skip_reason"),
        sa.CheckConstraint(
            "skip_reason IS NULL OR " + _in("skip_reason", SKIP_REASONS), name="skip_reason_value"
        ),
        # The claim of unkeyed first attempts: rows held back on a flow key are not in it,
        # nor retries and replays, so neither costs that claim anything however many wait
        # (on MySQL, `flow_key IS NULL` is an equality lookup in the index's second column,
        # and the kind of attempt a filter).
        *_partial(
            "ix_occurrences_claim",
            "available_at",
            where=UNKEYED_FRESH,
            mysql=("status", "flow_key", "available_at"),
        ),
        # The claim of unkeyed rows attempted before (MySQL: the claim index).
        *_partial("ix_occurrences_claim_again", "available_at", where=UNKEYED_AGAIN, mysql=None),
        # The keyed claim: each key's due rows in due order, but for those its key shelved
        # (MySQL: the claim index).
        *_partial("ix_occurrences_flow", "flow_key", "available_at", where=KEYED_OPEN, mysql=None),
        # A fifo key's head: its earliest pending row in due order (fire instant, then id).
        *_partial(
            "ix_occurrences_flow_order",
            "flow_key",
            "fire_at",
            "occurrence_id",
            where=KEYED,
            mysql=("status", "flow_key", "fire_at", "occurrence_id"),
        ),
        # A sleeping key's rows (`flow_key_sleeps`), woken in due order (MySQL: the claim
        # index).
        *_partial(
            "ix_occurrences_asleep", "flow_key", "available_at", where=KEYED_ASLEEP, mysql=None
        ),
        # The keyed claim's due rows in due order, but for those keys shelved: the keys with
        # work due, from those rows (`flow_due_window`), however many keys have only future
        # rows (MySQL: none; it walks the keys).
        *_partial(
            "ix_occurrences_flow_open",
            "available_at",
            "flow_key",
            where=KEYED_OPEN,
            mysql=None,
        ),
        # The earliest keyed row not due yet, for the loop's idle sleep.
        *_partial(
            "ix_occurrences_flow_due",
            "available_at",
            where=KEYED,
            mysql=("status", "available_at", "flow_key"),
        ),
        # A key's attempts in flight: its rows whose lease holds (MySQL: every row, each
        # key's leases in order of their end, so the count is a range of live ones).
        *_partial(
            "ix_occurrences_flow_leases",
            "flow_key",
            "lease_until",
            where=FLOW_LEASED,
            mysql=("flow_key", "lease_until"),
        ),
        # Also a topic's occurrence's deliveries: they are its schedule's at its instant
        # (an index of their parent would be written at each of their every write).
        sa.Index("ix_occurrences_schedule_id_fire_at", "schedule_id", "fire_at"),
        *_partial(
            "ix_occurrences_pending_by_schedule",
            "schedule_id",
            "fire_at",
            where="status = 'pending'",
            mysql=("schedule_id", "status", "fire_at"),
        ),
        *_partial(
            "ix_occurrences_dead_letters",
            "dead_lettered_at",
            where="status = 'dead_lettered'",
            mysql=("status", "dead_lettered_at"),
        ),
        # A schedule's dead letters: the settle asks, for each one-shot it finishes, whether
        # its firing was dead-lettered. Through the schedule's occurrences the planner
        # expects a schedule to hold as many as the average, which one schedule with 10^5
        # dead letters makes thousands; it then scanned the table for each one-shot (66 ms
        # each at 3x10^5). This index is a lookup however the dead letters fall (MySQL:
        # `ix_occurrences_pending_by_schedule` leads with the schedule and its status).
        *_partial(
            "ix_occurrences_dead_letters_by_schedule",
            "schedule_id",
            where="status = 'dead_lettered'",
            mysql=None,
        ),
        # Retention finds expired rows without scanning the history it keeps (on MySQL it
        # reads the oldest first and skips kept rows inside the index).
        *_partial(
            "ix_occurrences_retention", "updated_at", where=PRUNABLE, mysql=("updated_at", "status")
        ),
        MYSQL_TABLE,
    )

    occurrence_id: uuid.UUID = Field(sa_column=sa.Column(UUID, primary_key=True))
    schedule_id: uuid.UUID = Field(
        sa_column=sa.Column(UUID, sa.ForeignKey("schedules.id", ondelete="CASCADE"), nullable=False)
    )
    fire_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    # NULL while the schedule is paused: held, not claimable.
    available_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    # While held: the instant it was due, which resume gives back.
    held_until: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    # Set by the first claim: the cadence is planned and `fire_count` counted only then.
    first_attempt_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    status: str = Field(sa_column=sa.Column(sa.String(20), nullable=False))
    origin: str = Field(sa_column=sa.Column(sa.String(20), nullable=False))
    attempts: int = Field(sa_column=sa.Column(sa.Integer, nullable=False, server_default="0"))
    lease_token: uuid.UUID | None = Field(default=None, sa_column=sa.Column(UUID))
    lease_owner: str | None = Field(default=None, sa_column=sa.Column(sa.String(100)))
    # The lease's end, written only by the claim (a settle or a release ends the lease by
    # clearing `lease_token`). Unlike `available_at`, which is the lease's end too until a
    # pause holds the row or a cancel ends it, a pause or a cancel never moves it: an
    # attempt in flight holds its key's slot until it is settled or its lease runs out.
    lease_until: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    # Written only by the claim: when the leased attempt may start (the claim's instant, or
    # the due instant of one claimed ahead). A lost attempt's start in the attempt log.
    leased_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    # Claimed ahead and not started yet: a lease lost while this is true never ran, and
    # its attempt is not charged (the replica sets it false as the attempt starts).
    lease_ahead: bool = Field(
        default=False, sa_column=sa.Column(sa.Boolean, nullable=False, server_default=sa.false())
    )
    # Shelved by its flow key, paused or backing off (`flow_keys.shelving`): out of the
    # keyed claim's index until the key may start again. Its instant (`available_at`) stays,
    # and it still waits on the key (the key's `waiting` figure).
    shelved: bool = Field(
        default=False, sa_column=sa.Column(sa.Boolean, nullable=False, server_default=sa.false())
    )
    last_error: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    skip_reason: str | None = Field(default=None, sa_column=sa.Column(sa.String(20)))
    # How many ticks a skipped entry stands for: 1, or the rest of a long gap.
    skipped_count: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    delivered_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    dead_lettered_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    created_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    updated_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    # Its schedule's flow key, copied when the row is written (and by a PATCH of the key),
    # so that the claim never joins to find it.
    flow_key: str | None = Field(
        default=None, sa_column=sa.Column(sa.String(FLOW_KEY_LENGTH), nullable=True)
    )
    # A failure callback's (origin `callback`): the occurrence whose dead-lettering it
    # reports, and the JSON text it delivers in place of its schedule's payload.
    callback_of: uuid.UUID | None = Field(default=None, sa_column=sa.Column(UUID))
    body: str | None = Field(default=None, sa_column=sa.Column(LONG_TEXT))
    # A fan-out's delivery (origin `fanout`): the topic's occurrence it delivers, and the
    # subscription it delivers to (its endpoint is its flow key's, `endpoint_key`).
    parent_id: uuid.UUID | None = Field(default=None, sa_column=sa.Column(UUID))
    subscription_id: uuid.UUID | None = Field(default=None, sa_column=sa.Column(UUID))


class FlowKeyRow(SQLModel, table=True):
    """A flow key's limits, its token bucket and its back-off (DESIGN section 11). A key
    that schedules name with no row has no limits; what is in flight is never stored but
    counted from live leases, so a replica that dies holds its slots only until they end."""

    __tablename__ = "flow_keys"
    __table_args__ = (
        sa.CheckConstraint("rate IS NULL OR rate >= 1", name="rate"),
        sa.CheckConstraint("period_seconds > 0", name="period_seconds"),
        sa.CheckConstraint("burst IS NULL OR burst >= 1", name="burst"),
        sa.CheckConstraint("parallelism IS NULL OR parallelism >= 1", name="parallelism"),
        sa.CheckConstraint(_in("ordering", ORDERINGS), name="ordering"),
        sa.CheckConstraint("version >= 1", name="version"),
        sa.CheckConstraint("circuit IS NULL OR circuit IN ('open', 'disabled')", name="circuit"),
        # The keys whose shelved rows the claim unshelves, by when their back-off ends.
        *_partial(
            "ix_flow_keys_unshelving",
            "backoff_until",
            where=UNSHELVING,
            mysql=("shelving", "paused", "backoff_until"),
        ),
        MYSQL_TABLE,
    )

    key: str = Field(sa_column=sa.Column(sa.String(FLOW_KEY_LENGTH), primary_key=True))
    rate: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    period_seconds: float = Field(
        default=1.0, sa_column=sa.Column(DOUBLE, nullable=False, server_default="1")
    )
    burst: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    parallelism: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    ordering: str = Field(
        default="none", sa_column=sa.Column(sa.String(10), nullable=False, server_default="none")
    )
    paused: bool = Field(
        default=False, sa_column=sa.Column(sa.Boolean, nullable=False, server_default=sa.false())
    )
    # False for a row that only a back-off made (no limits were ever PUT): a PUT is then new.
    limits_set: bool = Field(
        default=True, sa_column=sa.Column(sa.Boolean, nullable=False, server_default=sa.true())
    )
    version: int = Field(
        default=1, sa_column=sa.Column(sa.Integer, nullable=False, server_default="1")
    )
    # The bucket: `tokens` as of `refilled_at` (NULL: full).
    tokens: float | None = Field(default=None, sa_column=sa.Column(DOUBLE))
    refilled_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    # A destination's Retry-After: nothing of the key starts before it.
    backoff_until: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    # Some of its pending rows are shelved (`occurrences.shelved`): it was paused or backing
    # off when a claim found them due.
    shelving: bool = Field(
        default=False, sa_column=sa.Column(sa.Boolean, nullable=False, server_default=sa.false())
    )
    # An endpoint's circuit breaker (`app.domain.endpoints.Circuit`; NULL: closed): open
    # holds the key back until `backoff_until`, then lets one attempt through at a time
    # (the claim reads parallelism 1); disabled pauses the key (`paused`) until enabled.
    circuit: str | None = Field(default=None, sa_column=sa.Column(sa.String(10)))
    failures_in_a_row: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    circuit_changed_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    circuit_opened_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    circuit_cooldown: float | None = Field(default=None, sa_column=sa.Column(DOUBLE))
    created_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    updated_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))


class FlowKeySleepRow(SQLModel, table=True):
    """A key asleep: the claim found nothing of it due for a while (`SLEEP_AFTER`) and
    shelved its rows, so that walks of the keys no longer visit it. `next_at` is at or
    before the instant of each row it shelved; the claim wakes the key's rows due within
    `WAKE_BEFORE` of it (`app.store.loop.sleeps`). A row that a key receives later is awake
    until a claim finds it far off too."""

    __tablename__ = "flow_key_sleeps"
    __table_args__ = (sa.Index("ix_flow_key_sleeps_next_at", "next_at"), MYSQL_TABLE)

    key: str = Field(sa_column=sa.Column(sa.String(FLOW_KEY_LENGTH), primary_key=True))
    next_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))


class TenantRow(SQLModel, table=True):
    """A tenant (DESIGN section 14). The row of `default` is made by the migration that
    brought tenants, and no request deletes it."""

    __tablename__ = "tenants"
    __table_args__ = (
        sa.CheckConstraint("version >= 1", name="version"),
        sa.CheckConstraint("max_schedules IS NULL OR max_schedules >= 1", name="max_schedules"),
        sa.CheckConstraint(
            "max_creates_per_minute IS NULL OR max_creates_per_minute >= 1",
            name="max_creates_per_minute",
        ),
        sa.CheckConstraint(f"weight >= {MIN_WEIGHT} AND weight <= {MAX_WEIGHT}", name="weight"),
        sa.CheckConstraint(
            "max_deliveries_per_second IS NULL OR max_deliveries_per_second >= 1",
            name="max_deliveries_per_second",
        ),
        sa.CheckConstraint("max_in_flight IS NULL OR max_in_flight >= 1", name="max_in_flight"),
        sa.CheckConstraint(
            "retention_seconds IS NULL OR retention_seconds >= 0", name="retention_seconds"
        ),
        MYSQL_TABLE,
    )

    id: str = Field(sa_column=sa.Column(sa.String(MAX_TENANT), primary_key=True))
    display_name: str | None = Field(
        default=None, sa_column=sa.Column(sa.String(MAX_DISPLAY_NAME), nullable=True)
    )
    version: int = Field(
        default=1, sa_column=sa.Column(sa.Integer, nullable=False, server_default="1")
    )
    # Create quotas (NULL: unlimited), and the creates bucket: `create_tokens` as of
    # `create_refilled_at` (NULL: full).
    max_schedules: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    max_creates_per_minute: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    create_tokens: float | None = Field(default=None, sa_column=sa.Column(DOUBLE))
    create_refilled_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    # Its share of the starts when the fleet is saturated, and what holds its deliveries
    # back; the claim reads the latter from its own flow key's row (`own_key`), which a PUT
    # writes in the same transaction.
    weight: int = Field(
        default=DEFAULT_WEIGHT,
        sa_column=sa.Column(sa.Integer, nullable=False, server_default=str(DEFAULT_WEIGHT)),
    )
    paused: bool = Field(
        default=False, sa_column=sa.Column(sa.Boolean, nullable=False, server_default=sa.false())
    )
    max_deliveries_per_second: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    max_in_flight: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    retention_seconds: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger))
    # Where its operator events go, a target as JSON (NULL: nowhere).
    events_target: dict[str, Any] | None = Field(
        default=None, sa_column=sa.Column(JSONType, nullable=True)
    )
    created_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    updated_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))


class TenantKeyRow(SQLModel, table=True):
    """A tenant key (`app.domain.tenant_keys`): its SHA-256, never the key itself."""

    __tablename__ = "tenant_keys"
    __table_args__ = (
        sa.CheckConstraint("role IN ('write', 'read')", name="role"),
        # A request's key finds its row by digest; a tenant's keys have distinct names.
        sa.UniqueConstraint("digest", name=sa.sql.elements.conv("tenant_keys_digest_key")),
        sa.UniqueConstraint(
            "tenant", "name", name=sa.sql.elements.conv("tenant_keys_tenant_name_key")
        ),
        MYSQL_TABLE,
    )

    id: uuid.UUID = Field(sa_column=sa.Column(UUID, primary_key=True))
    tenant: str = Field(sa_column=sa.Column(sa.String(MAX_TENANT), nullable=False))
    name: str = Field(sa_column=sa.Column(sa.String(64), nullable=False))
    role: str = Field(sa_column=sa.Column(sa.String(10), nullable=False))
    digest: str = Field(sa_column=sa.Column(sa.String(64), nullable=False))
    prefix: str = Field(sa_column=sa.Column(sa.String(16), nullable=False))
    created_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    expires_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    revoked_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    last_used_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))


class AttemptRow(SQLModel, table=True):
    """One attempt of one occurrence, written in the transaction that settles it (or, for an
    attempt whose replica died before settling it, by the claim that takes it again). A
    replay starts the attempt count again; the earlier attempts stay, so an occurrence's
    history is its attempts in the order they started."""

    __tablename__ = "attempts"
    __table_args__ = (
        sa.CheckConstraint(_in("outcome", ATTEMPT_OUTCOMES), name="outcome"),
        sa.CheckConstraint("attempt >= 1", name="attempt"),
        sa.CheckConstraint("duration_ms >= 0", name="duration_ms"),
        sa.Index("ix_attempts_occurrence_id_started_at", "occurrence_id", "started_at"),
        # An endpoint's attempts, newest first (MySQL: every attempt, NULLs first).
        *_partial(
            "ix_attempts_endpoint",
            "endpoint_id",
            "started_at",
            where="endpoint_id IS NOT NULL",
            mysql=("endpoint_id", "started_at"),
        ),
        MYSQL_TABLE,
    )

    # UUIDv7: ids sort by the instant they were made, the order of the history.
    id: uuid.UUID = Field(sa_column=sa.Column(UUID, primary_key=True))
    occurrence_id: uuid.UUID = Field(
        sa_column=sa.Column(
            UUID, sa.ForeignKey("occurrences.occurrence_id", ondelete="CASCADE"), nullable=False
        )
    )
    attempt: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    started_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    duration_ms: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    outcome: str = Field(sa_column=sa.Column(sa.String(20), nullable=False))
    status_code: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    error: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    # At most the first 1 KiB of the reply's body, as text.
    response_excerpt: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    replica: str | None = Field(default=None, sa_column=sa.Column(sa.String(100)))
    # The trace the attempt belongs to, 32 hex digits (NULL: none; docs/tracing.md).
    trace_id: str | None = Field(default=None, sa_column=sa.Column(sa.String(32)))
    # The endpoint it went to (NULL: another target): an endpoint's recent attempts.
    endpoint_id: uuid.UUID | None = Field(default=None, sa_column=sa.Column(UUID))
    # Its occurrence's instant, its schedule's tenant and its occurrence's flow key, as they
    # were when it settled: what the activity roll-up groups and times it by, read from the
    # log's own rows rather than one lookup of each occurrence and schedule. A settle writes
    # all three; `tenant` NULL means none were written (an attempt logged before they
    # existed, or by a claim or a stop rather than a settle), and the roll-up reads those
    # from the occurrence and its schedule.
    fire_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    tenant: str | None = Field(default=None, sa_column=sa.Column(sa.String(MAX_TENANT)))
    flow_key: str | None = Field(
        default=None, sa_column=sa.Column(sa.String(FLOW_KEY_LENGTH), nullable=True)
    )


class ScheduleEventRow(SQLModel, table=True):
    """One change in a schedule's life, written in the transaction of the change."""

    __tablename__ = "schedule_events"
    __table_args__ = (
        sa.CheckConstraint(_in("kind", EVENT_KINDS), name="kind"),
        sa.CheckConstraint("version >= 1", name="version"),
        sa.Index("ix_schedule_events_schedule_id_id", "schedule_id", "id"),
        MYSQL_TABLE,
    )

    # UUIDv7: a schedule's events read oldest first by id, which is also the cursor.
    id: uuid.UUID = Field(sa_column=sa.Column(UUID, primary_key=True))
    schedule_id: uuid.UUID = Field(
        sa_column=sa.Column(UUID, sa.ForeignKey("schedules.id", ondelete="CASCADE"), nullable=False)
    )
    kind: str = Field(sa_column=sa.Column(sa.String(32), nullable=False))
    at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    # The schedule's version once the change is made.
    version: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    # The API key's name, "cli", "system", or NULL when no keys are set.
    actor: str | None = Field(default=None, sa_column=sa.Column(sa.String(ACTOR_LENGTH)))
    # For `updated`: the names of the fields that changed.
    fields: list[str] | None = Field(default=None, sa_column=sa.Column(JSONType))


schedules: sa.Table = ScheduleRow.__table__  # type: ignore[attr-defined]
occurrences: sa.Table = OccurrenceRow.__table__  # type: ignore[attr-defined]
attempts: sa.Table = AttemptRow.__table__  # type: ignore[attr-defined]
schedule_events: sa.Table = ScheduleEventRow.__table__  # type: ignore[attr-defined]
flow_keys: sa.Table = FlowKeyRow.__table__  # type: ignore[attr-defined]
flow_key_sleeps: sa.Table = FlowKeySleepRow.__table__  # type: ignore[attr-defined]
tenants: sa.Table = TenantRow.__table__  # type: ignore[attr-defined]
tenant_keys: sa.Table = TenantKeyRow.__table__  # type: ignore[attr-defined]


def of_tenant(tenant: str) -> tuple[sa.ColumnElement[bool], ...]:
    """The schedules of `tenant`, as conditions that let another tenant's statement use the
    tenant indexes (`NOT_DEFAULT`, repeated as text whatever tenant is bound)."""
    if tenant == DEFAULT_TENANT:
        return (schedules.c.tenant == tenant,)
    return (schedules.c.tenant == tenant, sa.text(NOT_DEFAULT).self_group())  # type: ignore[return-value]


def in_claim_set(where: str) -> sa.ColumnElement[bool]:
    """The rows of one claim index (`CLAIM_SETS`), as a condition a statement repeats
    whole: literal text on PostgreSQL and SQLite, where it must imply the index's own."""
    return sa.text(where).self_group()  # type: ignore[return-value]


TENANT_EVENT_KINDS = (
    "created",
    "updated",
    "paused",
    "resumed",
    "deleted",
    "key_created",
    "key_revoked",
)
_TENANT_KEY_KINDS = "'key_created', 'key_revoked'"


class TenantEventRow(SQLModel, table=True):
    """One change of a tenant or of its keys (`app.domain.tenant_events`), written in the
    transaction of the change. No foreign key holds it to `tenants`: a tenant's events
    outlive it, so that its trail still ends with its `deleted` (a trail that went with
    what it records would lose that last event), and a tenant made again under the same id
    carries on the same trail."""

    __tablename__ = "tenant_events"
    __table_args__ = (
        sa.CheckConstraint(_in("kind", TENANT_EVENT_KINDS), name="kind"),
        sa.CheckConstraint("version IS NULL OR version >= 1", name="version"),
        # A key's events name the key; the others name none.
        sa.CheckConstraint(
            f"(kind IN ({_TENANT_KEY_KINDS}) AND key_id IS NOT NULL AND key_name IS NOT NULL)"
            f" OR (kind NOT IN ({_TENANT_KEY_KINDS}) AND key_id IS NULL AND key_name IS NULL)",
            name="key",
        ),
        sa.Index("ix_tenant_events_tenant_id", "tenant", "id"),
        MYSQL_TABLE,
    )

    # UUIDv7: a tenant's events read oldest first by id, which is also the cursor.
    id: uuid.UUID = Field(sa_column=sa.Column(UUID, primary_key=True))
    tenant: str = Field(sa_column=sa.Column(sa.String(MAX_TENANT), nullable=False))
    kind: str = Field(sa_column=sa.Column(sa.String(32), nullable=False))
    at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    # The operator API key's name, "cli", or NULL when no keys are set (as wide as any
    # actor: a tenant key, "tenant/key-name", manages no tenant today).
    actor: str | None = Field(default=None, sa_column=sa.Column(sa.String(ACTOR_LENGTH)))
    # The tenant's version once the change is made; NULL for a key's events and `deleted`.
    version: int | None = Field(default=None, sa_column=sa.Column(sa.Integer))
    # For `updated`: the names of the PUT's fields that changed.
    fields: list[str] | None = Field(default=None, sa_column=sa.Column(JSONType))
    # For a key's events: the key, by id and by name (the name stays when the key is gone).
    key_id: uuid.UUID | None = Field(default=None, sa_column=sa.Column(UUID))
    key_name: str | None = Field(default=None, sa_column=sa.Column(sa.String(64)))


tenant_events: sa.Table = TenantEventRow.__table__  # type: ignore[attr-defined]


class EndpointRow(SQLModel, table=True):
    """An endpoint (`app.domain.endpoints`): a tenant's reusable webhook destination. Its
    flow limits and circuit are its key's row (`endpoint_key`), its secrets
    `endpoint_secrets`."""

    __tablename__ = "endpoints"
    __table_args__ = (
        sa.CheckConstraint("version >= 1", name="version"),
        sa.CheckConstraint("failure_threshold >= 1", name="failure_threshold"),
        sa.CheckConstraint("cooldown_seconds > 0", name="cooldown_seconds"),
        sa.CheckConstraint("max_cooldown_seconds >= cooldown_seconds", name="max_cooldown"),
        sa.Index("ix_endpoints_tenant_id", "tenant", "id"),
        *_partial(
            "ix_endpoints_name",
            "tenant",
            "name",
            where="name IS NOT NULL",
            mysql=("tenant", "name"),
            unique=True,
        ),
        MYSQL_TABLE,
    )

    # UUIDv7: a tenant's endpoints list oldest first by id, which is also the cursor.
    id: uuid.UUID = Field(sa_column=sa.Column(UUID, primary_key=True))
    tenant: str = Field(sa_column=sa.Column(sa.String(MAX_TENANT), nullable=False))
    name: str | None = Field(default=None, sa_column=sa.Column(sa.String(200)))
    url: str = Field(sa_column=sa.Column(sa.String(2048), nullable=False))
    method: str = Field(sa_column=sa.Column(sa.String(10), nullable=False))
    headers: dict[str, str] = Field(sa_column=sa.Column(JSONType, nullable=False))
    timeout_seconds: float = Field(sa_column=sa.Column(DOUBLE, nullable=False))
    description: str | None = Field(default=None, sa_column=sa.Column(sa.String(1000)))
    failure_threshold: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    cooldown_seconds: float = Field(sa_column=sa.Column(DOUBLE, nullable=False))
    max_cooldown_seconds: float = Field(sa_column=sa.Column(DOUBLE, nullable=False))
    # NULL: never disabled.
    disable_after_seconds: float | None = Field(default=None, sa_column=sa.Column(DOUBLE))
    version: int = Field(
        default=1, sa_column=sa.Column(sa.Integer, nullable=False, server_default="1")
    )
    created_by: str | None = Field(default=None, sa_column=sa.Column(sa.String(ACTOR_LENGTH)))
    created_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    updated_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))


class EndpointSecretRow(SQLModel, table=True):
    """One of an endpoint's signing secrets: live until `expires_at` (NULL: the newest,
    live until a rotation sets it)."""

    __tablename__ = "endpoint_secrets"
    __table_args__ = (
        sa.Index("ix_endpoint_secrets_endpoint_id_id", "endpoint_id", "id"),
        MYSQL_TABLE,
    )

    # UUIDv7: newest last.
    id: uuid.UUID = Field(sa_column=sa.Column(UUID, primary_key=True))
    endpoint_id: uuid.UUID = Field(
        sa_column=sa.Column(UUID, sa.ForeignKey("endpoints.id", ondelete="CASCADE"), nullable=False)
    )
    secret: str = Field(sa_column=sa.Column(sa.String(200), nullable=False))
    created_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    expires_at: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))


ENDPOINT_EVENT_KINDS = (
    "created",
    "updated",
    "deleted",
    "secret_rotated",
    "opened",
    "reopened",
    "recovered",
    "disabled",
    "enabled",
)


class EndpointEventRow(SQLModel, table=True):
    """One change of an endpoint: its writes, its rotations and its circuit's changes of
    state. Like a tenant's, its trail outlives it (no foreign key)."""

    __tablename__ = "endpoint_events"
    __table_args__ = (
        sa.CheckConstraint(_in("kind", ENDPOINT_EVENT_KINDS), name="kind"),
        sa.Index("ix_endpoint_events_endpoint_id_id", "endpoint_id", "id"),
        MYSQL_TABLE,
    )

    # UUIDv7: an endpoint's events read oldest first by id, which is also the cursor.
    id: uuid.UUID = Field(sa_column=sa.Column(UUID, primary_key=True))
    endpoint_id: uuid.UUID = Field(sa_column=sa.Column(UUID, nullable=False))
    tenant: str = Field(sa_column=sa.Column(sa.String(MAX_TENANT), nullable=False))
    kind: str = Field(sa_column=sa.Column(sa.String(32), nullable=False))
    at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    # The API key's name, "cli", "system" (the circuit), or NULL when no keys are set.
    actor: str | None = Field(default=None, sa_column=sa.Column(sa.String(ACTOR_LENGTH)))
    # For `updated`: the fields that changed; for the circuit's: failures in a row and
    # the cooldown.
    detail: dict[str, Any] | None = Field(default=None, sa_column=sa.Column(JSONType))


endpoints: sa.Table = EndpointRow.__table__  # type: ignore[attr-defined]
endpoint_secrets: sa.Table = EndpointSecretRow.__table__  # type: ignore[attr-defined]
endpoint_events: sa.Table = EndpointEventRow.__table__  # type: ignore[attr-defined]


class OperatorEventRow(SQLModel, table=True):
    """An operator event waiting to be told (`app.domain.operator_events`): written in the
    transaction of its change, removed once its tenant's `events_target` took it or it was
    given up. `lease_until` holds it for the replica sending it."""

    __tablename__ = "operator_events"
    __table_args__ = (
        sa.CheckConstraint("attempts >= 0", name="attempts"),
        sa.Index("ix_operator_events_available_at", "available_at"),
        MYSQL_TABLE,
    )

    id: uuid.UUID = Field(sa_column=sa.Column(UUID, primary_key=True))
    tenant: str = Field(sa_column=sa.Column(sa.String(MAX_TENANT), nullable=False))
    kind: str = Field(sa_column=sa.Column(sa.String(40), nullable=False))
    body: str = Field(sa_column=sa.Column(LONG_TEXT, nullable=False))
    created_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    # When it may be sent next (after a failed attempt, later).
    available_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    attempts: int = Field(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    lease_until: datetime | None = Field(default=None, sa_column=sa.Column(UTCDateTime))
    last_error: str | None = Field(default=None, sa_column=sa.Column(sa.Text))


operator_events: sa.Table = OperatorEventRow.__table__  # type: ignore[attr-defined]


class TopicRow(SQLModel, table=True):
    """A topic of a tenant (`app.domain.topics`): what its subscriptions subscribe to."""

    __tablename__ = "topics"
    __table_args__ = (sa.CheckConstraint("version >= 1", name="version"), MYSQL_TABLE)

    tenant: str = Field(sa_column=sa.Column(sa.String(MAX_TENANT), primary_key=True))
    name: str = Field(sa_column=sa.Column(sa.String(128), primary_key=True))
    description: str | None = Field(default=None, sa_column=sa.Column(sa.String(1000)))
    version: int = Field(
        default=1, sa_column=sa.Column(sa.Integer, nullable=False, server_default="1")
    )
    created_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    updated_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))


class SubscriptionRow(SQLModel, table=True):
    """A subscription of an endpoint to a topic, with what it matches."""

    __tablename__ = "subscriptions"
    __table_args__ = (
        sa.CheckConstraint("version >= 1", name="version"),
        # A fan-out reads a topic's subscriptions; a removal of an endpoint, its own.
        sa.Index("ix_subscriptions_tenant_topic", "tenant", "topic"),
        sa.Index("ix_subscriptions_endpoint_id", "endpoint_id"),
        MYSQL_TABLE,
    )

    # UUIDv7: a topic's subscriptions list oldest first by id, which is also the cursor.
    id: uuid.UUID = Field(sa_column=sa.Column(UUID, primary_key=True))
    tenant: str = Field(sa_column=sa.Column(sa.String(MAX_TENANT), nullable=False))
    topic: str = Field(sa_column=sa.Column(sa.String(128), nullable=False))
    endpoint_id: uuid.UUID = Field(sa_column=sa.Column(UUID, nullable=False))
    # Globs (NULL: every event type), and top-level payload fields (NULL: any payload).
    event_types: list[str] | None = Field(default=None, sa_column=sa.Column(JSONType))
    match: dict[str, Any] | None = Field(default=None, sa_column=sa.Column(JSONType))
    version: int = Field(
        default=1, sa_column=sa.Column(sa.Integer, nullable=False, server_default="1")
    )
    created_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))
    updated_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))


topics: sa.Table = TopicRow.__table__  # type: ignore[attr-defined]
subscriptions: sa.Table = SubscriptionRow.__table__  # type: ignore[attr-defined]


class ActivityMinuteRow(SQLModel, table=True):
    """One minute's figures of the attempt log, of the fleet or of one tenant, endpoint or
    flow key (`app.domain.activity`), rolled up by one replica at a time every few seconds
    (`app.worker.activity`). The fleet has a row for every minute rolled up, nothing
    happening or not; a subject only for minutes it had attempts in."""

    __tablename__ = "activity_minutes"
    __table_args__ = (
        sa.CheckConstraint("scope IN ('fleet', 'tenant', 'endpoint', 'flow_key')", name="scope"),
        # Retention deletes whole minutes, oldest first.
        sa.Index("ix_activity_minutes_minute", "minute"),
        MYSQL_TABLE,
    )

    scope: str = Field(sa_column=sa.Column(sa.String(16), primary_key=True))
    # The tenant, the endpoint's id or the stored flow key ("" for the fleet).
    subject: str = Field(sa_column=sa.Column(sa.String(FLOW_KEY_LENGTH), primary_key=True))
    minute: datetime = Field(sa_column=sa.Column(UTCDateTime, primary_key=True))
    delivered: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    failed: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    dead_lettered: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    # Deliveries per lateness bucket (`app.domain.activity.LATENESS_BOUNDS`, then beyond).
    lateness: list[int] = Field(sa_column=sa.Column(JSONType, nullable=False))
    # When this row was rolled up: the fleet's latest is how current the figures are.
    rolled_at: datetime = Field(sa_column=sa.Column(UTCDateTime, nullable=False))


activity_minutes: sa.Table = ActivityMinuteRow.__table__  # type: ignore[attr-defined]
