"""Lanes: claimed deliveries waiting to start, one lane per schedule.

Invariants:
- a schedule has at most one delivery in flight; its others wait in its lane in tick order
  (`fire_at`, then id), so catch-ups and backfills arrive in tick order, whichever claim
  brought them;
- on time first: a lane whose head is a first attempt starts before any lane whose head is
  a retry or a replay, so a bulk replay never stands in front of first attempts; and the
  `reserve` a start is given is kept for first attempts: the others start only while more
  than that much room is left (of the window, and of the `most` a start is allowed), so a
  tick coming due finds a slot rather than waiting for a replayed delivery to finish;
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
import uuid
from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from app.domain.occurrence import Delivery


def tick_order(delivery: Delivery) -> tuple[datetime, uuid.UUID]:
    return delivery.fire_at, delivery.occurrence_id


@dataclass(frozen=True, slots=True)
class _Waiting:
    delivery: Delivery
    deadline: float  # loop time at which its lease ends
    unstarted: bool = False  # its attempt waits for its start mark

    @property
    def order(self) -> tuple[datetime, uuid.UUID]:
        return tick_order(self.delivery)


@dataclass(slots=True)
class Started:
    """What `Lanes.start` decided: deliveries to launch now, and deliveries to hand back."""

    launch: list[Delivery] = field(default_factory=list)
    hand_back: list[Delivery] = field(default_factory=list)
    # Of `launch`, the occurrences admitted unstarted: each is marked started before it is
    # sent (or handed back, when the mark finds it paused or cancelled).
    unstarted: set[uuid.UUID] = field(default_factory=set)


class Lanes:
    def __init__(self, limit: int, min_lease: float) -> None:
        self._limit = limit
        self._min_lease = min_lease
        self._lanes: dict[uuid.UUID, list[_Waiting]] = {}  # non-empty lanes only
        # Lanes with a head that may start: a first attempt, or another attempt.
        self._ready: deque[uuid.UUID] = deque()
        self._ready_again: deque[uuid.UUID] = deque()
        self._busy: set[uuid.UUID] = set()  # schedules with a delivery in flight
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
            sid = delivery.schedule_id
            waiting = _Waiting(delivery, deadline, delivery.occurrence_id in unstarted)
            lane = self._lanes.get(sid)
            if lane is None:
                lane = self._lanes[sid] = []
                bisect.insort(lane, waiting, key=lambda w: w.order)
                if sid not in self._busy:
                    self._make_ready(sid)
            else:
                bisect.insort(lane, waiting, key=lambda w: w.order)
            self._waiting += 1
        self._soonest = min(self._soonest, deadline)

    def start(
        self, now: float, most: int | None = None, *, reserve: int = 0, spare: int = 0
    ) -> Started:
        """Take the heads of ready lanes while the in-flight window has room, `most` at
        most when given; heads that are not first attempts only while more than `reserve`
        of that room is left. Up to `spare` more unstarted heads may leave beyond the
        window: their start marks are made while the window's deliveries finish (their
        caller holds each back from its sink until a slot of the window is free)."""
        started = Started()
        cap = self._limit + spare if most is None else len(self._busy) + most
        limit = min(self._limit, cap)
        again_limit = limit - reserve
        while len(self._busy) < min(self._limit + spare, cap):
            if self._ready:
                ready, window = self._ready, limit
            elif self._ready_again and len(self._busy) < again_limit + spare:
                ready, window = self._ready_again, again_limit
            else:
                break
            sid = ready[0]
            lane = self._lanes[sid]
            head = lane[0]
            if len(self._busy) >= window and not head.unstarted:
                break  # beyond the window, only a start mark may be made ahead
            ready.popleft()
            if head.deadline - now < self._min_lease:
                started.hand_back.extend(self._drop(sid))
                continue
            lane.pop(0)
            self._waiting -= 1
            if not lane:
                del self._lanes[sid]
            self._busy.add(sid)
            started.launch.append(head.delivery)
            if head.unstarted:
                started.unstarted.add(head.delivery.occurrence_id)
        return started

    def finished(self, delivery: Delivery) -> None:
        """The schedule's delivery in flight is done: its lane's next may start."""
        sid = delivery.schedule_id
        self._busy.discard(sid)
        if sid in self._lanes:
            self._make_ready(sid)

    def expiring(self, now: float) -> list[Delivery]:
        """Remove and return every waiting lane that holds a delivery whose lease is too
        short to start; cheap when none is (one comparison)."""
        if self._soonest - now >= self._min_lease:
            return []
        out: list[Delivery] = []
        for sid in [s for s, lane in self._lanes.items() if self._expires(lane, now)]:
            out.extend(self._drop(sid))
        self._soonest = min(
            (w.deadline for lane in self._lanes.values() for w in lane), default=float("inf")
        )
        return out

    def take_all(self) -> list[Delivery]:
        """Remove and return every waiting delivery (the loop is stopping)."""
        out = [w.delivery for lane in self._lanes.values() for w in lane]
        self._lanes.clear()
        self._ready.clear()
        self._ready_again.clear()
        self._waiting = 0
        self._soonest = float("inf")
        return out

    def _expires(self, lane: list[_Waiting], now: float) -> bool:
        return any(w.deadline - now < self._min_lease for w in lane)

    def _drop(self, sid: uuid.UUID) -> list[Delivery]:
        lane = self._lanes.pop(sid)
        self._waiting -= len(lane)
        for ready in (self._ready, self._ready_again):
            if sid in ready:
                ready.remove(sid)
        return [w.delivery for w in lane]

    def _make_ready(self, sid: uuid.UUID) -> None:
        """The lane may start its head: ahead of other attempts when it is a first one (by
        its head now; one that an earlier tick joins later keeps its place)."""
        first = self._lanes[sid][0].delivery.first
        (self._ready if first else self._ready_again).append(sid)
