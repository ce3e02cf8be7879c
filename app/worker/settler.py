"""The settle batcher: finished attempts are written a batch at a time.

Invariants:
- a settlement leaves the batcher only once written: a failed or cancelled write puts its
  batch back, so a stop cancelled part-way drops nothing it could still write;
- one settlement that the store refuses (not an outage: the statement itself fails) does
  not hold back the others: a failed batch is written again one by one, and a settlement
  refused `MAX_STRIKES` times on its own is given up, logged, to its lease (it is then
  attempted again, as after a crash);
- while the store is unreachable, writes back off exponentially up to `max_backoff`;
- `unsettled` counts every settlement added and not yet written (pending, or in a write
  on its way), and `on_written` runs after each write that lands, once the count is down:
  a caller that bounds `unsettled` bounds what a crash can leave sent but unrecorded.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence

from app.domain.errors import StoreUnavailableError
from app.domain.occurrence import Settlement

log = logging.getLogger(__name__)

MAX_STRIKES = 5

Write = Callable[[Sequence[Settlement]], Awaitable[None]]


class SettleBatcher:
    def __init__(
        self,
        write: Write,
        *,
        gather: float,
        backoff: float,
        max_backoff: float,
        on_error: Callable[[], None] = lambda: None,
        on_written: Callable[[], None] = lambda: None,
    ) -> None:
        self._write = write
        self._gather = gather  # a short window turns a stream of finishes into few writes
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._on_error = on_error
        self._on_written = on_written
        self._in_write = 0  # settlements taken out of `_pending` by the write on its way
        self._pending: list[Settlement] = []
        self._strikes: dict[uuid.UUID, int] = {}
        self._ready = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def unsettled(self) -> int:
        """Added and not yet written: pending, or in the write on its way."""
        return len(self._pending) + self._in_write

    @property
    def writing(self) -> bool:
        """A write is on its way (`stop` would cut it off and put its batch back)."""
        return self._lock.locked()

    def add(self, settlement: Settlement) -> None:
        self._pending.append(settlement)
        self._ready.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="chronoq-settler")

    async def _run(self) -> None:
        failures = 0
        while True:
            await self._ready.wait()
            await asyncio.sleep(self._gather)
            self._ready.clear()
            if await self.flush():
                failures = 0
                continue
            failures += 1
            await asyncio.sleep(min(self._backoff * 2**failures, self._max_backoff))
            self._ready.set()

    async def flush(self) -> bool:
        """Write everything pending; False when something is left for a later try."""
        async with self._lock:
            batch, self._pending = self._pending, []
            if not batch:
                return True
            self._in_write = len(batch)
            try:
                return await self._write_batch(batch)
            finally:
                self._in_write = 0

    async def _write_batch(self, batch: list[Settlement]) -> bool:
        try:
            await self._write(batch)
        except StoreUnavailableError:
            self._keep(batch)
            self._failed("settling %d deliveries failed; will retry", len(batch))
            return False
        except Exception:
            if len(batch) == 1:
                self._failed("settling %d delivery failed; will retry", 1)
                self._keep([s for s in batch if self._strike(s)])
                return not self._pending
            self._failed("settling %d deliveries failed; writing them one by one", len(batch))
            return await self._one_by_one(batch)
        except BaseException:  # cancelled mid-write: keep the batch for the next try
            self._keep(batch)
            raise
        if self._strikes:  # written at last: their earlier refusals no longer count
            for settlement in batch:
                self._strikes.pop(settlement.delivery.occurrence_id, None)
        self._written(len(batch))
        return True

    def _written(self, count: int) -> None:
        self._in_write -= count
        self._on_written()

    async def _one_by_one(self, batch: list[Settlement]) -> bool:
        left: list[Settlement] = []
        try:
            for index, settlement in enumerate(batch):
                try:
                    await self._write([settlement])
                except StoreUnavailableError:
                    left.extend(batch[index:])
                    break
                except Exception:
                    if self._strike(settlement):
                        left.append(settlement)
                    else:  # given up to its lease: no longer held here
                        self._in_write -= 1
                else:
                    self._strikes.pop(settlement.delivery.occurrence_id, None)
                    self._written(1)
        except BaseException:
            self._keep(left + batch[index:])
            raise
        self._keep(left)
        return not left

    def _strike(self, settlement: Settlement) -> bool:
        """Count a refusal of `settlement` alone; False once it is given up."""
        key = settlement.delivery.occurrence_id
        strikes = self._strikes.get(key, 0) + 1
        if strikes < MAX_STRIKES:
            self._strikes[key] = strikes
            return True
        self._strikes.pop(key, None)
        log.error(
            "gave up settling occurrence %s after %d refusals; its lease will run out and it "
            "will be attempted again",
            key,
            strikes,
            exc_info=True,
        )
        return False

    def _keep(self, batch: list[Settlement]) -> None:
        self._pending[:0] = batch
        if self._pending:
            self._ready.set()

    def _failed(self, message: str, count: int) -> None:
        self._on_error()
        log.warning(message, count, exc_info=True)

    async def close(self, attempts: int = 3, pause: float = 0.2) -> bool:
        """Stop the background writer and write what is left, trying `attempts` times;
        True when nothing is left. Safe to call when it never started."""
        await self.stop()
        for attempt in range(attempts):
            if await self.flush():
                return True
            if attempt + 1 < attempts:
                await asyncio.sleep(pause)
        return not self._pending

    async def stop(self) -> None:
        """Stop the background writer and wait until it has ended (a write it was making
        puts its batch back first); what is pending stays pending. A cancellation of the
        caller meanwhile goes through, and the writer is still known until it has ended,
        so that a later `stop` waits for it again."""
        task = self._task
        if task is None:
            return
        task.cancel()
        await asyncio.wait({task})
        self._task = None
