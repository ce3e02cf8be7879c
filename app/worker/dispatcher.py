"""The delivery loop: claim due occurrences, deliver them concurrently, settle in batches.

Invariants: every claimed occurrence ends in exactly one of settle (delivered, retry,
dead letter), release (handed back, due now), or an expired lease that any replica
re-claims. Nothing a replica holds is lost when it stops or dies. What a replica that dies
has sent and not recorded (and is sent again) is at most UNRECORDED_WINDOWS windows
(`concurrency`): in flight, or finished and waiting for a settle write.

The loop is put together from parts that each keep one promise (and have tests of their
own): `Pacing` (when to claim and how much), `Lanes` (per-schedule order, the in-flight
window, no start on a short lease), `ClaimedAhead` (ticks claimed before they are due:
`app.worker.ahead` says how they wait), `attempt` (one delivery, never raising) and its
`outcomes`, `SettleBatcher` (batched writes that drop nothing), `Alarm` (the idle sleep and
its wake-ups), `HandBacks` (releases that never raise), `drain` (the stop) and
`ClaimHealth` (readiness), `StartMarks` (the start marks of what waited unstarted). What is
left here is the cycle that joins them: claims, in issue order, feed the lanes (through
`ClaimedAhead` when claimed ahead); finished deliveries feed the batcher.

An attempt is charged once it starts: with the claim when the claim found no more than the
free slots, else at its start mark (`StartMarks`, or `ClaimedAhead`'s for one claimed
ahead). What waits in the lanes unstarted costs nothing if the replica dies.
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
from dataclasses import replace
from functools import partial

from app.domain.occurrence import Delivery, OccurrenceStatus, Settlement, Unsent
from app.settings import Settings
from app.sinks.registry import Sinks
from app.store.engine.database import Database
from app.store.engine.wakeups import Wakeups
from app.store.loop.claims import Claimed
from app.store.loop.queue import DeliveryQueue, Queue
from app.telemetry import delivery_metrics, tracing
from app.worker.ahead import ClaimedAhead, Turnover
from app.worker.alarm import Alarm
from app.worker.attempt import attempt
from app.worker.drain import drain
from app.worker.handbacks import HandBacks
from app.worker.health import ClaimHealth
from app.worker.lanes import Lanes
from app.worker.outcomes import auto_paused, circuits_changed
from app.worker.pacing import MAX_ERROR_BACKOFF, Pacing
from app.worker.settler import SettleBatcher
from app.worker.start_marks import StartMarks

log = logging.getLogger(__name__)

# Claims that keep failing for this many poll intervals make the replica unready.
UNHEALTHY_POLLS = 3
# The least a lease must have left for its delivery to start: the dispatch timeout, and
# up to this much more for the settle to land before the lease ends.
SETTLE_ALLOWANCE = 1.0
# At most this many claimed-ahead deliveries wait (times the window): beyond it, claims
# take only what is due.
AHEAD_CAPACITY_FACTOR = 10
# At most this many windows of deliveries are sent and not yet recorded (in flight, or
# finished and waiting for a settle write): a crash sends them again. Beyond it, starts
# wait for a write to land. Without a bound a store slower than the targets lets that grow
# to thousands (measured: 1,300 on PostgreSQL, 3,200 on SQLite in a W1 burst); at 8 the
# burst keeps its rate (docs/performance.md), at 2 it lost 30%: each write then carried too
# few settlements to keep up.
UNRECORDED_WINDOWS = 8
# While claimed-ahead ticks wait for their instant, retries and replays leave this share
# of the in-flight window free for them, and as much of the unrecorded bound
# (`Lanes.start`): measured beside a bulk replay on two replicas, most ticks that started
# late had waited for a slot in a window full of replayed deliveries, the rest for a settle
# write to bring the unrecorded back under its bound.
FIRST_ATTEMPT_RESERVE = 0.25
# Start marks of deliveries that waited unstarted are made ahead of a free slot for at most
# this share of the in-flight window (`StartMarks.spare`: as many as finished during the last
# mark), so that a saturated loop does not wait a mark's round trip before each start.
# Measured in W1 on PostgreSQL (docs/performance.md): at a quarter, 1,383 and 1,396
# deliveries/s against 1,800 without marks; at the whole window, with the marks gathered
# and each one statement looking its rows up by key, about 0.85 of the tree without marks
# (docs/benchmark-history.md, "Start marks made cheap"); two and four windows gained 3-5 %
# more, for a crash that may charge that many more attempts.
MARK_AHEAD_SHARE = 1.0
# The share of the in-flight window that a destination not known to answer quickly leaves
# free for the others (`Lanes`), so that a receiver that holds its requests never takes
# every slot: measured beside 400 one-shots to a receiver that held each 20 s, a stream to
# another receiver went from p99 19 s late to 5 ms (docs/benchmarks.md, "Isolation").
DESTINATION_SPARE_SHARE = 0.125


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
        # The wall clock the store's due instants are compared with: the host's, moved as
        # the database clock is (tests move it; `app.store.engine.clock.DatabaseClock`).
        self._wall = database.clock.time if database is not None else time.time
        self._sinks = sinks
        self._settings = settings
        self._rng = rng or random.Random()
        self._policy = settings.retry_policy()
        # Traces (app.telemetry.tracing): None while they are off, the one check claims and
        # attempts make then.
        self._tracer = tracing.active()
        self.owner = owner or replica_name()
        self._attempt = partial(
            attempt,
            sinks=sinks,
            dispatch_timeout=settings.dispatch_timeout,
            policy=self._policy,
            rng=self._rng,
            replica=self.owner,
        )
        self._stopping = asyncio.Event()
        self._alarm = Alarm(self._stopping)
        self._pacing = Pacing(
            concurrency=settings.concurrency,
            batch_size=settings.batch_size,
            poll_interval=settings.poll_interval,
            min_cycle_delay=settings.min_cycle_delay,
        )
        self._lanes = Lanes(
            settings.concurrency,
            min_lease(settings),
            spare_slots=max(1, int(settings.concurrency * DESTINATION_SPARE_SHARE)),
            weight_of=queue.weight_of,
        )
        self._first_attempt_reserve = int(settings.concurrency * FIRST_ATTEMPT_RESERVE)
        self._settler = SettleBatcher(
            self._write_settlements,
            gather=settings.min_cycle_delay,
            backoff=settings.poll_interval,
            max_backoff=MAX_ERROR_BACKOFF,
            on_error=self._count_error,
            on_written=self._start_ready,
        )
        self._health = ClaimHealth(UNHEALTHY_POLLS * settings.poll_interval)
        self._in_flight: dict[asyncio.Task[None], Delivery] = {}
        self._claims: list[asyncio.Task[None]] = []  # in the order they were issued
        self._claiming = 0  # rows asked for by claims still running
        self._parked = 0  # waiting on saturated destinations, as of the last cycle
        self._skipping: frozenset[str] = frozenset()  # what the latest claim passed over
        # What `at_rest` reads: claims issued so far; how many had been issued when
        # something in hand last moved on (started, finished, settled, handed back); the
        # latest claim that found nothing due, and ran alone (beside another claim, it may
        # have skipped the rows that one had locked); the claims running, and those of
        # them that have run beside another.
        self._issued = 0
        self._issued_at_last_move = 0
        self._found_nothing = 0
        self._running: set[int] = set()
        self._beside: set[int] = set()
        # Whether the latest claim to end found nothing: the next claim then runs alone.
        self._nothing_found = False
        self._claim_error: Exception | None = None
        self._changed = asyncio.Event()  # something the loop holds finished or moved on
        self._hand_backs = HandBacks(
            self._queue, on_error=self._count_error, on_done=self._moved_on
        )
        self._claimed_ahead = ClaimedAhead(
            mark=self._queue.start_ahead,
            admit=self._lanes.admit,
            start=self._start_ready,
            release=self._hand_backs.release,
            on_error=self._count_error,
            stopping=self._stopping,
            room=self._free_slots,
            turnover=Turnover(lambda: self._finishes),
            wall=self._wall,
        )
        # Deliveries that waited unstarted in the lanes are marked started as they leave;
        # up to a share of the window ahead of a free slot, each then waits for a permit.
        self._finishes = 0
        self._start_marks = StartMarks(
            self._queue.start_ahead,
            self._count_error,
            finished=lambda: self._finishes,
            most=int(settings.concurrency * MARK_AHEAD_SHARE),
            gather=settings.min_cycle_delay,
        )
        self._send_permits = asyncio.Semaphore(settings.concurrency)
        self._task: asyncio.Task[None] | None = None
        self.cycles = 0
        self.errors = 0
        self.started_deliveries = 0

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
        return self._lanes.waiting + len(self._claimed_ahead)

    @property
    def unsettled(self) -> int:
        """Attempts made whose settlements are not written yet (a write failed, or one is
        waiting to be made)."""
        return self._settler.pending

    @property
    def claim_error(self) -> Exception | None:
        """Why the latest claim that failed failed (None: none has)."""
        return self._claim_error

    def at_rest(self) -> bool:
        """Whether the loop has done everything due: nothing it claimed is in hand (but for
        ticks claimed ahead, waiting for their instant), no start mark, hand-back or settle
        write is on its way, and a claim issued after the last of those ended, which ran
        alone, found nothing due (beside another claim it may have skipped the rows that one
        locked; what a claim still running finds is due later, or newly written). A running
        loop at rest stays so until something falls due."""
        ahead = self._claimed_ahead
        return (
            self._found_nothing > self._issued_at_last_move
            and not self._in_flight
            and not self._lanes.waiting
            and not ahead.busy
            and len(ahead) == ahead.unmarked_ahead
            and not self._hand_backs.busy
            and not self._settler.unsettled
        )

    async def changed(self) -> None:
        """Until something the loop holds moves on, or a claim ends."""
        self._changed.clear()
        await self._changed.wait()

    # -- steps -----------------------------------------------------------------------

    def _backoff(self, attempt: int) -> float:
        return self._policy.delay(attempt, self._rng)

    async def claim(
        self,
        limit: int,
        ahead: float = 0.0,
        start: int | None = None,
        skip: Sequence[str] = (),
    ) -> Claimed:
        """Lease up to `limit` due occurrences, and with `ahead` those due within that many
        seconds; with more than `start` due, none of them starts with the claim
        (`Claimed.unstarted`); none of the destinations in `skip`."""
        if self._tracer is None:
            return await self._lease(limit, ahead, start, skip)
        with self._tracer.claim(limit) as span:
            claimed = await self._lease(limit, ahead, start, skip)
            return replace(claimed, deliveries=span.claimed(claimed.deliveries))

    async def _lease(
        self, limit: int, ahead: float, start: int | None, skip: Sequence[str]
    ) -> Claimed:
        claimed = await self._queue.claim(
            limit=limit,
            lease=self._settings.lease,
            owner=self.owner,
            backoff=self._backoff,
            ahead=ahead,
            start=start,
            skip=skip,
        )
        delivery_metrics.CLAIMED.inc(len(claimed.deliveries))
        auto_paused(claimed.auto_paused)
        for (reason, tenant), count in claimed.held_back.items():
            delivery_metrics.FLOW_HELD.labels(*delivery_metrics.with_tenant(tenant, reason)).inc(
                count
            )
        return claimed

    async def attempt(self, delivery: Delivery) -> Settlement | Unsent:
        """One delivery under the dispatch timeout (`app.worker.attempt`), in its span
        when traces are on."""
        if self._tracer is not None:
            return await self._tracer.attempt(delivery, self._attempt)
        return await self._attempt(delivery)

    async def _write_settlements(self, settlements: Sequence[Settlement]) -> None:
        try:
            settled = await self._queue.settle(settlements)
            auto_paused(settled.auto_paused)
            circuits_changed(settled.circuits)
        finally:
            self._moved_on()
        retries = [s.retry_in for s in settlements if s.retry_in is not None]
        if retries and self.running:
            self.wake_in(min(retries))
        if self.running and any(
            s.delivery.flow_key is not None or s.status is OccurrenceStatus.DEAD_LETTERED
            for s in settlements
        ):
            # A settled attempt frees its key's slot: what its parallelism or order held
            # back may start now. A dead letter may have written a failure callback, due now.
            self._alarm.wake_in(0.0)

    def _count_error(self) -> None:
        self.errors += 1
        delivery_metrics.LOOP_ERRORS.inc()

    def _moved_on(self) -> None:
        """Something in hand started, ended or was written: what a claim issued before
        this found says nothing of what is due after it."""
        self._issued_at_last_move = self._issued
        self._changed.set()

    # -- the loop --------------------------------------------------------------------

    @asynccontextmanager
    async def started(self) -> AsyncIterator[Dispatcher]:
        """Run the loop for the duration of the block; stop it gracefully on exit. A loop
        that stopped may be started again."""
        assert not self.running, "the loop is running already"
        self._stopping.clear()
        self._issued_at_last_move = self._issued  # what an earlier run found is not news
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
        """How far ahead the next claim looks: `claim_ahead`, or nothing while the
        claimed-ahead deliveries waiting are at their bound."""
        if self._claimed_ahead.unmarked_ahead >= AHEAD_CAPACITY_FACTOR * self._pacing.capacity:
            return 0.0
        return self._settings.claim_ahead

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
                    self._hand_backs.short_leases(self._lanes.expiring(loop.time()))
                    ahead = self._ahead()
                    batch = self._pacing.batch(ahead)
                    # Destinations that may start nothing more here: the claims pass over
                    # their rows, and what of them waits here leaves the claims room.
                    saturated = self._lanes.saturated(loop.time())
                    self._parked = self._lanes.parked(saturated)
                    room = self._pacing.room(batch, self._in_hand() + self._claiming)
                    # After a claim that found nothing, a second claim beside the next one
                    # would only contend with it for what it finds.
                    alone = self._nothing_found
                    if not room or not self._pacing.may_claim(len(self._claims), alone=alone):
                        await self._pacing.wait_for_room(self._stopping)
                        continue
                    self.cycles += 1
                    delivery_metrics.LOOP_CYCLES.inc()
                    self._issue_claim(min(batch, room), ahead, saturated)
                    await self._alarm.sleep(self._pacing.next_pause)
        finally:
            self._wakeups.unsubscribe(self.wake_in)
            await self._stop_claims()
            await self._claimed_ahead.stop()  # into the lanes, which the drain hands back
            await drain(
                lanes=self._lanes,
                in_flight=self._in_flight,
                release=self._hand_backs.release,
                settler=self._settler,
                grace=self._settings.dispatch_timeout,
            )
            await self._hand_backs.wait()

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

    def _issue_claim(self, limit: int, ahead: float, skip: Sequence[str] = ()) -> None:
        previous = self._claims[-1] if self._claims else None
        # What the claim may start at once: the slots that nothing claimed is waiting for.
        start = max(0, self._free_slots() - self._claiming)
        self._claiming += limit
        self._skipping = frozenset(skip)
        self._issued += 1
        if self._running:
            self._beside.update(self._running, (self._issued,))
        self._running.add(self._issued)
        task = asyncio.create_task(
            self._claim_into_lanes(limit, previous, ahead, self._issued, start, skip)
        )
        self._claims.append(task)

    def _in_hand(self) -> int:
        """What counts against the claims' window: deliveries in flight and waiting in the
        lanes, but for those parked on a destination that may start nothing more here, as
        of the last cycle (`Lanes.parked`): the claims pass over that destination's rows,
        so a backlog of it never keeps this replica from claiming what others are due."""
        return max(0, len(self._in_flight) + self._lanes.waiting - self._parked)

    def _free_slots(self) -> int:
        """In-flight slots that no delivery in hand is waiting for."""
        return max(0, self._settings.concurrency - len(self._in_flight) - self._lanes.waiting)

    async def _claim_into_lanes(
        self,
        limit: int,
        previous: asyncio.Task[None] | None,
        ahead: float = 0.0,
        serial: int = 0,
        start: int | None = None,
        skip: Sequence[str] = (),
    ) -> None:
        """One claim; its rows join the lanes after those of every claim issued before it
        (two claims at once can each take some of one schedule's ticks, and the earlier
        claim holds the earlier ticks), then start as the lanes allow. A failure is logged
        and paces the next claim by an exponential backoff."""
        issued = asyncio.get_running_loop().time()
        claimed: Claimed | None = None
        try:
            try:
                claimed = await self.claim(limit, ahead, start, skip)
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
            self._running.discard(serial)
            alone = serial not in self._beside
            self._beside.discard(serial)
            self._pacing.claim_ended()
            self._changed.set()
        if claimed is None:
            return
        self._health.succeeded()
        self._nothing_found = not claimed.deliveries and not claimed.more
        if self._nothing_found and alone:
            self._found_nothing = max(self._found_nothing, serial)
        pause = self._pacing.claimed(
            len(claimed.deliveries), limit, ahead, claimed.due_in, claimed.more
        )
        self._alarm.wake_in(pause)
        self._admit(claimed, issued)

    def _claim_failed(self, exc: Exception) -> None:
        self._claim_error = exc
        self._count_error()
        self._health.failed(exc, retry_in=self._pacing.failed())

    def _admit(self, claimed: Claimed, issued: float) -> None:
        """The lease began no earlier than the claim was issued: it ends by then + lease.
        A delivery claimed ahead waits until its due instant, by the database's clock as
        the claims read it (this replica's may run ahead of it)."""
        deadline = issued + self._settings.lease
        # The claim's first reading is the tight one; its transaction's instant, read by
        # now, bounds the clock too, and is the later of the two if the database's clock
        # stepped forward while the claim ran.
        readings = [] if claimed.reading is None else [claimed.reading]
        if claimed.claimed_at is not None:
            readings.append((claimed.claimed_at, time.monotonic()))
        ready = self._claimed_ahead.take(
            claimed.deliveries, claimed.not_before, deadline, readings=readings
        )
        self._lanes.admit(ready, deadline, claimed.unstarted)
        self._start_ready()

    def _start_ready(self) -> None:
        if self._stopping.is_set() and self.running:
            return  # the drain hands back what is waiting
        # Sent and not yet recorded is what a crash would send again: a store slower than
        # the targets holds starts back rather than let that grow past its bound.
        unrecorded = len(self._in_flight) + self._settler.unsettled
        most = max(0, UNRECORDED_WINDOWS * self._settings.concurrency - unrecorded)
        reserve = self._first_attempt_reserve if self._claimed_ahead.expecting else 0
        started = self._lanes.start(
            asyncio.get_running_loop().time(),
            most,
            reserve=reserve,
            spare=self._start_marks.spare,
        )
        self._hand_backs.short_leases(started.hand_back)
        for delivery in started.launch:
            unstarted = delivery.occurrence_id in started.unstarted
            task = asyncio.create_task(self._deliver(delivery, unstarted))
            self._in_flight[task] = delivery
            self.started_deliveries += 1
            delivery_metrics.IN_FLIGHT.inc()
            task.add_done_callback(self._finished)
        if started.launch or started.hand_back:
            self._moved_on()

    async def _deliver(self, delivery: Delivery, unstarted: bool = False) -> None:
        # One that waited unstarted is marked started first: a pause or cancel since its
        # claim stops it there, and it is handed back uncharged.
        if unstarted and not await self._start_marks.start(delivery):
            self.started_deliveries -= 1  # never handed to a sink
            await self._hand_backs.release([delivery], False)
            return
        # The settlement joins the batcher as the task's last step: a finished task's
        # attempt is always there to settle, whether or not its callback has run.
        async with self._send_permits:  # at most `concurrency` sent at once
            self._lanes.sending(delivery, asyncio.get_running_loop().time())
            done = await self.attempt(delivery)
        if isinstance(done, Unsent):
            # Not the target's failure: handed back uncharged, due again a little later.
            await self._hand_backs.release([delivery], False, done)
            return
        self._settler.add(done)

    def _finished(self, task: asyncio.Task[None]) -> None:
        delivery = self._in_flight.pop(task, None)
        if delivery is None:
            return
        delivery_metrics.IN_FLIGHT.dec()
        self._finishes += 1
        destination = self._lanes.finished(delivery, asyncio.get_running_loop().time())
        if destination in self._skipping:
            # A slot of a destination the claims passed over is free: claim its rows again
            # now, not at the next poll (the claim that passed over them found nothing).
            self._skipping = frozenset()
            self._alarm.wake_in(0.0)
        self._start_ready()
        self._pacing.freed(self._in_hand())
        self._moved_on()
