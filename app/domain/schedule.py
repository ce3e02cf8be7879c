"""Schedules: their statuses, the transitions an operator may ask for, and the snapshot record."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.domain.errors import ConflictError
from app.domain.misfire import DEFAULT_GRACE_SECONDS, DEFAULT_MAX_CATCHUP, MisfirePolicy, Rules
from app.domain.target import Target
from app.domain.trigger import Trigger


class ScheduleStatus(StrEnum):
    PENDING = "pending"
    PAUSED = "paused"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"


TERMINAL = frozenset({ScheduleStatus.COMPLETED, ScheduleStatus.CANCELLED, ScheduleStatus.FAILED})


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


@dataclass(frozen=True, slots=True)
class ScheduleDraft:
    """A validated schedule that is about to be stored."""

    id: uuid.UUID
    name: str | None
    event_type: str
    payload: Any
    target: Target
    trigger: Trigger
    max_attempts: int
    labels: dict[str, str]
    first_fire_at: datetime
    jitter_seconds: float
    rules: Rules
    first_delay: float = 0.0  # the first occurrence's jitter draw
    idempotency_key: str | None = None
    request_hash: str | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule as stored, with what is derived from its occurrences."""

    id: uuid.UUID
    name: str | None
    event_type: str
    payload: Any
    target: Target
    trigger: Trigger
    max_attempts: int
    labels: dict[str, str]
    jitter_seconds: float
    rules: Rules
    status: ScheduleStatus
    fire_count: int
    skipped_count: int
    last_skip_reason: str | None
    last_fired_at: datetime | None
    created_at: datetime
    updated_at: datetime
    next_fire_at: datetime | None
    next_occurrence_id: uuid.UUID | None
    attempts: int
    last_error: str | None
    request_hash: str | None = None


class ScheduleSpec(BaseModel):
    """What a client asks for when creating a schedule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(default=None, min_length=1, max_length=200)
    event_type: str = Field(min_length=1, max_length=200)
    payload: Any = Field(default_factory=dict)
    target: Target
    trigger: Trigger
    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    jitter_seconds: float = Field(
        default=0.0,
        ge=0,
        le=86400,
        description="Spread each firing uniformly over [fire_at, fire_at + jitter_seconds)",
    )
    misfire_policy: MisfirePolicy = Field(
        default="fire_once",
        description="Missed ticks: fire_once (one catch-up), skip (drop ticks later than "
        "misfire_grace_seconds) or fire_all (each, up to max_catchup)",
    )
    misfire_grace_seconds: float = Field(
        default=DEFAULT_GRACE_SECONDS,
        ge=0,
        le=86400 * 365,
        description="How late a tick may fire under skip",
    )
    max_catchup: int = Field(
        default=DEFAULT_MAX_CATCHUP,
        ge=1,
        le=1000,
        description="Missed ticks fired (fire_all) or listed as skipped, per gap",
    )
    max_occurrences: int | None = Field(
        default=None, ge=1, description="Fire at most this many ticks, then complete"
    )

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not key or len(key) > 100 or ":" in key:
                raise ValueError(f"label key {key!r} must be 1-100 characters without ':'")
            if len(text) > 200:
                raise ValueError(f"label {key!r} is longer than 200 characters")
        return value


class SchedulePatch(BaseModel):
    """A partial change; absent fields stay as they are."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    payload: Any = None
    target: Target | None = None
    trigger: Trigger | None = None
    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    labels: dict[str, str] | None = None
    jitter_seconds: float | None = Field(default=None, ge=0, le=86400)
    misfire_policy: MisfirePolicy | None = Field(
        default=None,
        description="Missed ticks: fire_once (one catch-up), skip (drop ticks later than "
        "misfire_grace_seconds) or fire_all (each, up to max_catchup)",
    )
    misfire_grace_seconds: float | None = Field(
        default=None, ge=0, le=86400 * 365, description="How late a tick may fire under skip"
    )
    max_catchup: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="Missed ticks fired (fire_all) or listed as skipped, per gap",
    )
    max_occurrences: int | None = Field(
        default=None, ge=1, description="Fire at most this many ticks, then complete"
    )

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return None if value is None else ScheduleSpec._label_keys(value)


def rules_of(spec: ScheduleSpec) -> Rules:
    return Rules(
        policy=spec.misfire_policy,
        grace_seconds=spec.misfire_grace_seconds,
        max_catchup=spec.max_catchup,
        max_occurrences=spec.max_occurrences,
    )
