"""Claims ahead: ticks claimed before they are due wait here, off the lanes, for their instant.

A steady stream of ticks is claimed ahead: a claim also leases the occurrences due within
a short window (that no lease holds; the setting CHRONOQ_CLAIM_AHEAD), so that the claim's round
trips happen before the ticks are due, not after. Each such delivery goes through two
steps before it reaches the lanes, by the database's clock as the claims read it
(`app.worker.database_clock`):

1. A lead before its instant it is marked started (`ClaimedAhead`): one statement,
   for all the deliveries whose marks fall due within START_GATHER of each other, that
   a pause or cancel committed since the claim stops it at. A stopped one is handed back
   unstarted, with its instant (a pause holds it until the resume; a cancel has ended it
   already). The lead is about that statement's own time, so that it is done by the
   instant and the tick goes out on time: START_LEAD while marks are quick, longer while
   the database is slow to answer them (a bulk replay's writes beside the stream), up to
   MAX_START_LEAD. The gathering makes a stream of thousands of ticks a second cost a few
   dozen statements a second, not one a tick. A pause committed in the last lead +
   START_GATHER before an instant is as late as one after it.
   Only as many are marked as the loop will have free slots for by their instants: its
   free slots now, less those marked and waiting, plus the slots that attempts finishing
   at the recent pace free within a lead (`Turnover`). The others would wait in the
   lanes, charged, behind the deliveries in flight, and a replica that died then would
   cost each an attempt it never made. They join the lanes unstarted at their
   instant instead, and are marked as they leave the lanes (`app.worker.start_marks`).
2. Marked, it waits (a `Timetable` again) until its instant, then joins the lanes. Nothing starts
   early, and nothing starts before its mark has answered, however late: an attempt sent
   before its mark commits would be made again under the same number by the next claim if
   this replica died in between, and would not count against the attempt budget. A mark
   slowed by the database (a bulk replay's writes beside the stream answer in hundreds of
   milliseconds) makes its ticks as late as it is, and lengthens the lead of the next.

Invariants:
- `Timetable`: every delivery put in it is handed on exactly once, with the lease end it
  was put in with: by the timer no earlier than its instant by `monotonic` (less the
  `gather` it was made with), or by `release_all` when the loop stops. Nothing is dropped.
- `ClaimedAhead`: every delivery it takes reaches the lanes exactly once, not before its
  instant and not before its mark has answered that it may start; or else is handed back
  unstarted (stopped since its claim, or its mark failed: then all
  of that statement's not started yet are, or their leases run out, uncharged). When the
  loop stops, what waits joins the lanes at once, unmarked, and the drain hands it back.
"""

from __future__ import annotations

import asyncio
import heapq
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from app.domain.occurrence import Delivery
from app.worker.database_clock import DatabaseClock
from app.worker.outcomes import log

# The clock of every instant here: the monotonic clock, read when it is needed. The event
# loop's own time may be read once per turn of the loop, and in milliseconds (libuv's), so
# behind this by up to a turn; and its timers may fire up to their resolution early. A
# timer here is only a wake-up: what it hands on is due by this clock, read then.
monotonic = time.monotonic
# How long before its instant a claimed-ahead attempt is marked started, and how close
# together the marks that share one statement fall (see the module's docstring). The lead
# follows what the marks take: at least twice the last one's time, decaying back towards
# START_LEAD by LEAD_DECAY a mark, never beyond MAX_START_LEAD.
START_LEAD = 0.1
MAX_START_LEAD = 0.25
LEAD_DECAY = 0.9
START_GATHER = 0.03

# One claim of an occurrence: the occurrence is claimed again for each retry, and what is
# kept for an earlier claim must find only that claim's delivery.
ClaimKey = tuple[uuid.UUID, uuid.UUID]


def claim_key(delivery: Delivery) -> ClaimKey:
    return delivery.occurrence_id, delivery.lease_token


# Deliveries that are due, grouped by the lease end they were claimed with.
OnDue = Callable[[list[Delivery], float], None]


class Admit(Protocol):
    """Queue deliveries in the lanes (`Lanes.admit`); `unstarted`: those not marked."""

    def __call__(
        self,
        deliveries: list[Delivery],
        deadline: float,
        unstarted: Collection[uuid.UUID] = ...,
    ) -> None: ...


# Mark claimed-ahead deliveries started; the ids of those that may start.
Mark = Callable[[Sequence[Delivery]], Awaitable[set[uuid.UUID]]]
# Hand deliveries back (`started`: whether their attempt is counted); never raises.
Release = Callable[[Sequence[Delivery], bool], Awaitable[None]]


class Timetable:
    """Deliveries waiting, each until an instant of `monotonic`, handed on by a timer.
    `gather`: a timer that fires also hands on what falls due within that many seconds
    after it, together (their consumer then starts them at their own instants)."""

    def __init__(self, on_due: OnDue, *, gather: float = 0.0) -> None:
        self._on_due = on_due
        self._gather = gather
        # (instant it may start, serial, delivery, lease end), soonest first.
        self._heap: list[tuple[float, int, Delivery, float]] = []
        self._serial = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def next_at(self) -> float | None:
        """The instant the soonest delivery in it may start, if any waits."""
        return self._heap[0][0] if self._heap else None

    def put(self, delivery: Delivery, at: float, deadline: float) -> None:
        """Hold `delivery` until instant `at`; `arm` after a batch of these."""
        self._serial += 1
        heapq.heappush(self._heap, (at, self._serial, delivery, deadline))

    def arm(self) -> None:
        """A timer for the soonest delivery in it, unless one is set for then or sooner."""
        if not self._heap:
            return
        at = self._heap[0][0]
        if self._timer is not None:
            if self._timer_at <= at:
                return
            self._timer.cancel()
        self._timer_at = at
        delay = max(0.0, at - monotonic())
        self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def release_all(self) -> None:
        """Stopping: hand on everything in it, due or not."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, float("inf")
        self._release(float("inf"))

    def _fire(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        self._release(monotonic() + self._gather)
        self.arm()  # what it fired early for, again

    def _release(self, until: float) -> None:
        by_deadline: dict[float, list[Delivery]] = {}
        while self._heap and self._heap[0][0] <= until:
            _, _, delivery, deadline = heapq.heappop(self._heap)
            by_deadline.setdefault(deadline, []).append(delivery)
        for deadline, deliveries in by_deadline.items():
            self._on_due(deliveries, deadline)


class Turnover:
    """How many attempts finish a second lately, from `finishes`, a count that only grows,
    read again at most every `every` seconds."""

    def __init__(
        self,
        finishes: Callable[[], int],
        *,
        every: float = 1.0,
        clock: Callable[[], float] = monotonic,
    ) -> None:
        self._finishes = finishes
        self._every = every
        self._clock = clock
        self._since: tuple[float, int] | None = None  # when it was last read, and what
        self._rate = 0.0

    def per_second(self) -> float:
        now, count = self._clock(), self._finishes()
        if self._since is None:
            self._since = (now, count)
        began, before = self._since
        if now - began >= self._every:
            self._rate = (count - before) / (now - began)
            self._since = (now, count)
        return self._rate


class ClaimedAhead:
    """From a claim ahead to the lanes. `admit` queues deliveries in the lanes and `start`
    lets the lanes start what they may; `mark` and `release` are the store's; `on_error`
    counts a failed mark; `stopping` says the loop is stopping; `room` is how many slots
    are free, `turnover` how fast they free up (none: as if never); `wall` is the wall clock
    the due instants are read against until a claim has read the database's
    (`DatabaseClock`)."""

    def __init__(
        self,
        *,
        mark: Mark,
        admit: Admit,
        start: Callable[[], None],
        release: Release,
        on_error: Callable[[], None],
        stopping: asyncio.Event,
        room: Callable[[], int] = lambda: 1 << 30,
        turnover: Turnover | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._mark = mark
        self._turnover = turnover or Turnover(lambda: 0)
        self._wall = wall  # the clock due instants are read against without a reading
        self._clock = DatabaseClock()
        self._admit = admit
        self._start = start
        self._release = release
        self._on_error = on_error
        self._stopping = stopping
        self._room = room  # free slots: how many may be marked started now
        self._not_due = Timetable(self._due, gather=START_GATHER)  # not about due yet
        # About due, waiting to be marked started (`_start_due`); marked, and waiting for
        # their instant (`_marked`); the instant of each, by `monotonic`.
        self._starting: list[tuple[list[Delivery], float]] = []
        self._task: asyncio.Task[None] | None = None
        self._marked = Timetable(self._at_instant)
        # Beyond the room when their mark was due: they join the lanes unstarted.
        self._unmarked = Timetable(self._unstarted_due)
        # Keyed by claim, not by occurrence: a retry claimed ahead again while its earlier
        # claim's delivery is still being handed on is another delivery.
        self._instants: dict[ClaimKey, float] = {}
        self.lead = START_LEAD  # how long before its instant a delivery is marked

    def __len__(self) -> int:
        """Taken, and not yet in the lanes or handed back (but for those being marked)."""
        return len(self._not_due) + len(self._marked) + len(self._unmarked)

    @property
    def unmarked_ahead(self) -> int:
        """Waiting to be marked started: what bounds how far ahead the loop claims."""
        return len(self._not_due)

    @property
    def expecting(self) -> bool:
        """Ticks wait for their instant or are being marked: some will join the lanes soon."""
        return bool(self._instants) or len(self) > 0

    @property
    def busy(self) -> bool:
        """Marks are being made or wait to be."""
        return self._task is not None or bool(self._starting)

    def take(
        self,
        deliveries: list[Delivery],
        not_before: Mapping[uuid.UUID, datetime],
        deadline: float,
        *,
        readings: Sequence[tuple[datetime, float]] = (),
    ) -> list[Delivery]:
        """A claim's deliveries, whose lease ends at loop time `deadline`: returns those due
        already (not in `not_before`), and takes the others, each due at its instant there.
        `readings`: the database's clock as the claim read it, each with the instant of
        `monotonic` by which it had (`DatabaseClock`): each waits until the database's
        clock reaches its instant, however far this replica's runs ahead of it (the wall
        clock stands in while no reading is known)."""
        for instant, read_by in readings:
            self._clock.observe(instant, read_by)
        if not not_before:
            return deliveries
        now = monotonic()
        wall = self._wall()
        ready: list[Delivery] = []
        due_now: list[Delivery] = []
        for delivery in deliveries:
            due = not_before.get(delivery.occurrence_id)
            if due is None:
                ready.append(delivery)
                continue
            at = self._clock.local_time_of(due, now)
            wait = due.timestamp() - wall if at is None else at - now
            if wait <= self.lead:
                due_now.append(delivery)  # claimed ahead, and (about) due by now
                self._instants[claim_key(delivery)] = now + wait
            else:
                self._not_due.put(delivery, now + wait - self.lead, deadline)
                self._instants[claim_key(delivery)] = now + wait
        self._not_due.arm()
        if due_now:
            self._due(due_now, deadline)
        return ready

    async def stop(self) -> None:
        """The loop is stopping (`stopping` is set): everything waiting joins the lanes, once
        the marks being made are done."""
        self._not_due.release_all()
        if self._task is not None:
            await asyncio.wait({self._task})
        self._marked.release_all()
        self._unmarked.release_all()
        self._instants.clear()

    def _due(self, deliveries: list[Delivery], deadline: float) -> None:
        """The lead before their instant: marked started first (`_start_due`), then waits
        until the instant; when the loop is stopping they join the lanes at once."""
        if self._stopping.is_set():
            self._at_instant(deliveries, deadline)
            return
        self._starting.append((deliveries, deadline))
        if self._task is None:
            self._task = asyncio.create_task(self._start_due())

    def _at_instant(self, deliveries: list[Delivery], deadline: float) -> None:
        self._admit(deliveries, deadline)
        self._start()

    def _unstarted_due(self, deliveries: list[Delivery], deadline: float) -> None:
        self._admit(deliveries, deadline, {d.occurrence_id for d in deliveries})
        self._start()

    def _within_room(
        self, groups: list[tuple[list[Delivery], float]]
    ) -> list[tuple[list[Delivery], float]]:
        """Of the groups whose mark is due, as many as there will be free slots for by
        their instants (but for those marked and waiting for theirs); the others wait
        unmarked until their instant."""
        # Slots in flight now turn over while the marked wait for their instants: a stream
        # of quick attempts frees its pace's worth again each lead, a slow destination
        # holding its slots next to none.
        turning = int(self._turnover.per_second() * (self.lead + START_GATHER))
        room = self._room() + turning - len(self._marked)
        within: list[tuple[list[Delivery], float]] = []
        beyond = False
        for deliveries, deadline in groups:
            take = deliveries[: max(room, 0)]
            room -= len(take)
            if take:
                within.append((take, deadline))
            for delivery in deliveries[len(take) :]:
                at = self._instants.pop(claim_key(delivery), 0.0)
                self._unmarked.put(delivery, at, deadline)
                beyond = True
        if beyond:
            self._unmarked.arm()
        return within

    async def _start_due(self) -> None:
        """Mark what came due meanwhile, in one statement, and let the lanes start it."""
        try:
            while self._starting:
                groups, self._starting = self._starting, []
                groups = self._within_room(groups)
                due = [delivery for deliveries, _ in groups for delivery in deliveries]
                if not due:
                    continue
                began = monotonic()
                try:
                    may_start = await self._mark(due)
                except Exception:
                    self._on_error()
                    log.exception("marking %d claimed-ahead occurrences started failed", len(due))
                    for delivery in due:
                        self._instants.pop(claim_key(delivery), None)
                    await self._release(due, False)
                    continue
                now = monotonic()
                self.lead = min(
                    MAX_START_LEAD, max(START_LEAD, 2 * (now - began), self.lead * LEAD_DECAY)
                )
                for deliveries, deadline in groups:
                    ready = []
                    for delivery in deliveries:
                        at = self._instants.pop(claim_key(delivery), now)
                        if delivery.occurrence_id not in may_start:
                            continue
                        if at > now:
                            self._marked.put(delivery, at, deadline)  # never early
                        else:
                            ready.append(delivery)
                    self._admit(ready, deadline)
                self._marked.arm()
                self._start()
                stopped = [d for d in due if d.occurrence_id not in may_start]
                if stopped:
                    log.info(
                        "%d claimed-ahead occurrences were paused or cancelled before their "
                        "instant; not starting them",
                        len(stopped),
                    )
                    await self._release(stopped, False)
        finally:
            self._task = None
