"""The database clock: every replica reads time from the one database, never its own.

It is read in two ways, and only these: into Python, once per transaction where a dialect
binds it into its statements (`transaction_now`, `Dialect.bound_now`), and inside the
statements themselves where a dialect lets the server read it (PostgreSQL's `now()`).

`DatabaseClock` is that clock as this process sees it, with the seam tests move time by
instead of waiting for it (`DatabaseClock.move`). Production never moves it; unmoved, no
statement and no instant differs from what the database says.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

# Every way the three databases' SQL reads a clock of its own: while the clock is moved, a
# statement that reads one otherwise than as its dialect's `server_clock` would not see the
# move, and is refused rather than run on the wrong time.
CLOCK_READS = re.compile(
    r"\b(?:now|transaction_timestamp|statement_timestamp|clock_timestamp|timeofday|sysdate"
    r"|utc_timestamp|utc_date|utc_time|curdate|curtime)\s*\("
    r"|\bunix_timestamp\s*\(\s*\)"
    r"|\b(?:current_timestamp|current_date|current_time|localtimestamp|localtime)\b"
    r"|'now'",
    re.IGNORECASE,
)


class DatabaseClock:
    """The clock of one kind of database as this process reads it: one per dialect, so
    every `Database` of that kind in the process (the API's pool, the delivery loop's, a
    test's own) reads the same one, as replicas read the one database's.

    The clock seam, for tests only (no setting reaches it): `move(by)` moves the clock
    forward at once, and every read of it after that is `by` later: the instants
    `transaction_now` and `Dialect.bound_now` return, and each statement that reads the
    server's clock itself (PostgreSQL's `now()`, in the claim, the settle, the start marks,
    `next_due_in` and the rest), whose text then reads it moved (`Dialect.moved_statement`).
    So claims, leases and their expiry, retry instants, due instants, misfire checks,
    pause and resume instants, created and updated stamps, the loop's "next due in" and
    retention all see the moved clock, on every store. `reset()` puts it back.

    `freeze(at)` lets the clock run on only until `at`, and stand still there until
    `unfreeze()`: every read of it in between, in Python or in a statement, is the earlier
    of the moved clock and `at`. A test steps the delivery loop on a frozen clock: what is
    due by then is due, and what comes due after it (a retry a step makes) is not yet.

    Unmoved, nothing changes: statements are sent as they are written (no hook is even
    installed until a first move), and the only cost is adding a zero shift to the
    instants read into Python.
    """

    def __init__(self, on_move: Callable[[], None] = lambda: None) -> None:
        self._shift = timedelta(0)
        self._frozen_at: datetime | None = None
        # Called at each move: installs, once, what makes statements read the clock moved
        # (`Dialect`'s statement hook).
        self._on_move = on_move

    @property
    def shift(self) -> timedelta:
        """How far the clock is moved (zero but in tests)."""
        return self._shift

    @property
    def frozen_at(self) -> datetime | None:
        """The instant the clock stands still at from then on (`freeze`), if any."""
        return self._frozen_at

    @property
    def moved(self) -> bool:
        """Whether statements must read the clock moved or frozen (never in production)."""
        return bool(self._shift) or self._frozen_at is not None

    def freeze(self, at: datetime) -> None:
        """Let the clock run until `at` (now, or later) and stand still there."""
        if at.tzinfo is None:
            raise ValueError("the clock freezes at an aware instant")
        self._on_move()
        self._frozen_at = at

    def unfreeze(self) -> None:
        """Let the clock run again, from where it would be had it never stood still."""
        self._frozen_at = None

    def move(self, by: timedelta) -> None:
        """Move the clock forward by `by`, at once, for every read of it from now on
        (a clock never runs backwards: a negative `by` is refused)."""
        if by < timedelta(0):
            raise ValueError("the database clock moves forward only")
        self._on_move()
        self._shift += by

    def reset(self) -> None:
        """The clock as the database keeps it again."""
        self._shift = timedelta(0)
        self._frozen_at = None

    def host_now(self) -> datetime:
        """This host's clock, moved as the database clock is: the database clock where
        it is the host's (SQLite), and the best guess of it where there is no connection
        to read it on."""
        now = datetime.now(UTC) + self._shift
        return now if self._frozen_at is None else min(now, self._frozen_at)

    def time(self) -> float:
        """`host_now` as `time.time()` reads it: what the delivery loop compares the due
        instants the store hands it with."""
        now = time.time() + self._shift.total_seconds()
        return now if self._frozen_at is None else min(now, self._frozen_at.timestamp())


def moved_statement(statement: str, read: str | None, moved: str) -> str:
    """`statement` with each `read` of the server's clock in its text replaced by `moved`,
    the same clock moved; any other clock it reads is refused (it would not see the move)."""
    pieces = statement.split(read) if read is not None else [statement]
    for piece in pieces:
        if (found := CLOCK_READS.search(piece)) is not None:
            raise AssertionError(
                f"a statement reads the clock as {found.group(0)!r}, which does not see "
                f"the moved database clock: {statement}"
            )
    return moved.join(pieces)
