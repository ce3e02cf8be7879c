"""Claimed ahead, not due yet: deliveries wait here for their instant, then go on.

Invariant: every delivery held is handed on exactly once, with the lease end it was held
with: by the timer no earlier than its instant (less the timer's resolution and the
`gather` it was made with), or by `release_all` when the loop stops. Nothing is dropped.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable

from app.domain.occurrence import Delivery

# Event loop timers run up to their resolution early (a millisecond on libuv's).
TIMER_SLACK = 0.001

# Deliveries that are due, grouped by the lease end they were claimed with.
OnDue = Callable[[list[Delivery], float], None]


class Held:
    """`gather`: a timer that fires also hands on what falls due within that many seconds
    after it, together (their consumer then starts them at their own instants)."""

    def __init__(self, on_due: OnDue, *, gather: float = 0.0) -> None:
        self._on_due = on_due
        self._gather = gather
        # (loop time it may start, serial, delivery, lease end), soonest first.
        self._heap: list[tuple[float, int, Delivery, float]] = []
        self._serial = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def next_at(self) -> float | None:
        """The loop time the soonest held delivery may start, if any is held."""
        return self._heap[0][0] if self._heap else None

    def hold(self, delivery: Delivery, at: float, deadline: float) -> None:
        """Hold `delivery` until loop time `at`; `arm` after a batch of these."""
        self._serial += 1
        heapq.heappush(self._heap, (at, self._serial, delivery, deadline))

    def arm(self) -> None:
        """A timer for the soonest held delivery, unless one is set for then or sooner."""
        if not self._heap:
            return
        at = self._heap[0][0]
        if self._timer is not None:
            if self._timer_at <= at:
                return
            self._timer.cancel()
        self._timer_at = at
        self._timer = asyncio.get_running_loop().call_at(at, self._fire)

    def release_all(self) -> None:
        """Stopping: hand on everything held, due or not."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, float("inf")
        self._release(float("inf"))

    def _fire(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        self._release(asyncio.get_running_loop().time() + TIMER_SLACK + self._gather)
        self.arm()

    def _release(self, until: float) -> None:
        by_deadline: dict[float, list[Delivery]] = {}
        while self._heap and self._heap[0][0] <= until:
            _, _, delivery, deadline = heapq.heappop(self._heap)
            by_deadline.setdefault(deadline, []).append(delivery)
        for deadline, deliveries in by_deadline.items():
            self._on_due(deliveries, deadline)
