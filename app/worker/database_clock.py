"""The database's clock as this process's monotonic clock can tell it: due instants are the
database's, and a tick claimed ahead must not start before its instant by that clock, however
far this replica's own wall clock runs ahead of it, nor wait longer than it must.

A claim ahead first reads the database's clock, and notes the instant of the monotonic
clock (`time.monotonic`) by which the answer had come back (`Claimed.reading`); the claim's
own instant, by when the claim came back, is a reading too, the later one if the database's
clock stepped forward while the claim ran. An instant was read no later than then, so at
any later monotonic instant `l` the database's clock reads at least
`instant + (l - read_by)`: each reading is a lower bound of the database's
clock less the monotonic one. The best (largest) of the last WINDOW seconds stands: a
reading is as tight as its round trip, a slow one never makes a tick later than the best,
and a drift or a step of either clock counts within WINDOW.

Invariant: `local_time_of(instant)` is never earlier than the monotonic instant at which
the database's clock reaches `instant`, by any reading still in the window (both clocks
steady over it).
"""

from __future__ import annotations

from collections import deque
from datetime import datetime

# How long a reading stands (seconds).
WINDOW = 10.0


class DatabaseClock:
    """Lower bounds of the database's clock (epoch seconds) less the monotonic clock, best
    first, over the last WINDOW seconds."""

    def __init__(self, window: float = WINDOW) -> None:
        self._window = window
        # (monotonic instant of the reading, its bound), bounds decreasing: a reading that a later,
        # larger one beats can never be the best again.
        self._bounds: deque[tuple[float, float]] = deque()

    def observe(self, instant: datetime, read_by: float) -> None:
        """The database's clock read `instant` no later than monotonic instant `read_by`."""
        bound = instant.timestamp() - read_by
        while self._bounds and self._bounds[-1][1] <= bound:
            self._bounds.pop()
        self._bounds.append((read_by, bound))

    def local_time_of(self, instant: datetime, now: float) -> float | None:
        """The monotonic instant by which the database's clock reads `instant` (at `now`:
        readings older than the window are dropped); None: no reading stands."""
        while self._bounds and self._bounds[0][0] < now - self._window:
            self._bounds.popleft()
        if not self._bounds:
            return None
        return instant.timestamp() - self._bounds[0][1]
