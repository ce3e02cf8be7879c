"""Retry policy: capped exponential backoff with optional full jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass


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
