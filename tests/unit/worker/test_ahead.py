"""Claimed ahead: `Timetable` hands each delivery on once, at its instant, with its lease end;
`ClaimedAhead` marks each started before its instant and lets none reach the lanes early,
nor one that a pause or cancel stopped since its claim."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from app.domain.occurrence import Delivery
from app.worker.ahead import (
    MAX_START_LEAD,
    START_GATHER,
    START_LEAD,
    ClaimedAhead,
    Timetable,
    Turnover,
)
from tests import factories

# How long "soon" may take on a machine whose every core is busy; far above the waits held.
WAIT = 10.0
LEASE_END = 1_000.0


def delivery() -> Delivery:
    return factories.make_delivery(occurrence_id=uuid.uuid4(), lease_token=uuid.uuid4())


class Recorder:
    """What Timetable hands on: (loop time, deliveries, lease end) per call."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, list[Delivery], float]] = []
        self.unstarted: set[uuid.UUID] = set()  # admitted unmarked (`ClaimedAhead` only)
        self.arrived = asyncio.Event()

    def __call__(
        self,
        deliveries: list[Delivery],
        deadline: float,
        unstarted: Collection[uuid.UUID] = frozenset(),
    ) -> None:
        self.calls.append((time.monotonic(), deliveries, deadline))
        self.unstarted.update(unstarted)
        self.arrived.set()

    def handed_on(self) -> list[Delivery]:
        return [d for _, deliveries, _ in self.calls for d in deliveries]

    async def until(self, count: int) -> None:
        async with asyncio.timeout(WAIT):
            while len(self.handed_on()) < count:
                self.arrived.clear()
                await self.arrived.wait()


async def test_a_held_delivery_is_handed_on_at_its_instant_and_not_before() -> None:
    recorder = Recorder()
    held = Timetable(recorder)
    at = time.monotonic() + 0.2
    first = delivery()

    held.put(first, at, LEASE_END)
    held.arm()
    assert len(held) == 1
    assert held.next_at == at
    await recorder.until(1)

    [(handed_at, deliveries, deadline)] = recorder.calls
    assert deliveries == [first]
    assert deadline == LEASE_END
    assert handed_at >= at
    assert len(held) == 0
    assert held.next_at is None


async def test_deliveries_go_on_in_order_of_their_instants_whatever_order_they_were_held() -> None:
    recorder = Recorder()
    held = Timetable(recorder)
    now = time.monotonic()
    late, early, middle = delivery(), delivery(), delivery()

    held.put(late, now + 0.3, LEASE_END)
    held.put(early, now + 0.1, LEASE_END)
    held.put(middle, now + 0.2, LEASE_END)
    held.arm()
    await recorder.until(3)

    assert recorder.handed_on() == [early, middle, late]


async def test_a_sooner_delivery_held_after_arming_moves_the_timer_forward() -> None:
    recorder = Recorder()
    held = Timetable(recorder)
    now = time.monotonic()
    far, near = delivery(), delivery()
    held.put(far, now + WAIT * 2, LEASE_END)  # beyond the test's patience
    held.arm()

    held.put(near, now + 0.05, LEASE_END)
    held.arm()
    await recorder.until(1)

    assert recorder.handed_on() == [near]
    assert len(held) == 1
    assert held.next_at == now + WAIT * 2
    held.release_all()


async def test_deliveries_due_together_go_on_grouped_by_their_lease_end() -> None:
    recorder = Recorder()
    held = Timetable(recorder)
    at = time.monotonic() + 0.05
    one, two, three = delivery(), delivery(), delivery()

    held.put(one, at, 100.0)
    held.put(two, at, 200.0)
    held.put(three, at, 100.0)
    held.arm()
    await recorder.until(3)

    grouped = {deadline: deliveries for _, deliveries, deadline in recorder.calls}
    assert grouped == {100.0: [one, three], 200.0: [two]}


async def test_release_all_hands_on_everything_at_once_and_nothing_later() -> None:
    recorder = Recorder()
    held = Timetable(recorder)
    now = time.monotonic()
    soon, later = delivery(), delivery()
    held.put(soon, now + 0.1, LEASE_END)
    held.put(later, now + WAIT * 2, LEASE_END)
    held.arm()

    held.release_all()

    assert recorder.handed_on() == [soon, later]
    assert len(held) == 0
    await asyncio.sleep(0.3)  # past the first instant: its cancelled timer hands on nothing
    assert recorder.handed_on() == [soon, later]


async def test_a_delivery_whose_instant_has_passed_goes_on_at_the_next_turn() -> None:
    recorder = Recorder()
    held = Timetable(recorder)
    past = delivery()

    held.put(past, time.monotonic() - 1.0, LEASE_END)
    held.arm()
    await recorder.until(1)

    assert recorder.handed_on() == [past]


class Store:
    """The marks and hand-backs `ClaimedAhead` asks for: `stopped` ids may not start (a
    pause or cancel since the claim); `failing` makes every mark fail."""

    def __init__(self, stopped: frozenset[uuid.UUID] = frozenset(), failing: bool = False):
        self.stopped = stopped
        self.failing = failing
        self.marks: list[tuple[float, list[Delivery]]] = []
        self.released: list[tuple[list[Delivery], bool]] = []
        self.errors = 0
        self.handed_back = asyncio.Event()

    async def mark(self, deliveries: Sequence[Delivery]) -> set[uuid.UUID]:
        self.marks.append((time.monotonic(), list(deliveries)))
        if self.failing:
            raise ConnectionError("the database is down")
        return {d.occurrence_id for d in deliveries} - self.stopped

    async def release(self, deliveries: Sequence[Delivery], started: bool) -> None:
        self.released.append((list(deliveries), started))
        self.handed_back.set()

    def error(self) -> None:
        self.errors += 1


def claimed_ahead(
    store: Store,
    lanes: Recorder,
    stopping: asyncio.Event | None = None,
    room: int = 1 << 30,
    turnover: Turnover | None = None,
    wall: Callable[[], float] = time.time,
) -> Any:
    return ClaimedAhead(
        mark=store.mark,
        admit=lanes,
        start=lambda: None,
        release=store.release,
        on_error=store.error,
        stopping=stopping or asyncio.Event(),
        room=lambda: room,
        turnover=turnover,
        wall=wall,
    )


def due_in(seconds: float) -> datetime:
    return datetime.fromtimestamp(time.time() + seconds, UTC)


async def test_what_is_due_already_goes_straight_on_and_the_rest_is_taken() -> None:
    lanes = Recorder()
    ahead = claimed_ahead(Store(), lanes)
    now, later = delivery(), delivery()

    ready = ahead.take([now, later], {later.occurrence_id: due_in(WAIT * 2)}, LEASE_END)

    assert ready == [now]
    assert len(ahead) == 1
    assert ahead.unmarked_ahead == 1
    assert ahead.take([now], {}, LEASE_END) == [now]
    await ahead.stop()


async def test_a_claimed_ahead_delivery_is_marked_before_its_instant_and_starts_at_it() -> None:
    store, lanes = Store(), Recorder()
    ahead = claimed_ahead(store, lanes)
    one = delivery()
    instant = time.monotonic() + 0.2

    assert ahead.take([one], {one.occurrence_id: due_in(0.2)}, LEASE_END) == []
    await lanes.until(1)

    ((marked_at, marked),) = store.marks
    assert marked == [one]
    assert marked_at >= instant - START_LEAD - START_GATHER - 0.01
    ((admitted_at, admitted, deadline),) = [call for call in lanes.calls if call[1]]
    assert admitted == [one]
    assert deadline == LEASE_END
    assert admitted_at >= instant - 0.01  # the wall clock read, give or take
    assert store.released == []
    assert len(ahead) == 0
    assert not ahead.busy


async def test_only_as_many_as_there_are_free_slots_for_are_marked_the_rest_wait_unstarted() -> (
    None
):
    """One free slot, three ticks at one instant: one is marked (charged) before it; the
    other two would wait behind it in the lanes, so they join the lanes unstarted at the
    instant (marked only as they leave the lanes), and a crash meanwhile costs them nothing."""
    store, lanes = Store(), Recorder()
    ahead = claimed_ahead(store, lanes, room=1)
    ticks = [delivery() for _ in range(3)]
    instant = time.monotonic() + 0.2

    ahead.take(ticks, {d.occurrence_id: due_in(0.2) for d in ticks}, LEASE_END)
    await lanes.until(3)

    assert [marked for _, marked in store.marks] == [ticks[:1]]
    assert lanes.unstarted == {d.occurrence_id for d in ticks[1:]}
    for admitted_at, _, deadline in [call for call in lanes.calls if call[1]]:
        assert admitted_at >= instant - 0.01, "nothing joins before its instant"
        assert deadline == LEASE_END
    assert store.released == []
    assert len(ahead) == 0


async def test_slots_freed_at_the_recent_pace_by_their_instants_count_as_room() -> None:
    """One free slot now, but attempts finishing at 100 a second: within the lead as many
    slots as that free up, so the three ticks of one instant are all marked ahead, none
    left to be marked at their instant."""
    store, lanes = Store(), Recorder()
    finished, clock = [0], [0.0]
    turnover = Turnover(lambda: finished[0], clock=lambda: clock[0])
    turnover.per_second()
    clock[0], finished[0] = 1.0, 100  # and then the pace stands: no later reading
    assert turnover.per_second() == 100.0
    ahead = claimed_ahead(store, lanes, room=1, turnover=turnover)
    ticks = [delivery() for _ in range(3)]

    ahead.take(ticks, {d.occurrence_id: due_in(0.2) for d in ticks}, LEASE_END)
    await lanes.until(3)

    assert [marked for _, marked in store.marks] == [ticks]
    assert lanes.unstarted == set()
    await ahead.stop()


def test_the_turnover_is_the_pace_of_the_last_reading_interval() -> None:
    finished = [0]
    clock = [100.0]
    turnover = Turnover(lambda: finished[0], every=1.0, clock=lambda: clock[0])
    assert turnover.per_second() == 0.0  # nothing known yet
    clock[0], finished[0] = 100.5, 40
    assert turnover.per_second() == 0.0  # read again only after `every`
    clock[0], finished[0] = 102.0, 200
    assert turnover.per_second() == 100.0
    clock[0] = 103.0  # nothing finished since: the pace is none
    assert turnover.per_second() == 0.0


async def test_it_expects_ticks_from_their_claim_until_the_lanes_have_them() -> None:
    store, lanes = Store(), Recorder()
    ahead = claimed_ahead(store, lanes)
    one = delivery()
    assert not ahead.expecting

    ahead.take([one], {one.occurrence_id: due_in(0.2)}, LEASE_END)
    assert ahead.expecting  # held: the lanes keep room for it
    await lanes.until(1)

    assert not ahead.expecting


async def test_marks_falling_due_close_together_share_one_statement() -> None:
    store, lanes = Store(), Recorder()
    ahead = claimed_ahead(store, lanes)
    one, two = delivery(), delivery()
    first = START_LEAD + 0.1  # beyond the lead: held, then marked together
    not_before = {
        one.occurrence_id: due_in(first),
        two.occurrence_id: due_in(first + START_GATHER / 3),
    }

    ahead.take([one, two], not_before, LEASE_END)
    await lanes.until(2)

    assert [marked for _, marked in store.marks] == [[one, two]]


async def test_one_stopped_since_its_claim_never_starts_and_is_handed_back_unstarted() -> None:
    paused, going = delivery(), delivery()
    store, lanes = Store(stopped=frozenset({paused.occurrence_id})), Recorder()
    ahead = claimed_ahead(store, lanes)
    not_before = {d.occurrence_id: due_in(0.05) for d in (paused, going)}

    ahead.take([paused, going], not_before, LEASE_END)
    await lanes.until(1)
    async with asyncio.timeout(WAIT):
        await store.handed_back.wait()

    assert lanes.handed_on() == [going]
    assert store.released == [([paused], False)]
    assert not ahead.busy


async def test_a_failed_mark_hands_all_of_its_deliveries_back_unstarted() -> None:
    store, lanes = Store(failing=True), Recorder()
    ahead = claimed_ahead(store, lanes)
    batch = [delivery(), delivery()]

    ahead.take(batch, {d.occurrence_id: due_in(0.05) for d in batch}, LEASE_END)
    async with asyncio.timeout(WAIT):
        await store.handed_back.wait()

    assert store.released == [(batch, False)]
    assert store.errors == 1
    assert lanes.handed_on() == []


async def test_a_delivery_about_due_at_its_claim_is_marked_at_once() -> None:
    store, lanes = Store(), Recorder()
    ahead = claimed_ahead(store, lanes)
    one = delivery()

    ahead.take([one], {one.occurrence_id: due_in(START_LEAD / 2)}, LEASE_END)
    assert ahead.busy  # its mark is on its way; it is not held for a timer
    await lanes.until(1)

    assert lanes.handed_on() == [one]


async def test_stopping_puts_everything_held_in_the_lanes_at_once_unmarked() -> None:
    store, lanes = Store(), Recorder()
    stopping = asyncio.Event()
    ahead = claimed_ahead(store, lanes, stopping)
    soon, later = delivery(), delivery()
    not_before = {soon.occurrence_id: due_in(WAIT * 2), later.occurrence_id: due_in(WAIT * 3)}
    ahead.take([soon, later], not_before, LEASE_END)

    stopping.set()
    await ahead.stop()

    assert sorted(map(id, lanes.handed_on())) == sorted(map(id, [soon, later]))
    assert store.marks == []
    assert len(ahead) == 0


async def test_slow_marks_lengthen_the_lead_and_quick_ones_shorten_it_again() -> None:
    class Slow(Store):
        delay = 0.08

        async def mark(self, deliveries: Sequence[Delivery]) -> set[uuid.UUID]:
            await asyncio.sleep(self.delay)
            return await super().mark(deliveries)

    store, lanes = Slow(), Recorder()
    ahead = claimed_ahead(store, lanes)
    assert ahead.lead == START_LEAD
    first = delivery()
    ahead.take([first], {first.occurrence_id: due_in(0.1)}, LEASE_END)
    await lanes.until(1)
    # Twice what the mark took: the next delivery's mark begins that long before its instant.
    assert max(START_LEAD, 2 * Slow.delay) <= ahead.lead <= MAX_START_LEAD
    slow_lead = ahead.lead

    Slow.delay = 0.0
    for _ in range(40):
        quick = delivery()
        ahead.take([quick], {quick.occurrence_id: due_in(0.0)}, LEASE_END)
    await lanes.until(41)
    assert START_LEAD <= ahead.lead < slow_lead
    await ahead.stop()


class Late(Store):
    """Marks that answer only `delay` seconds after they are asked."""

    delay = 0.4

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.answered = asyncio.Event()

    async def mark(self, deliveries: Sequence[Delivery]) -> set[uuid.UUID]:
        try:
            await asyncio.sleep(self.delay)
            return await super().mark(deliveries)
        finally:
            self.answered.set()


async def until_answered(store: Late, ahead: Any) -> None:
    """Until the mark has answered and its answer is taken in (no await comes between)."""
    async with asyncio.timeout(WAIT):
        await store.answered.wait()
    assert not ahead.busy


async def test_a_mark_unanswered_at_the_instant_holds_the_start_until_it_answers() -> None:
    # An attempt sent before its mark commits would be made again under the same number
    # if the replica died in between: however late the mark, the tick waits for it.
    store, lanes = Late(), Recorder()
    ahead = claimed_ahead(store, lanes)
    one = delivery()
    asked = time.monotonic()

    ahead.take([one], {one.occurrence_id: due_in(0.05)}, LEASE_END)
    await lanes.until(1)

    ((admitted_at, admitted, _),) = [call for call in lanes.calls if call[1]]
    assert admitted == [one]
    assert [marked for _, marked in store.marks] == [[one]]
    assert admitted_at >= asked + store.delay, "it started before its mark answered"
    assert store.released == []
    assert len(ahead) == 0
    await ahead.stop()


async def test_a_late_mark_that_says_stopped_starts_nothing() -> None:
    one = delivery()
    store, lanes = Late(stopped=frozenset({one.occurrence_id})), Recorder()
    ahead = claimed_ahead(store, lanes)

    ahead.take([one], {one.occurrence_id: due_in(0.05)}, LEASE_END)
    await until_answered(store, ahead)

    assert lanes.handed_on() == [], "a paused delivery started"
    assert store.released == [([one], False)]
    await ahead.stop()


async def test_a_late_mark_that_fails_starts_nothing_and_hands_it_back_unstarted() -> None:
    store, lanes = Late(failing=True), Recorder()
    ahead = claimed_ahead(store, lanes)
    one = delivery()

    ahead.take([one], {one.occurrence_id: due_in(0.0)}, LEASE_END)
    await until_answered(store, ahead)

    assert lanes.handed_on() == []
    assert store.errors == 1
    assert store.released == [([one], False)]
    await ahead.stop()


async def test_an_occurrence_claimed_again_soon_after_it_started_starts_once_per_claim() -> None:
    # A claimed-ahead tick starts at its instant; its attempt fails at once and its retry,
    # due a moment later, is claimed ahead again (a new lease). What was kept for the first
    # claim must not start its delivery a second time, nor keep the second from starting.
    store, lanes = Store(), Recorder()
    ahead = claimed_ahead(store, lanes)
    first = delivery()
    retry = factories.make_delivery(
        occurrence_id=first.occurrence_id, lease_token=uuid.uuid4(), attempt=first.attempt + 1
    )

    ahead.take([first], {first.occurrence_id: due_in(0.0)}, LEASE_END)
    await lanes.until(1)
    ahead.take([retry], {retry.occurrence_id: due_in(0.2)}, LEASE_END)
    await lanes.until(2)
    await asyncio.sleep(START_GATHER * 3)  # past every timer either claim set

    assert lanes.handed_on() == [first, retry]
    assert store.released == []
    assert len(ahead) == 0
    await ahead.stop()


async def test_a_replica_clock_ahead_of_the_databases_never_starts_a_tick_early() -> None:
    """Due instants are the database's: read against the claim's instant of it, a tick
    waits its whole wait however far this replica's clock runs ahead."""
    store, lanes = Store(), Recorder()
    # this replica's clock, 30 s ahead of the database's
    ahead = claimed_ahead(store, lanes, wall=lambda: time.time() + 30)
    one = delivery()
    claimed_at = datetime.now(UTC)  # the database's instant of the claim
    instant = time.monotonic() + 0.3

    taken = ahead.take(
        [one],
        {one.occurrence_id: claimed_at + timedelta(seconds=0.3)},
        LEASE_END,
        readings=[(claimed_at, time.monotonic())],
    )

    assert taken == []  # by the replica's clock it was due 29.7 s ago
    await lanes.until(1)
    ((admitted_at, admitted, _),) = [call for call in lanes.calls if call[1]]
    assert admitted == [one]
    assert admitted_at >= instant - 0.01
    await ahead.stop()


async def test_a_tick_waits_from_when_the_claim_read_the_clock_not_from_when_it_ended() -> None:
    """A claim that took long after it read the database's clock (its planning, its
    writes, the claim before it) does not make its ticks late by that much: each starts at
    its instant by the readings of the clock, not a whole wait after the claim ended."""
    store, lanes = Store(), Recorder()
    # never read: the claim's reading stands
    ahead = claimed_ahead(store, lanes, wall=lambda: time.time() + 30)
    one = delivery()
    # The database's clock read `claimed_at` by loop time `read_by`, 0.4 s ago.
    read_by = time.monotonic() - 0.4
    claimed_at = datetime.now(UTC) - timedelta(seconds=0.4)

    taken = ahead.take(
        [one],
        {one.occurrence_id: claimed_at + timedelta(seconds=0.6)},
        LEASE_END,
        readings=[(claimed_at, read_by)],
    )

    assert taken == []
    await lanes.until(1)
    ((admitted_at, admitted, _),) = [call for call in lanes.calls if call[1]]
    assert admitted == [one]
    assert admitted_at >= read_by + 0.6 - 0.01
    assert admitted_at < read_by + 0.95, "it waited its whole wait from the claim's end"
    await ahead.stop()


async def test_a_database_clock_stepped_forward_during_the_claim_holds_no_tick_for_the_step() -> (
    None
):
    """The claim read the clock, then the database's clock stepped an hour forward before
    the claim read its instant: the claim's instant, read by when it came back, bounds the
    clock too, so the tick waits for its instant on the stepped clock, not an hour more."""
    store, lanes = Store(), Recorder()
    ahead = claimed_ahead(store, lanes)
    one = delivery()
    claimed_at = datetime.now(UTC) + timedelta(hours=1)  # the claim's instant, stepped
    before_the_step = (datetime.now(UTC), time.monotonic())
    instant = time.monotonic() + 0.3

    taken = ahead.take(
        [one],
        {one.occurrence_id: claimed_at + timedelta(seconds=0.3)},
        LEASE_END,
        readings=[before_the_step, (claimed_at, time.monotonic())],
    )

    assert taken == []
    await lanes.until(1)
    ((admitted_at, admitted, _),) = [call for call in lanes.calls if call[1]]
    assert admitted == [one]
    assert instant - 0.01 <= admitted_at < instant + 1.0
    await ahead.stop()
