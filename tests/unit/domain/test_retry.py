"""Retry policy: capped exponential backoff, optionally with full jitter (DESIGN 2)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from app.domain.errors import InvalidInputError
from app.domain.retry import MIN_RETRY_DELAY_SECONDS, RetryPolicy, RetrySpec, raised_to_floor


@pytest.mark.parametrize(
    ("base", "cap", "attempt", "expected"),
    [
        (1.0, 300.0, 1, 1.0),
        (1.0, 300.0, 2, 2.0),
        (1.0, 300.0, 3, 4.0),
        (1.0, 300.0, 9, 256.0),
        (1.0, 300.0, 10, 300.0),
        (1.0, 300.0, 30, 300.0),
        (0.5, 10.0, 4, 4.0),
        (0.5, 10.0, 6, 10.0),
        (2.0, 2.0, 1, 2.0),
        (2.0, 2.0, 5, 2.0),
    ],
)
def test_backoff_without_jitter_doubles_from_base_up_to_the_cap(
    base: float, cap: float, attempt: int, expected: float
) -> None:
    policy = RetryPolicy(base_delay=base, max_delay=cap, jitter=False)

    assert policy.backoff(attempt) == expected
    assert policy.delay(attempt, random.Random(1)) == expected


def test_delay_without_jitter_does_not_consume_randomness() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=300.0, jitter=False)
    rng = random.Random(5)
    state = rng.getstate()

    policy.delay(3, rng)

    assert rng.getstate() == state


@pytest.mark.parametrize("attempt", [1, 2, 3, 5, 8, 9, 12, 40])
def test_full_jitter_draws_within_zero_and_the_capped_backoff(attempt: int) -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=300.0, jitter=True)
    rng = random.Random(20240305)
    capped = policy.backoff(attempt)

    draws = [policy.delay(attempt, rng) for _ in range(500)]

    assert all(0.0 <= d <= capped for d in draws)
    # Spread over the whole range, not clustered at the cap.
    assert min(draws) < 0.1 * capped
    assert max(draws) > 0.9 * capped


def test_full_jitter_is_reproducible_from_the_seed() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=300.0, jitter=True)

    first = [policy.delay(n, random.Random(7)) for n in range(1, 12)]
    again = [policy.delay(n, random.Random(7)) for n in range(1, 12)]

    assert first == again


@pytest.mark.parametrize("attempt", [63, 64, 1_000, 10**6, 10**18, 2**100])
def test_huge_attempt_numbers_stay_at_the_cap(attempt: int) -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=300.0, jitter=False)

    assert policy.backoff(attempt) == 300.0


@given(
    base=st.floats(min_value=0.001, max_value=3600, allow_nan=False),
    extra=st.floats(min_value=0, max_value=86400, allow_nan=False),
    attempt=st.integers(min_value=1, max_value=10**30),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_any_attempt_gives_a_finite_delay_within_the_cap(
    base: float, extra: float, attempt: int, seed: int
) -> None:
    cap = base + extra
    policy = RetryPolicy(base_delay=base, max_delay=cap, jitter=True)

    backoff = policy.backoff(attempt)
    delay = policy.delay(attempt, random.Random(seed))

    assert math.isfinite(backoff)
    assert base <= backoff <= cap
    assert 0.0 <= delay <= backoff


@given(
    base=st.floats(min_value=0.001, max_value=60, allow_nan=False),
    attempt=st.integers(min_value=1, max_value=200),
)
def test_backoff_never_decreases_with_the_attempt_number(base: float, attempt: int) -> None:
    policy = RetryPolicy(base_delay=base, max_delay=300.0, jitter=False)

    assert policy.backoff(attempt + 1) >= policy.backoff(attempt)


def test_a_schedule_policy_sets_what_it_names_over_the_services() -> None:
    service = RetryPolicy(base_delay=1.0, max_delay=300.0, jitter=True)
    own = RetrySpec(base_delay_seconds=10, jitter=False).over(service)
    assert own == RetryPolicy(base_delay=10.0, max_delay=300.0, jitter=False, floor=0.1)
    assert RetrySpec().over(service) == RetryPolicy(1.0, 300.0, jitter=True, floor=0.1)


@pytest.mark.parametrize(
    ("spec", "pointer"),
    [
        (RetrySpec(base_delay_seconds=60, max_delay_seconds=30), "#/retry/max_delay_seconds"),
        # Its base above the service's most: the base is what is out of line.
        (RetrySpec(base_delay_seconds=600), "#/retry/base_delay_seconds"),
    ],
)
def test_a_policy_whose_most_is_below_its_start_names_the_field(
    spec: RetrySpec, pointer: str
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        spec.check(RetryPolicy(base_delay=1.0, max_delay=300.0))
    assert refused.value.pointer == pointer


@pytest.mark.parametrize("field", ["base_delay_seconds", "max_delay_seconds"])
@pytest.mark.parametrize("seconds", [0.001, 0.05, 0.0999])
def test_a_schedule_policy_below_the_floor_is_refused_naming_the_field(
    field: str, seconds: float
) -> None:
    with pytest.raises(ValidationError) as refused:
        RetrySpec.model_validate({field: seconds})
    assert [error["loc"] for error in refused.value.errors()] == [(field,)]


def test_a_schedule_policy_at_the_floor_is_taken() -> None:
    spec = RetrySpec(base_delay_seconds=0.1, max_delay_seconds=0.1)
    assert spec.over(RetryPolicy(1.0, 300.0)).backoff(1) == 0.1


@given(attempt=st.integers(min_value=1, max_value=60), seed=st.integers(0, 2**32))
def test_a_schedule_policy_never_waits_less_than_the_floor_even_with_jitter(
    attempt: int, seed: int
) -> None:
    # The service's own base may be below the floor (its settings are the operator's).
    policy = RetrySpec(jitter=True).over(RetryPolicy(0.001, 0.002, jitter=False))
    assert policy.delay(attempt, random.Random(seed)) >= MIN_RETRY_DELAY_SECONDS


def test_a_policy_stored_below_the_floor_loads_raised_to_it() -> None:
    stored = {"base_delay_seconds": 0.001, "max_delay_seconds": 0.001, "jitter": False}
    spec = RetrySpec.model_validate(raised_to_floor(stored))
    assert (spec.base_delay_seconds, spec.max_delay_seconds) == (0.1, 0.1)
    assert spec.over(RetryPolicy(1.0, 300.0)).delay(7, random.Random(1)) == 0.1


@pytest.mark.parametrize(
    ("max_delay", "retry_after", "honoured"),
    [(300.0, 999_999_999.0, 300.0), (300.0, 120.0, 120.0), (5.0, 60.0, 5.0), (1e9, 1e12, 86400.0)],
)
def test_a_retry_after_is_honoured_up_to_the_policys_most(
    max_delay: float, retry_after: float, honoured: float
) -> None:
    assert RetryPolicy(1.0, max_delay).honoured(retry_after) == honoured
