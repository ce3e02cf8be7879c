"""Trigger bounds: `start_at` and `end_at` (both inclusive) on cron and interval triggers,
what validation refuses, and how first fire, ticks, counts and previews honour them."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from app.domain.errors import InvalidInputError
from app.domain.trigger import (
    Trigger,
    count_ticks,
    fire_times,
    first_fire_at,
    first_fire_or_refuse,
    next_fire_after,
    resolve,
    ticks_between,
)

TRIGGER: TypeAdapter[Trigger] = TypeAdapter(Trigger)

PLUS_TWO = timezone(timedelta(hours=2))


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def trigger(**spec: Any) -> Trigger:
    return TRIGGER.validate_python(spec)


def hourly(**bounds: Any) -> Trigger:
    """A cron trigger firing on every whole hour (UTC)."""
    return trigger(type="cron", expression="0 * * * *", **bounds)


def interval(every: float, start_at: datetime, **bounds: Any) -> Trigger:
    return trigger(type="interval", every_seconds=every, start_at=start_at, **bounds)


T0 = utc(2027, 1, 4, 12)


# cron start_at / end_at


def test_a_cron_never_fires_before_start_at() -> None:
    bounded = hourly(start_at=utc(2027, 1, 4, 12, 30))

    assert next_fire_after(bounded, utc(2027, 1, 4)) == utc(2027, 1, 4, 13)


def test_a_cron_tick_exactly_at_start_at_is_included() -> None:
    bounded = hourly(start_at=utc(2027, 1, 4, 12))

    assert next_fire_after(bounded, utc(2027, 1, 4)) == utc(2027, 1, 4, 12)
    assert next_fire_after(bounded, utc(2027, 1, 4, 12)) == utc(2027, 1, 4, 13)


def test_a_cron_start_at_in_another_offset_is_the_same_instant() -> None:
    # 14:00 at +02:00 is 12:00Z
    bounded = hourly(start_at=datetime(2027, 1, 4, 14, tzinfo=PLUS_TWO))

    assert next_fire_after(bounded, utc(2027, 1, 4)) == utc(2027, 1, 4, 12)


def test_a_bounded_cron_ticks_from_start_at_to_end_at_inclusive() -> None:
    bounded = hourly(start_at=utc(2027, 1, 4, 12), end_at=utc(2027, 1, 4, 14))

    assert list(ticks_between(bounded, utc(2027, 1, 4), utc(2027, 1, 5))) == [
        utc(2027, 1, 4, 12),
        utc(2027, 1, 4, 13),
        utc(2027, 1, 4, 14),
    ]


def test_a_cron_has_no_next_fire_past_end_at() -> None:
    bounded = hourly(end_at=utc(2027, 1, 4, 14, 30))

    assert next_fire_after(bounded, utc(2027, 1, 4, 13, 59)) == utc(2027, 1, 4, 14)
    assert next_fire_after(bounded, utc(2027, 1, 4, 14)) is None
    assert next_fire_after(bounded, utc(2027, 2, 1)) is None


def test_an_unbounded_cron_keeps_firing() -> None:
    assert next_fire_after(hourly(), utc(2027, 1, 4, 14)) == utc(2027, 1, 4, 15)


def test_a_cron_count_is_capped() -> None:
    # 30 days of hourly ticks in (Jan 1, Jan 31]
    after, until = utc(2027, 1, 1), utc(2027, 1, 31)

    assert count_ticks(hourly(), after, until, 100) == 100
    assert count_ticks(hourly(), after, until, 10_000) == 720


# interval end_at


def test_interval_ticks_stop_at_end_at() -> None:
    bounded = interval(60, T0, end_at=T0 + timedelta(seconds=150))

    assert list(ticks_between(bounded, T0 - timedelta(seconds=1), T0 + timedelta(hours=1))) == [
        T0,
        T0 + timedelta(seconds=60),
        T0 + timedelta(seconds=120),
    ]
    assert next_fire_after(bounded, T0 + timedelta(seconds=120)) is None


def test_an_interval_tick_exactly_at_end_at_is_included() -> None:
    bounded = interval(60, T0, end_at=T0 + timedelta(seconds=120))

    assert next_fire_after(bounded, T0 + timedelta(seconds=60)) == T0 + timedelta(seconds=120)
    assert next_fire_after(bounded, T0 + timedelta(seconds=120)) is None


def test_an_interval_count_is_exact_and_arithmetic_over_a_million_ticks() -> None:
    every_second = interval(1, T0)
    until = T0 + timedelta(seconds=1_000_000)

    began = time.perf_counter()
    counted = count_ticks(every_second, T0, until, 10)  # the cap does not apply
    elapsed = time.perf_counter() - began

    assert counted == 1_000_000
    assert elapsed < 0.1  # walking a million ticks one by one takes about a second


def test_an_interval_count_includes_start_at_and_stops_at_end_at() -> None:
    bounded = interval(1, T0, end_at=T0 + timedelta(seconds=500_000))

    # T0, T0+1 s, ..., T0+500000 s
    assert count_ticks(bounded, T0 - timedelta(days=1), T0 + timedelta(days=365), 10) == 500_001


@pytest.mark.parametrize(
    ("after", "until", "expected"),
    [
        (0, 0, 0),  # (T0, T0]: empty
        (0, 59, 0),
        (0, 60, 1),
        (-1, 0, 1),  # T0 itself
        (30, 600, 10),  # T0+60 s ... T0+600 s
        (60, 599, 8),  # T0+120 s ... T0+540 s
        (0, 6000, 100),
        (1200, 1199, 0),
    ],
)
def test_an_interval_count_matches_the_ticks_in_the_range(
    after: int, until: int, expected: int
) -> None:
    every_minute = interval(60, T0)
    low, high = T0 + timedelta(seconds=after), T0 + timedelta(seconds=until)

    assert count_ticks(every_minute, low, high, 10_000) == expected
    assert len(list(ticks_between(every_minute, low, high))) == expected


def test_an_interval_count_past_end_at_is_zero() -> None:
    bounded = interval(60, T0, end_at=T0 + timedelta(seconds=120))

    assert count_ticks(bounded, T0 + timedelta(seconds=120), T0 + timedelta(days=1), 10) == 0


# validation


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "cron", "expression": "0 * * * *"},
        {"type": "interval", "every_seconds": 60},
    ],
)
@pytest.mark.parametrize("end_offset", [timedelta(0), timedelta(seconds=-1), timedelta(days=-3)])
def test_end_at_not_after_start_at_is_refused_at_end_at(
    spec: dict[str, Any], end_offset: timedelta
) -> None:
    with pytest.raises(ValidationError) as refused:
        trigger(**spec, start_at=T0, end_at=T0 + end_offset)

    errors = refused.value.errors()
    assert len(errors) == 1
    assert errors[0]["loc"][-1] == "end_at"
    assert "end_at must be after start_at" in errors[0]["msg"]


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "cron", "expression": "0 * * * *"},
        {"type": "interval", "every_seconds": 60},
    ],
)
def test_end_at_just_after_start_at_is_accepted(spec: dict[str, Any]) -> None:
    end = T0 + timedelta(microseconds=1)

    bounded = trigger(**spec, start_at=T0, end_at=end)

    assert bounded.end_at == end  # type: ignore[union-attr]


def test_an_end_at_in_another_offset_is_compared_as_an_instant() -> None:
    # 13:00 at +02:00 is 11:00Z, before a 12:00Z start
    with pytest.raises(ValidationError) as refused:
        hourly(start_at=T0, end_at=datetime(2027, 1, 4, 13, tzinfo=PLUS_TWO))

    assert refused.value.errors()[0]["loc"][-1] == "end_at"


# first fire


def test_a_cron_whose_bounds_hold_no_tick_has_no_first_fire() -> None:
    # 12:00 daily, but only between 13:00 and 20:00 on one day
    daily = trigger(
        type="cron",
        expression="0 12 * * *",
        start_at=utc(2027, 1, 1, 13),
        end_at=utc(2027, 1, 1, 20),
    )

    assert first_fire_at(daily, utc(2026, 12, 31)) is None


def test_a_cron_first_fire_is_the_first_tick_at_or_after_start_at() -> None:
    daily = trigger(
        type="cron", expression="0 12 * * *", start_at=utc(2027, 1, 1, 12), end_at=utc(2027, 2, 1)
    )

    assert first_fire_at(daily, utc(2026, 12, 31)) == utc(2027, 1, 1, 12)
    assert first_fire_or_refuse(daily, utc(2026, 12, 31)) == utc(2027, 1, 1, 12)


def test_a_cron_whose_end_at_has_passed_has_no_first_fire() -> None:
    ended = hourly(end_at=utc(2027, 1, 4, 12))

    assert first_fire_at(ended, utc(2027, 1, 4, 12, 0, 1)) is None


def test_a_cron_created_exactly_at_its_end_at_tick_still_fires_it() -> None:
    ending = hourly(end_at=utc(2027, 1, 4, 12))

    assert first_fire_at(ending, utc(2027, 1, 4, 12)) == utc(2027, 1, 4, 12)


def test_an_interval_whose_end_at_has_passed_has_no_first_fire() -> None:
    ended = interval(60, T0, end_at=T0 + timedelta(minutes=5))

    assert first_fire_at(ended, T0 + timedelta(hours=1)) is None


def test_an_interval_with_a_future_start_at_first_fires_at_start_at_within_bounds() -> None:
    bounded = interval(60, T0, end_at=T0 + timedelta(minutes=5))

    assert first_fire_at(bounded, T0 - timedelta(days=1)) == T0


def test_an_unstarted_interval_whose_end_at_is_before_its_creation_has_no_first_fire() -> None:
    # start_at defaults to the creation instant, which is after end_at
    ends_early = trigger(type="interval", every_seconds=60, end_at=T0)
    created = T0 + timedelta(hours=1)

    assert first_fire_at(resolve(ends_early, created), created) is None
    assert fire_times(ends_early, T0, 5, created) == []
    with pytest.raises(InvalidInputError) as refused:
        first_fire_or_refuse(resolve(ends_early, created), created)
    assert refused.value.pointer == "#/trigger/end_at"


def test_refusing_a_trigger_with_nothing_to_fire_points_at_its_end_at() -> None:
    ended = hourly(end_at=utc(2027, 1, 4, 12))

    with pytest.raises(InvalidInputError) as refused:
        first_fire_or_refuse(ended, utc(2027, 1, 5))

    assert refused.value.pointer == "#/trigger/end_at"


def test_refusing_an_item_of_a_batch_keeps_the_item_pointer() -> None:
    ended = interval(60, T0, end_at=T0 + timedelta(minutes=5))

    with pytest.raises(InvalidInputError) as refused:
        first_fire_or_refuse(ended, T0 + timedelta(hours=1), "#/items/3")

    assert refused.value.pointer == "#/items/3/trigger/end_at"


def test_a_trigger_with_something_to_fire_is_not_refused() -> None:
    bounded = interval(60, T0, end_at=T0 + timedelta(minutes=5))

    assert first_fire_or_refuse(bounded, T0 + timedelta(seconds=90), "#/items/3") == T0 + (
        timedelta(seconds=120)
    )


# fire_times


def test_cron_fire_times_stop_at_end_at() -> None:
    bounded = hourly(end_at=utc(2027, 1, 4, 14))

    assert fire_times(bounded, utc(2027, 1, 4, 11, 30), 10, utc(2027, 1, 4, 11, 30)) == [
        utc(2027, 1, 4, 12),
        utc(2027, 1, 4, 13),
        utc(2027, 1, 4, 14),
    ]


def test_cron_fire_times_start_at_start_at() -> None:
    bounded = hourly(start_at=utc(2027, 1, 4, 15))

    assert fire_times(bounded, utc(2027, 1, 4, 11, 30), 2, utc(2027, 1, 4, 11, 30)) == [
        utc(2027, 1, 4, 15),
        utc(2027, 1, 4, 16),
    ]


def test_interval_fire_times_stop_at_end_at() -> None:
    bounded = interval(60, T0, end_at=T0 + timedelta(seconds=180))

    assert fire_times(bounded, T0 - timedelta(seconds=1), 10, T0) == [
        T0,
        T0 + timedelta(seconds=60),
        T0 + timedelta(seconds=120),
        T0 + timedelta(seconds=180),
    ]


def test_fire_times_of_an_unstarted_interval_start_at_creation_and_stop_at_end_at() -> None:
    unstarted = trigger(type="interval", every_seconds=60, end_at=T0 + timedelta(seconds=150))

    assert fire_times(unstarted, T0 - timedelta(seconds=1), 10, T0) == [
        T0,
        T0 + timedelta(seconds=60),
        T0 + timedelta(seconds=120),
    ]


def test_fire_times_past_end_at_are_empty() -> None:
    bounded = hourly(end_at=utc(2027, 1, 4, 14))

    assert fire_times(bounded, utc(2027, 1, 4, 14), 10, utc(2027, 1, 4, 14)) == []
