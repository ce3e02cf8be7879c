"""Cron in a time zone: wall-clock times matched by the expression, mapped to real instants.

A cron expression names wall-clock times. Around a DST change some of those do not exist
(the gap when clocks go forward) and some exist twice (the repeat when they go back):

- gap, `dst_gap="shift"` (default): a skipped wall time fires once, at the first instant after
  the gap; several skipped wall times that land on that instant fire once.
  `dst_gap="skip"`: a wall time that does not exist does not fire.
- repeat, `dst_repeat="first"` (default): a repeated wall time fires at its first occurrence,
  except that an expression whose hour field is `*` fires in each real hour (the repeated hour
  is another hour of the clock). `dst_repeat="both"`: every repeated wall time fires twice.

Away from a transition the walk below maps one wall time and stops; around one it maps
the few that could still fire first.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from croniter import croniter

DstGap = Literal["shift", "skip"]
DstRepeat = Literal["first", "both"]

# No zone moves its clock by more than two hours at once.
_REACH = timedelta(hours=3)


def _change_instant(zone: ZoneInfo, low: datetime, high: datetime) -> datetime:
    """The instant in (low, high] where the zone's offset changes (transitions are whole
    seconds, so bisection to the second is exact)."""
    offset = low.astimezone(zone).utcoffset()
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        middle = middle.replace(microsecond=0)
        if middle <= low:
            middle = low + timedelta(seconds=1)
        if middle.astimezone(zone).utcoffset() == offset:
            low = middle
        else:
            high = middle
    return high


def instants(
    wall: datetime, zone: ZoneInfo, *, gap: DstGap, repeat: DstRepeat, hourly: bool
) -> list[datetime]:
    """The UTC instants at which the naive wall-clock time `wall` fires in `zone`."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first == second:
        return [first]
    exists = first.astimezone(zone).replace(tzinfo=None) == wall
    if exists:  # repeated: `first` is the earlier occurrence
        return [first, second] if repeat == "both" or hourly else [first]
    if gap == "skip":
        return []
    # In a gap, fold=1 reads the wall time with the offset after the change and fold=0 with
    # the one before, so the change itself lies between them.
    low, high = min(first, second), max(first, second)
    return [_change_instant(zone, low, high)]


def next_after(
    expression: str,
    zone_name: str,
    after: datetime,
    *,
    gap: DstGap = "shift",
    repeat: DstRepeat = "first",
) -> datetime:
    """The first fire instant strictly after `after` (raises CroniterBadDateError if none).

    Wall times are walked in order from the earliest one that could still fire after
    `after`, until a wall time's earliest instant is past the best candidate: around a
    repeated hour, the second pass of a wall time comes after wall times that follow it.
    """
    zone = ZoneInfo(zone_name)
    fields = expression.split()
    hourly = (fields[2] if len(fields) == 6 else fields[1]) in ("*", "*/1")
    after = after.astimezone(UTC)
    lowest = min(
        (after + shift).astimezone(zone).utcoffset() or timedelta(0)
        for shift in (-_REACH, timedelta(0), _REACH)
    )
    start = after.replace(tzinfo=None) + lowest - timedelta(microseconds=1)
    walls = croniter(expression, start, second_at_beginning=True, day_or=True)
    best: datetime | None = None
    while True:
        wall = walls.get_next(datetime)
        if best is not None and _earliest(wall, zone) > best:
            return best
        for candidate in instants(wall, zone, gap=gap, repeat=repeat, hourly=hourly):
            if candidate > after and (best is None or candidate < best):
                best = candidate


def _earliest(wall: datetime, zone: ZoneInfo) -> datetime:
    return min(
        wall.replace(tzinfo=zone, fold=0).astimezone(UTC),
        wall.replace(tzinfo=zone, fold=1).astimezone(UTC),
    )


def gaps(
    expression: str, zone_name: str, after: datetime, until: datetime
) -> list[tuple[datetime, int]]:
    """The DST gaps in (after, until] that swallow wall times of the expression: for each,
    the instant the clocks jump (where `dst_gap="shift"` would fire) and how many of the
    expression's wall times do not exist. The zone is sampled every 12 hours, so the cost
    follows the length of the range, not the number of ticks in it."""
    zone = ZoneInfo(zone_name)
    found: list[tuple[datetime, int]] = []
    step = timedelta(hours=12)
    low = after.astimezone(UTC)
    while low < until:
        high = min(low + step, until)
        before, later = low.astimezone(zone).utcoffset(), high.astimezone(zone).utcoffset()
        if before is not None and later is not None and later > before:
            change = _change_instant(zone, low, high)
            first_missing = change.replace(tzinfo=None) + before
            walls = croniter(
                expression,
                first_missing - timedelta(microseconds=1),
                second_at_beginning=True,
                day_or=True,
            )
            end = change.replace(tzinfo=None) + later
            missing = 0
            try:
                while walls.get_next(datetime) < end:
                    missing += 1
            except (ValueError, OverflowError):
                pass  # the expression's next wall time lies past year 9999: none is missing
            if missing:
                found.append((change, missing))
        low = high
    return found
