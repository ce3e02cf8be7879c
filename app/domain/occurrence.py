"""Occurrences: one firing of a schedule, its status, and how a delivery outcome settles it."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeAlias

from app.domain.retry import MAX_RETRY_DELAY_SECONDS, RetryPolicy, RetrySpec
from app.domain.target import Target
from app.domain.tenants import DEFAULT_TENANT, is_own_key


class OccurrenceStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # a tick that did not fire; see app.domain.misfire
    # A topic's occurrence once it fanned out to its deliveries (app.domain.topics).
    COMPLETED = "completed"


class Origin(StrEnum):
    """Why an occurrence exists: the schedule's own cadence, a missed tick fired late
    (misfire policy fire_all or skip), an operator's backfill, an operator's trigger, or
    another occurrence's dead-lettering, reported to the schedule's `on_failure` target
    (app.domain.callbacks), or a topic's occurrence fanned out to one of its subscriptions
    (a delivery, app.domain.topics)."""

    SCHEDULE = "schedule"
    TRIGGER = "trigger"
    CATCHUP = "catchup"
    BACKFILL = "backfill"
    CALLBACK = "callback"
    FANOUT = "fanout"


# Origins of rows that are no firing of their schedule: a failure callback, a fan-out's
# delivery (their first claim counts no firing, and their dead letters pause nothing).
NOT_FIRINGS = frozenset({Origin.CALLBACK, Origin.FANOUT})


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
    # A callback's: the occurrence whose dead-lettering it reports.
    callback_of: uuid.UUID | None = None
    # A fan-out's delivery: the topic's occurrence it delivers, its subscription and the
    # endpoint it goes to.
    parent_id: uuid.UUID | None = None
    subscription_id: uuid.UUID | None = None
    endpoint_id: uuid.UUID | None = None
    # A topic's occurrence read alone: its deliveries (None: not read, or not a topic's).
    deliveries: tuple[Occurrence, ...] | None = None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A dead-lettered occurrence with what it would have delivered."""

    occurrence: Occurrence
    event_type: str
    payload: Any
    target: Target
    # Its schedule's name (None: the schedule has none).
    schedule_name: str | None = None


# A stream of deliveries that arrive in order, one at a time (`Delivery.lane`).
Lane: TypeAlias = uuid.UUID | tuple[uuid.UUID, str | None]


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
    # When it was due before its claim (its jittered or retry instant, never before
    # `fire_at`): handed back unstarted, it is due again then, not at once.
    due_at: datetime | None = None
    # The flow key whose limits it counts against (None: none): its settle may free a slot.
    flow_key: str | None = None
    # Its schedule's own retry policy over the service's (None: the service's).
    retry: RetrySpec | None = None
    # Its first attempt ever (not a retry, a replay or a lost lease's): it starts first.
    first: bool = False
    # Its schedule's tenant: webhooks name it (X-Chronoq-Tenant), AMQP messages too.
    tenant: str = DEFAULT_TENANT
    # The W3C traceparent its sinks send (None: none): its schedule's, stored at create,
    # or with tracing on the attempt's own span (docs/tracing.md).
    traceparent: str | None = None
    # A fan-out's delivery: the topic's occurrence it delivers (X-Occurrence-Id), its own
    # id being the delivery's (webhook-id, Idempotency-Key).
    parent_id: uuid.UUID | None = None

    @property
    def lane(self) -> Lane:
        """What it arrives in order within, one at a time (`app.worker.lanes`): its
        schedule's deliveries; a fan-out's, its schedule's to its endpoint (its key), so
        that each subscriber's stream is its own."""
        return self.schedule_id if self.parent_id is None else (self.schedule_id, self.flow_key)


# How much of a reply's body an attempt keeps (DESIGN 9): enough to read an error page's
# message, little enough that the attempt log does not weigh on the settle path.
RESPONSE_EXCERPT_BYTES = 1024


def response_excerpt(body: bytes) -> str:
    """The start of a reply's body as the attempt log keeps it: at most
    `RESPONSE_EXCERPT_BYTES`, as text (bytes that are not UTF-8, and NUL, become U+FFFD)."""
    # NUL too: no database keeps it in text.
    return body[:RESPONSE_EXCERPT_BYTES].decode("utf-8", "replace").replace("\x00", "\ufffd")


class FailureReason(StrEnum):
    """Why an attempt failed, in a fixed vocabulary: a metric's label, so never a detail
    (a status code, a host or an error text would each make a series of their own)."""

    HTTP_3XX = "3xx"  # redirects are not followed
    HTTP_4XX = "4xx"
    HTTP_429 = "429"
    HTTP_5XX = "5xx"
    CONNECT = "connect"  # no connection to the target, or it dropped mid-request
    TIMEOUT = "timeout"  # no answer within the target's timeout or the dispatch timeout
    DENIED = "denied"  # the target's address is one the service may not call
    BROKER = "broker"  # RabbitMQ unreachable, or it refused or returned the message
    OTHER = "other"


# A sink's report of one attempt. `status_code` is the reply's (webhooks only) and
# `response_excerpt` the start of its body (`response_excerpt()`); both None when there
# was no reply (a broker, a connection that failed).


@dataclass(frozen=True, slots=True)
class Delivered:
    status_code: int | None = None
    response_excerpt: str | None = None


@dataclass(frozen=True, slots=True)
class Retryable:
    """The attempt failed but may succeed later; `retry_after` is the target's own request."""

    error: str
    retry_after: float | None = None
    status_code: int | None = None
    response_excerpt: str | None = None
    # Why, when there was no reply; a reply's status says it otherwise (`failure_reason`).
    reason: FailureReason = FailureReason.OTHER


@dataclass(frozen=True, slots=True)
class Permanent:
    """The attempt failed in a way that retrying cannot fix."""

    error: str
    status_code: int | None = None
    response_excerpt: str | None = None
    reason: FailureReason = FailureReason.OTHER


Outcome = Delivered | Retryable | Permanent


def failure_reason(outcome: Retryable | Permanent) -> FailureReason:
    """The class of a failed attempt: its reply's status class when the target answered,
    else what its sink saw (no connection, no reply in time, an address refused, the
    broker)."""
    status = outcome.status_code
    if status is None:
        return outcome.reason
    if status == 429:
        return FailureReason.HTTP_429
    if 500 <= status < 600:
        return FailureReason.HTTP_5XX
    if 400 <= status < 500:
        return FailureReason.HTTP_4XX
    if 300 <= status < 400:
        return FailureReason.HTTP_3XX
    return FailureReason.OTHER


@dataclass(frozen=True, slots=True)
class Unsent:
    """Nothing was sent: this replica could not make the attempt (it ran out of file
    descriptors, memory or buffers, or has no sink for the target's type). Not the
    target's failure, so no attempt: it is not charged, not logged, and the occurrence is
    handed back, due again after `retry_in` seconds, for this replica or another."""

    error: str
    retry_in: float = 1.0


# What a sink reports: an attempt's outcome, or that no attempt was made.
Attempted = Outcome | Unsent

# A target's Retry-After is honoured up to its delivery's retry policy's `max_delay`, and
# never beyond a day (`RetryPolicy.honoured`).
MAX_RETRY_AFTER = MAX_RETRY_DELAY_SECONDS


# The answers that say "not now" for the destination as a whole: with Retry-After they
# hold the delivery's whole flow key, not only the occurrence.
BACK_PRESSURE_STATUSES = frozenset({429, 503})


def key_backoff(delivery: Delivery, outcome: Retryable, policy: RetryPolicy) -> float | None:
    """How long the delivery's flow key waits after this answer (None: it does not): the
    Retry-After as the delivery's retry `policy` honours it (`RetryPolicy.honoured`); never
    a tenant's own key (`app.domain.tenants.own_key`)."""
    if (
        delivery.flow_key is None
        # A tenant's own key holds all its deliveries of no key of their own, to any
        # destination: one receiver's answer holds back its key's only.
        or is_own_key(delivery.flow_key)
        or outcome.retry_after is None
        or outcome.status_code not in BACK_PRESSURE_STATUSES
    ):
        return None
    return policy.honoured(outcome.retry_after)


class AttemptOutcome(StrEnum):
    """How one attempt ended, as the attempt log records it."""

    DELIVERED = "delivered"
    RETRY = "retry"
    DEAD_LETTERED = "dead_lettered"
    # Its replica died or stalled before settling it; the claim that took the occurrence
    # again recorded it.
    LEASE_EXPIRED = "lease_expired"


ATTEMPT_OUTCOME_OF = {
    OccurrenceStatus.DELIVERED: AttemptOutcome.DELIVERED,
    OccurrenceStatus.PENDING: AttemptOutcome.RETRY,
    OccurrenceStatus.DEAD_LETTERED: AttemptOutcome.DEAD_LETTERED,
}


@dataclass(frozen=True, slots=True)
class Attempt:
    """One recorded attempt of an occurrence (DESIGN 9)."""

    attempt: int
    started_at: datetime
    duration_ms: int
    outcome: AttemptOutcome
    status_code: int | None
    error: str | None
    response_excerpt: str | None
    replica: str | None
    id: uuid.UUID | None = None  # its place in the log (None until written)
    # The trace it belongs to, 32 hex digits (None: none; docs/tracing.md).
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class Settlement:
    """What to write for one finished attempt: the occurrence's new state and, for the
    attempt log, when the attempt started (wall clock, UTC; None: at the settle), how long
    it took, what the target answered and which replica made it."""

    delivery: Delivery
    status: OccurrenceStatus
    error: str | None = None
    retry_in: float | None = None
    started_at: datetime | None = None
    duration_ms: int = 0
    status_code: int | None = None
    response_excerpt: str | None = None
    replica: str | None = None
    # Why a failed attempt failed (None: it did not fail).
    reason: FailureReason | None = None
    # Seconds the delivery's whole flow key is to wait: its destination answered 429 or 503
    # with Retry-After (None: no back-off asked, or no key).
    key_backoff: float | None = None

    @property
    def outcome(self) -> AttemptOutcome:
        return ATTEMPT_OUTCOME_OF[self.status]


def settle(
    delivery: Delivery,
    outcome: Outcome,
    policy: RetryPolicy,
    rng: random.Random,
    *,
    started_at: datetime | None = None,
    duration: float = 0.0,
    replica: str | None = None,
) -> Settlement:
    """Turn an attempt's outcome into a settlement: delivered, retried later (under the
    delivery's own retry policy over `policy`, the service's), or dead-lettered.
    `started_at` and `duration` (seconds) time the attempt for its record."""
    timing: dict[str, Any] = {
        "started_at": started_at,
        "duration_ms": max(0, round(duration * 1000)),
        "status_code": outcome.status_code,
        "response_excerpt": outcome.response_excerpt,
        "replica": replica,
    }
    if isinstance(outcome, Delivered):
        return Settlement(delivery, OccurrenceStatus.DELIVERED, **timing)
    timing["reason"] = failure_reason(outcome)
    if delivery.retry is not None:
        policy = delivery.retry.over(policy)  # the schedule's own, over the service's
    if isinstance(outcome, Retryable):
        timing["key_backoff"] = key_backoff(delivery, outcome, policy)
    if isinstance(outcome, Permanent) or delivery.attempt >= delivery.max_attempts:
        return Settlement(delivery, OccurrenceStatus.DEAD_LETTERED, error=outcome.error, **timing)
    delay = policy.delay(delivery.attempt, rng)
    if outcome.retry_after is not None:
        delay = max(delay, policy.honoured(outcome.retry_after))
    return Settlement(
        delivery, OccurrenceStatus.PENDING, error=outcome.error, retry_in=delay, **timing
    )
