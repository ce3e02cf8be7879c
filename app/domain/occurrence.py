"""Occurrences: one firing of a schedule, its status, and how a delivery outcome settles it."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from app.domain.retry import RetryPolicy
from app.domain.target import Target


class OccurrenceStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # a tick that did not fire; see app.domain.misfire


class Origin(StrEnum):
    """Why an occurrence exists: the schedule's own cadence, a missed tick fired late
    (misfire policy fire_all or skip), an operator's backfill, or an operator's trigger."""

    SCHEDULE = "schedule"
    TRIGGER = "trigger"
    CATCHUP = "catchup"
    BACKFILL = "backfill"


@dataclass(frozen=True, slots=True)
class Occurrence:
    occurrence_id: uuid.UUID
    schedule_id: uuid.UUID
    fire_at: datetime
    available_at: datetime | None
    status: OccurrenceStatus
    origin: Origin
    attempts: int
    last_error: str | None
    delivered_at: datetime | None
    dead_lettered_at: datetime | None
    created_at: datetime
    updated_at: datetime
    skip_reason: str | None = None
    skipped_count: int = 0


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A dead-lettered occurrence with what it would have delivered."""

    occurrence: Occurrence
    event_type: str
    payload: Any
    target: Target


@dataclass(frozen=True, slots=True)
class Delivery:
    """A claimed occurrence, ready to hand to a sink; `lease_token` guards its settle."""

    occurrence_id: uuid.UUID
    schedule_id: uuid.UUID
    fire_at: datetime
    attempt: int
    max_attempts: int
    lease_token: uuid.UUID
    event_type: str
    body: bytes
    target: Target
    one_shot: bool
    # The schedule may have nothing after this one (a bounded schedule's last tick, a
    # catch-up or a backfill): its settle checks whether the schedule is done.
    last: bool = False
    # Why it exists (its cadence, a manual trigger, a catch-up, a backfill): lateness is
    # reported by origin, so a backfill of old ticks does not look like an outage.
    origin: Origin = Origin.SCHEDULE


@dataclass(frozen=True, slots=True)
class Delivered:
    pass


@dataclass(frozen=True, slots=True)
class Retryable:
    """The attempt failed but may succeed later; `retry_after` is the target's own request."""

    error: str
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class Permanent:
    """The attempt failed in a way that retrying cannot fix."""

    error: str


Outcome = Delivered | Retryable | Permanent

# A target's Retry-After is honoured up to a day; beyond that it is more likely a bug than a plan.
MAX_RETRY_AFTER = 86400.0


@dataclass(frozen=True, slots=True)
class Settlement:
    """What to write for one finished attempt."""

    delivery: Delivery
    status: OccurrenceStatus
    error: str | None = None
    retry_in: float | None = None


def settle(
    delivery: Delivery, outcome: Outcome, policy: RetryPolicy, rng: random.Random
) -> Settlement:
    """Turn an attempt's outcome into a settlement: delivered, retried later, or dead-lettered."""
    if isinstance(outcome, Delivered):
        return Settlement(delivery, OccurrenceStatus.DELIVERED)
    if isinstance(outcome, Permanent) or delivery.attempt >= delivery.max_attempts:
        return Settlement(delivery, OccurrenceStatus.DEAD_LETTERED, error=outcome.error)
    delay = policy.delay(delivery.attempt, rng)
    if outcome.retry_after is not None:
        delay = max(delay, min(outcome.retry_after, MAX_RETRY_AFTER))
    return Settlement(delivery, OccurrenceStatus.PENDING, error=outcome.error, retry_in=delay)
