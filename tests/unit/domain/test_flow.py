"""The rules of a flow key: its limits' validation, the token bucket and the allowance."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.domain.errors import InvalidInputError
from app.domain.flow import Bucket, FlowLimits, Ordering, allowance, check_key, full_bucket

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize("key", ["a", "customer:42", "A.b_c-d:9", "x" * 128])
def test_keys_in_the_alphabet_are_accepted(key: str) -> None:
    assert check_key(key) == key


@pytest.mark.parametrize("key", ["", "x" * 129, "a b", "a/b", "é", "a\n", "a\x00b", "a%20"])
def test_keys_out_of_the_alphabet_name_where_they_came_from(key: str) -> None:
    with pytest.raises(InvalidInputError) as raised:
        check_key(key, parameter="key")
    assert raised.value.parameter == "key"


@pytest.mark.parametrize(
    ("limits", "pointer"),
    [
        ({"rate": 0}, "#/rate"),
        ({"rate": -5}, "#/rate"),
        ({"rate": 10**9}, "#/rate"),
        ({"rate": 5, "burst": 0}, "#/burst"),
        ({"burst": 5}, "#/burst"),
        ({"parallelism": 0}, "#/parallelism"),
        ({"period_seconds": 0}, "#/period_seconds"),
        ({"period_seconds": -1}, "#/period_seconds"),
        ({"period_seconds": float("nan")}, "#/period_seconds"),
        ({"period_seconds": float("inf")}, "#/period_seconds"),
        ({"period_seconds": 86_401}, "#/period_seconds"),
        ({"ordering": Ordering.FIFO, "parallelism": 2}, "#/parallelism"),
    ],
)
def test_incoherent_limits_name_the_field(limits: dict[str, object], pointer: str) -> None:
    with pytest.raises(InvalidInputError) as raised:
        FlowLimits(**limits)  # type: ignore[arg-type]
    assert raised.value.pointer == pointer


def test_no_limits_allow_any_number() -> None:
    limits = FlowLimits()
    room, _ = allowance(limits, full_bucket(limits, T0), in_flight=1_000, now=T0)
    assert room is None


def test_parallelism_counts_what_is_in_flight() -> None:
    limits = FlowLimits(parallelism=10)
    bucket = full_bucket(limits, T0)
    assert allowance(limits, bucket, in_flight=0, now=T0)[0] == 10
    assert allowance(limits, bucket, in_flight=7, now=T0)[0] == 3
    # More in flight than allowed (the limit was lowered): nothing starts, never negative.
    assert allowance(limits, bucket, in_flight=12, now=T0)[0] == 0


def test_fifo_starts_one_and_only_when_none_is_in_flight() -> None:
    limits = FlowLimits(ordering=Ordering.FIFO)
    bucket = full_bucket(limits, T0)
    assert allowance(limits, bucket, in_flight=0, now=T0)[0] == 1
    assert allowance(limits, bucket, in_flight=1, now=T0)[0] == 0


def test_a_full_bucket_allows_its_burst_then_refills_at_the_rate() -> None:
    limits = FlowLimits(rate=50, burst=100)
    bucket = full_bucket(limits, T0)
    room, bucket = allowance(limits, bucket, in_flight=0, now=T0)
    assert room == 100
    bucket = bucket.spent(100)
    assert allowance(limits, bucket, in_flight=0, now=T0)[0] == 0
    # 50 a second: 0.1 s later five tokens are back, and never more than the burst.
    assert allowance(limits, bucket, in_flight=0, now=at(0.1))[0] == 5
    assert allowance(limits, bucket, in_flight=0, now=at(3600))[0] == 100


def test_the_period_spreads_the_rate() -> None:
    limits = FlowLimits(rate=6, period_seconds=60)  # 6 a minute: one each 10 s
    bucket = full_bucket(limits, T0).spent(6)
    assert allowance(limits, bucket, in_flight=0, now=at(9.9))[0] == 0
    assert allowance(limits, bucket, in_flight=0, now=at(10))[0] == 1


def test_the_tighter_of_rate_and_parallelism_wins() -> None:
    limits = FlowLimits(rate=100, parallelism=3)
    bucket = full_bucket(limits, T0)
    assert allowance(limits, bucket, in_flight=0, now=T0)[0] == 3
    assert allowance(limits, bucket.spent(99), in_flight=0, now=T0)[0] == 1


def test_a_clock_behind_the_last_refill_refills_nothing() -> None:
    limits = FlowLimits(rate=10)
    bucket = Bucket(tokens=2.0, refilled_at=at(5))
    room, refilled = allowance(limits, bucket, in_flight=0, now=at(4))
    assert room == 2
    assert refilled.refilled_at == at(5)


def test_paused_and_backing_off_keys_start_nothing_until_then() -> None:
    paused = FlowLimits(parallelism=5, paused=True)
    assert allowance(paused, full_bucket(paused, T0), in_flight=0, now=T0)[0] == 0
    limits = FlowLimits(parallelism=5)
    bucket = full_bucket(limits, T0)
    assert allowance(limits, bucket, in_flight=0, now=at(29), backoff_until=at(30))[0] == 0
    assert allowance(limits, bucket, in_flight=0, now=at(30), backoff_until=at(30))[0] == 5


def test_an_empty_bucket_says_when_its_next_token_comes() -> None:
    limits = FlowLimits(rate=2, period_seconds=10)  # one each 5 s
    assert full_bucket(limits, T0).next_token_in(limits) == 0.0
    assert full_bucket(limits, T0).spent(2).next_token_in(limits) == pytest.approx(5.0)
    assert Bucket(tokens=0.5, refilled_at=T0).next_token_in(limits) == pytest.approx(2.5)
    assert Bucket(0.0, T0).next_token_in(FlowLimits(parallelism=2)) is None


def test_a_key_is_limited_by_any_of_its_limits_and_not_by_none() -> None:
    assert not FlowLimits().limited
    assert FlowLimits(rate=1).limited
    assert FlowLimits(parallelism=1).limited
    assert FlowLimits(ordering=Ordering.FIFO).limited
    assert FlowLimits(paused=True).limited
