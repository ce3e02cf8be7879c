"""One attempt: a delivery handed to its sink under the dispatch timeout, and its outcome.

Invariant: an attempt never raises. The target's answer, a timeout or any failure of the
sink becomes a settlement (delivered, retry, dead letter, by the retry policy), but for a
resource this replica ran short of, which is no attempt at all: `Unsent`, handed back
uncharged. Every settlement is observed (`outcomes.observe`) as it is made.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime

from app.domain.occurrence import (
    Attempted,
    Delivery,
    FailureReason,
    Retryable,
    Settlement,
    Unsent,
    settle,
)
from app.domain.retry import RetryPolicy
from app.sinks.base import local_shortage
from app.sinks.registry import Sinks
from app.telemetry import delivery_metrics
from app.worker.outcomes import log, observe


async def attempt(
    delivery: Delivery,
    *,
    sinks: Sinks,
    dispatch_timeout: float,
    policy: RetryPolicy,
    rng: random.Random,
    replica: str,
) -> Settlement | Unsent:
    """Deliver once, within `dispatch_timeout` seconds; `replica` is recorded on the attempt."""
    outcome: Attempted
    # The wall clock says when it started (the attempt log); the monotonic clock how long.
    started_at = datetime.now(UTC)
    started = time.perf_counter()
    try:
        async with asyncio.timeout(dispatch_timeout):
            outcome = await sinks.deliver(delivery)
    except TimeoutError:
        outcome = Retryable(
            f"dispatch timed out after {dispatch_timeout:g}s", reason=FailureReason.TIMEOUT
        )
    except Exception as exc:
        if (shortage := local_shortage(exc)) is not None:
            outcome = Unsent(f"this replica ran out of a resource: {shortage}")
        else:
            log.exception("delivery of occurrence %s raised", delivery.occurrence_id)
            outcome = Retryable(f"internal error: {type(exc).__name__}: {exc}"[:500])
    if isinstance(outcome, Unsent):
        delivery_metrics.UNSENT.inc()
        log.warning(
            "occurrence %s not sent, handed back for %.1fs: %s",
            delivery.occurrence_id,
            outcome.retry_in,
            outcome.error,
            extra={"occurrence_id": str(delivery.occurrence_id), "reason": outcome.error},
        )
        return outcome
    seconds = time.perf_counter() - started
    settlement = settle(
        delivery,
        outcome,
        policy,
        rng,
        started_at=started_at,
        duration=seconds,
        replica=replica,
    )
    observe(settlement, seconds)
    return settlement
