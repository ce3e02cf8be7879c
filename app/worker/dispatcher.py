"""The delivery loop: claim due occurrences, deliver them concurrently, settle in batches.

Invariant: every claimed occurrence ends in exactly one of settle (delivered, retry,
dead letter), release (handed back, due now), or an expired lease that any replica
re-claims. Nothing a replica holds is lost when it stops or dies.

A steady stream of ticks is claimed ahead: a claim also leases the occurrences due within
CLAIM_AHEAD seconds (that no lease holds), and each waits here, off the lanes, until its due
instant by this replica's clock. The claim's round trips then happen before the ticks are
due, not after; nothing starts early.

The loop is put together from parts that each keep one promise (and have tests of their
own): `Lanes` (per-schedule order, the in-flight window, no start on a short lease),
`Held` (claimed ahead, waiting for its instant), `SettleBatcher` (batched writes that drop
nothing), `Alarm` (the idle sleep and its wake-ups), `drain` (the stop) and `ClaimHealth`
(readiness). What is left here is the cycle that joins them: claims, in issue order, feed
the lanes (through `Held` when claimed ahead); finished deliveries feed the batcher.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from app import metrics
from app.domain.occurrence import (
    Attempted,
    Delivery,
    OccurrenceStatus,
    Retryable,
    Settlement,
    Unsent,
    settle,
)
from app.domain.retry import RetryPolicy
from app.settings import Settings
from app.sinks.base import Sinks, local_shortage
from app.store.claims import Claimed
from app.store.database import Database
from app.store.queue import DeliveryQueue, Queue
from app.store.wakeups import Wakeups
from app.worker.ahead import TIMER_SLACK, Held
from app.worker.alarm import WAKE_MARGIN, Alarm
from app.worker.drain import drain
from app.worker.health import ClaimHealth
from app.worker.lanes import Lanes
from app.worker.settler import SettleBatcher

log = logging.getLogger(__name__)

MAX_ERROR_BACKOFF = 5.0
MAX_CLAIMS = 2
# Claims that keep failing for this many poll intervals make the replica unready.
UNHEALTHY_POLLS = 3
# The least a lease must have left for its delivery to start: the dispatch timeout, and
# up to this much more for the settle to land before the lease ends.
SETTLE_ALLOWANCE = 1.0
# How far ahead the loop claims occurrences that are not due yet, and how long it waits
# after a claim that took everything due in that window: the next claim then comes while
# the window's end is still CLAIM_AHEAD - AHEAD_PAUSE away, so a claim that takes less
# than that has every tick waiting before it is due.
CLAIM_AHEAD = 0.5
AHEAD_PAUSE = 0.2
# At most this many claimed-ahead deliveries wait (times the window): beyond it, claims
# take only what is due.
HELD_CAPACITY_FACTOR = 10
# A claim ahead takes up to this many times CHRONOQ_BATCH_SIZE.
AHEAD_BATCHES = 3
# How long before its instant a claimed-ahead attempt is marked started (the statement that
# a pause or cancel since the claim stops it at): about that statement's own time, so that
# it is done by the instant and the tick goes out on time; and the attempts whose marks
# fall due within START_GATHER of each other share one statement, so that a stream of
# thousands of ticks a second costs a few dozen statements a second, not one a tick. A
# pause committed in the last START_LEAD + START_GATHER before an instant is as late as one
# committed after it.
START_LEAD = 0.02
START_GATHER = 0.03

OUTCOMES = {
    OccurrenceStatus.DELIVERED: "delivered",
    OccurrenceStatus.PENDING: "retry",
    OccurrenceStatus.DEAD_LETTERED: "dead_lettered",
}


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
        metrics.LATENESS.labels(delivery.origin, target_type).observe(
            max(time.time() - delivery.fire_at.timestamp(), 0.0)
        )
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


def replica_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def min_lease(settings: Settings) -> float:
    """How much of its lease a delivery needs left to start."""
    spare = settings.lease - settings.dispatch_timeout
    return settings.dispatch_timeout + min(SETTLE_ALLOWANCE, spare / 2)


class Dispatcher:
    """Owns one replica's claim/deliver/settle cycle."""

    def __init__(
        self,
        database: Database | None,
        sinks: Sinks,
        settings: Settings,
        *,
        queue: Queue | None = None,
        rng: random.Random | None = None,
        owner: str | None = None,
        wakeups: Wakeups | None = None,
    ) -> None:
        self._wakeups = wakeups or Wakeups()
        if queue is None:
            assert database is not None, "give a database or a queue"
            queue = DeliveryQueue(database, self._wakeups)
        self._queue = queue
        self._sinks = sinks
        self._settings = settings
        self._rng = rng or random.Random()
        self._policy = RetryPolicy(
            settings.retry_base_delay, settings.retry_max_delay, settings.jitter
        )
        self.owner = owner or replica_name()
        self._stopping = asyncio.Event()
        self._room = asyncio.Event()
        self._alarm = Alarm(self._stopping)
        self._lanes = Lanes(settings.concurrency, min_lease(settings))
        self._settler = SettleBatcher(
            self._write_settlements,
            gather=settings.min_cycle_delay,
            backoff=settings.poll_interval,
            max_backoff=MAX_ERROR_BACKOFF,
            on_error=self._count_error,
        )
        self._health = ClaimHealth(UNHEALTHY_POLLS * settings.poll_interval)
        self._in_flight: dict[asyncio.Task[None], Delivery] = {}
        self._claims: list[asyncio.Task[None]] = []  # in the order they were issued
        self._claiming = 0  # rows asked for by claims still running
        self._releases: set[asyncio.Task[None]] = set()
        self._held = Held(self._due, gather=START_GATHER)  # claimed ahead, not due yet
        # Claimed ahead and about due, waiting to be marked started (`_start_due`); marked,
        # and waiting for their instant (`_marked`); the instant of each, by loop time.
        self._starting: list[tuple[list[Delivery], float]] = []
        self._start_task: asyncio.Task[None] | None = None
        self._marked = Held(self._to_lanes)
        self._instants: dict[uuid.UUID, float] = {}
        self._task: asyncio.Task[None] | None = None
        # At most `concurrency` in flight plus two batches waiting behind them, claimed a
        # full batch at a time: the next claim is on its way before the lanes run dry.
        self._capacity = settings.concurrency + 2 * settings.batch_size
        self._refill_at = settings.batch_size
        self._next_pause = settings.min_cycle_delay
        self._consecutive_errors = 0
        self.cycles = 0
        self.errors = 0

    # -- what others read ------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def health(self) -> str:
        """ "ok", "stopped", or why claims are failing: what readiness reports."""
        if not self.running:
            return "stopped"
        return self._health.problem() or "ok"

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def waiting(self) -> int:
        """Claimed, not started: in the lanes, or claimed ahead and not due yet."""
        return self._lanes.waiting + len(self._held) + len(self._marked)

    # -- steps -----------------------------------------------------------------------

    def _backoff(self, attempt: int) -> float:
        return self._policy.delay(attempt, self._rng)

    async def claim(self, limit: int, ahead: float = 0.0) -> Claimed:
        """Lease up to `limit` due occurrences, and with `ahead` those due within that many
        seconds."""
        claimed = await self._queue.claim(
            limit=limit,
            lease=self._settings.lease,
            owner=self.owner,
            backoff=self._backoff,
            ahead=ahead,
        )
        metrics.CLAIMED.inc(len(claimed.deliveries))
        return claimed

    async def attempt(self, delivery: Delivery) -> Settlement | Unsent:
        """One delivery under the dispatch timeout; any failure becomes a retryable outcome,
        but for a local resource error, which is no attempt at all (`Unsent`)."""
        timeout = self._settings.dispatch_timeout
        outcome: Attempted
        # The wall clock says when it started (the attempt log); the monotonic clock how long.
        started_at = datetime.now(UTC)
        started = time.perf_counter()
        try:
            async with asyncio.timeout(timeout):
                outcome = await self._sinks.deliver(delivery)
        except TimeoutError:
            outcome = Retryable(f"dispatch timed out after {timeout:g}s")
        except Exception as exc:
            if (shortage := local_shortage(exc)) is not None:
                outcome = Unsent(f"this replica ran out of a resource: {shortage}")
            else:
                log.exception("delivery of occurrence %s raised", delivery.occurrence_id)
                outcome = Retryable(f"internal error: {type(exc).__name__}: {exc}"[:500])
        if isinstance(outcome, Unsent):
            metrics.UNSENT.inc()
            log.warning(
                "occurrence %s not sent, handed back for %.1fs: %s",
                delivery.occurrence_id,
                outcome.retry_in,
                outcome.error,
                extra={"occurrence_id": str(delivery.occurrence_id), "reason": outcome.error},
            )
            return outcome
        seconds = time.perf_counter() - started
        settlement = settle(
            delivery,
            outcome,
            self._policy,
            self._rng,
            started_at=started_at,
            duration=seconds,
            replica=self.owner,
        )
        _observe(settlement, seconds)
        return settlement

    async def _write_settlements(self, settlements: Sequence[Settlement]) -> None:
        await self._queue.settle(settlements)
        retries = [s.retry_in for s in settlements if s.retry_in is not None]
        if retries and self.running:
            self.wake_in(min(retries))

    async def release(
        self, deliveries: Sequence[Delivery], *, started: bool, unsent: Unsent | None = None
    ) -> None:
        """Hand occurrences back; one that never started is not counted. `unsent`: why
        they could not be sent, which their `last_error` says until they are."""
        await self._queue.release(deliveries, started=started, unsent=unsent)

    async def _release_quietly(
        self, deliveries: Sequence[Delivery], started: bool, unsent: Unsent | None = None
    ) -> None:
        if not deliveries:
            return
        try:
            await self.release(deliveries, started=started, unsent=unsent)
        except Exception:
            # Their leases run out instead; another replica takes them then.
            self._count_error()
            log.exception("releasing %d occurrences failed", len(deliveries))

    def _hand_back(self, deliveries: list[Delivery]) -> None:
        """Release, in the background, claimed deliveries whose lease is too short to start."""
        if not deliveries:
            return
        metrics.HANDED_BACK.inc(len(deliveries))
        log.info("handing back %d claimed occurrences whose lease ran short", len(deliveries))
        task = asyncio.create_task(self._release_quietly(deliveries, False))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    def _count_error(self) -> None:
        self.errors += 1
        metrics.LOOP_ERRORS.inc()

    async def run_once(self) -> int:
        """One cycle of the loop's own parts, for tests that step it: claim one batch, let
        the lanes start it (in order, one per schedule at a time), wait until every
        delivery of it has finished, and write the settlements. Returns how many it
        claimed. Not for use while `run` is running."""
        assert not self.running, "run_once steps a loop that is not running"
        claimed = await self.claim(min(self._settings.batch_size, self._settings.concurrency))
        loop = asyncio.get_running_loop()
        self._admit(claimed, loop.time())
        while self._in_flight or self._held or self._marked or self._start_task is not None:
            if self._in_flight:
                await asyncio.wait(set(self._in_flight))
            elif self._start_task is not None:
                await asyncio.wait({self._start_task})
            else:  # not due yet: its timer starts it
                at = min(t for t in (self._held.next_at, self._marked.next_at) if t is not None)
                assert at is not None
                await asyncio.sleep(max(at - loop.time(), 0.0) + TIMER_SLACK)
        if self._releases:
            await asyncio.wait(set(self._releases))
        if not await self._settler.flush():
            raise RuntimeError("settling failed; see the log")
        return len(claimed.deliveries)

    # -- the loop --------------------------------------------------------------------

    @asynccontextmanager
    async def started(self) -> AsyncIterator[Dispatcher]:
        """Run the loop for the duration of the block; stop it gracefully on exit."""
        self._task = asyncio.create_task(self.run(), name="chronoq-dispatcher")
        try:
            yield self
        finally:
            await self.stop()

    async def stop(self) -> None:
        """Stop gracefully: the loop bounds its grace period by the dispatch timeout. If
        this is cancelled (a shutdown that ran out of time), the loop is cancelled too and
        waited for: its drain then ends every delivery before this returns."""
        self._stopping.set()
        task = self._task
        if task is None:
            return
        try:
            await asyncio.wait({task}, timeout=self._settings.dispatch_timeout + 5)
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})

    def wake_in(self, seconds: float) -> None:
        """Something is due in `seconds`: end the current sleep in time to claim it ahead,
        if it lasts longer."""
        self._alarm.wake_in(max(seconds - self._ahead(), 0.0))

    def _ahead(self) -> float:
        """How far ahead the next claim looks: CLAIM_AHEAD, or nothing while the claimed-ahead
        deliveries waiting are at their bound."""
        if len(self._held) >= HELD_CAPACITY_FACTOR * self._capacity:
            return 0.0
        return CLAIM_AHEAD

    async def run(self) -> None:
        """Claim, deliver and settle until stopped.

        Claims run as tasks, up to MAX_CLAIMS at once: a claim's round trips wait behind the
        delivery traffic on this event loop, so the next batch is requested before the last
        one has arrived. `min_cycle_delay` (after a claim that found work) or `poll_interval`
        (after an empty one; longer after a failed one) separates their starts.
        """
        loop = asyncio.get_running_loop()
        self._settler.start()
        self._wakeups.subscribe(self.wake_in)
        try:
            async with self._queue.listening():
                while not self._stopping.is_set():
                    self._hand_back(self._lanes.expiring(loop.time()))
                    # A claim ahead takes larger batches: what it takes is not due yet, so
                    # it waits off the lanes, and a claim's round trips are then shared by
                    # more ticks (a steady stream is claimed at a multiple of its rate).
                    ahead = self._ahead()
                    batch = self._settings.batch_size * (AHEAD_BATCHES if ahead else 1)
                    room = (
                        self._settings.concurrency
                        + 2 * batch
                        - len(self._in_flight)
                        - self._lanes.waiting
                        - self._claiming
                    )
                    if room < self._refill_at or len(self._claims) >= MAX_CLAIMS:
                        # Full: let a batch's worth drain and claim it in one statement,
                        # rather than one claim round trip per freed slot.
                        await self._wait_for_room()
                        continue
                    self.cycles += 1
                    metrics.LOOP_CYCLES.inc()
                    self._issue_claim(min(batch, room), ahead)
                    await self._alarm.sleep(self._next_pause)
        finally:
            self._wakeups.unsubscribe(self.wake_in)
            await self._stop_claims()
            self._held.release_all()  # into the lanes, which the drain hands back
            if self._start_task is not None:
                await asyncio.wait({self._start_task})
            self._marked.release_all()
            self._instants.clear()
            await drain(
                lanes=self._lanes,
                in_flight=self._in_flight,
                release=self._release_quietly,
                settler=self._settler,
                grace=self._settings.dispatch_timeout,
            )
            if self._releases:
                await asyncio.wait(set(self._releases))

    async def _stop_claims(self) -> None:
        """Let running claims finish (their rows are then handed back by the drain); if
        the stop is cancelled meanwhile, cancel them: their leases run out."""
        claims = list(self._claims)
        if not claims:
            return
        try:
            await asyncio.wait(claims)
        finally:
            for claim in claims:
                claim.cancel()
            await asyncio.wait(claims)

    def _issue_claim(self, limit: int, ahead: float) -> None:
        previous = self._claims[-1] if self._claims else None
        self._claiming += limit
        task = asyncio.create_task(self._claim_into_lanes(limit, previous, ahead))
        self._claims.append(task)

    async def _claim_into_lanes(
        self, limit: int, previous: asyncio.Task[None] | None, ahead: float = 0.0
    ) -> None:
        """One claim; its rows join the lanes after those of every claim issued before it
        (two claims at once can each take some of one schedule's ticks, and the earlier
        claim holds the earlier ticks), then start as the lanes allow. A failure is logged
        and paces the next claim by an exponential backoff."""
        issued = asyncio.get_running_loop().time()
        claimed: Claimed | None = None
        try:
            try:
                claimed = await self.claim(limit, ahead)
            except Exception as exc:
                self._claim_failed(exc)
            if previous is not None:
                await asyncio.wait({previous})
        finally:
            # Out of `_claims` before the loop is woken: a done-callback would run only after
            # the woken loop had looked, and a loop that saw a finished claim still counted
            # could wait for a room signal that no one is left to send.
            current = asyncio.current_task()
            if current in self._claims:
                self._claims.remove(current)
            self._claiming -= limit
            self._room.set()
        if claimed is None:
            return
        self._consecutive_errors = 0
        self._health.succeeded()
        poll = self._settings.poll_interval
        if len(claimed.deliveries) >= limit or (claimed.deliveries and not ahead):
            self._next_pause = self._settings.min_cycle_delay  # a backlog: claim again soon
        elif claimed.deliveries:
            # Everything due within the window is claimed: the next claim can wait a while.
            self._next_pause = min(poll, max(self._settings.min_cycle_delay, AHEAD_PAUSE))
        else:
            # Idle: sleep until the next known due instant (less the window, when that
            # instant is beyond it: a lease ending sooner cannot be claimed ahead), polling
            # at least this often.
            due_in = claimed.due_in
            if due_in is None:
                self._next_pause = poll
            else:
                wait = due_in - ahead if due_in > ahead else due_in
                self._next_pause = min(poll, max(wait, 0.0) + WAKE_MARGIN)
        self._alarm.wake_in(self._next_pause)
        self._admit(claimed, issued)

    def _claim_failed(self, exc: Exception) -> None:
        self._count_error()
        self._health.failed(exc)
        self._consecutive_errors += 1
        self._next_pause = min(
            self._settings.poll_interval * 2 ** min(self._consecutive_errors, 10),
            max(MAX_ERROR_BACKOFF, self._settings.poll_interval),
        )
        log.exception("claim failed; retrying in %.2fs", self._next_pause)

    def _admit(self, claimed: Claimed, issued: float) -> None:
        """The lease began no earlier than the claim was issued: it ends by then + lease.
        A delivery claimed ahead waits until its due instant, by this replica's clock."""
        deadline = issued + self._settings.lease
        ready = claimed.deliveries
        due_now: list[Delivery] = []
        if claimed.not_before:
            now, wall = asyncio.get_running_loop().time(), time.time()
            ready = []
            for delivery in claimed.deliveries:
                due = claimed.not_before.get(delivery.occurrence_id)
                if due is None:
                    ready.append(delivery)
                elif (wait := due.timestamp() - wall) <= START_LEAD:
                    due_now.append(delivery)  # claimed ahead, and (about) due by now
                    self._instants[delivery.occurrence_id] = now + wait
                else:
                    self._held.hold(delivery, now + wait - START_LEAD, deadline)
                    self._instants[delivery.occurrence_id] = now + wait
            self._held.arm()
        self._lanes.admit(ready, deadline)
        self._start_ready()
        if due_now:
            self._due(due_now, deadline)

    def _due(self, deliveries: list[Delivery], deadline: float) -> None:
        """Claimed-ahead deliveries START_LEAD before their instant: marked started first
        (`_start_due`), then held until the instant; when the loop is stopping they join the
        lanes at once, which the drain hands back unstarted."""
        if self._stopping.is_set():
            self._lanes.admit(deliveries, deadline)
            self._start_ready()
            return
        self._starting.append((deliveries, deadline))
        if self._start_task is None:
            self._start_task = asyncio.create_task(self._start_due())

    def _to_lanes(self, deliveries: list[Delivery], deadline: float) -> None:
        """Marked started and now at their instant (or the loop stopping): into the lanes."""
        self._lanes.admit(deliveries, deadline)
        self._start_ready()

    async def _start_due(self) -> None:
        """Mark claimed-ahead deliveries started, in one statement for all those that came
        due meanwhile, and let the lanes start them. One that a cancel or a pause stopped
        since its claim never starts: it is handed back unstarted, with its instant (a
        pause holds it until the resume; a cancel has ended it already). If the statement
        fails, all of them are handed back unstarted (or their leases run out, uncharged)."""
        try:
            while self._starting:
                groups, self._starting = self._starting, []
                due = [delivery for deliveries, _ in groups for delivery in deliveries]
                try:
                    may_start = await self._queue.start_ahead(due)
                except Exception:
                    self._count_error()
                    log.exception("marking %d claimed-ahead occurrences started failed", len(due))
                    for delivery in due:
                        self._instants.pop(delivery.occurrence_id, None)
                    await self._release_quietly(due, False)
                    continue
                now = asyncio.get_running_loop().time()
                for deliveries, deadline in groups:
                    ready = []
                    for delivery in deliveries:
                        at = self._instants.pop(delivery.occurrence_id, now)
                        if delivery.occurrence_id not in may_start:
                            continue
                        if at > now + TIMER_SLACK:
                            self._marked.hold(delivery, at, deadline)  # never early
                        else:
                            ready.append(delivery)
                    self._lanes.admit(ready, deadline)
                self._marked.arm()
                self._start_ready()
                stopped = [d for d in due if d.occurrence_id not in may_start]
                if stopped:
                    log.info(
                        "%d claimed-ahead occurrences were paused or cancelled before their "
                        "instant; not starting them",
                        len(stopped),
                    )
                    await self._release_quietly(stopped, False)
        finally:
            self._start_task = None

    def _start_ready(self) -> None:
        if self._stopping.is_set() and self.running:
            return  # the drain hands back what is waiting
        started = self._lanes.start(asyncio.get_running_loop().time())
        self._hand_back(started.hand_back)
        for delivery in started.launch:
            task = asyncio.create_task(self._deliver(delivery))
            self._in_flight[task] = delivery
            metrics.IN_FLIGHT.inc()
            task.add_done_callback(self._finished)

    async def _deliver(self, delivery: Delivery) -> None:
        # The settlement joins the batcher as the task's last step: a finished task's
        # attempt is always there to settle, whether or not its callback has run.
        done = await self.attempt(delivery)
        if isinstance(done, Unsent):
            # Not the target's failure: handed back uncharged, due again a little later.
            await self._release_quietly([delivery], False, done)
            return
        self._settler.add(done)

    def _finished(self, task: asyncio.Task[None]) -> None:
        delivery = self._in_flight.pop(task, None)
        if delivery is None:
            return
        metrics.IN_FLIGHT.dec()
        self._lanes.finished(delivery)
        self._start_ready()
        room = self._capacity - len(self._in_flight) - self._lanes.waiting
        if room >= self._refill_at:
            self._room.set()

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
