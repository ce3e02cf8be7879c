"""What happened, minute by minute: deliveries, failures, dead letters and lateness, from
the attempt log every replica writes (never one process's memory).

A minute's lateness is a histogram, counts per bucket of `LATENESS_BOUNDS` (the same
buckets as the `chronoq_delivery_lateness_seconds` metric): minutes add up bucket by
bucket, so a percentile over an hour or a day is read from their sum, exact to a bucket.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

# Upper bounds in seconds; a minute's counts have one more entry, for beyond the last.
LATENESS_BOUNDS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
    3600,
)
BUCKETS = len(LATENESS_BOUNDS) + 1
MINUTE = timedelta(minutes=1)


class Window(StrEnum):
    """The spans a chart covers, each in minutes."""

    HOUR = "1h"
    DAY = "24h"

    @property
    def span(self) -> timedelta:
        return timedelta(hours=1) if self is Window.HOUR else timedelta(days=1)


class Scope(StrEnum):
    """What the figures are of: the whole fleet (of the caller's tenants), or one subject."""

    FLEET = "fleet"
    TENANT = "tenant"
    SCHEDULE = "schedule"
    FLOW_KEY = "flow_key"
    ENDPOINT = "endpoint"


def bucket_of(seconds: float) -> int:
    """The lateness bucket `seconds` falls in (early deliveries count as on time)."""
    for index, bound in enumerate(LATENESS_BOUNDS):
        if seconds <= bound:
            return index
    return len(LATENESS_BOUNDS)


def quantile(counts: Sequence[int], q: float) -> float | None:
    """The upper bound of the bucket that holds the q-quantile: None when nothing was
    delivered, infinity when it lies beyond the last bound."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(counts):
        seen += count
        if seen >= rank and count:
            return LATENESS_BOUNDS[index] if index < len(LATENESS_BOUNDS) else math.inf
    return math.inf


@dataclass(frozen=True, slots=True)
class Minute:
    """One minute's figures (`at` is its first instant, UTC)."""

    at: datetime
    delivered: int = 0
    # Attempts that did not deliver: retried, dead-lettered, or lost with their replica.
    failed: int = 0
    dead_lettered: int = 0
    # Counts per lateness bucket of the deliveries (`BUCKETS` entries).
    lateness: tuple[int, ...] = field(default=(0,) * BUCKETS)

    def __add__(self, other: Minute) -> Minute:
        return Minute(
            at=min(self.at, other.at),
            delivered=self.delivered + other.delivered,
            failed=self.failed + other.failed,
            dead_lettered=self.dead_lettered + other.dead_lettered,
            lateness=tuple(a + b for a, b in zip(self.lateness, other.lateness, strict=True)),
        )


@dataclass(frozen=True, slots=True)
class Activity:
    """A window's minutes, oldest first, every minute of it present (zeros where nothing
    happened), with the instant the figures were rolled up to."""

    scope: Scope
    subject: str | None
    window: Window
    since: datetime
    until: datetime
    minutes: tuple[Minute, ...]
    # When the figures were last brought up to date (the minutes are rolled up every few
    # seconds; a schedule's are read from its log at once); None: never rolled up yet.
    current_to: datetime | None

    @property
    def total(self) -> Minute:
        """The window's figures, added up (in one pass per figure: adding a day's 1,440
        minutes one `Minute` at a time took a good part of a chart's time)."""
        minutes = self.minutes
        if not minutes:
            return Minute(at=self.since)
        return Minute(
            at=self.since,
            delivered=sum(minute.delivered for minute in minutes),
            failed=sum(minute.failed for minute in minutes),
            dead_lettered=sum(minute.dead_lettered for minute in minutes),
            lateness=tuple(map(sum, zip(*(minute.lateness for minute in minutes), strict=True))),
        )


def floor_minute(instant: datetime) -> datetime:
    return instant.replace(second=0, microsecond=0)


def window_since(now: datetime, window: Window) -> datetime:
    """The first minute of `window` ending with the minute of `now`."""
    return floor_minute(now) + MINUTE - window.span


def every_minute(since: datetime, until: datetime, found: Iterable[Minute]) -> tuple[Minute, ...]:
    """The minutes from `since` (a minute's start) up to `until`, those not `found` as
    zeros."""
    by_minute = {minute.at: minute for minute in found}
    minutes = []
    at = since
    while at < until:
        minutes.append(by_minute.get(at) or Minute(at=at))
        at += MINUTE
    return tuple(minutes)
