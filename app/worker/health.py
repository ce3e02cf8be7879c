"""Whether the loop's claims are working, for readiness.

Invariant: the loop reads as failing once its claims have failed without a success in
between for longer than `threshold` seconds, and as healthy again after the first claim
that succeeds. A single failed claim (a blip) does not make it unready.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class ClaimHealth:
    def __init__(self, threshold: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._threshold = threshold
        self._clock = clock
        self._failing_since: float | None = None
        self._reason = ""

    def succeeded(self) -> None:
        self._failing_since = None

    def failed(self, exc: BaseException) -> None:
        if self._failing_since is None:
            self._failing_since = self._clock()
        # The kind of failure only: a message may name where the database lives.
        self._reason = type(exc).__name__

    def problem(self) -> str | None:
        """None while healthy, else what readiness reports."""
        if self._failing_since is None:
            return None
        failing = self._clock() - self._failing_since
        if failing <= self._threshold:
            return None
        return f"claims failing for {failing:.1f}s: {self._reason}"
