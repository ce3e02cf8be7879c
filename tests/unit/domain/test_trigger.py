"""Triggers: first fire, next fire, the misfire rule, and what validation refuses (DESIGN 4)."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from croniter import croniter
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from app.domain import misfire
from app.domain.errors import InvalidInputError
from app.domain.trigger import (
    CronTrigger,
    ImmediateTrigger,
    IntervalTrigger,
    OnceTrigger,
    Trigger,
    check_cadence,
    first_fire_at,
    is_recurring,
    next_fire_after,
    resolve,
)

TRIGGER: TypeAdapter[Trigger] = TypeAdapter(Trigger)


def next_after_firing(fired: Trigger, fire_at: datetime, now: datetime) -> datetime | None:
    """The tick planned after a firing at `fire_at` claimed at `now` (default rules)."""
    return misfire.plan(fired, misfire.Rules(), fire_at, now).upcoming


def trigger(**spec: Any) -> Trigger:
    return TRIGGER.validate_python(spec)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def cron(expression: str, zone: str = "UTC") -> Trigger:
    return trigger(type="cron", expression=expression, timezone=zone)


def interval(every: float, start_at: datetime) -> Trigger:
    return trigger(type="interval", every_seconds=every, start_at=start_at)


NOW = utc(2024, 3, 5, 10, 30)  # a Tuesday
PLUS_TWO = timezone(timedelta(hours=2))

# hypothesis takes naive bounds and attaches the zone itself
EARLIEST, LATEST = datetime(2000, 1, 1), datetime(2100, 1, 1)  # noqa: DTZ001
instants = st.datetimes(min_value=EARLIEST, max_value=LATEST, timezones=st.just(UTC))


# once and immediate


def test_once_at_fires_at_that_instant_in_utc() -> None:
    once = resolve(trigger(type="once", at="2024-03-05T12:00:00+02:00"), NOW)

    fire = first_fire_at(once, NOW)

    assert fire == utc(2024, 3, 5, 10, 0)
    assert fire.utcoffset() == timedelta(0)


def test_once_at_in_the_past_is_due_at_once_rather_than_skipped() -> None:
    past = utc(2024, 3, 1, 8, 0)
    once = resolve(trigger(type="once", at=past), NOW)

    assert first_fire_at(once, NOW) == past


def test_once_delay_seconds_resolves_to_an_instant_after_now() -> None:
    once = resolve(trigger(type="once", delay_seconds=90.5), NOW)

    assert isinstance(once, OnceTrigger)
    assert once.delay_seconds is None
    assert once.at == NOW + timedelta(seconds=90.5)
    assert first_fire_at(once, NOW + timedelta(seconds=3)) == NOW + timedelta(seconds=90.5)


def test_resolving_a_resolved_once_trigger_changes_nothing() -> None:
    once = resolve(trigger(type="once", delay_seconds=10), NOW)

    assert resolve(once, NOW + timedelta(hours=1)) == once


def test_immediate_fires_now() -> None:
    immediate = resolve(trigger(type="immediate"), NOW)

    assert isinstance(immediate, ImmediateTrigger)
    assert first_fire_at(immediate, NOW) == NOW


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "once", "at": "2024-03-05T12:00:00Z"},
        {"type": "once", "delay_seconds": 5},
        {"type": "immediate"},
    ],
)
def test_one_shot_triggers_have_no_next_fire(spec: dict[str, Any]) -> None:
    one_shot = resolve(trigger(**spec), NOW)

    assert not is_recurring(one_shot)
    assert next_fire_after(one_shot, NOW) is None
    assert next_after_firing(one_shot, NOW, NOW + timedelta(hours=1)) is None


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "cron", "expression": "* * * * *"},
        {"type": "interval", "every_seconds": 60},
    ],
)
def test_cron_and_interval_are_recurring(spec: dict[str, Any]) -> None:
    assert is_recurring(trigger(**spec))


# cron


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        # 5 fields
        ("*/5 * * * *", utc(2024, 3, 5, 10, 2), utc(2024, 3, 5, 10, 5)),
        ("0 9 * * 1-5", utc(2024, 3, 9, 12, 0), utc(2024, 3, 11, 9, 0)),
        ("30 4 1 * *", utc(2024, 3, 5, 10, 30), utc(2024, 4, 1, 4, 30)),
        # 6 fields, the first one is seconds
        ("15 * * * * *", utc(2024, 3, 5, 10, 0), utc(2024, 3, 5, 10, 0, 15)),
        ("15 * * * * *", utc(2024, 3, 5, 10, 0, 15), utc(2024, 3, 5, 10, 1, 15)),
        ("0 30 9 * * *", utc(2024, 3, 5, 10, 30), utc(2024, 3, 6, 9, 30)),
        ("*/20 * * * * *", utc(2024, 3, 5, 10, 0, 41), utc(2024, 3, 5, 10, 1, 0)),
        # macros
        ("@yearly", NOW, utc(2025, 1, 1)),
        ("@annually", NOW, utc(2025, 1, 1)),
        ("@monthly", NOW, utc(2024, 4, 1)),
        ("@weekly", NOW, utc(2024, 3, 10)),  # the next Sunday
        ("@daily", NOW, utc(2024, 3, 6)),
        ("@midnight", NOW, utc(2024, 3, 6)),
        ("@hourly", NOW, utc(2024, 3, 5, 11)),
        ("@Daily", NOW, utc(2024, 3, 6)),
    ],
)
def test_cron_next_fire_is_the_next_matching_instant(
    expression: str, after: datetime, expected: datetime
) -> None:
    assert next_fire_after(cron(expression), after) == expected


def test_cron_next_fire_is_strictly_after_an_instant_that_is_itself_a_tick() -> None:
    assert next_fire_after(cron("0 12 * * *"), utc(2024, 3, 5, 12)) == utc(2024, 3, 6, 12)


def test_cron_with_both_day_fields_fires_on_either_day() -> None:
    """Vixie cron: day-of-month OR day-of-week when both are restricted."""
    thirteenth_or_friday = cron("0 0 13 * 5")

    fires = []
    at = utc(2024, 9, 1)
    for _ in range(8):
        fire = next_fire_after(thirteenth_or_friday, at)
        assert fire is not None
        fires.append(fire)
        at = fire

    assert [f.date().isoformat() for f in fires] == [
        "2024-09-06",  # Fri
        "2024-09-13",  # Fri the 13th, once
        "2024-09-20",  # Fri
        "2024-09-27",  # Fri
        "2024-10-04",  # Fri
        "2024-10-11",  # Fri
        "2024-10-13",  # Sun the 13th
        "2024-10-18",  # Fri
    ]


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("0 0 * * 5", utc(2024, 9, 6), utc(2024, 9, 13)),  # only Fridays
        ("0 0 13 * *", utc(2024, 9, 13), utc(2024, 10, 13)),  # only the 13th
    ],
)
def test_cron_with_one_day_field_unrestricted_uses_only_the_other(
    expression: str, after: datetime, expected: datetime
) -> None:
    assert next_fire_after(cron(expression), after) == expected


@pytest.mark.parametrize(
    ("expression", "zone", "after", "expected"),
    [
        ("30 9 * * *", "America/New_York", utc(2024, 1, 10), utc(2024, 1, 10, 14, 30)),
        ("30 9 * * *", "America/New_York", utc(2024, 7, 10), utc(2024, 7, 10, 13, 30)),
        ("0 0 * * *", "Asia/Kolkata", utc(2024, 1, 1, 10), utc(2024, 1, 1, 18, 30)),
        ("0 8 * * 1", "Europe/Paris", utc(2024, 3, 5), utc(2024, 3, 11, 7)),
    ],
)
def test_cron_in_a_time_zone_fires_at_the_local_time_as_a_utc_instant(
    expression: str, zone: str, after: datetime, expected: datetime
) -> None:
    fire = next_fire_after(cron(expression, zone), after)

    assert fire == expected
    assert fire is not None
    assert fire.tzinfo is UTC


def test_cron_first_fire_is_now_when_now_is_a_tick() -> None:
    assert first_fire_at(cron("30 10 * * *"), NOW) == NOW


def test_cron_first_fire_is_the_next_tick_when_now_is_between_ticks() -> None:
    assert first_fire_at(cron("*/15 * * * *"), NOW + timedelta(seconds=1)) == utc(
        2024, 3, 5, 10, 45
    )


def test_cron_resolve_changes_nothing() -> None:
    daily = cron("@daily", "Europe/Paris")

    assert resolve(daily, NOW) == daily


@given(instants)
def test_every_minute_cron_fires_on_the_next_whole_minute(after: datetime) -> None:
    fire = next_fire_after(cron("* * * * *"), after)

    assert fire is not None
    assert fire > after
    assert fire.second == 0
    assert fire.microsecond == 0
    assert fire - after <= timedelta(minutes=1)


@given(instants)
def test_every_second_cron_fires_on_the_next_whole_second(after: datetime) -> None:
    fire = next_fire_after(cron("* * * * * *"), after)

    assert fire is not None
    assert fire > after
    assert fire.microsecond == 0
    assert fire - after <= timedelta(seconds=1)


# interval


def test_interval_without_start_at_starts_when_resolved() -> None:
    every = resolve(trigger(type="interval", every_seconds=60), NOW)

    assert isinstance(every, IntervalTrigger)
    assert every.start_at == NOW
    assert first_fire_at(every, NOW) == NOW
    assert next_fire_after(every, NOW) == NOW + timedelta(seconds=60)


def test_interval_with_a_future_start_at_first_fires_at_start_at() -> None:
    start = utc(2024, 3, 6, 8, 0)
    every = interval(3600, start)

    assert first_fire_at(every, NOW) == start
    assert next_fire_after(every, NOW) == start
    assert next_fire_after(every, start) == start + timedelta(hours=1)


def test_interval_with_a_past_start_at_fires_on_its_grid_not_from_now() -> None:
    start = utc(2024, 3, 5, 10, 0, 7)
    every = interval(60, start)

    # NOW is 10:30:00; ticks are at :07 past each minute.
    assert first_fire_at(every, NOW) == utc(2024, 3, 5, 10, 30, 7)
    assert next_fire_after(every, NOW) == utc(2024, 3, 5, 10, 30, 7)


def test_interval_first_fire_is_now_when_now_is_a_tick() -> None:
    every = interval(300, utc(2024, 3, 5, 10, 0))

    assert first_fire_at(every, NOW) == NOW


def test_interval_start_at_with_an_offset_gives_utc_ticks() -> None:
    every = interval(60, datetime(2024, 3, 5, 12, 0, tzinfo=PLUS_TWO))

    fire = next_fire_after(every, utc(2024, 3, 5, 10, 0, 30))

    assert fire == utc(2024, 3, 5, 10, 1)
    assert fire is not None
    assert fire.utcoffset() == timedelta(0)


@given(
    every=st.one_of(
        st.integers(min_value=1, max_value=10**7).map(float),
        st.floats(min_value=1, max_value=10**6, allow_nan=False, allow_infinity=False),
    ),
    start=instants,
    after=instants,
)
def test_interval_next_fire_is_the_first_tick_strictly_after(
    every: float, start: datetime, after: datetime
) -> None:
    step = timedelta(seconds=every)
    ticks = interval(every, start)

    fire = next_fire_after(ticks, after)

    assert fire is not None
    assert fire > after
    assert fire >= start
    assert (fire - start) % step == timedelta(0)
    assert fire == start or fire - step <= after


@given(
    every=st.integers(min_value=1, max_value=86400),
    start=instants,
    after=instants,
)
def test_interval_next_fire_strictly_increases_along_the_ticks(
    every: int, start: datetime, after: datetime
) -> None:
    ticks = interval(every, start)

    first = next_fire_after(ticks, after)
    assert first is not None
    second = next_fire_after(ticks, first)

    assert second is not None
    assert second - first == timedelta(seconds=every)


# misfire rule fire_once


def test_a_firing_on_time_is_followed_by_the_next_tick() -> None:
    every = interval(60, utc(2024, 3, 5, 10, 0))
    fired = utc(2024, 3, 5, 10, 1)

    assert next_after_firing(every, fired, fired + timedelta(milliseconds=200)) == utc(
        2024, 3, 5, 10, 2
    )


def test_a_late_interval_firing_realigns_onto_the_first_tick_after_now() -> None:
    every = interval(60, utc(2024, 3, 5, 10, 0))
    fired = utc(2024, 3, 5, 10, 1)
    now = utc(2024, 3, 5, 10, 5, 30)  # ticks 10:02 to 10:05 were missed

    assert next_after_firing(every, fired, now) == utc(2024, 3, 5, 10, 6)


def test_a_late_cron_firing_realigns_onto_the_first_tick_after_now() -> None:
    five_minutely = cron("*/5 * * * *")
    fired = utc(2024, 3, 5, 10, 5)
    now = utc(2024, 3, 5, 10, 31)

    assert next_after_firing(five_minutely, fired, now) == utc(2024, 3, 5, 10, 35)


def test_a_late_firing_observed_exactly_on_a_tick_moves_past_it() -> None:
    every = interval(60, utc(2024, 3, 5, 10, 0))

    assert next_after_firing(every, utc(2024, 3, 5, 10, 1), utc(2024, 3, 5, 10, 5)) == utc(
        2024, 3, 5, 10, 6
    )


@given(
    every=st.integers(min_value=1, max_value=3600),
    ticks_late=st.integers(min_value=0, max_value=10_000),
    extra=st.floats(min_value=0, max_value=1, exclude_max=True),
)
def test_a_late_firing_never_schedules_a_past_tick(
    every: int, ticks_late: int, extra: float
) -> None:
    start = utc(2024, 1, 1)
    step = timedelta(seconds=every)
    ticks = interval(every, start)
    fired = start + 3 * step
    now = fired + ticks_late * step + extra * step

    following = next_after_firing(ticks, fired, now)

    assert following is not None
    assert following > now
    assert following - step <= now
    assert (following - start) % step == timedelta(0)


# validation


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ({"type": "cron", "expression": "61 * * * *"}, "minute field: 61 is out of range 0-59"),
        ({"type": "cron", "expression": "0 24 * * *"}, "hour field: 24 is out of range 0-23"),
        ({"type": "cron", "expression": "0 0 0 * *"}, "day-of-month field: 0 is out of range 1-31"),
        ({"type": "cron", "expression": "0 0 * 13 *"}, "month field: 13 is out of range 1-12"),
        ({"type": "cron", "expression": "0 0 * * 1-8"}, "day-of-week field: 8 is out of range 0-7"),
        ({"type": "cron", "expression": "60 0 0 * * *"}, "second field: 60 is out of range 0-59"),
        ({"type": "cron", "expression": "0 61 0 * * *"}, "minute field: 61 is out of range 0-59"),
        ({"type": "cron", "expression": "a b c d e"}, "minute field: 'a' is not a valid value"),
        ({"type": "cron", "expression": "0 0 * jan-foo *"}, "month field: 'jan-foo' is not a"),
        ({"type": "cron", "expression": "* * *"}, "5 fields, or 6"),
        ({"type": "cron", "expression": "0 0 * * * * *"}, "5 fields, or 6"),
        ({"type": "cron", "expression": ""}, "at least 1 character"),
        ({"type": "cron", "expression": "0 0 30 2 *"}, "can never fire"),
        ({"type": "cron", "expression": "@reboot"}, "unknown macro"),
        ({"type": "cron", "expression": "@every 5m"}, "unknown macro"),
        (
            {"type": "cron", "expression": "* * * * *", "timezone": "Mars/Olympus_Mons"},
            "unknown IANA time zone",
        ),
        ({"type": "once"}, "exactly one of 'at' or 'delay_seconds'"),
        (
            {"type": "once", "at": "2024-03-05T12:00:00Z", "delay_seconds": 5},
            "exactly one of 'at' or 'delay_seconds'",
        ),
        ({"type": "once", "at": "2024-03-05T12:00:00"}, "timezone"),
        ({"type": "once", "delay_seconds": -1}, "greater than or equal to 0"),
        ({"type": "interval", "every_seconds": 0.5}, "greater than or equal to 1"),
        ({"type": "interval", "every_seconds": 60, "jitter": 1}, "Extra inputs"),
        ({"type": "weekly"}, "does not match any of the expected tags"),
    ],
)
def test_invalid_triggers_are_refused(spec: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValidationError, match=complaint):
        trigger(**spec)


def test_a_naive_once_at_is_refused_even_as_a_datetime() -> None:
    with pytest.raises(ValidationError):
        OnceTrigger(type="once", at=datetime(2024, 3, 5, 12, 0))  # noqa: DTZ001


def test_cron_expression_whitespace_is_normalized() -> None:
    spaced = CronTrigger(type="cron", expression="  */5   *  * * *  ")

    assert spaced.expression == "*/5 * * * *"


# how sparse a cron expression may be

SPARSE = [
    pytest.param("0 0 * 2 1#5", id="the fifth Monday of February: up to 40 years apart"),
    pytest.param("30 12 * 2 3#5", id="with other hours and minutes"),
    pytest.param("0 0 0 * 2 1#5", id="with seconds"),
    pytest.param("0 0 * FEB MON#5", id="by name"),
]


@pytest.mark.parametrize("expression", SPARSE)
def test_a_cron_expression_with_ten_years_in_a_row_without_a_tick_is_refused(
    expression: str,
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        check_cadence(cron(expression, "Asia/Kathmandu"), "#/items/3")

    assert refused.value.pointer == "#/items/3/trigger/expression"
    assert "at least once in any 10 consecutive years" in refused.value.detail


def test_the_refusal_names_the_years_without_a_tick() -> None:
    with pytest.raises(InvalidInputError, match="no tick from 2017 through 2043"):
        check_cadence(cron("0 0 * 2 1#5"))


@pytest.mark.parametrize(
    "expression",
    [
        "0 0 29 2 *",  # every 4 years, 8 across 2100
        "0 0 * 2 1#4",
        "0 0 * 1 1#5",  # a fifth Monday in January: at least every 6 years
        "0 0 * 2,3 1#5",
        "0 0 * * 1#5",
        "0 0 * * 1#1",
        "0 0 1W * *",
        "0 0 31W 4 *",
        "0 0 * * L5",
        "*/5 * * * *",
        "@yearly",
    ],
)
def test_a_cron_expression_that_fires_at_least_every_ten_years_is_accepted(
    expression: str,
) -> None:
    check_cadence(cron(expression))


FIFTH_WEEKDAYS = [
    f"0 0 * {months} {weekdays}"
    for months in ("2", "4", "2,4", "1", "9,11")
    for weekdays in ("1#5", "0#5", "1#5,4#5", "5#5,6#5,0#5")
]


@pytest.mark.parametrize("expression", FIFTH_WEEKDAYS)
def test_the_cadence_check_agrees_with_the_ticks_croniter_finds(expression: str) -> None:
    walls = croniter(expression, datetime(1999, 12, 31, 23, 59, tzinfo=UTC), day_or=True)
    years: list[int] = []
    while (year := walls.get_next(datetime).year) < 2400:
        if not years or years[-1] != year:
            years.append(year)
    longest = max(later - earlier - 1 for earlier, later in itertools.pairwise(years))

    try:
        check_cadence(cron(expression))
    except InvalidInputError as refused:
        assert longest >= 10
        first, last = map(int, re.findall(r"from (\d+) through (\d+)", refused.detail)[0])
        assert last - first + 1 >= 10
        assert not set(range(first, last + 1)) & set(years)
        assert {first - 1, last + 1} <= set(years)
    else:
        assert longest < 10


@pytest.mark.parametrize(
    "expression", ["0 0 29 2 1#5", "0 0 1 1 1#1", "0 0 15W * 1", "0 0 1 * L5", "0 0 L * 5#2"]
)
def test_a_day_of_the_month_with_a_weekday_by_position_is_refused(expression: str) -> None:
    # croniter fires these on neither the union nor the intersection of their day fields.
    with pytest.raises(ValidationError, match=r"give \* \(or \?\) for one of the two"):
        cron(expression)


def test_checking_how_sparse_an_expression_is_asks_croniter_a_bounded_number_of_ticks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[object] = []
    original = croniter.get_next

    def counting(self: croniter, *args: Any, **kwargs: Any) -> Any:
        asked.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(croniter, "get_next", counting)

    for _ in range(1000):  # a batch of the same expression
        with pytest.raises(InvalidInputError):
            check_cadence(cron("0 1 * 2 6#5"))

    # One question per kind of calendar year (its first weekday, leap or not), once.
    assert 0 < len(asked) <= 14


@pytest.mark.parametrize(
    ("expression", "year"), [("0 0 29 2 1#5", 2044), ("0 0 * 2 1#5", 2044), ("0 0 1 1 1#1", 2027)]
)
def test_a_cron_trigger_stored_before_these_rules_still_reads_and_plans_its_next_tick(
    expression: str, year: int
) -> None:
    stored = TRIGGER.validate_python(
        {"type": "cron", "expression": expression}, context={"stored": True}
    )

    upcoming = next_fire_after(stored, utc(2026, 6, 1))

    assert upcoming is not None
    assert upcoming.year == year
