"""The charts' roll-up: every `activity_interval`, one replica at a time recomputes the
latest minutes of `activity_minutes` from the attempt log.

Invariant: a minute's rows are what the log holds for that minute when it was last
recomputed (`app.store.records.activity.roll_up`, idempotent). Each round recomputes from
a little before the latest minute rolled up (attempts are logged when they settle, a
request's timeout after they start) to the current one; every `LATE_EVERY` rounds it
reaches back `LATE_REACH`, for attempts logged long after they started (one whose replica
died is logged by the claim that takes its occurrence again, a lease later). The first
round of an installation reaches back a day, to the first attempt in it, and the rounds
catch up an hour at a time. A failure is logged and retried later, and never stops the
loop.
"""

from __future__ import annotations

from contextlib import suppress
from datetime import timedelta

from app.domain.activity import MINUTE, floor_minute
from app.settings import Settings
from app.store.dialects import dialect_of, transaction_now
from app.store.engine.database import Connection, Database
from app.store.records.activity import earliest_attempt, prune_activity, roll_up, rolled_to
from app.worker.periodic import Periodic

# Each round recomputes from this long before the latest minute rolled up: the minute
# before the current one, and the current one.
REACH = timedelta(minutes=1)
# Every so many rounds, from this long before it.
LATE_REACH = timedelta(minutes=15)
LATE_EVERY = 30
# The first round, with nothing rolled up yet: at most this far back.
FIRST_REACH = timedelta(days=1)
# At most this many minutes a round: catching up a day takes a round an hour, each a short
# transaction.
MOST = timedelta(hours=1)


class ActivityRollup(Periodic):
    """Owns one replica's share of the roll-up."""

    task_name = "chronoq-activity"
    doing = "rolling up activity"

    def __init__(self, database: Database, settings: Settings) -> None:
        super().__init__()
        self._db = database
        self._settings = settings
        self.rounds = 0

    @property
    def interval(self) -> float:
        return self._settings.activity_interval

    async def _round(self, conn: Connection, reach: timedelta) -> int:
        async with dialect_of(conn).exclusive(conn, "activity") as held:
            if not held:
                return 0
            now = await transaction_now(conn)
            current = floor_minute(now)
            latest = await rolled_to(conn)
            if latest is None:
                first = await earliest_attempt(conn, now - FIRST_REACH)
                since = current if first is None else floor_minute(first)
            else:
                since = min(latest, current) - reach
            since = max(since, current - FIRST_REACH)
            until = min(current + MINUTE, since + MOST)
            written = await roll_up(conn, since, until, now)
            with suppress(OverflowError):
                kept_from = now - timedelta(seconds=self._settings.activity_retention)
                await prune_activity(conn, floor_minute(kept_from))
            return written

    async def run_once(self) -> int:
        """One round; returns how many rows it wrote (0 while another replica rolls up)."""
        reach = LATE_REACH if self.rounds % LATE_EVERY == 0 else REACH
        try:
            return await self._db.run(lambda conn: self._round(conn, reach))
        finally:
            self.rounds += 1
