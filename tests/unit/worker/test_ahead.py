"""Held: claimed-ahead deliveries wait for their instant, then go on once, with their lease end."""

from __future__ import annotations

import asyncio
import uuid

from app.domain.occurrence import Delivery
from app.worker.ahead import TIMER_SLACK, Held
from tests import factories

# How long "soon" may take on a machine whose every core is busy; far above the waits held.
WAIT = 10.0
LEASE_END = 1_000.0


def delivery() -> Delivery:
    return factories.make_delivery(occurrence_id=uuid.uuid4(), lease_token=uuid.uuid4())


class Recorder:
    """What Held hands on: (loop time, deliveries, lease end) per call."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, list[Delivery], float]] = []
        self.arrived = asyncio.Event()

    def __call__(self, deliveries: list[Delivery], deadline: float) -> None:
        self.calls.append((asyncio.get_running_loop().time(), deliveries, deadline))
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
    held = Held(recorder)
    loop = asyncio.get_running_loop()
    at = loop.time() + 0.2
    first = delivery()

    held.hold(first, at, LEASE_END)
    held.arm()
    assert len(held) == 1
    assert held.next_at == at
    await recorder.until(1)

    [(handed_at, deliveries, deadline)] = recorder.calls
    assert deliveries == [first]
    assert deadline == LEASE_END
    assert handed_at >= at - TIMER_SLACK
    assert len(held) == 0
    assert held.next_at is None


async def test_deliveries_go_on_in_order_of_their_instants_whatever_order_they_were_held() -> None:
    recorder = Recorder()
    held = Held(recorder)
    now = asyncio.get_running_loop().time()
    late, early, middle = delivery(), delivery(), delivery()

    held.hold(late, now + 0.3, LEASE_END)
    held.hold(early, now + 0.1, LEASE_END)
    held.hold(middle, now + 0.2, LEASE_END)
    held.arm()
    await recorder.until(3)

    assert recorder.handed_on() == [early, middle, late]


async def test_a_sooner_delivery_held_after_arming_moves_the_timer_forward() -> None:
    recorder = Recorder()
    held = Held(recorder)
    now = asyncio.get_running_loop().time()
    far, near = delivery(), delivery()
    held.hold(far, now + WAIT * 2, LEASE_END)  # beyond the test's patience
    held.arm()

    held.hold(near, now + 0.05, LEASE_END)
    held.arm()
    await recorder.until(1)

    assert recorder.handed_on() == [near]
    assert len(held) == 1
    assert held.next_at == now + WAIT * 2
    held.release_all()


async def test_deliveries_due_together_go_on_grouped_by_their_lease_end() -> None:
    recorder = Recorder()
    held = Held(recorder)
    at = asyncio.get_running_loop().time() + 0.05
    one, two, three = delivery(), delivery(), delivery()

    held.hold(one, at, 100.0)
    held.hold(two, at, 200.0)
    held.hold(three, at, 100.0)
    held.arm()
    await recorder.until(3)

    grouped = {deadline: deliveries for _, deliveries, deadline in recorder.calls}
    assert grouped == {100.0: [one, three], 200.0: [two]}


async def test_release_all_hands_on_everything_at_once_and_nothing_later() -> None:
    recorder = Recorder()
    held = Held(recorder)
    now = asyncio.get_running_loop().time()
    soon, later = delivery(), delivery()
    held.hold(soon, now + 0.1, LEASE_END)
    held.hold(later, now + WAIT * 2, LEASE_END)
    held.arm()

    held.release_all()

    assert recorder.handed_on() == [soon, later]
    assert len(held) == 0
    await asyncio.sleep(0.3)  # past the first instant: its cancelled timer hands on nothing
    assert recorder.handed_on() == [soon, later]


async def test_a_delivery_whose_instant_has_passed_goes_on_at_the_next_turn() -> None:
    recorder = Recorder()
    held = Held(recorder)
    past = delivery()

    held.hold(past, asyncio.get_running_loop().time() - 1.0, LEASE_END)
    held.arm()
    await recorder.until(1)

    assert recorder.handed_on() == [past]
