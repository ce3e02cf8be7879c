"""Triggers: when a schedule fires. The only module that knows croniter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal
from zoneinfo import available_timezones

from croniter import CroniterBadCronError, CroniterBadDateError, croniter
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from app.domain import wallclock
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


class _TriggerModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OnceTrigger(_TriggerModel):
    """Fires once at `at`; `delay_seconds` is resolved to `at` when the schedule is created."""

    type: Literal["once"]
    at: AwareDatetime | None = None
    delay_seconds: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _exactly_one(self) -> OnceTrigger:
        if (self.at is None) == (self.delay_seconds is None):
            raise ValueError("give exactly one of 'at' or 'delay_seconds'")
        return self


class ImmediateTrigger(_TriggerModel):
    """Fires once, as soon as the schedule is created."""

    type: Literal["immediate"]


class CronTrigger(_TriggerModel):
    """Fires on a cron expression evaluated in `timezone`."""

    type: Literal["cron"]
    expression: str = Field(min_length=1, max_length=200)
    timezone: str = "UTC"
    dst_gap: DstGap = Field(
        default="shift",
        description="A wall time skipped by a DST gap: fire once at the gap's end, or skip it",
    )
    dst_repeat: DstRepeat = Field(
        default="first",
        description="A wall time that occurs twice: fire at its first occurrence, or at both",
    )

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        if value != "UTC" and value not in _zone_names():
            raise ValueError(f"unknown IANA time zone {value!r}")
        return value

    @field_validator("expression")
    @classmethod
    def _valid_expression(cls, value: str) -> str:
        text = " ".join(value.split())
        expanded = MACROS.get(text.lower(), text)
        if text.startswith("@") and text.lower() not in MACROS:
            raise ValueError(f"unknown macro {text!r}; known: {', '.join(sorted(MACROS))}")
        fields = len(expanded.split())
        if fields not in (5, 6):
            raise ValueError("a cron expression has 5 fields, or 6 with leading seconds")
        if not croniter.is_valid(expanded, second_at_beginning=True):
            raise ValueError(f"invalid cron expression {text!r}")
        try:
            _cron_iter(expanded, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
        except (CroniterBadDateError, CroniterBadCronError):
            raise ValueError(f"cron expression {text!r} can never fire") from None
        return text

    @property
    def normalized(self) -> str:
        return MACROS.get(self.expression.lower(), self.expression)


class IntervalTrigger(_TriggerModel):
    """Fires at start_at + k * every_seconds for k = 0, 1, 2, ..."""

    type: Literal["interval"]
    every_seconds: float = Field(ge=1)
    start_at: AwareDatetime | None = None


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


def is_recurring(trigger: Trigger) -> bool:
    return trigger.type in RECURRING_TYPES


def resolve(trigger: Trigger, now: datetime) -> Trigger:
    """Pin the relative parts of a trigger to `now`, so that it means the same thing forever."""
    if isinstance(trigger, OnceTrigger) and trigger.delay_seconds is not None:
        return OnceTrigger(type="once", at=now + timedelta(seconds=trigger.delay_seconds))
    if isinstance(trigger, IntervalTrigger) and trigger.start_at is None:
        return IntervalTrigger(type="interval", every_seconds=trigger.every_seconds, start_at=now)
    return trigger


def first_fire_at(trigger: Trigger, now: datetime) -> datetime:
    """The first fire instant of a resolved trigger that is created (or resumed) at `now`.

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
            return trigger.start_at.astimezone(UTC)
    fire = next_fire_after(trigger, now - timedelta(microseconds=1))
    assert fire is not None
    return fire


def next_fire_after(trigger: Trigger, after: datetime) -> datetime | None:
    """The first fire instant strictly after `after`, or None when the trigger has no more."""
    if isinstance(trigger, CronTrigger):
        try:
            return wallclock.next_after(
                trigger.normalized,
                trigger.timezone,
                after,
                gap=trigger.dst_gap,
                repeat=trigger.dst_repeat,
            )
        except CroniterBadDateError:
            return None
    if isinstance(trigger, IntervalTrigger):
        assert trigger.start_at is not None, "resolve() the trigger first"
        start = trigger.start_at.astimezone(UTC)
        if after < start:
            return start
        step = timedelta(seconds=trigger.every_seconds)
        ticks = (after - start) // step + 1
        return start + ticks * step
    return None


def next_after_firing(trigger: Trigger, fire_at: datetime, now: datetime) -> datetime | None:
    """The tick that follows a firing at `fire_at` observed at `now` (misfire rule fire_once).

    When the firing was late by several ticks, those ticks collapse into the one that just
    fired and the schedule realigns onto the first tick strictly after `now`: never a burst.
    """
    return next_fire_after(trigger, max(fire_at, now))


def fire_times(trigger: Trigger, after: datetime, count: int, now: datetime) -> list[datetime]:
    """The next `count` fire instants strictly after `after`, for a trigger created at `now`."""
    resolved = resolve(trigger, now)
    if not is_recurring(resolved):
        fire = first_fire_at(resolved, now)
        return [fire] if fire > after else []
    times: list[datetime] = []
    moment = after
    while len(times) < count:
        upcoming = next_fire_after(resolved, moment)
        if upcoming is None:
            break
        times.append(upcoming)
        moment = upcoming
    return times
