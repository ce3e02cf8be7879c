"""Schedules: their statuses, the transitions an operator may ask for, and the snapshot record."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import ConfigDict, Field

from app.domain.errors import ConflictError, PreconditionFailedError
from app.domain.ids import occurrence_id
from app.domain.limits import (
    MAX_COUNT,
    EventType,
    FlowKeyName,
    InputModel,
    JsonPayload,
    Labels,
    Name,
    without_null,
)
from app.domain.misfire import DEFAULT_GRACE_SECONDS, DEFAULT_MAX_CATCHUP, MisfirePolicy, Rules
from app.domain.retry import RetrySpec
from app.domain.target import Target
from app.domain.tenants import DEFAULT_TENANT
from app.domain.trigger import Trigger

# A pause through the API or the CLI is "manual"; one the loop makes after
# `pause_after_failures` dead letters in a row is "failures".
PauseReason = Literal["manual", "failures"]
MANUAL_PAUSE: PauseReason = "manual"
FAILURES_PAUSE: PauseReason = "failures"

# The actor of the changes the delivery loop makes.
SYSTEM_ACTOR = "system"
# The actor of the operator CLI's changes.
CLI_ACTOR = "cli"


@dataclass(frozen=True, slots=True)
class AutoPause:
    """A schedule that paused itself: `consecutive_failures` occurrences dead-lettered in a
    row reached its `pause_after_failures`, `threshold`."""

    schedule_id: uuid.UUID
    name: str | None
    consecutive_failures: int
    threshold: int


class EventKind(StrEnum):
    """What a schedule's audit event records."""

    CREATED = "created"
    UPDATED = "updated"
    PAUSED = "paused"
    RESUMED = "resumed"
    TRIGGERED = "triggered"
    CANCELLED = "cancelled"
    BACKFILLED = "backfilled"
    COMPLETED = "completed"
    FAILED = "failed"
    AUTO_PAUSED = "auto_paused"
    DEAD_LETTER_REPLAYED = "dead_letter_replayed"
    DEAD_LETTER_DISCARDED = "dead_letter_discarded"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleEvent:
    """One change in a schedule's life: `version` is the schedule's once the change is
    made, `actor` the API key's name, "cli", "system", or None when no keys are set."""

    id: uuid.UUID
    schedule_id: uuid.UUID
    kind: EventKind
    at: datetime
    version: int
    actor: str | None
    fields: list[str] | None = None


class ScheduleStatus(StrEnum):
    PENDING = "pending"
    PAUSED = "paused"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"


TERMINAL = frozenset({ScheduleStatus.COMPLETED, ScheduleStatus.CANCELLED, ScheduleStatus.FAILED})


def check_version(current: int, expected: frozenset[int] | None, state: str | None = None) -> None:
    """Optimistic concurrency: `expected` holds the versions a client's If-Match names
    (None: any version will do); `state` says what is at `current` (a schedule's version)."""
    if expected is not None and current not in expected:
        named = ", ".join(f'"{v}"' for v in sorted(expected)) or "no version of it"
        state = state or f"the schedule is at version {current}"
        raise PreconditionFailedError(f"{state}; If-Match named {named}")


def check_pause(status: ScheduleStatus) -> None:
    if status in TERMINAL:
        raise ConflictError(f"a {status} schedule cannot be paused")


def check_resume(status: ScheduleStatus) -> None:
    if status in TERMINAL:
        raise ConflictError(f"a {status} schedule cannot be resumed")


def check_patch(status: ScheduleStatus, *, changes_trigger: bool) -> None:
    """A cancelled schedule is closed. A completed or failed one can still be corrected
    (target, payload, attempts, labels) so that a replay of its dead letter goes right, but it
    gets no new trigger: it has fired."""
    if status is ScheduleStatus.CANCELLED:
        raise ConflictError("a cancelled schedule cannot be changed")
    if changes_trigger and status in TERMINAL:
        raise ConflictError(f"a {status} schedule has fired; it cannot get a new trigger")


def check_trigger(status: ScheduleStatus) -> None:
    if status in (ScheduleStatus.PAUSED, ScheduleStatus.CANCELLED):
        raise ConflictError(f"a {status} schedule cannot be triggered; resume it first")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleDefinition:
    """The fields a schedule is created with: the one list its draft and its snapshot share,
    and that the store's columns and the API's response follow."""

    id: uuid.UUID
    name: str | None
    event_type: str
    # The tenant it belongs to (`app.domain.tenants`), with all it holds.
    tenant: str = DEFAULT_TENANT
    payload: Any
    target: Target
    trigger: Trigger
    max_attempts: int
    labels: dict[str, str]
    jitter_seconds: float
    rules: Rules
    pause_after_failures: int | None = None
    flow_key: str | None = None
    retry: RetrySpec | None = None
    on_failure: Target | None = None
    request_hash: str | None = None
    created_by: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleDraft(ScheduleDefinition):
    """A validated schedule that is about to be stored, with its first occurrence."""

    first_fire_at: datetime
    first_delay: float = 0.0  # the first occurrence's jitter draw
    idempotency_key: str | None = None
    # The W3C traceparent of the request that creates it (None: none), sent on every
    # delivery of its occurrences.
    traceparent: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule(ScheduleDefinition):
    """A schedule as stored, with what is derived from its occurrences."""

    status: ScheduleStatus
    fire_count: int
    skipped_count: int
    last_skip_reason: str | None
    last_fired_at: datetime | None
    created_at: datetime
    updated_at: datetime
    version: int = 1
    # Why a paused schedule is paused (None while it is not).
    pause_reason: PauseReason | None = None
    # Occurrences dead-lettered in a row; a delivery sets it back to 0.
    consecutive_failures: int = 0
    # Read from the schedule's occurrences, never written as such.
    next_fire_at: datetime | None
    next_occurrence_id: uuid.UUID | None
    attempts: int
    last_error: str | None


# Schedule fields that its occurrences hold: the earliest pending one, the latest attempted.
DERIVED_FIELDS = frozenset({"next_fire_at", "next_occurrence_id", "attempts", "last_error"})

# How `Rules` reads as flat fields (flat name: Rules attribute): the names of the spec's
# fields, of the columns and of the response. `fired`, a count the store keeps, is no setting.
RULE_FIELDS: dict[str, str] = {
    "misfire_policy": "policy",
    "misfire_grace_seconds": "grace_seconds",
    "max_catchup": "max_catchup",
    "max_occurrences": "max_occurrences",
}


# Their names, listed once (a batch snapshots a thousand drafts).
_DEFINITION_FIELDS = tuple(f.name for f in fields(ScheduleDefinition))


def definition(draft: ScheduleDefinition) -> dict[str, Any]:
    """The fields a schedule was created with, by name."""
    return {name: getattr(draft, name) for name in _DEFINITION_FIELDS}


def first_snapshot(
    draft: ScheduleDraft, now: datetime, first_occurrence_id: uuid.UUID | None = None
) -> Schedule:
    """The schedule a draft becomes when stored at `now`: pending, nothing fired yet, its
    first occurrence next. `first_occurrence_id` is that occurrence's id when the caller
    has derived it already (the same `occurrence_id` of the draft's first fire instant)."""
    if first_occurrence_id is None:
        first_occurrence_id = occurrence_id(draft.id, draft.first_fire_at)
    return Schedule(
        **definition(draft),
        status=ScheduleStatus.PENDING,
        fire_count=0,
        skipped_count=0,
        last_skip_reason=None,
        last_fired_at=None,
        created_at=now,
        updated_at=now,
        version=1,
        pause_reason=None,
        consecutive_failures=0,
        next_fire_at=draft.first_fire_at,
        next_occurrence_id=first_occurrence_id,
        attempts=0,
        last_error=None,
    )


def flat_rules(rules: Rules) -> dict[str, Any]:
    """`rules` under their flat names (RULE_FIELDS)."""
    return {name: getattr(rules, attribute) for name, attribute in RULE_FIELDS.items()}


def flat(schedule: Schedule) -> dict[str, Any]:
    """A schedule's fields by name, with its rules spread into their flat names."""
    values = {f.name: getattr(schedule, f.name) for f in fields(Schedule) if f.name != "rules"}
    return values | flat_rules(schedule.rules)


_JITTER = "Spread each firing uniformly over [fire_at, fire_at + jitter_seconds)"
_MISFIRE_POLICY = (
    "Missed ticks: fire_once (one catch-up), skip (drop ticks later than "
    "misfire_grace_seconds) or fire_all (each, up to max_catchup)"
)
_GRACE = "How late a tick may fire under skip"
_CATCHUP = "Missed ticks fired (fire_all) or listed as skipped, per gap"
_MAX_OCCURRENCES = "Fire at most this many ticks, then complete"
MAX_ATTEMPTS = 1000
MAX_JITTER_SECONDS = 86400
MAX_GRACE_SECONDS = 86400 * 365
MAX_CATCHUP = 1000
MAX_PAUSE_AFTER_FAILURES = 1000
_RETRY = (
    "This schedule's retry policy; what it leaves out (or null for all of it) is the "
    "service's. A PATCH replaces it whole"
)
_ON_FAILURE = (
    "A target told of each occurrence of this schedule that is dead-lettered, with the "
    "occurrence, its last error and its payload (type occurrence.dead_lettered); null: none"
)
_ON_FAILURE_EXAMPLE = {"type": "webhook", "url": "http://127.0.0.1:8080/alerts/chronoq"}
_NAME = (
    "A name for people to find it by (not unique), kept in Unicode NFC, without control or "
    "invisible characters (Unicode Cf: zero-width, BOM, soft hyphen, bidi controls); null: none"
)
_EVENT_TYPE = (
    "What the occurrence is about, sent as the X-Event-Type header and the AMQP message type "
    "(up to 255 bytes, no control characters)"
)
_PAYLOAD = "The JSON value delivered as each occurrence's body (nested at most 64 levels)"
_TARGET = "Where each occurrence is delivered: a webhook or a RabbitMQ exchange"
_TRIGGER = "When it fires: once, immediately, on a cron expression or every so many seconds"
_MAX_ATTEMPTS = "Attempts per occurrence before it is dead-lettered; null: the service's"
_LABELS = (
    "Labels to filter lists by (label=key:value): at most 64, keys 1-63 characters without "
    "':', values up to 255, both kept in Unicode NFC, without control or invisible characters"
)
_FLOW_KEY = (
    "A flow key (1-128 of A-Z a-z 0-9 . _ : -) whose limits the deliveries of every schedule "
    "naming it share (PUT /v1/flow-keys/{key}); null: none"
)
_PAUSE_AFTER = (
    "Pause the schedule (pause_reason failures) after this many occurrences dead-lettered "
    "in a row; null: never"
)


class ScheduleSpec(InputModel):
    """What a client asks for when creating a schedule."""

    model_config = ConfigDict(frozen=True)
    _text_checked = frozenset({"payload"})

    name: Name | None = Field(default=None, description=_NAME)
    event_type: EventType = Field(description=_EVENT_TYPE, examples=["invoice.due"])
    payload: JsonPayload = Field(default_factory=dict, description=_PAYLOAD)
    target: Target = Field(description=_TARGET)
    trigger: Trigger = Field(description=_TRIGGER)
    max_attempts: int | None = Field(default=None, ge=1, le=MAX_ATTEMPTS, description=_MAX_ATTEMPTS)
    labels: Labels = Field(default_factory=dict, description=_LABELS)
    jitter_seconds: float = Field(default=0.0, ge=0, le=MAX_JITTER_SECONDS, description=_JITTER)
    misfire_policy: MisfirePolicy = Field(default="fire_once", description=_MISFIRE_POLICY)
    misfire_grace_seconds: float = Field(
        default=DEFAULT_GRACE_SECONDS, ge=0, le=MAX_GRACE_SECONDS, description=_GRACE
    )
    max_catchup: int = Field(
        default=DEFAULT_MAX_CATCHUP, ge=1, le=MAX_CATCHUP, description=_CATCHUP
    )
    max_occurrences: int | None = Field(
        default=None, ge=1, le=MAX_COUNT, description=_MAX_OCCURRENCES
    )
    pause_after_failures: int | None = Field(
        default=None, ge=1, le=MAX_PAUSE_AFTER_FAILURES, description=_PAUSE_AFTER
    )
    flow_key: FlowKeyName | None = Field(
        default=None, description=_FLOW_KEY, examples=["customer-42"]
    )
    retry: RetrySpec | None = Field(default=None, description=_RETRY)
    on_failure: Target | None = Field(
        default=None, description=_ON_FAILURE, examples=[_ON_FAILURE_EXAMPLE]
    )


# PATCH fields that may be left out but never set to null (the service names the field):
# their schema does not offer null. `payload`, `max_occurrences`, `pause_after_failures`
# `flow_key`, `retry` and `on_failure` take null as a value.
NOT_NULLABLE = (
    "target",
    "trigger",
    "max_attempts",
    "labels",
    "jitter_seconds",
    "misfire_policy",
    "misfire_grace_seconds",
    "max_catchup",
)


_without_null = without_null(NOT_NULLABLE)


class SchedulePatch(InputModel):
    """A partial change; absent fields stay as they are. The same limits as on create."""

    model_config = ConfigDict(frozen=True, json_schema_extra=_without_null)
    _text_checked = frozenset({"payload"})

    payload: JsonPayload = Field(default=None, description=_PAYLOAD)
    target: Target | None = Field(default=None, description=_TARGET)
    trigger: Trigger | None = Field(
        default=None,
        description=_TRIGGER + "; a new trigger recomputes the next occurrence",
    )
    max_attempts: int | None = Field(
        default=None, ge=1, le=MAX_ATTEMPTS, description="Attempts per occurrence"
    )
    labels: Labels | None = Field(default=None, description=_LABELS + "; replaces them all")
    jitter_seconds: float | None = Field(
        default=None, ge=0, le=MAX_JITTER_SECONDS, description=_JITTER
    )
    misfire_policy: MisfirePolicy | None = Field(default=None, description=_MISFIRE_POLICY)
    misfire_grace_seconds: float | None = Field(
        default=None, ge=0, le=MAX_GRACE_SECONDS, description=_GRACE
    )
    max_catchup: int | None = Field(default=None, ge=1, le=MAX_CATCHUP, description=_CATCHUP)
    max_occurrences: int | None = Field(
        default=None, ge=1, le=MAX_COUNT, description=_MAX_OCCURRENCES
    )
    pause_after_failures: int | None = Field(
        default=None, ge=1, le=MAX_PAUSE_AFTER_FAILURES, description=_PAUSE_AFTER
    )
    flow_key: FlowKeyName | None = Field(
        default=None, description=_FLOW_KEY, examples=["customer-42"]
    )
    retry: RetrySpec | None = Field(default=None, description=_RETRY)
    on_failure: Target | None = Field(
        default=None, description=_ON_FAILURE, examples=[_ON_FAILURE_EXAMPLE]
    )


def rules_of(values: object, *, fired: int = 0) -> Rules:
    """The rules that `values` (a spec, a stored row) holds under their flat names."""
    return Rules(
        **{attribute: getattr(values, name) for name, attribute in RULE_FIELDS.items()},
        fired=fired,
    )
