"""The drain: a stopping loop hands back what never started, settles what finished, and
cancels what is still running, even when the drain itself is cancelled."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from app.domain.occurrence import Delivery, OccurrenceStatus, Settlement
from app.domain.target import WebhookTarget
from app.worker.drain import drain
from app.worker.lanes import Lanes
from app.worker.settler import SettleBatcher
from tests import factories

TARGET = WebhookTarget(type="webhook", url="http://127.0.0.1:9/x")
FIRST_TICK = datetime(2024, 3, 5, 10, 0, tzinfo=UTC)
LONG = 1e9  # a lease deadline (loop time) that never runs short in a test
WAIT = 1.0  # how long a test waits for something that should happen at once
GRACE = 0.05


def delivery(tick: int = 0, schedule_id: uuid.UUID | None = None) -> Delivery:
    return factories.make_delivery(
        occurrence_id=uuid.uuid4(),
        schedule_id=schedule_id or uuid.uuid4(),
        fire_at=FIRST_TICK + timedelta(minutes=tick),
        lease_token=uuid.uuid4(),
        target=TARGET,
        one_shot=False,
    )


class FakeWrite:
    """A store's settle write that succeeds, unless told to stall its first call."""

    def __init__(self, *, stall_first: bool = False) -> None:
        self.written: list[Settlement] = []
        self.calls = 0
        self.entered = asyncio.Event()
        self._stall_first = stall_first

    async def __call__(self, batch: Sequence[Settlement]) -> None:
        self.calls += 1
        self.entered.set()
        if self._stall_first and self.calls == 1:
            await asyncio.Event().wait()
        self.written.extend(batch)


class FakeRelease:
    """Records each `release(deliveries, started)` call; never raises."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[Delivery], bool]] = []
        self.called = asyncio.Event()

    async def __call__(self, deliveries: Sequence[Delivery], started: bool) -> None:
        self.calls.append((list(deliveries), started))
        self.called.set()

    def released(self, *, started: bool) -> list[Delivery]:
        return [d for deliveries, s in self.calls if s is started for d in deliveries]


def make_settler(write: FakeWrite, *, gather: float = 10.0) -> SettleBatcher:
    # A long gather: what the drain writes, it writes itself, not the background writer.
    settler = SettleBatcher(write, gather=gather, backoff=0.01, max_backoff=0.02)
    settler.start()
    return settler


def lanes_holding(*deliveries: Delivery) -> Lanes:
    lanes = Lanes(limit=10, min_lease=1.0)
    lanes.admit(deliveries, deadline=LONG)
    return lanes


async def settle_when(settler: SettleBatcher, delivery: Delivery, gate: asyncio.Event) -> None:
    """A delivery task: its settlement joins the batcher as its last step."""
    await gate.wait()
    settler.add(Settlement(delivery, OccurrenceStatus.DELIVERED))


async def settle_now(settler: SettleBatcher, delivery: Delivery) -> None:
    settler.add(Settlement(delivery, OccurrenceStatus.DELIVERED))


def settler_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == "chronoq-settler" and not t.done()]


async def test_waiting_deliveries_are_handed_back_as_not_started() -> None:
    waiting = [delivery(0), delivery(1)]
    release = FakeRelease()
    write = FakeWrite()

    await drain(
        lanes=lanes_holding(*waiting),
        in_flight={},
        release=release,
        settler=make_settler(write),
        grace=GRACE,
    )

    assert sorted(release.released(started=False), key=lambda d: d.fire_at) == waiting
    assert release.released(started=True) == []
    assert write.written == []


async def test_a_finished_task_still_mapped_in_flight_is_settled_not_handed_back() -> None:
    finished = delivery()
    release = FakeRelease()
    write = FakeWrite()
    settler = make_settler(write)
    task = asyncio.create_task(settle_now(settler, finished))
    await task
    in_flight = {task: finished}  # as if its done-callback had not run yet

    await drain(
        lanes=lanes_holding(), in_flight=in_flight, release=release, settler=settler, grace=GRACE
    )

    assert release.released(started=True) == []
    assert release.released(started=False) == []
    assert [s.delivery for s in write.written] == [finished]


async def test_a_task_that_finishes_within_the_grace_period_is_settled_not_handed_back() -> None:
    running = delivery()
    release = FakeRelease()
    write = FakeWrite()
    settler = make_settler(write)
    gate = asyncio.Event()
    task = asyncio.create_task(settle_when(settler, running, gate))
    asyncio.get_running_loop().call_soon(gate.set)

    await drain(
        lanes=lanes_holding(),
        in_flight={task: running},
        release=release,
        settler=settler,
        grace=WAIT,
    )

    assert release.released(started=True) == []
    assert [s.delivery for s in write.written] == [running]


async def test_a_task_still_running_after_the_grace_period_is_cancelled_and_handed_back() -> None:
    stuck = delivery()
    release = FakeRelease()
    write = FakeWrite()
    settler = make_settler(write)
    task = asyncio.create_task(settle_when(settler, stuck, asyncio.Event()))

    await drain(
        lanes=lanes_holding(),
        in_flight={task: stuck},
        release=release,
        settler=settler,
        grace=GRACE,
    )

    assert task.cancelled()
    assert release.released(started=True) == [stuck]
    assert release.released(started=False) == []
    assert write.written == []


async def test_a_drain_stops_the_settlers_background_writer() -> None:
    write = FakeWrite()
    settler = make_settler(write)
    assert len(settler_tasks()) == 1

    await drain(
        lanes=lanes_holding(), in_flight={}, release=FakeRelease(), settler=settler, grace=GRACE
    )

    assert settler_tasks() == []


async def test_a_drain_cancelled_in_its_grace_wait_ends_every_task_and_writes_what_settled() -> (
    None
):
    waiting = delivery(1)
    stuck, finished = delivery(), delivery()
    release = FakeRelease()
    write = FakeWrite()
    settler = make_settler(write)
    stuck_task = asyncio.create_task(settle_when(settler, stuck, asyncio.Event()))
    finished_task = asyncio.create_task(settle_now(settler, finished))
    await finished_task
    in_flight = {stuck_task: stuck, finished_task: finished}
    draining = asyncio.create_task(
        drain(
            lanes=lanes_holding(waiting),
            in_flight=in_flight,
            release=release,
            settler=settler,
            grace=10.0,
        )
    )
    async with asyncio.timeout(WAIT):
        await release.called.wait()  # handed back the waiting; now in the grace wait

    draining.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(WAIT):
            await draining

    assert release.released(started=False) == [waiting]
    assert all(task.done() for task in in_flight)
    assert settler_tasks() == []
    assert [s.delivery for s in write.written] == [finished]
    assert settler.pending == 0


async def test_a_drain_cancelled_during_its_settle_write_still_makes_a_last_write() -> None:
    finished = delivery()
    write = FakeWrite(stall_first=True)
    settler = make_settler(write)
    task = asyncio.create_task(settle_now(settler, finished))
    await task
    draining = asyncio.create_task(
        drain(
            lanes=lanes_holding(),
            in_flight={task: finished},
            release=FakeRelease(),
            settler=settler,
            grace=GRACE,
        )
    )
    async with asyncio.timeout(WAIT):
        await write.entered.wait()  # the drain's own write, stalled

    draining.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(WAIT):
            await draining

    assert write.calls == 2
    assert [s.delivery for s in write.written] == [finished]
    assert settler.pending == 0
    assert settler_tasks() == []


async def test_a_drain_cancelled_while_the_settler_winds_down_is_still_cancelled() -> None:
    # The background writer is mid-write when the drain stops it; its write, once
    # cancelled, awaits its cleanup (a rollback). A cancel that lands then must not be
    # lost: the drain returns by raising CancelledError, not by carrying on.
    finished = delivery()
    writing = asyncio.Event()
    cleanup_started = asyncio.Event()
    written: list[Settlement] = []

    async def write(batch: Sequence[Settlement]) -> None:
        if not writing.is_set():
            writing.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cleanup_started.set()
                await asyncio.sleep(0.2)
                raise
        written.extend(batch)

    settler = SettleBatcher(write, gather=0.0, backoff=0.01, max_backoff=0.02)
    settler.start()
    settler.add(Settlement(finished, OccurrenceStatus.DELIVERED))
    async with asyncio.timeout(WAIT):
        await writing.wait()
    draining = asyncio.create_task(
        drain(
            lanes=lanes_holding(), in_flight={}, release=FakeRelease(), settler=settler, grace=GRACE
        )
    )
    async with asyncio.timeout(WAIT):
        await cleanup_started.wait()

    draining.cancel()

    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(WAIT):
            await draining
    assert [s.delivery for s in written] == [finished]
