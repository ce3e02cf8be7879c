"""The retention loop: every `retention_interval`, delete expired finished occurrences in batches.

Invariant: what is deleted is decided by `app.store.records.retention.prune` alone (finished
occurrences past `retention`, never pending ones or dead letters). Each batch is a short
transaction of its own that skips locked rows, with a pause between batches, so claims
and settles interleave and never wait behind pruning. Replicas take turns through an
advisory lock; a failure is logged and retried later, and never stops the loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from functools import partial

from app.domain.errors import StoreUnavailableError
from app.settings import Settings
from app.store.dialects import transaction_now
from app.store.engine.database import Connection, Database
from app.store.records.retention import prune, prune_schedules, tenant_retentions
from app.telemetry import store_metrics
from app.worker.history import HistoryKeeper
from app.worker.periodic import Periodic

log = logging.getLogger(__name__)

BATCH_PAUSE = 0.05
# Between batches the loop rests at least this many times as long as the batch took, so
# pruning holds the database at most a quarter of the time however slow a batch gets.
REST_FACTOR = 3.0
# Ended schedules deleted per statement: each takes its occurrences, attempts and events
# with it, so a batch is a tenth of the occurrences' (`CHRONOQ_RETENTION_BATCH`).
SCHEDULE_BATCH_SHARE = 10


def rest_after(took: float) -> float:
    """The pause after a batch that took `took` seconds."""
    return max(BATCH_PAUSE, took * REST_FACTOR)


class Pruner(Periodic):
    """Owns one replica's share of retention."""

    task_name = "chronoq-pruner"
    doing = "pruning"

    def __init__(self, database: Database, settings: Settings) -> None:
        super().__init__()
        self._db = database
        self._settings = settings
        self.pruned_total = 0
        self.schedules_pruned_total = 0
        self.rounds = 0
        # History in day partitions (PostgreSQL): its days made, dropped and swept.
        self.history = (
            HistoryKeeper(database, settings) if database.dialect.partitioned_history else None
        )

    @property
    def interval(self) -> float:
        return self._settings.retention_interval

    async def run(self) -> None:
        # The days ahead are made at once, not a round later: rows of a day that has no
        # partition yet would stay in the default one.
        if self.history is not None:
            try:
                await self.history.round()
            except Exception as exc:
                detail = exc.detail if isinstance(exc, StoreUnavailableError) else exc
                log.warning("keeping history in partitions failed; retrying later: %s", detail)
        await super().run()

    async def _prune_batch(self, conn: Connection) -> int:
        now = await transaction_now(conn)
        try:
            cutoff = now - timedelta(seconds=self._settings.retention)
        except OverflowError:
            return 0  # a retention reaching before year 1: nothing is that old
        return await prune(conn, older_than=cutoff, limit=self._settings.retention_batch)

    async def _prune_schedules(
        self, conn: Connection, seconds: float, kept: Sequence[str], only: str | None
    ) -> int:
        """A batch of ended schedules older than `seconds`: of `only` (a tenant with a
        retention of its own), or of every tenant but those `kept`."""
        now = await transaction_now(conn)
        try:
            cutoff = now - timedelta(seconds=seconds)
        except OverflowError:
            return 0
        return await prune_schedules(
            conn,
            older_than=cutoff,
            limit=self.schedule_batch,
            kept=kept,
            only=None if only is None else [only],
        )

    @property
    def schedule_batch(self) -> int:
        return max(1, self._settings.retention_batch // SCHEDULE_BATCH_SHARE)

    async def run_once(self) -> int:
        """One round: batches of finished occurrences, then (unless schedule retention is
        off) of ended schedules, each until one comes back short or the loop is stopping;
        the schedules of each tenant with a retention of its own in a pass of their own;
        returns how many occurrences and schedules it deleted."""
        total = schedules = 0
        try:
            if self.history is not None:
                await self.history.round()
            total = await self._batches(self._prune_batch, self._settings.retention_batch, False)
            # A tenant's `retention_seconds` overrides the setting for its schedules (0:
            # kept forever).
            own = await self._db.run(tenant_retentions)
            passes: list[tuple[float, str | None]] = [(self._settings.schedule_retention, None)]
            passes += sorted((seconds, tenant) for tenant, seconds in own.items())
            for seconds, only in passes:
                if seconds <= 0 or self._stopping.is_set():
                    continue
                schedules += await self._batches(
                    partial(
                        self._prune_schedules,
                        seconds=seconds,
                        kept=list(own) if only is None else [],
                        only=only,
                    ),
                    self.schedule_batch,
                    True,
                )
        finally:
            self.rounds += 1
            if total:
                log.info("pruned %d finished occurrences", total)
            if schedules:
                log.info("deleted %d ended schedules with their history", schedules)
        return total + schedules

    async def _batches(
        self, batch: Callable[[Connection], Awaitable[int]], size: int, of_schedules: bool
    ) -> int:
        deleted_total = 0
        while True:
            started = time.monotonic()
            deleted = await self._db.run(batch)
            took = time.monotonic() - started
            deleted_total += deleted
            if of_schedules:
                self.schedules_pruned_total += deleted
                store_metrics.SCHEDULES_PRUNED.inc(deleted)
            else:
                self.pruned_total += deleted
                store_metrics.PRUNED.inc(deleted)
            if deleted < size or self._stopping.is_set():
                return deleted_total
            # Let claims and settles in between; each batch holds its rows briefly.
            await self._pause(rest_after(took))
