"""What a finished attempt shows operators: its metrics and its log line; and the line of
each schedule its dead letters paused.

Invariant: a log line carries ids, the attempt and the outcome, and a failure's kind; never
a payload, a header or a URL (the full error text is on the occurrence, which the API guards).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from app.domain.endpoints import CircuitChanged, CircuitEvent
from app.domain.occurrence import FailureReason, OccurrenceStatus, Settlement
from app.domain.schedule import AutoPause
from app.telemetry import delivery_metrics

# The loop's lines keep the loop's logger name, wherever in the loop they are written.
log = logging.getLogger("app.worker.dispatcher")

OUTCOMES = {
    OccurrenceStatus.DELIVERED: "delivered",
    OccurrenceStatus.PENDING: "retry",
    OccurrenceStatus.DEAD_LETTERED: "dead_lettered",
}


def observe(settlement: Settlement, seconds: float) -> None:
    """Metrics and the log line of one finished attempt that took `seconds`."""
    delivery = settlement.delivery
    target_type = delivery.target.type
    status = settlement.status
    outcome = OUTCOMES[status]
    failure = settlement.reason
    delivery_metrics.DURATION.labels(target_type).observe(seconds)
    delivery_metrics.ATTEMPTS.labels(outcome, target_type, failure or "none").inc()
    delivery_metrics.DELIVERIES.labels(outcome, target_type).inc()
    fields = {
        "schedule_id": str(delivery.schedule_id),
        "occurrence_id": str(delivery.occurrence_id),
        "attempt": delivery.attempt,
        "outcome": outcome,
    }
    if status is OccurrenceStatus.DELIVERED:
        delivery_metrics.DELIVERED.labels(
            *delivery_metrics.with_tenant(delivery.tenant, target_type)
        ).inc()
        delivery_metrics.LATENESS.labels(delivery.origin, target_type).observe(
            max(time.time() - delivery.fire_at.timestamp(), 0.0)
        )
        if log.isEnabledFor(logging.DEBUG):
            log.debug("delivered occurrence %s", delivery.occurrence_id, extra=fields)
    elif status is OccurrenceStatus.DEAD_LETTERED:
        labels = delivery_metrics.with_tenant(
            delivery.tenant, target_type, failure or FailureReason.OTHER
        )
        delivery_metrics.DEAD_LETTERED.labels(*labels).inc()
        delivery_metrics.DEAD_LETTERS.inc()
        why = reason(settlement.error)
        log.warning(
            "dead-lettered occurrence %s after attempt %d: %s",
            delivery.occurrence_id,
            delivery.attempt,
            why,
            extra={**fields, "reason": why},
        )
    else:
        why = reason(settlement.error)
        log.info(
            "occurrence %s failed attempt %d, retrying in %.1fs: %s",
            delivery.occurrence_id,
            delivery.attempt,
            settlement.retry_in or 0.0,
            why,
            extra={**fields, "reason": why, "retry_in": round(settlement.retry_in or 0.0, 3)},
        )


def reason(error: str | None) -> str:
    """The kind of a failure without its detail: a target's reply may echo the payload and
    a client error may name a URL with a token in it."""
    return (error or "unknown").split(":", 1)[0][:80]


def auto_paused(paused: Sequence[AutoPause]) -> None:
    """Count the schedules that paused themselves, and say each one on a WARNING line."""
    if not paused:
        return
    delivery_metrics.AUTO_PAUSED.inc(len(paused))
    for pause in paused:
        log.warning(
            "schedule %s (%s) paused itself after %d occurrences dead-lettered in a row "
            "(pause_after_failures %d); resume it once its target is fixed",
            pause.schedule_id,
            pause.name or "no name",
            pause.consecutive_failures,
            pause.threshold,
            extra={
                "schedule_id": str(pause.schedule_id),
                "schedule_name": pause.name,
                "consecutive_failures": pause.consecutive_failures,
                "pause_after_failures": pause.threshold,
            },
        )


def circuits_changed(changes: Sequence[CircuitChanged]) -> None:
    """Count the endpoints' circuits a settle moved, and say each on a line: a WARNING when
    it stops deliveries (opened, reopened, disabled), INFO when they flow again."""
    for change in changes:
        delivery_metrics.CIRCUITS.labels(
            *delivery_metrics.with_tenant(change.tenant, change.event.value)
        ).inc()
        level = logging.INFO if change.event is CircuitEvent.RECOVERED else logging.WARNING
        log.log(
            level,
            "endpoint %s circuit %s after %d failed attempts in a row%s",
            change.endpoint_id,
            change.event.value,
            change.failures,
            "" if change.cooldown is None else f"; the next probe in {change.cooldown:g}s",
            extra={
                "endpoint_id": str(change.endpoint_id),
                "tenant": change.tenant,
                "circuit": change.event.value,
                "consecutive_failures": change.failures,
            },
        )
