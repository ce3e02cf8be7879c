"""Retry policy: capped exponential backoff with optional full jitter; a schedule may set
its own (`RetrySpec`) over the service's."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict, Field

from app.domain.errors import InvalidInputError
from app.domain.limits import InputModel

# A retry is never planned further off than a day (a Retry-After is capped the same way).
MAX_RETRY_DELAY_SECONDS = 86400.0
# The shortest wait between attempts a schedule's own policy may ask for: a write key must
# not turn a schedule into a stream of requests at its target (the service's settings are
# the operator's, and have no floor).
MIN_RETRY_DELAY_SECONDS = 0.1


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Delay before the next attempt after `attempt` failed (1-based).

    Without jitter: base * 2^(attempt-1), capped at max_delay.
    With full jitter: a uniform draw in [0, that capped value], which spreads a
    burst of failures from one outage instead of retrying them in lockstep.
    Never below `floor` (0 for the service's settings; `MIN_RETRY_DELAY_SECONDS` for a
    schedule's own policy).
    """

    base_delay: float
    max_delay: float
    jitter: bool = True
    floor: float = 0.0

    def backoff(self, attempt: int) -> float:
        exponent = min(max(attempt - 1, 0), 62)
        return max(self.floor, float(min(self.max_delay, self.base_delay * (2**exponent))))

    def delay(self, attempt: int, rng: random.Random) -> float:
        capped = self.backoff(attempt)
        return max(self.floor, rng.uniform(0.0, capped)) if self.jitter else capped

    def honoured(self, retry_after: float) -> float:
        """How long a receiver's Retry-After is honoured: at most as long as this policy
        ever waits (`max_delay`), and never more than a day. A receiver cannot hold a
        delivery, or its flow key, longer than its schedule's own policy would."""
        return max(0.0, min(retry_after, self.max_delay, MAX_RETRY_DELAY_SECONDS))


_BASE = (
    "Delay after the first failed attempt, doubled after each further one (at least 0.1); "
    "null: the service's CHRONOQ_RETRY_BASE_DELAY"
)
_MAX = (
    "The most a delay grows to (at least 0.1), and the longest a target's Retry-After is "
    "honoured; null: the service's CHRONOQ_RETRY_MAX_DELAY"
)
_JITTER = (
    "Draw each delay uniformly from [0, delay] (full jitter); null: the service's CHRONOQ_JITTER"
)


class RetrySpec(InputModel):
    """A schedule's own retry policy; what it leaves out is the service's setting."""

    model_config = ConfigDict(
        frozen=True,
        json_schema_extra={"examples": [{"base_delay_seconds": 5, "max_delay_seconds": 600}]},
    )

    base_delay_seconds: float | None = Field(
        default=None,
        ge=MIN_RETRY_DELAY_SECONDS,
        le=MAX_RETRY_DELAY_SECONDS,
        description=_BASE,
        examples=[5],
    )
    max_delay_seconds: float | None = Field(
        default=None,
        ge=MIN_RETRY_DELAY_SECONDS,
        le=MAX_RETRY_DELAY_SECONDS,
        description=_MAX,
        examples=[600],
    )
    jitter: bool | None = Field(default=None, description=_JITTER, examples=[True])

    def over(self, policy: RetryPolicy) -> RetryPolicy:
        """`policy` (the service's) with what this spec sets, and the floor of a
        schedule's own policy."""
        return RetryPolicy(
            base_delay=policy.base_delay
            if self.base_delay_seconds is None
            else self.base_delay_seconds,
            max_delay=policy.max_delay
            if self.max_delay_seconds is None
            else self.max_delay_seconds,
            jitter=policy.jitter if self.jitter is None else self.jitter,
            floor=MIN_RETRY_DELAY_SECONDS,
        )

    def check(self, policy: RetryPolicy, pointer: str = "#/retry") -> None:
        """The coherence rule of the settings: the most a delay grows to is not below its
        start (with the service's `policy` for what this leaves out)."""
        effective = self.over(policy)
        if effective.max_delay < effective.base_delay:
            field = (
                "max_delay_seconds" if self.max_delay_seconds is not None else "base_delay_seconds"
            )
            raise InvalidInputError(
                f"max_delay_seconds ({effective.max_delay:g}) must not be below "
                f"base_delay_seconds ({effective.base_delay:g})",
                pointer=f"{pointer}/{field}",
            )


def raised_to_floor(stored: Any) -> Any:
    """A stored policy's JSON with each delay below `MIN_RETRY_DELAY_SECONDS` raised to it:
    a schedule stored before the floor still loads, and runs at the floor."""
    if not isinstance(stored, dict):
        return stored
    return {
        name: max(value, MIN_RETRY_DELAY_SECONDS)
        if name in ("base_delay_seconds", "max_delay_seconds")
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and 0 < value < MIN_RETRY_DELAY_SECONDS
        else value
        for name, value in stored.items()
    }
