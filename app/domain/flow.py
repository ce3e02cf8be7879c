"""Flow keys: how many attempts of one key may start now. Pure: the store keeps a key's
limits and bucket and counts its attempts in flight; this decides what follows from them.

Invariant: an allowance never exceeds what the limits allow at that instant. The token
bucket holds at most `burst` tokens and refills at `rate / period_seconds`; in-flight
attempts count against `parallelism`; a fifo key starts one attempt at a time, and only
when none is in flight; a paused or backing-off key starts nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from app.domain.errors import InvalidInputError

KEY_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
KEY_ALPHABET = "1-128 of A-Z a-z 0-9 . _ : -"

# Bounds that keep the bucket's arithmetic exact in a float and a day's figures sane.
MAX_RATE = 1_000_000
MAX_PERIOD_SECONDS = 86_400
MAX_PARALLELISM = 100_000


class Ordering(StrEnum):
    NONE = "none"
    FIFO = "fifo"


def check_key(key: str, *, pointer: str | None = None, parameter: str | None = None) -> str:
    """The key itself, or an error naming where it came from."""
    if not KEY_PATTERN.fullmatch(key):
        raise InvalidInputError(
            f"a flow key is {KEY_ALPHABET}", pointer=pointer, parameter=parameter
        )
    return key


@dataclass(frozen=True, slots=True)
class FlowLimits:
    """A key's limits; None is no limit. `burst` defaults to `rate`."""

    rate: int | None = None
    period_seconds: float = 1.0
    burst: int | None = None
    parallelism: int | None = None
    ordering: Ordering = Ordering.NONE
    paused: bool = False

    def __post_init__(self) -> None:
        _bounded("rate", self.rate, 1, MAX_RATE)
        _bounded("burst", self.burst, 1, MAX_RATE)
        _bounded("parallelism", self.parallelism, 1, MAX_PARALLELISM)
        period = self.period_seconds
        if not (math.isfinite(period) and 0 < period <= MAX_PERIOD_SECONDS):
            raise InvalidInputError(
                f"must be more than 0 and at most {MAX_PERIOD_SECONDS}",
                pointer="#/period_seconds",
            )
        if self.burst is not None and self.rate is None:
            raise InvalidInputError("a burst needs a rate", pointer="#/burst")
        if self.ordering is Ordering.FIFO and (self.parallelism or 1) > 1:
            raise InvalidInputError("fifo means parallelism 1", pointer="#/parallelism")

    @property
    def capacity(self) -> int | None:
        """How many tokens the bucket holds when full (None: no rate limit)."""
        if self.rate is None:
            return None
        return self.burst if self.burst is not None else self.rate

    @property
    def most_in_flight(self) -> int | None:
        return 1 if self.ordering is Ordering.FIFO else self.parallelism

    @property
    def limited(self) -> bool:
        """Whether anything bounds the key (a key with none is claimed as if unkeyed)."""
        return self.paused or self.capacity is not None or self.most_in_flight is not None


def _bounded(field: str, value: int | None, low: int, high: int) -> None:
    if value is not None and not (low <= value <= high):
        raise InvalidInputError(f"must be from {low} to {high}", pointer=f"#/{field}")


@dataclass(frozen=True, slots=True)
class Bucket:
    """A key's token bucket as stored: `tokens` as of `refilled_at`."""

    tokens: float
    refilled_at: datetime

    def refilled(self, limits: FlowLimits, now: datetime) -> Bucket:
        """The bucket at `now`; time never runs backwards for it (a replica with a clock
        behind the last writer's refills nothing)."""
        capacity = limits.capacity
        if capacity is None or limits.rate is None:
            return self
        elapsed = max(0.0, (now - self.refilled_at).total_seconds())
        tokens = min(float(capacity), self.tokens + elapsed * limits.rate / limits.period_seconds)
        return Bucket(tokens, max(now, self.refilled_at))

    def spent(self, count: int) -> Bucket:
        return replace(self, tokens=self.tokens - count)

    def next_token_in(self, limits: FlowLimits) -> float | None:
        """Seconds until the bucket holds a whole token (0: it does; None: no rate limit)."""
        if limits.rate is None:
            return None
        missing = 1.0 - self.tokens
        return max(0.0, missing * limits.period_seconds / limits.rate)


def full_bucket(limits: FlowLimits, now: datetime) -> Bucket:
    return Bucket(float(limits.capacity or 0), now)


def allowance(
    limits: FlowLimits,
    bucket: Bucket,
    *,
    in_flight: int,
    now: datetime,
    backoff_until: datetime | None = None,
) -> tuple[int | None, Bucket]:
    """How many attempts of the key may start at `now` (None: no limit), and the bucket as
    refilled to `now`. The caller spends from that bucket what it does start."""
    bucket = bucket.refilled(limits, now)
    if limits.paused or (backoff_until is not None and backoff_until > now):
        return 0, bucket
    most = limits.most_in_flight
    room: int | None = None if most is None else max(0, most - in_flight)
    if limits.capacity is not None:
        tokens = max(0, math.floor(bucket.tokens + 1e-9))
        room = tokens if room is None else min(room, tokens)
    return room, bucket


@dataclass(frozen=True, slots=True)
class FlowKey:
    """A key as an operator sees it: its limits (None: never PUT, so none), the version a
    PUT or DELETE may name, and the live figures: attempts in flight now, occurrences due
    and held back, and the destination's back-off, while it lasts."""

    key: str
    limits: FlowLimits | None
    version: int | None
    in_flight: int
    waiting: int
    backoff_until: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
