"""Whether the loop's claims are working, for readiness and the log.

Invariants: the loop reads as failing once its claims have failed without a success in
between for longer than `threshold` seconds, and as healthy again after the first claim
that succeeds. A single failed claim (a blip) does not make it unready. A database that is
down or not migrated fails every claim until it is back: that is said on one line once (and
again if the reason changes), not at every retry, and its end on one line too; any other
failure is logged with its traceback each time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from app.domain.errors import StoreUnavailableError
from app.worker.outcomes import log
from app.worker.pacing import MAX_ERROR_BACKOFF


class ClaimHealth:
    def __init__(self, threshold: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._threshold = threshold
        self._clock = clock
        self._failing_since: float | None = None
        self._reason = ""
        # What the log last said the claims wait for (the database down, or not migrated),
        # while they keep failing for that reason.
        self._waiting_for: str | None = None

    def succeeded(self) -> None:
        self._failing_since = None
        if self._waiting_for is not None:
            self._waiting_for = None
            log.info("claims work again")

    def failed(self, exc: BaseException, retry_in: float = 0.0) -> None:
        """A claim failed; the next is tried `retry_in` seconds later."""
        if self._failing_since is None:
            self._failing_since = self._clock()
        # The kind of failure only: a message may name where the database lives.
        self._reason = type(exc).__name__
        if not isinstance(exc, StoreUnavailableError):
            log.error("claim failed; retrying in %.2fs", retry_in, exc_info=exc)
        elif exc.detail != self._waiting_for:
            self._waiting_for = exc.detail
            log.warning(
                "claims wait for the database, trying again every %gs at most: %s",
                MAX_ERROR_BACKOFF,
                exc.detail,
            )

    def problem(self) -> str | None:
        """None while healthy, else what readiness reports."""
        if self._failing_since is None:
            return None
        failing = self._clock() - self._failing_since
        if failing <= self._threshold:
            return None
        return f"claims failing for {failing:.1f}s: {self._reason}"
