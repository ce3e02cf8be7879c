"""Settling an attempt: delivered, retried later, or dead-lettered (DESIGN 1 and 5)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.occurrence import (
    MAX_RETRY_AFTER,
    Delivered,
    Delivery,
    FailureReason,
    OccurrenceStatus,
    Permanent,
    Retryable,
    failure_reason,
    settle,
)
from app.domain.retry import RetryPolicy, RetrySpec
from tests import factories

POLICY = RetryPolicy(base_delay=1.0, max_delay=300.0, jitter=True)
STEADY = RetryPolicy(base_delay=1.0, max_delay=300.0, jitter=False)


def make_delivery(**overrides: Any) -> Delivery:
    return factories.make_delivery(**{"one_shot": False, **overrides})


def test_a_delivered_outcome_settles_as_delivered() -> None:
    delivery = make_delivery()

    settlement = settle(delivery, Delivered(), POLICY, random.Random(1))

    assert settlement.delivery is delivery
    assert settlement.status is OccurrenceStatus.DELIVERED
    assert settlement.error is None
    assert settlement.retry_in is None


@pytest.mark.parametrize("attempt", [1, 4, 5])
def test_a_delivery_on_the_last_attempts_still_counts_as_delivered(attempt: int) -> None:
    settlement = settle(make_delivery(attempt=attempt), Delivered(), POLICY, random.Random(1))

    assert settlement.status is OccurrenceStatus.DELIVERED


@pytest.mark.parametrize("attempt", [1, 2, 5])
def test_a_permanent_failure_dead_letters_at_once(attempt: int) -> None:
    settlement = settle(
        make_delivery(attempt=attempt), Permanent("HTTP 404: gone"), POLICY, random.Random(1)
    )

    assert settlement.status is OccurrenceStatus.DEAD_LETTERED
    assert settlement.error == "HTTP 404: gone"
    assert settlement.retry_in is None


@pytest.mark.parametrize(("attempt", "max_attempts"), [(1, 5), (2, 5), (4, 5), (1, 2)])
def test_a_retryable_failure_below_the_budget_is_retried_within_the_backoff(
    attempt: int, max_attempts: int
) -> None:
    rng = random.Random(attempt)
    delivery = make_delivery(attempt=attempt, max_attempts=max_attempts)

    settlement = settle(delivery, Retryable("HTTP 503"), POLICY, rng)

    assert settlement.status is OccurrenceStatus.PENDING
    assert settlement.error == "HTTP 503"
    assert settlement.retry_in is not None
    assert 0.0 <= settlement.retry_in <= POLICY.backoff(attempt)


def test_a_retry_without_jitter_waits_the_exact_backoff() -> None:
    settlement = settle(make_delivery(attempt=4), Retryable("timed out"), STEADY, random.Random(1))

    assert settlement.retry_in == 8.0


@pytest.mark.parametrize(("attempt", "max_attempts"), [(5, 5), (1, 1), (6, 5)])
def test_a_retryable_failure_on_the_last_attempt_dead_letters(
    attempt: int, max_attempts: int
) -> None:
    delivery = make_delivery(attempt=attempt, max_attempts=max_attempts)

    settlement = settle(delivery, Retryable("connection refused"), POLICY, random.Random(1))

    assert settlement.status is OccurrenceStatus.DEAD_LETTERED
    assert settlement.error == "connection refused"
    assert settlement.retry_in is None


def test_a_retry_after_longer_than_the_backoff_is_honoured() -> None:
    settlement = settle(
        make_delivery(attempt=1), Retryable("HTTP 429", retry_after=120.0), POLICY, random.Random(1)
    )

    assert settlement.status is OccurrenceStatus.PENDING
    assert settlement.retry_in == 120.0


def test_a_retry_after_shorter_than_the_backoff_does_not_shorten_it() -> None:
    settlement = settle(
        make_delivery(attempt=6, max_attempts=10),
        Retryable("HTTP 503", retry_after=1.0),
        STEADY,
        random.Random(1),
    )

    assert settlement.retry_in == 32.0


@pytest.mark.parametrize("retry_after", [301.0, MAX_RETRY_AFTER + 1, 999_999_999.0, float("inf")])
def test_a_retry_after_beyond_the_policys_most_is_capped_there(retry_after: float) -> None:
    settlement = settle(
        make_delivery(), Retryable("HTTP 429", retry_after=retry_after), POLICY, random.Random(1)
    )

    assert settlement.retry_in == POLICY.max_delay


def test_a_retry_after_is_capped_at_the_schedules_own_most() -> None:
    own = RetrySpec(max_delay_seconds=30)
    settlement = settle(
        make_delivery(flow_key="k", retry=own),
        Retryable("HTTP 429", retry_after=999_999_999.0, status_code=429),
        POLICY,
        random.Random(1),
    )

    assert settlement.retry_in == 30.0
    assert settlement.key_backoff == 30.0


def test_a_key_back_off_is_capped_at_the_services_most_without_a_policy_of_its_own() -> None:
    settlement = settle(
        make_delivery(attempt=5, max_attempts=5, flow_key="k"),
        Retryable("HTTP 503", retry_after=999_999_999.0, status_code=503),
        POLICY,
        random.Random(1),
    )

    assert settlement.key_backoff == POLICY.max_delay


def test_a_retry_after_on_the_last_attempt_still_dead_letters() -> None:
    settlement = settle(
        make_delivery(attempt=5, max_attempts=5),
        Retryable("HTTP 429", retry_after=60.0),
        POLICY,
        random.Random(1),
    )

    assert settlement.status is OccurrenceStatus.DEAD_LETTERED


@given(
    attempt=st.integers(min_value=1, max_value=50),
    max_attempts=st.integers(min_value=1, max_value=50),
    retry_after=st.none() | st.floats(min_value=0, max_value=10 * MAX_RETRY_AFTER),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_a_retryable_failure_either_retries_within_bounds_or_dead_letters_at_the_budget(
    attempt: int, max_attempts: int, retry_after: float | None, seed: int
) -> None:
    delivery = make_delivery(attempt=attempt, max_attempts=max_attempts)

    settlement = settle(delivery, Retryable("boom", retry_after), POLICY, random.Random(seed))

    if attempt >= max_attempts:
        assert settlement.status is OccurrenceStatus.DEAD_LETTERED
        return
    assert settlement.status is OccurrenceStatus.PENDING
    assert settlement.retry_in is not None
    upper = max(POLICY.backoff(attempt), min(retry_after or 0.0, POLICY.max_delay))
    assert 0.0 <= settlement.retry_in <= upper
    if retry_after is not None:
        assert settlement.retry_in >= min(retry_after, POLICY.max_delay)


@pytest.mark.parametrize("status", [429, 503])
def test_a_keyed_delivery_asked_to_wait_holds_its_whole_key(status: int) -> None:
    settlement = settle(
        make_delivery(flow_key="customer-42"),
        Retryable(f"HTTP {status}", retry_after=90.0, status_code=status),
        POLICY,
        random.Random(1),
    )

    assert settlement.key_backoff == 90.0


def test_a_key_is_held_even_when_the_answer_spends_the_last_attempt() -> None:
    settlement = settle(
        make_delivery(attempt=5, max_attempts=5, flow_key="k"),
        Retryable("HTTP 429", retry_after=30.0, status_code=429),
        POLICY,
        random.Random(1),
    )

    assert settlement.status is OccurrenceStatus.DEAD_LETTERED
    assert settlement.key_backoff == 30.0


@pytest.mark.parametrize(
    ("flow_key", "status", "retry_after"),
    [
        (None, 429, 30.0),  # no key to hold
        ("k", 500, 30.0),  # an error of its own, not "not now"
        ("k", 429, None),  # no instant named
    ],
)
def test_no_key_is_held_without_a_key_a_back_pressure_answer_and_an_instant(
    flow_key: str | None, status: int, retry_after: float | None
) -> None:
    settlement = settle(
        make_delivery(flow_key=flow_key),
        Retryable(f"HTTP {status}", retry_after=retry_after, status_code=status),
        POLICY,
        random.Random(1),
    )

    assert settlement.key_backoff is None


@pytest.mark.parametrize(
    ("status", "reason"),
    [(301, "3xx"), (404, "4xx"), (408, "4xx"), (429, "429"), (500, "5xx"), (503, "5xx")],
)
def test_a_reply_fails_by_its_status_class(status: int, reason: str) -> None:
    assert failure_reason(Retryable("HTTP", status_code=status)) == reason
    assert failure_reason(Permanent("HTTP", status_code=status)) == reason


def test_a_failure_without_a_reply_keeps_what_its_sink_saw() -> None:
    assert failure_reason(Retryable("no route", reason=FailureReason.CONNECT)) == "connect"
    assert failure_reason(Permanent("denied", reason=FailureReason.DENIED)) == "denied"
    assert failure_reason(Retryable("something else")) == "other"
