"""One attempt never raises: every end of a delivery becomes a settlement, or `Unsent`."""

from __future__ import annotations

import asyncio
import errno
import random
from datetime import UTC, datetime

import pytest

from app.domain.occurrence import (
    Delivered,
    Delivery,
    OccurrenceStatus,
    Outcome,
    Permanent,
    Retryable,
    Settlement,
    Unsent,
)
from app.domain.retry import RetryPolicy
from app.sinks.registry import Sinks
from app.worker.attempt import attempt
from tests import factories

POLICY = RetryPolicy(0.5, 4.0, jitter=False)


class Scripted:
    """A sink that answers with `answer`, raises it, or hangs."""

    def __init__(self, answer: Outcome | BaseException | None) -> None:
        self.answer = answer

    async def deliver(self, delivery: Delivery) -> Outcome:
        if self.answer is None:
            await asyncio.Event().wait()
        if isinstance(self.answer, BaseException):
            raise self.answer
        assert self.answer is not None
        return self.answer


async def run(
    answer: Outcome | BaseException | None, timeout: float = 5.0, **delivery: object
) -> Settlement | Unsent:
    return await attempt(
        factories.make_delivery(**delivery),
        sinks=Sinks({"webhook": Scripted(answer)}),
        dispatch_timeout=timeout,
        policy=POLICY,
        rng=random.Random(1),
        replica="r1",
    )


async def test_a_delivered_attempt_is_settled_delivered_with_its_timing_and_replica() -> None:
    before = datetime.now(UTC)
    settled = await run(Delivered(status_code=204))
    assert isinstance(settled, Settlement)
    assert settled.status is OccurrenceStatus.DELIVERED
    assert settled.status_code == 204
    assert settled.replica == "r1"
    assert settled.started_at is not None
    assert settled.started_at >= before
    assert settled.duration_ms >= 0


async def test_a_retryable_failure_is_retried_after_the_policy_delay() -> None:
    settled = await run(Retryable("HTTP 503"), attempt=2)
    assert isinstance(settled, Settlement)
    assert settled.status is OccurrenceStatus.PENDING
    assert settled.retry_in == 1.0  # 0.5 * 2^(2-1), no jitter
    assert settled.error == "HTTP 503"


async def test_a_permanent_failure_or_a_spent_budget_dead_letters() -> None:
    permanent = await run(Permanent("HTTP 410"))
    spent = await run(Retryable("HTTP 503"), attempt=3, max_attempts=3)
    assert isinstance(permanent, Settlement)
    assert isinstance(spent, Settlement)
    assert permanent.status is OccurrenceStatus.DEAD_LETTERED
    assert spent.status is OccurrenceStatus.DEAD_LETTERED


async def test_a_delivery_past_the_dispatch_timeout_is_cut_off_and_retried() -> None:
    async with asyncio.timeout(5):
        settled = await run(None, timeout=0.05)
    assert isinstance(settled, Settlement)
    assert settled.status is OccurrenceStatus.PENDING
    assert settled.error == "dispatch timed out after 0.05s"


async def test_a_sink_that_raises_is_an_internal_error_retried_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settled = await run(ValueError("bad state"))
    assert isinstance(settled, Settlement)
    assert settled.status is OccurrenceStatus.PENDING
    assert settled.error == "internal error: ValueError: bad state"
    assert any("raised" in r.getMessage() and r.exc_info for r in caplog.records)


async def test_a_local_shortage_is_no_attempt_at_all() -> None:
    cause = OSError(errno.EMFILE, "Too many open files")
    wrapped = RuntimeError("connect failed")
    wrapped.__cause__ = cause
    unsent = await run(wrapped)
    assert isinstance(unsent, Unsent)
    assert unsent.error.startswith("this replica ran out of a resource: ")


async def test_a_target_type_without_a_sink_is_unsent() -> None:
    unsent = await attempt(
        factories.make_delivery(),
        sinks=Sinks({}),
        dispatch_timeout=1.0,
        policy=POLICY,
        rng=random.Random(1),
        replica="r1",
    )
    assert isinstance(unsent, Unsent)
