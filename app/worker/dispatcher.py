"""The delivery loop: claim due occurrences, deliver them concurrently, settle in batches.

Invariant: every claimed occurrence ends in exactly one of settle (delivered, retry,
dead letter), release (handed back, due now), or an expired lease that any replica
re-claims. Nothing a replica holds is lost when it stops or dies.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
import random
import socket
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import datetime

from app import metrics
from app.domain.occurrence import (
    Delivery,
    OccurrenceStatus,
    Outcome,
    Retryable,
    Settlement,
    settle,
)
from app.domain.retry import RetryPolicy
from app.settings import Settings
from app.sinks.base import Sinks
from app.store.clock import transaction_now
from app.store.database import Connection, Database
from app.store.occurrences import OccurrenceStore
from app.store.wakeups import PgListener, Wakeups, next_due_in

log = logging.getLogger(__name__)

MAX_ERROR_BACKOFF = 5.0
MAX_CLAIMS = 2
# Wake this long after an occurrence's instant, so the claim's clock has passed it.
WAKE_MARGIN = 0.001


def _observe(settlement: Settlement, seconds: float) -> None:
    """Metrics and the log line of one finished attempt. Log lines carry ids, the attempt and
    the outcome; never a payload, a header or a URL."""
    delivery = settlement.delivery
    target_type = delivery.target.type
    status = settlement.status
    outcome = OUTCOMES[status]
    metrics.DURATION.labels(target_type).observe(seconds)
    metrics.DELIVERIES.labels(outcome, target_type).inc()
    fields = {
        "schedule_id": str(delivery.schedule_id),
        "occurrence_id": str(delivery.occurrence_id),
        "attempt": delivery.attempt,
        "outcome": outcome,
    }
    if status is OccurrenceStatus.DELIVERED:
        metrics.LATENESS.observe(max(time.time() - delivery.fire_at.timestamp(), 0.0))
        if log.isEnabledFor(logging.DEBUG):
            log.debug("delivered occurrence %s", delivery.occurrence_id, extra=fields)
    elif status is OccurrenceStatus.DEAD_LETTERED:
        metrics.DEAD_LETTERS.inc()
        reason = _reason(settlement.error)
        log.warning(
            "dead-lettered occurrence %s after attempt %d: %s",
            delivery.occurrence_id,
            delivery.attempt,
            reason,
            extra={**fields, "reason": reason},
        )
    else:
        reason = _reason(settlement.error)
        log.info(
            "occurrence %s failed attempt %d, retrying in %.1fs: %s",
            delivery.occurrence_id,
            delivery.attempt,
            settlement.retry_in or 0.0,
            reason,
            extra={**fields, "reason": reason, "retry_in": settlement.retry_in},
        )


def _reason(error: str | None) -> str:
    """The kind of a failure without its detail: a target's reply may echo the payload and
    a client error may name a URL with a token in it. The full text is on the occurrence."""
    return (error or "unknown").split(":", 1)[0][:80]


OUTCOMES = {
    OccurrenceStatus.DELIVERED: "delivered",
    OccurrenceStatus.PENDING: "retry",
    OccurrenceStatus.DEAD_LETTERED: "dead_lettered",
}


def _tick_order(delivery: Delivery) -> tuple[datetime, uuid.UUID]:
    return delivery.fire_at, delivery.occurrence_id


def replica_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Dispatcher:
    """Owns one replica's claim/deliver/settle cycle."""

    def __init__(
        self,
        database: Database,
        sinks: Sinks,
        settings: Settings,
        *,
        store: OccurrenceStore | None = None,
        rng: random.Random | None = None,
        owner: str | None = None,
        wakeups: Wakeups | None = None,
    ) -> None:
        self._db = database
        self._wakeups = wakeups or Wakeups()
        self._sinks = sinks
        self._settings = settings
        self._store = store or OccurrenceStore()
        self._rng = rng or random.Random()
        self._policy = RetryPolicy(
            settings.retry_base_delay, settings.retry_max_delay, settings.jitter
        )
        self.owner = owner or replica_name()
        self._stopping = asyncio.Event()
        self._room = asyncio.Event()
        self._settle_ready = asyncio.Event()
        self._settle_lock = asyncio.Lock()
        self._inflight: dict[asyncio.Task[None], Delivery] = {}
        # Claimed but not started: the next claim overlaps the deliveries in flight.
        self._queued: deque[Delivery] = deque()
        self._to_settle: list[Settlement] = []
        # Schedules with a delivery in flight, and their deliveries waiting behind it in tick
        # order (two claims running side by side can each take some of one schedule's rows).
        self._busy: dict[uuid.UUID, list[Delivery]] = {}
        self._held = 0
        self._task: asyncio.Task[None] | None = None
        # At most `concurrency` in flight plus two batches queued behind them, claimed a
        # full batch at a time: the next claim is on its way before the queue runs dry.
        self._capacity = settings.concurrency + 2 * settings.batch_size
        self._refill_at = settings.batch_size
        self._claims: set[asyncio.Task[None]] = set()
        self._claiming = 0  # rows asked for by claims still running
        self._next_pause = settings.min_cycle_delay
        # The idle sleep ends at `_wake_at` (event-loop time); an announcement or a claim
        # that learns of an earlier due instant moves it earlier and sets `_rewake`.
        self._wake_at = 0.0
        self._rewake = asyncio.Event()
        self._due_in: float | None = None  # from the last empty claim
        self._consecutive_errors = 0
        self.cycles = 0
        self.errors = 0

    # -- steps ----------------------------------------------------------------------

    def _backoff(self, attempt: int) -> float:
        return self._policy.delay(attempt, self._rng)

    async def claim(self, limit: int) -> list[Delivery]:
        """Lease up to `limit` due occurrences. When there are none, the same transaction
        reads how soon the next one is due, for the idle sleep."""
        settings = self._settings

        async def work(conn: Connection) -> list[Delivery]:
            found = await self._store.claim_due(
                conn, limit=limit, lease=settings.lease, owner=self.owner, backoff=self._backoff
            )
            self._due_in = None if found else await next_due_in(conn)
            return found

        found = await self._db.run(work)
        metrics.CLAIMED.inc(len(found))
        return found

    async def attempt(self, delivery: Delivery) -> Settlement:
        """One delivery under the dispatch timeout; any failure becomes a retryable outcome."""
        timeout = self._settings.dispatch_timeout
        outcome: Outcome
        started = time.perf_counter()
        try:
            async with asyncio.timeout(timeout):
                outcome = await self._sinks.deliver(delivery)
        except TimeoutError:
            outcome = Retryable(f"dispatch timed out after {timeout:g}s")
        except Exception as exc:
            log.exception("delivery of occurrence %s raised", delivery.occurrence_id)
            outcome = Retryable(f"internal error: {type(exc).__name__}")
        settlement = settle(delivery, outcome, self._policy, self._rng)
        _observe(settlement, time.perf_counter() - started)
        return settlement

    async def settle(self, settlements: Sequence[Settlement]) -> None:
        if settlements:
            await self._db.run(lambda conn: self._store.settle(conn, settlements))
            retries = [s.retry_in for s in settlements if s.retry_in is not None]
            if retries and self.running:
                self.wake_in(min(retries))

    async def release(self, deliveries: Sequence[Delivery], *, started: bool) -> None:
        """Hand occurrences back, due now, and tell the other replicas so that one of them
        takes them at once (this one is stopping)."""
        if not deliveries:
            return

        async def work(conn: Connection) -> None:
            await self._store.release(conn, deliveries, started=started)
            if conn.dialect.name == "postgresql":
                await self._wakeups.announce(conn, await transaction_now(conn))

        await self._db.run(work)

    async def run_once(self) -> int:
        """Claim one batch, deliver it, settle it; returns how many were claimed (for tests)."""
        deliveries = await self.claim(min(self._settings.batch_size, self._settings.concurrency))
        by_schedule: dict[uuid.UUID, list[Delivery]] = {}
        for delivery in deliveries:
            by_schedule.setdefault(delivery.schedule_id, []).append(delivery)

        async def in_order(group: list[Delivery]) -> list[Settlement]:
            return [await self.attempt(delivery) for delivery in group]

        groups = await asyncio.gather(*(in_order(g) for g in by_schedule.values()))
        await self.settle([settlement for group in groups for settlement in group])
        return len(deliveries)

    # -- the loop -------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @asynccontextmanager
    async def started(self) -> AsyncIterator[Dispatcher]:
        """Run the loop for the duration of the block; stop it gracefully on exit."""
        self._task = asyncio.create_task(self.run(), name="chronoq-dispatcher")
        try:
            yield self
        finally:
            await self.stop()

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            # The loop itself bounds the grace period by the dispatch timeout.
            await asyncio.wait({self._task}, timeout=self._settings.dispatch_timeout + 5)
            if not self._task.done():
                self._task.cancel()
                with suppress(asyncio.CancelledError):
                    await self._task

    async def _pause(self, seconds: float) -> None:
        """Sleep `seconds`, or less if a wake-up moves the end earlier, or until stopped."""
        loop = asyncio.get_running_loop()
        self._wake_at = loop.time() + seconds
        while not self._stopping.is_set():
            remaining = self._wake_at - loop.time()
            if remaining <= 0:
                return
            self._rewake.clear()
            woken = asyncio.ensure_future(self._rewake.wait())
            stop = asyncio.ensure_future(self._stopping.wait())
            try:
                await asyncio.wait({woken, stop}, timeout=remaining, return_when="FIRST_COMPLETED")
            finally:
                woken.cancel()
                stop.cancel()

    def wake_in(self, seconds: float) -> None:
        """Something is due in `seconds`: end the current sleep by then, if it lasts longer."""
        at = asyncio.get_running_loop().time() + max(seconds, 0.0) + WAKE_MARGIN
        if at < self._wake_at:
            self._wake_at = at
            self._rewake.set()

    async def run(self) -> None:
        """Claim, deliver and settle until stopped.

        Claims run as tasks, up to MAX_CLAIMS at once: a claim's round trips wait behind the
        delivery traffic on this event loop, so the next batch is requested before the last
        one has arrived. `min_cycle_delay` (after a claim that found work) or `poll_interval`
        (after an empty one; longer after a failed one) separates their starts.
        """
        settler = asyncio.create_task(self._settle_continuously(), name="chronoq-settler")
        self._wakeups.subscribe(self.wake_in)
        listener = None
        if self._db.dialect == "postgresql":
            listener = PgListener(self._db.url, self._wakeups, schema=self._db.schema)
            listener.start()
        try:
            while not self._stopping.is_set():
                room = (
                    self._capacity
                    - len(self._inflight)
                    - len(self._queued)
                    - self._held
                    - self._claiming
                )
                if room < self._refill_at or len(self._claims) >= MAX_CLAIMS:
                    # Full: let a batch's worth drain and claim it in one statement, rather
                    # than one claim round trip per freed slot.
                    await self._wait_for_room()
                    continue
                self.cycles += 1
                metrics.LOOP_CYCLES.inc()
                limit = min(self._settings.batch_size, room)
                self._claiming += limit
                task = asyncio.create_task(self._claim_into_queue(limit))
                self._claims.add(task)
                task.add_done_callback(self._claims.discard)
                await self._pause(self._next_pause)
        finally:
            self._wakeups.unsubscribe(self.wake_in)
            if listener is not None:
                await listener.stop()
            if self._claims:
                await asyncio.wait(set(self._claims))
            await self._drain()
            settler.cancel()
            with suppress(asyncio.CancelledError):
                await settler

    async def _claim_into_queue(self, limit: int) -> None:
        """One claim; its rows join the queue and start as slots allow. A failure is logged
        and paces the next claim by an exponential backoff."""
        try:
            deliveries = await self.claim(limit)
        except Exception:
            self.errors += 1
            metrics.LOOP_ERRORS.inc()
            self._consecutive_errors += 1
            self._next_pause = min(
                self._settings.poll_interval * 2 ** min(self._consecutive_errors, 10),
                max(MAX_ERROR_BACKOFF, self._settings.poll_interval),
            )
            log.exception("claim failed; retrying in %.2fs", self._next_pause)
            return
        finally:
            # Out of `_claims` before the loop is woken: a done-callback would run only after
            # the woken loop had looked, and a loop that saw a finished claim still counted
            # could wait for a room signal that no one is left to send.
            current = asyncio.current_task()
            if current is not None:
                self._claims.discard(current)
            self._claiming -= limit
            self._room.set()
        self._consecutive_errors = 0
        if deliveries:
            self._next_pause = self._settings.min_cycle_delay
        else:
            # Idle: sleep until the next known due instant, polling at least this often.
            due_in = self._due_in
            poll = self._settings.poll_interval
            self._next_pause = poll if due_in is None else min(poll, due_in + WAKE_MARGIN)
        self.wake_in(self._next_pause)
        self._queued.extend(deliveries)
        self._start_queued()

    def _start_queued(self) -> None:
        """Start queued deliveries while the in-flight window has room. A schedule has one
        delivery in flight at a time: its others wait behind it, in tick order, so that
        catch-ups and backfills arrive in tick order."""
        while self._queued and len(self._inflight) < self._settings.concurrency:
            if self._stopping.is_set():
                return
            delivery = self._queued.popleft()
            waiting = self._busy.get(delivery.schedule_id)
            if waiting is not None:
                bisect.insort(waiting, delivery, key=_tick_order)
                self._held += 1
                continue
            self._busy[delivery.schedule_id] = []
            self._launch(delivery)

    def _launch(self, delivery: Delivery) -> None:
        task = asyncio.create_task(self._deliver(delivery))
        self._inflight[task] = delivery
        metrics.IN_FLIGHT.inc()
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        delivery = self._inflight.pop(task, None)
        if delivery is not None:
            metrics.IN_FLIGHT.dec()
            waiting = self._busy.pop(delivery.schedule_id, None)
            if waiting:
                self._held -= 1
                following = waiting.pop(0)
                if self._stopping.is_set():
                    self._queued.appendleft(following)  # handed back by the drain
                    self._queued.extend(waiting)
                    self._held -= len(waiting)
                else:
                    self._busy[following.schedule_id] = waiting
                    self._launch(following)
        self._start_queued()
        if self._capacity - len(self._inflight) - len(self._queued) - self._held >= self._refill_at:
            self._room.set()

    async def _deliver(self, delivery: Delivery) -> None:
        settlement = await self.attempt(delivery)
        # Append only after the await: the settler swaps the list out while we wait.
        self._to_settle.append(settlement)
        self._settle_ready.set()

    async def _wait_for_room(self) -> None:
        """Until a claim or a settle frees room; the poll interval bounds the wait, so a
        missed signal costs a poll, never the loop."""
        self._room.clear()
        stop = asyncio.ensure_future(self._stopping.wait())
        room = asyncio.ensure_future(self._room.wait())
        try:
            await asyncio.wait(
                {stop, room},
                timeout=self._settings.poll_interval,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            stop.cancel()
            room.cancel()

    async def _settle_continuously(self) -> None:
        failures = 0
        while True:
            await self._settle_ready.wait()
            # A short gather window turns a stream of finishing deliveries into few statements.
            await asyncio.sleep(self._settings.min_cycle_delay)
            self._settle_ready.clear()
            if await self._flush():
                failures = 0
            else:
                failures += 1
                await asyncio.sleep(
                    min(self._settings.poll_interval * 2**failures, MAX_ERROR_BACKOFF)
                )
                self._settle_ready.set()

    async def _flush(self) -> bool:
        """Write every finished attempt in one transaction; on failure keep them for later."""
        async with self._settle_lock:
            batch, self._to_settle = self._to_settle, []
            try:
                await self.settle(batch)
            except Exception:
                self.errors += 1
                metrics.LOOP_ERRORS.inc()
                log.exception("settling %d deliveries failed; will retry", len(batch))
                self._to_settle[:0] = batch
                return False
            return True

    async def _release_quietly(self, deliveries: Sequence[Delivery], *, started: bool) -> None:
        try:
            await self.release(deliveries, started=started)
        except Exception:
            # Their leases run out instead; another replica takes them then.
            log.exception("releasing %d occurrences failed", len(deliveries))

    async def _drain(self) -> None:
        """Graceful stop: what was claimed but not started is handed back at once (its attempt
        not counted); in-flight deliveries get the dispatch timeout to finish, then the
        stragglers are cancelled and handed back; every finished attempt is settled."""
        queued, self._queued = list(self._queued), deque()
        for waiting in self._busy.values():
            queued.extend(waiting)
            waiting.clear()
        self._held = 0
        await self._release_quietly(queued, started=False)
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=self._settings.dispatch_timeout)
        stragglers = list(self._inflight.items())
        for task, _ in stragglers:
            task.cancel()
        if stragglers:
            await asyncio.wait({task for task, _ in stragglers})
            await self._release_quietly([d for _, d in stragglers], started=True)
        for _ in range(3):
            if await self._flush():
                break
            await asyncio.sleep(0.2)
