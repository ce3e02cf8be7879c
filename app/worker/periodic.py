"""A duty a replica runs beside its delivery loop every few seconds (retention, the charts'
roll-up): started and stopped with the loop, each round's failure logged and the next round
put off longer each time (doubling, capped), never stopping the loop."""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import ClassVar, Self

from app.domain.errors import StoreUnavailableError

log = logging.getLogger(__name__)

MAX_ERROR_BACKOFF = 300.0
STOP_GRACE = 5.0


class Periodic(ABC):
    """`run_once` every `interval` seconds between `started()` and its end."""

    # The task's name, and what its log lines say failed ("pruning").
    task_name: ClassVar[str]
    doing: ClassVar[str]

    def __init__(self) -> None:
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.errors = 0

    @property
    @abstractmethod
    def interval(self) -> float:
        """Seconds between rounds."""

    @abstractmethod
    async def run_once(self) -> int:
        """One round; what it did, as a count."""

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @asynccontextmanager
    async def started(self) -> AsyncIterator[Self]:
        """Run the rounds for the duration of the block; stop them on exit."""
        self._stopping.clear()
        self._task = asyncio.create_task(self.run(), name=self.task_name)
        try:
            yield self
        finally:
            await self.stop()

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            # A round in flight is short transactions; past the grace, cancelling it rolls
            # back the one open, which loses nothing.
            await asyncio.wait({self._task}, timeout=STOP_GRACE)
            if not self._task.done():
                self._task.cancel()
                with suppress(asyncio.CancelledError):
                    await self._task

    async def _pause(self, seconds: float) -> None:
        with suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def run(self) -> None:
        """A round every `interval` until stopped; after a failed one, wait longer each time
        (doubling, capped) before the next."""
        interval = self.interval
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
                    # The database down or not migrated: its detail says which, no traceback.
                    log.warning("%s failed; retrying in %.1fs: %s", self.doing, delay, exc.detail)
                else:
                    log.exception("%s failed; retrying in %.1fs", self.doing, delay)
            else:
                failures = 0
                delay = interval
