"""Keeping history in day partitions (PostgreSQL), a round at a time inside the pruner's:
the days ahead made, the expired ones dropped, a slice of the default partition swept.

Invariant: what is dropped is decided by `app.store.records.history` alone; the attempt
log's days go `retention` after they ended (the occurrences' retention), the events' days
`schedule_retention` after (none while it is 0, which keeps ended schedules and so their
events). A failure is the pruner's: logged, and the round tried again later.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from functools import partial

from app.settings import Settings
from app.store.dialects import transaction_now
from app.store.engine.database import Database
from app.store.records.history import drop_expired, make_ahead, sweep_kept
from app.store.schema.partitions import ATTEMPTS, HISTORY, History
from app.telemetry import store_metrics

log = logging.getLogger(__name__)

# Rows of a default partition read for owners gone, per table and round.
SWEEP_SLICE = 5000


class HistoryKeeper:
    """One replica's share of the partitions' upkeep."""

    def __init__(self, database: Database, settings: Settings) -> None:
        self._db = database
        self._settings = settings
        self._sweep_from: dict[str, tuple[uuid.UUID, datetime] | None] = {
            h.name: None for h in HISTORY
        }
        self.made: list[str] = []
        self.dropped: list[str] = []

    def _kept_for(self, history: History) -> float:
        if history is ATTEMPTS:
            return self._settings.retention
        return self._settings.schedule_retention

    async def round(self) -> int:
        """Make, drop and sweep once; how many partitions it made and dropped and rows it
        swept."""
        now = await self._db.run(transaction_now)
        done = 0
        for history in HISTORY:
            made = await self._db.run(partial(make_ahead, history=history, today=now.date()))
            if made:
                log.info("made partitions %s", ", ".join(made))
            self.made += made
            done += len(made)
            seconds = self._kept_for(history)
            if seconds > 0:
                try:
                    cutoff = now - timedelta(seconds=seconds)
                except OverflowError:
                    cutoff = None  # reaching before year 1: nothing is that old
                while cutoff is not None:
                    name = await self._db.run(partial(drop_expired, history=history, cutoff=cutoff))
                    if name is None:
                        break
                    log.info("dropped partition %s", name)
                    self.dropped.append(name)
                    store_metrics.HISTORY_PARTITIONS_DROPPED.labels(table=history.name).inc()
                    done += 1
            swept, self._sweep_from[history.name] = await self._db.run(
                partial(
                    sweep_kept,
                    history=history,
                    after=self._sweep_from[history.name],
                    limit=SWEEP_SLICE,
                )
            )
            store_metrics.HISTORY_ROWS_SWEPT.labels(table=history.name).inc(swept)
            done += swept
        return done
