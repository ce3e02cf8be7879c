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

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from datetime import timedelta

from app.domain.activity import MINUTE, floor_minute
from app.domain.errors import StoreUnavailableError
from app.settings import Settings
from app.store.dialects import dialect_of, transaction_now
from app.store.engine.database import Connection, Database
from app.store.records.activity import earliest_attempt, prune_activity, roll_up, rolled_to

log = logging.getLogger(__name__)

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
MAX_ERROR_BACKOFF = 300.0
STOP_GRACE = 5.0


class ActivityRollup:
    """Owns one replica's share of the roll-up."""

    def __init__(self, database: Database, settings: Settings) -> None:
        self._db = database
        self._settings = settings
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0
        self.errors = 0

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

    @asynccontextmanager
    async def started(self) -> AsyncIterator[ActivityRollup]:
        """Roll up every `activity_interval` for the duration of the block."""
        self._stopping.clear()
        self._task = asyncio.create_task(self.run(), name="chronoq-activity")
        try:
            yield self
        finally:
            await self.stop()

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            # A round is one transaction: cancelling it rolls it back, which loses nothing.
            await asyncio.wait({self._task}, timeout=STOP_GRACE)
            if not self._task.done():
                self._task.cancel()
                with suppress(asyncio.CancelledError):
                    await self._task

    async def _pause(self, seconds: float) -> None:
        with suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def run(self) -> None:
        interval = self._settings.activity_interval
        failures = 0
        delay = interval
        while True:
            await self._pause(delay)
            if self._stopping.is_set():
                return
            try:
                await self.run_once()
            except Exception as exc:
                self.errors += 1
                failures += 1
                delay = min(interval * 2 ** min(failures, 10), max(interval, MAX_ERROR_BACKOFF))
                if isinstance(exc, StoreUnavailableError):
                    log.warning(
                        "rolling up activity failed; retrying in %.1fs: %s", delay, exc.detail
                    )
                else:
                    log.exception("rolling up activity failed; retrying in %.1fs", delay)
            else:
                failures = 0
                delay = interval
