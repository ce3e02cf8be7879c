"""Lanes: claimed deliveries waiting to start, one lane per schedule (a fan-out's: per
schedule and endpoint, `Delivery.lane`), shared fairly between the destinations they go to.

Invariants:
- a lane has at most one delivery in flight; its others wait in it in tick order
  (`fire_at`, then id), so catch-ups and backfills arrive in tick order, whichever claim
  brought them; a topic's subscribers each have a lane of their own, so that a slow one
  holds back none of the others;
- on time first: a lane whose head is a first attempt starts before any lane whose head is
  a retry or a replay, so a bulk replay never stands in front of first attempts; and the
  `reserve` a start is given is kept for first attempts: the others start only while more
  than that much room is left (of the window, and of the `most` a start is allowed), so a
  tick coming due finds a slot rather than waiting for a replayed delivery to finish;
- within a destination, ready lanes take turns by tenant (weighted fair queuing): one
  tenant's backlog claimed first never stands in front of another tenant's due tick;
- destinations take turns (round robin over those with a lane ready, each lane's
  destination being its head's): a destination is entitled to a share of the window among
  the destinations with work here, in proportion to its weight (its latest delivery's
  tenant's, so that tenants of weights 3 and 1 delivering to destinations of their own
  start 3:1 here too; all 1: equal shares), and takes more only while none under its share
  has a lane ready; one that has not shown it answers within `slow_after` seconds
  (no attempt of it finished yet, the last one took longer, or one in flight has run
  longer) never holds more than the window less `spare_slots`, so that a receiver that
  holds its requests leaves room for the others, which start at once (work-conserving:
  alone and answering, a destination may use the whole window);
- at most `limit` deliveries are in flight, and up to `spare` more unstarted ones being
  marked started (`start`);
- nothing starts once its lease is too short to finish: a delivery whose lease ends within
  `min_lease` seconds is handed back instead, with the rest of its lane, so that the lane's
  order survives and no lease expires on an occurrence that was never attempted;
- a delivery admitted unstarted (its claim found more than could start at once) leaves
  listed in `Started.unstarted`: its start mark comes first, at its start, so that a crash
  charges nothing for what waits here and a pause or cancel since its claim stops it.

No I/O and no clock of its own: callers pass the loop's time.
"""

from __future__ import annotations

import bisect
import heapq
import uuid
from collections import deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from app.domain.destinations import destination_of
from app.domain.occurrence import Delivery, Lane

# An attempt that has not been answered within this many seconds marks its destination
# slow: it is then kept to its share of the window, less the spare slots.
SLOW_AFTER = 1.0
# How many destinations' last answer times are remembered (the oldest is forgotten first):
# a destination forgotten is unproven again, which costs it the spare slots only.
REMEMBERED_DESTINATIONS = 4096


def tick_order(delivery: Delivery) -> tuple[datetime, uuid.UUID]:
    return delivery.fire_at, delivery.occurrence_id


@dataclass(frozen=True, slots=True)
class _Waiting:
    delivery: Delivery
    deadline: float  # loop time at which its lease ends
    unstarted: bool = False  # its attempt waits for its start mark
    destination: str = ""

    @property
    def order(self) -> tuple[datetime, uuid.UUID]:
        return tick_order(self.delivery)


class _Ready:
    """A destination's ready lanes of one kind, in turn by tenant: weighted fair queuing
    over the lanes' tenants (a lane of a tenant of weight w that becomes ready gets the
    virtual time `max(now, the tenant's last) + 1/w`, `now` being the last one taken's), so
    that one tenant's many ready lanes never stand all in front of another tenant's one;
    lanes of one tenant keep the order they became ready in."""

    __slots__ = ("_heap", "_last", "_live", "_now", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Lane]] = []
        self._live: dict[Lane, int] = {}  # each ready lane: its entry's number
        self._last: dict[str, float] = {}  # each tenant's latest virtual time
        self._now = 0.0
        self._seq = 0

    def __bool__(self) -> bool:
        return bool(self._live)

    def append(self, lane_of: Lane, tenant: str, weight: int) -> None:
        at = max(self._now, self._last.get(tenant, 0.0)) + 1.0 / max(1, weight)
        self._last[tenant] = at
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, lane_of))
        self._live[lane_of] = self._seq

    def first(self) -> Lane:
        """The lane whose turn it is (entries of lanes removed meanwhile are dropped)."""
        heap = self._heap
        while self._live.get(heap[0][2]) != heap[0][1]:
            heapq.heappop(heap)
        return heap[0][2]

    def remove(self, lane_of: Lane) -> None:
        if self.first() == lane_of:
            self._now = heapq.heappop(self._heap)[0]
        del self._live[lane_of]
        if not self._live:  # nothing waits: the tenants start even again
            self._heap.clear()
            self._last.clear()


@dataclass(slots=True)
class _Destination:
    """One destination's part of the lanes: its deliveries in flight, and its lanes ready
    to start (by the head's kind: a first attempt, or another attempt)."""

    name: str
    busy: int = 0
    waiting: int = 0  # its deliveries in the lanes, ready or behind another
    weight: int = 1  # its latest delivery's tenant's weight
    ready: _Ready = field(default_factory=_Ready)
    ready_again: _Ready = field(default_factory=_Ready)
    # The loop time each delivery in flight was sent (`Lanes.sending`), in that order: the
    # first is the oldest still unanswered. One launched and waiting for a send permit or
    # its start mark is not in it: that wait is this replica's, not the destination's.
    started: dict[uuid.UUID, float] = field(default_factory=dict)

    def queue(self, first: bool) -> _Ready:
        return self.ready if first else self.ready_again

    @property
    def idle(self) -> bool:
        return not self.busy and not self.waiting


@dataclass(slots=True)
class Started:
    """What `Lanes.start` decided: deliveries to launch now, and deliveries to hand back."""

    launch: list[Delivery] = field(default_factory=list)
    hand_back: list[Delivery] = field(default_factory=list)
    # Of `launch`, the occurrences admitted unstarted: each is marked started before it is
    # sent (or handed back, when the mark finds it paused or cancelled).
    unstarted: set[uuid.UUID] = field(default_factory=set)


class Lanes:
    def __init__(
        self,
        limit: int,
        min_lease: float,
        *,
        spare_slots: int = 0,
        slow_after: float = SLOW_AFTER,
        weight_of: Callable[[str], int] = lambda _tenant: 1,
    ) -> None:
        self._limit = limit
        self._weight_of = weight_of  # a tenant's weight (fair dispatch)
        self._weights = 0  # the weights of the destinations with work here, summed
        self._min_lease = min_lease
        # What a destination not known to answer quickly leaves free of the window.
        self._spare_slots = min(spare_slots, limit - 1) if limit > 1 else 0
        self._slow_after = slow_after
        self._lanes: dict[Lane, list[_Waiting]] = {}  # non-empty lanes only
        # Destinations with work here (a lane ready, or a delivery in flight).
        self._destinations: dict[str, _Destination] = {}
        # Destinations with a lane ready, in turn: of first attempts, and of the others.
        self._turns: dict[bool, deque[str]] = {True: deque(), False: deque()}
        self._ready: dict[Lane, tuple[str, bool]] = {}  # lane: destination, kind
        self._busy: dict[Lane, str] = {}  # schedule in flight: its destination
        # How long each destination's latest finished attempt took (seconds).
        self._answered_in: dict[str, float] = {}
        self._waiting = 0
        self._soonest = float("inf")  # no waiting lease ends before this

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def in_flight(self) -> int:
        return len(self._busy)

    def admit(
        self,
        deliveries: Iterable[Delivery],
        deadline: float,
        unstarted: Collection[uuid.UUID] = frozenset(),
    ) -> None:
        """Queue a claim's deliveries; `deadline` is when their lease ends (loop time);
        `unstarted`: the occurrences whose attempt waits for its start mark."""
        for delivery in deliveries:
            lane_of = delivery.lane
            waiting = _Waiting(
                delivery,
                deadline,
                delivery.occurrence_id in unstarted,
                destination_of(delivery.target),
            )
            destination = self._destination(waiting.destination)
            destination.waiting += 1
            weight = self._weight_of(delivery.tenant)
            if weight != destination.weight:
                self._weights += weight - destination.weight
                destination.weight = weight
            lane = self._lanes.get(lane_of)
            if lane is None:
                lane = self._lanes[lane_of] = []
                bisect.insort(lane, waiting, key=lambda w: w.order)
                if lane_of not in self._busy:
                    self._make_ready(lane_of)
            else:
                bisect.insort(lane, waiting, key=lambda w: w.order)
            self._waiting += 1
        self._soonest = min(self._soonest, deadline)

    def start(
        self, now: float, most: int | None = None, *, reserve: int = 0, spare: int = 0
    ) -> Started:
        """Take the heads of ready lanes, destinations in turn as their shares allow, while
        the in-flight window has room, `most` at most when given; heads that are not first
        attempts only while more than `reserve` of that room is left. Up to `spare` more
        unstarted heads may leave beyond the window: their start marks are made while the
        window's deliveries finish (their caller holds each back from its sink until a slot
        of the window is free)."""
        started = Started()
        cap = self._limit + spare if most is None else len(self._busy) + most
        limit = min(self._limit, cap)
        ceiling = min(self._limit + spare, cap)
        for first, window in ((True, limit), (False, limit - reserve)):
            while len(self._busy) < ceiling:
                if not first and len(self._busy) >= window + spare:
                    break
                destination = self._next(first, now)
                if destination is None:
                    break
                ready = destination.queue(first)
                lane_of = ready.first()
                lane = self._lanes[lane_of]
                head = lane[0]
                if len(self._busy) >= window and not head.unstarted:
                    return started  # beyond the window, only a start mark may be made ahead
                self._unready(lane_of)
                if head.deadline - now < self._min_lease:
                    started.hand_back.extend(self._drop(lane_of))
                    continue
                lane.pop(0)
                self._waiting -= 1
                if not lane:
                    del self._lanes[lane_of]
                self._launch(lane_of, head)
                self._destinations[head.destination].waiting -= 1
                started.launch.append(head.delivery)
                if head.unstarted:
                    started.unstarted.add(head.delivery.occurrence_id)
        return started

    def sending(self, delivery: Delivery, now: float) -> None:
        """The delivery in flight is being sent, at loop time `now`: from here on its
        destination is timed by it (`finished`)."""
        name = self._busy.get(delivery.lane)
        if name is not None:
            self._destinations[name].started[delivery.occurrence_id] = now

    def finished(self, delivery: Delivery, now: float | None = None) -> str | None:
        """The schedule's delivery in flight is done (at loop time `now`, which times its
        destination's answer when given): its lane's next may start. Returns its
        destination (None: it was not in flight here)."""
        lane_of = delivery.lane
        name = self._busy.pop(lane_of, None)
        if name is not None:
            destination = self._destinations[name]
            destination.busy -= 1
            began = destination.started.pop(delivery.occurrence_id, None)
            if now is not None and began is not None:
                self._answered(name, now - began)
            self._forget_if_idle(destination)
        if lane_of in self._lanes:
            self._make_ready(lane_of)
        return name

    def saturated(self, now: float) -> list[str]:
        """The destinations that may start nothing more here: each not known to answer
        quickly, at or over its share. A claim passes over their rows, which would only
        wait in these lanes while another replica may have room for them."""
        return [
            d.name
            for d in self._destinations.values()
            if d.busy and not self._answering(d, now) and d.busy >= self._entitled(d, now)
        ]

    def parked(self, saturated: Collection[str]) -> int:
        """How many waiting deliveries go to the `saturated` destinations: they start only
        as those destinations' own deliveries finish, so they leave the claims room for
        the others (which the claims then pass over them to take)."""
        return sum(self._destinations[name].waiting for name in saturated)

    def expiring(self, now: float) -> list[Delivery]:
        """Remove and return every waiting lane that holds a delivery whose lease is too
        short to start; cheap when none is (one comparison)."""
        if self._soonest - now >= self._min_lease:
            return []
        out: list[Delivery] = []
        for lane_of in [s for s, lane in self._lanes.items() if self._expires(lane, now)]:
            out.extend(self._drop(lane_of))
        self._soonest = min(
            (w.deadline for lane in self._lanes.values() for w in lane), default=float("inf")
        )
        return out

    def take_all(self) -> list[Delivery]:
        """Remove and return every waiting delivery (the loop is stopping)."""
        out = [w.delivery for lane in self._lanes.values() for w in lane]
        for lane_of in list(self._ready):
            self._unready(lane_of)
        for destination in list(self._destinations.values()):
            destination.waiting = 0
            self._forget_if_idle(destination)
        self._lanes.clear()
        self._waiting = 0
        self._soonest = float("inf")
        return out

    # -- shares ------------------------------------------------------------------------

    def _next(self, first: bool, now: float) -> _Destination | None:
        """The next destination in turn with a lane of this kind ready that may start one:
        first any under its share; when none is, one that may take more (`_may_borrow`)."""
        turns = self._turns[first]
        for _ in range(len(turns)):
            destination = self._destinations[turns[0]]
            turns.rotate(-1)
            if destination.busy < self._entitled(destination, now):
                return destination
        for _ in range(len(turns)):
            destination = self._destinations[turns[0]]
            turns.rotate(-1)
            if self._may_borrow(destination, now):
                return destination
        return None

    def _entitled(self, destination: _Destination, now: float) -> int:
        """Its weight's share of the window among the destinations with work here; one
        not known to answer quickly leaves the spare slots free even alone (at least one)."""
        share = -(-self._limit * destination.weight // max(1, self._weights))
        if self._spare_slots and not self._answering(destination, now):
            share = min(share, self._limit - self._spare_slots)
        return share

    def _may_borrow(self, destination: _Destination, now: float) -> bool:
        """Beyond its share (and beyond the window, an unstarted head within the start's
        spare): a destination that answers quickly may take any free slot; another only
        while the spare slots stay free. Its deliveries beyond the window wait for a send
        permit, so this also bounds the permits it may hold."""
        if not self._spare_slots or self._answering(destination, now):
            return True
        return len(self._busy) < self._limit - self._spare_slots

    def _answering(self, destination: _Destination, now: float) -> bool:
        """Whether the destination is known to answer within `slow_after`: its latest
        attempt did, and none of it in flight has run longer."""
        answered_in = self._answered_in.get(destination.name)
        if answered_in is None or answered_in >= self._slow_after:
            return False
        oldest = next(iter(destination.started.values()), None)
        return oldest is None or now - oldest < self._slow_after

    def _answered(self, name: str, seconds: float) -> None:
        self._answered_in.pop(name, None)
        self._answered_in[name] = seconds
        if len(self._answered_in) > REMEMBERED_DESTINATIONS:
            del self._answered_in[next(iter(self._answered_in))]

    # -- bookkeeping -------------------------------------------------------------------

    def _launch(self, lane_of: Lane, head: _Waiting) -> None:
        destination = self._destination(head.destination)
        destination.busy += 1
        self._busy[lane_of] = head.destination

    def _destination(self, name: str) -> _Destination:
        destination = self._destinations.get(name)
        if destination is None:
            destination = self._destinations[name] = _Destination(name)
            self._weights += destination.weight
        return destination

    def _forget_if_idle(self, destination: _Destination) -> None:
        if destination.idle:
            del self._destinations[destination.name]
            self._weights -= destination.weight

    def _expires(self, lane: list[_Waiting], now: float) -> bool:
        return any(w.deadline - now < self._min_lease for w in lane)

    def _drop(self, lane_of: Lane) -> list[Delivery]:
        lane = self._lanes.pop(lane_of)
        self._waiting -= len(lane)
        self._unready(lane_of)
        for waiting in lane:
            destination = self._destinations[waiting.destination]
            destination.waiting -= 1
            self._forget_if_idle(destination)
        return [w.delivery for w in lane]

    def _make_ready(self, lane_of: Lane) -> None:
        """The lane may start its head: ahead of other attempts when it is a first one (by
        its head now; one that an earlier tick joins later keeps its place), in its head's
        destination's turn."""
        head = self._lanes[lane_of][0]
        first = head.delivery.first
        destination = self._destination(head.destination)
        ready = destination.queue(first)
        if not ready:
            self._turns[first].append(destination.name)
        tenant = head.delivery.tenant
        ready.append(lane_of, tenant, self._weight_of(tenant))
        self._ready[lane_of] = (destination.name, first)

    def _unready(self, lane_of: Lane) -> None:
        """The lane leaves its destination's ready lanes (if it was there)."""
        where = self._ready.pop(lane_of, None)
        if where is None:
            return
        name, first = where
        destination = self._destinations[name]
        ready = destination.queue(first)
        ready.remove(lane_of)
        if not ready:
            self._turns[first].remove(name)
        self._forget_if_idle(destination)
