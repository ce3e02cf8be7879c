"""Retry policy: capped exponential backoff with optional full jitter; a schedule may set
its own (`RetrySpec`) over the service's."""

from __future__ import annotations

import random
from dataclasses import dataclass

from pydantic import ConfigDict, Field

from app.domain.errors import InvalidInputError
from app.domain.limits import InputModel


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Delay before the next attempt after `attempt` failed (1-based).

    Without jitter: base * 2^(attempt-1), capped at max_delay.
    With full jitter: a uniform draw in [0, that capped value], which spreads a
    burst of failures from one outage instead of retrying them in lockstep.
    """

    base_delay: float
    max_delay: float
    jitter: bool = True

    def backoff(self, attempt: int) -> float:
        exponent = min(max(attempt - 1, 0), 62)
        return float(min(self.max_delay, self.base_delay * (2**exponent)))

    def delay(self, attempt: int, rng: random.Random) -> float:
        capped = self.backoff(attempt)
        return rng.uniform(0.0, capped) if self.jitter else capped


# A retry is never planned further off than a day (a Retry-After is capped the same way).
MAX_RETRY_DELAY_SECONDS = 86400.0

_BASE = (
    "Delay after the first failed attempt, doubled after each further one; null: the "
    "service's CHRONOQ_RETRY_BASE_DELAY"
)
_MAX = "The most a delay grows to; null: the service's CHRONOQ_RETRY_MAX_DELAY"
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
        default=None, gt=0, le=MAX_RETRY_DELAY_SECONDS, description=_BASE, examples=[5]
    )
    max_delay_seconds: float | None = Field(
        default=None, gt=0, le=MAX_RETRY_DELAY_SECONDS, description=_MAX, examples=[600]
    )
    jitter: bool | None = Field(default=None, description=_JITTER, examples=[True])

    def over(self, policy: RetryPolicy) -> RetryPolicy:
        """`policy` (the service's) with what this spec sets."""
        return RetryPolicy(
            base_delay=policy.base_delay
            if self.base_delay_seconds is None
            else self.base_delay_seconds,
            max_delay=policy.max_delay
            if self.max_delay_seconds is None
            else self.max_delay_seconds,
            jitter=policy.jitter if self.jitter is None else self.jitter,
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
