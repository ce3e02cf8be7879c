"""Triggers: when a schedule fires. The only module that knows croniter."""

from __future__ import annotations

import re
from calendar import isleap
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from itertools import islice
from typing import Annotated, Literal
from zoneinfo import available_timezones

from croniter import DAY_FIELD, MONTH_FIELD, CroniterBadDateError, CroniterError, croniter
from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.config import JsonDict

from app.domain import wallclock
from app.domain.errors import InvalidInputError
from app.domain.limits import (
    HORIZON,
    MAX_PERIOD_SECONDS,
    InputModel,
    Instant,
    at_most,
    on_input,
)
from app.domain.wallclock import DstGap, DstRepeat

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class _TriggerModel(InputModel):
    model_config = ConfigDict(frozen=True)


def _after_start(value: datetime | None, info: ValidationInfo) -> datetime | None:
    start = info.data.get("start_at")
    if value is not None and start is not None and value <= start:
        raise ValueError("end_at must be after start_at")
    return value


_START_AT = "No tick before this instant (inclusive)"
_END_AT = "No tick after this instant (inclusive); the schedule then completes"


_TYPE = "The trigger's kind, which names the fields it takes"
# Exactly one of `at` and `delay_seconds` (the other absent or null). Said with if/then/else
# rather than a oneOf of two objects, which generators of clients take for two models.
_ONCE_EXACTLY_ONE: JsonDict = {
    "if": {"required": ["at"], "properties": {"at": {"type": "string"}}},
    "then": {"properties": {"delay_seconds": {"type": "null"}}},
    "else": {"required": ["delay_seconds"], "properties": {"delay_seconds": {"type": "number"}}},
}


class OnceTrigger(_TriggerModel):
    """Fires once at `at`; `delay_seconds` is resolved to `at` when the schedule is created.
    Give exactly one of the two."""

    model_config = ConfigDict(json_schema_extra=_ONCE_EXACTLY_ONE)

    type: Literal["once"] = Field(description=_TYPE)
    at: Instant | None = Field(
        default=None,
        description="The instant to fire at (RFC 3339 with an offset); one in the past fires "
        "at once. Exactly one of at and delay_seconds",
    )
    delay_seconds: float | None = Field(
        default=None,
        ge=0,
        le=MAX_PERIOD_SECONDS,
        description="Fire this many seconds after the schedule is created (stored as at). "
        "Exactly one of at and delay_seconds",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> OnceTrigger:
        if (self.at is None) == (self.delay_seconds is None):
            raise ValueError("give exactly one of 'at' or 'delay_seconds'")
        return self


class ImmediateTrigger(_TriggerModel):
    """Fires once, as soon as the schedule is created."""

    type: Literal["immediate"] = Field(description=_TYPE)


class CronTrigger(_TriggerModel):
    """Fires on a cron expression evaluated in `timezone`."""

    type: Literal["cron"] = Field(description=_TYPE)
    expression: str = Field(
        min_length=1,
        max_length=200,
        description="Five fields (minute hour day-of-month month day-of-week), or six with "
        "leading seconds, or a macro (@hourly, @daily, @weekly, @monthly, @yearly); # L W "
        "as croniter reads them",
        examples=["0 9 * * 1-5"],
    )
    timezone: str = Field(
        default="UTC",
        json_schema_extra={"minLength": 1, "maxLength": 64},
        description="The IANA time zone the expression's wall times are in",
        examples=["Europe/Paris"],
    )
    dst_gap: DstGap = Field(
        default="shift",
        description="A wall time skipped by a DST gap: fire once at the gap's end, or skip it",
    )
    dst_repeat: DstRepeat = Field(
        default="first",
        description="A wall time that occurs twice: fire at its first occurrence, or at both",
    )
    start_at: Instant | None = Field(default=None, description=_START_AT)
    end_at: Instant | None = Field(default=None, description=_END_AT)

    _end_after_start = field_validator("end_at")(_after_start)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        if value != "UTC" and value not in _zone_names():
            raise ValueError(f"unknown IANA time zone {value!r}")
        return value

    @field_validator("expression")
    @classmethod
    def _valid_expression(cls, value: str, info: ValidationInfo) -> str:
        text = " ".join(value.split())
        if (problem := _expression_problem(text, on_input(info))) is not None:
            raise ValueError(problem)
        return text

    @property
    def normalized(self) -> str:
        return MACROS.get(self.expression.lower(), self.expression)


class IntervalTrigger(_TriggerModel):
    """Fires at start_at + k * every_seconds for k = 0, 1, 2, ..."""

    type: Literal["interval"] = Field(description=_TYPE)
    every_seconds: Annotated[float, at_most(MAX_PERIOD_SECONDS)] = Field(
        ge=1,
        json_schema_extra={"maximum": MAX_PERIOD_SECONDS},
        description="Seconds between ticks (at least 1, at most ten years)",
    )
    start_at: Instant | None = Field(
        default=None, description="The first tick (default: when the schedule is created)"
    )
    end_at: Instant | None = Field(default=None, description=_END_AT)

    _end_after_start = field_validator("end_at")(_after_start)


Trigger = Annotated[
    OnceTrigger | ImmediateTrigger | CronTrigger | IntervalTrigger,
    Field(discriminator="type"),
]

RECURRING_TYPES = frozenset({"cron", "interval"})


def _zone_names() -> frozenset[str]:
    global _ZONES
    if _ZONES is None:
        _ZONES = frozenset(available_timezones())
    return _ZONES


_ZONES: frozenset[str] | None = None


def _cron_iter(expression: str, start: datetime) -> croniter:
    return croniter(expression, start, second_at_beginning=True, day_or=True)


# The most days each month has (February's in a leap year).
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_DOW_FIELD = 4  # croniter's index of the day-of-week field (its DAY_FIELD + 2)


# A batch names one expression many times, and every schedule read back is validated again:
# each text is judged once.
@lru_cache(maxsize=4096)
def _expression_problem(text: str, on_input: bool) -> str | None:
    """Why `text` (whitespace normalized) is no cron expression Chronoq takes, or None.

    Only what is cheap to decide: the syntax (croniter's), whether the expression mixes the
    two kinds of day fields (on input), and whether it can fire at all, read from its
    fields. How sparse it is, is `check_cadence`'s to judge."""
    if text.startswith("@") and text.lower() not in MACROS:
        return f"unknown macro {text!r}; known: {', '.join(sorted(MACROS))}"
    expanded = MACROS.get(text.lower(), text)
    if len(expanded.split()) not in (5, 6):
        return "a cron expression has 5 fields, or 6 with leading seconds"
    try:
        parsed = _cron_iter(expanded, datetime(2000, 1, 1, tzinfo=UTC))
    except CroniterError:
        return _field_problem(expanded.split()) or f"invalid cron expression {text!r}"
    days, weekdays = parsed.expanded[DAY_FIELD], parsed.expanded[_DOW_FIELD]
    if _by_position(parsed):
        # croniter fires such an expression on neither the union nor the intersection of
        # its day fields, and which depends on how far it looks; Quartz, where # and W come
        # from, asks for ? in one of them.
        if on_input and days != ["*"] and weekdays != ["*"]:
            return (
                f"cron expression {text!r} gives both a day of the month and a day of the "
                "week, one of them with #, L or W: give * (or ?) for one of the two"
            )
        # `L` of a weekday, `W` and an nth weekday up to the fourth find a day in every
        # month, a fifth weekday in some: `check_cadence` judges how many.
        return None
    if days == ["*"] or weekdays != ["*"] or _exists(days, parsed.expanded[MONTH_FIELD]):
        # Days of the month and days of the week are alternatives, and a day of the week
        # comes in every month: such an expression fires every year, or on 29 February
        # (at least every 8 years).
        return None
    return f"cron expression {text!r} can never fire"


# Each field's name and the numbers it takes, in the five-field order (six fields put the
# seconds first); a day of the week is 0-7, Sunday both 0 and 7.
_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
)
_SECONDS_FIELD = ("second", 0, 59)
# The numbers of a field's values and ranges, not its steps (after /) or nth weekdays (#).
_FIELD_NUMBER = re.compile(r"(?<![/#\d])\d+")


def _field_problem(fields: list[str]) -> str | None:
    """Which field of an expression croniter refuses, and why, or None when each field is
    valid on its own: each one is tried alone, the others `*`."""
    layout = ((_SECONDS_FIELD,) if len(fields) == 6 else ()) + _FIELDS
    for index, (name, low, high) in enumerate(layout):
        alone = ["*"] * len(fields)
        alone[index] = fields[index]
        try:
            _cron_iter(" ".join(alone), datetime(2000, 1, 1, tzinfo=UTC))
        except CroniterError:
            for number in map(int, _FIELD_NUMBER.findall(fields[index])):
                if not low <= number <= high:
                    return f"{name} field: {number} is out of range {low}-{high}"
            return f"{name} field: {fields[index]!r} is not a valid value"
    return None


def _exists(days: Sequence[int | str], months: Sequence[int | str]) -> bool:
    """Whether one of `days` (of the month; `l` the last) is a day of one of `months`."""
    longest = max(
        (
            _MONTH_DAYS[month - 1]
            for month in (range(1, 13) if list(months) == ["*"] else months)
            if isinstance(month, int)
        ),
        default=0,
    )
    return any(day == "l" or (isinstance(day, int) and day <= longest) for day in days)


def _by_position(parsed: croniter) -> bool:
    """Whether the expression names days by their position in the month: an nth or last
    weekday (`1#2`, `L5`) or the weekday nearest a day (`15W`)."""
    return bool(parsed.nth_weekday_of_month or parsed.nearest_weekday)


# The longest run of calendar years a new cron expression may leave without a tick. Finding
# the next tick costs a walk of the calendar up to it, and a schedule asleep longer is
# surely a mistake: the bound keeps the one small and refuses the other. Only a fifth
# weekday of a month comes that rarely (the fifth Monday of February: once in 28 years).
MAX_CRON_GAP_YEARS = 10
# The Gregorian calendar repeats every 400 years (146097 days: whole weeks), and in that
# cycle a year's days fall as those of every year of its kind (the weekday of its 1 January,
# and whether it is a leap year), of which there are 14.
_CYCLE = range(2000, 2400)


def _year_kind(year: int) -> tuple[int, bool]:
    return date(year, 1, 1).weekday(), isleap(year)


def check_cadence(trigger: Trigger, pointer: str = "#") -> None:
    """Refuse a new cron trigger that leaves `MAX_CRON_GAP_YEARS` calendar years in a row
    without a tick, naming its expression. Checked where a schedule is made or its trigger
    changed, and by the preview; never on what is stored, which keeps its cadence."""
    if not isinstance(trigger, CronTrigger):
        return
    days = tuple(trigger.normalized.lower().split()[-3:])
    if (problem := _cadence_problem(days)) is not None:
        raise InvalidInputError(
            f"cron expression {trigger.expression!r} {problem}",
            pointer=f"{pointer}/trigger/expression",
        )


@lru_cache(maxsize=4096)
def _cadence_problem(days: tuple[str, ...]) -> str | None:
    """What is wrong with how often the day fields (day of month, month, day of week) of an
    expression come round, or None.

    Plain fields fire every year or every leap year; `L` of a weekday and `W` find a day in
    every month, and so does an nth weekday up to the fourth. A fifth weekday may not: which
    days of a year match depends on the year's kind alone, so one question to croniter per
    kind (each walking at most one year) tells the years with a tick in the whole cycle."""
    expression = "0 0 " + " ".join(days)
    parsed = _cron_iter(expression, datetime(2000, 1, 1, tzinfo=UTC))
    if not any(5 in nths for nths in parsed.nth_weekday_of_month.values()):
        return None
    walls = croniter(expression, day_or=True, max_years_between_matches=1)
    fires: dict[tuple[int, bool], bool] = {}
    for year in _CYCLE:
        kind = _year_kind(year)
        if kind not in fires:
            try:
                tick = walls.get_next(
                    datetime, start_time=datetime(year - 1, 12, 31, 23, 59, tzinfo=UTC)
                )
            except CroniterBadDateError:  # none within the year
                fires[kind] = False
            else:
                fires[kind] = tick.year == year
    # The runs of years without a tick, from the cycle's first year with one through the
    # same year of the next cycle (the calendar repeats: those are real years too).
    ticking = [fires[_year_kind(year)] for year in _CYCLE]
    if not any(ticking):
        return "can never fire"
    start = _CYCLE.start + ticking.index(True)
    after = start
    for year in range(start + 1, start + len(_CYCLE) + 1):
        if ticking[(year - _CYCLE.start) % len(_CYCLE)]:
            if year - after - 1 >= MAX_CRON_GAP_YEARS:
                return (
                    f"has no tick from {after + 1} through {year - 1}: a cron expression "
                    f"must fire at least once in any {MAX_CRON_GAP_YEARS} consecutive years"
                )
            after = year
    return None


def is_recurring(trigger: Trigger) -> bool:
    return trigger.type in RECURRING_TYPES


def resolve(trigger: Trigger, now: datetime) -> Trigger:
    """Pin the relative parts of a trigger to `now`, so that it means the same thing forever."""
    if isinstance(trigger, OnceTrigger) and trigger.delay_seconds is not None:
        return OnceTrigger(type="once", at=now + timedelta(seconds=trigger.delay_seconds))
    if isinstance(trigger, IntervalTrigger) and trigger.start_at is None:
        return trigger.model_copy(update={"start_at": now})
    return trigger


def first_fire_at(trigger: Trigger, now: datetime) -> datetime | None:
    """The first fire instant of a resolved trigger that is created (or resumed) at `now`,
    or None when its bounds leave it nothing to fire.

    A one-shot instant in the past is due at once: it is late, not skipped.
    """
    if isinstance(trigger, OnceTrigger):
        assert trigger.at is not None, "resolve() the trigger first"
        return trigger.at.astimezone(UTC)
    if isinstance(trigger, ImmediateTrigger):
        return now
    if isinstance(trigger, IntervalTrigger):
        assert trigger.start_at is not None, "resolve() the trigger first"
        if trigger.start_at >= now:
            return _bounded(trigger, trigger.start_at.astimezone(UTC))
    return next_fire_after(trigger, now - timedelta(microseconds=1))


def first_fire_or_refuse(trigger: Trigger, now: datetime, pointer: str = "#") -> datetime:
    """The first fire instant of a resolved trigger; a trigger whose bounds leave nothing
    to fire is refused, naming its end."""
    first = first_fire_at(trigger, now)
    if first is None:
        raise InvalidInputError(
            "end_at is before the trigger's first fire instant: it would never fire",
            pointer=f"{pointer}/trigger/end_at",
        )
    return first


def _bounded(trigger: CronTrigger | IntervalTrigger, fire: datetime | None) -> datetime | None:
    # Nothing fires at or after the horizon: the year left before datetime's end holds
    # what is added to a fire instant (jitter, a DST shift), and a trigger simply ends there.
    if fire is None or fire >= HORIZON:
        return None
    if trigger.end_at is not None and fire > trigger.end_at:
        return None
    return fire


def next_fire_after(trigger: Trigger, after: datetime) -> datetime | None:
    """The first fire instant strictly after `after`, or None when the trigger has no more."""
    if isinstance(trigger, CronTrigger):
        if trigger.start_at is not None:
            after = max(after, trigger.start_at - timedelta(microseconds=1))
        try:
            fire = wallclock.next_after(
                trigger.normalized,
                trigger.timezone,
                after,
                gap=trigger.dst_gap,
                repeat=trigger.dst_repeat,
            )
        except (CroniterBadDateError, OverflowError, ValueError):
            # No tick left, or the next one lies past year 9999 (croniter raises either).
            return None
        return _bounded(trigger, fire)
    if isinstance(trigger, IntervalTrigger):
        assert trigger.start_at is not None, "resolve() the trigger first"
        start = trigger.start_at.astimezone(UTC)
        if after < start:
            return _bounded(trigger, start)
        step = timedelta(seconds=trigger.every_seconds)
        ticks = (after - start) // step + 1
        try:
            return _bounded(trigger, start + ticks * step)
        except OverflowError:  # past datetime's end, so past the horizon too
            return None
    return None


def ticks_between(trigger: Trigger, after: datetime, until: datetime) -> Iterator[datetime]:
    """The fire instants t of a resolved recurring trigger with after < t <= until, in order."""
    moment = after
    while (upcoming := next_fire_after(trigger, moment)) is not None and upcoming <= until:
        yield upcoming
        moment = upcoming


def count_ticks(trigger: Trigger, after: datetime, until: datetime, cap: int) -> int:
    """How many ticks lie in (after, until], counted exactly up to `cap` (an interval's
    count is arithmetic and always exact)."""
    if isinstance(trigger, IntervalTrigger):
        first = next_fire_after(trigger, after)
        if first is None or first > until:
            return 0
        last = until if trigger.end_at is None else min(until, trigger.end_at)
        return int((last - first) // timedelta(seconds=trigger.every_seconds)) + 1
    return sum(1 for _ in islice(ticks_between(trigger, after, until), cap))


def fire_times(trigger: Trigger, after: datetime, count: int, now: datetime) -> list[datetime]:
    """The next `count` fire instants strictly after `after`, for a trigger created at `now`."""
    resolved = resolve(trigger, now)
    if not is_recurring(resolved):
        fire = first_fire_at(resolved, now)
        return [fire] if fire is not None and fire > after else []
    times: list[datetime] = []
    moment = after
    while len(times) < count:
        upcoming = next_fire_after(resolved, moment)
        if upcoming is None:
            break
        times.append(upcoming)
        moment = upcoming
    return times
