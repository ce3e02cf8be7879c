"""Hand-backs: claimed occurrences the loop returns to the store unsettled (released).

Invariants:
- a hand-back never raises: one that fails is logged and counted, and its leases run out
  instead, after which any replica takes the occurrences again;
- one made in the background is known until it has ended (`busy`, `wait`), so that the
  loop's stop waits for it and the loop is not at rest before it (`Dispatcher.at_rest`);
- each one, in the background or not, signals its end (`on_done`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from app.domain.errors import StoreUnavailableError
from app.domain.occurrence import Delivery, Unsent
from app.store.loop.queue import Queue
from app.telemetry import delivery_metrics

log = logging.getLogger(__name__)


class HandBacks:
    def __init__(
        self, queue: Queue, *, on_error: Callable[[], None], on_done: Callable[[], None]
    ) -> None:
        self._queue = queue
        self._on_error = on_error
        self._on_done = on_done  # a hand-back has ended (one in the background: and left `busy`)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def busy(self) -> bool:
        return bool(self._tasks)

    async def release(
        self, deliveries: Sequence[Delivery], started: bool, unsent: Unsent | None = None
    ) -> None:
        """Hand occurrences back; one that never started is not counted as an attempt.
        `unsent`: why they could not be sent, which their `last_error` says until they are."""
        if not deliveries:
            return
        try:
            await self._hand_back(deliveries, started, unsent)
        finally:
            self._on_done()

    async def _hand_back(
        self, deliveries: Sequence[Delivery], started: bool, unsent: Unsent | None = None
    ) -> None:
        try:
            await self._queue.release(deliveries, started=started, unsent=unsent)
        except StoreUnavailableError as exc:
            # Their leases run out and the next claim takes them: nothing is lost.
            self._on_error()
            log.warning("releasing %d occurrences failed: %s", len(deliveries), exc)
        except Exception:
            self._on_error()
            log.exception("releasing %d occurrences failed", len(deliveries))

    def short_leases(self, deliveries: list[Delivery]) -> None:
        """Hand back, in the background, claimed deliveries whose lease is too short to
        start."""
        if not deliveries:
            return
        delivery_metrics.HANDED_BACK.inc(len(deliveries))
        log.info("handing back %d claimed occurrences whose lease ran short", len(deliveries))
        self.in_background(deliveries)

    def in_background(self, deliveries: list[Delivery]) -> None:
        """Hand back unstarted, without waiting; `wait` waits for it."""
        task = asyncio.create_task(self._hand_back(deliveries, False))
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    async def wait(self) -> None:
        if self._tasks:
            await asyncio.wait(set(self._tasks))

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._on_done()
