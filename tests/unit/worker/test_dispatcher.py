"""The production loop (`Dispatcher.run`, not a stepping double) on a fake store and sink:
the properties its invariant needs, each shown where it could break."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.domain.errors import StoreUnavailableError
from app.domain.occurrence import Delivered, Delivery, Outcome, Settlement
from app.domain.settled import Settled
from app.domain.target import WebhookTarget
from app.settings import Settings
from app.sinks.registry import Sinks
from app.store.loop.claims import Claimed
from app.worker.dispatcher import UNRECORDED_WINDOWS, Dispatcher, min_lease
from tests.stepping import step
from tests.waiting import eventually, suspended_in

EPOCH = datetime(2030, 1, 1, tzinfo=UTC)
TARGET = WebhookTarget(type="webhook", url="http://127.0.0.1:9/hook")


def delivery(schedule: uuid.UUID | None = None, tick: int = 0) -> Delivery:
    return Delivery(
        occurrence_id=uuid.uuid4(),
        schedule_id=schedule or uuid.uuid4(),
        fire_at=EPOCH + timedelta(seconds=tick),
        attempt=1,
        max_attempts=5,
        lease_token=uuid.uuid4(),
        event_type="test",
        body=b"{}",
        target=TARGET,
        one_shot=True,
    )


@dataclass
class FakeQueue:
    """Claims hand out scripted batches, each after its own delay; then nothing."""

    batches: list[tuple[float, list[Delivery]]] = field(default_factory=list)
    fail_claims: int = 0  # the first this many claims raise
    settle_gate: asyncio.Event | None = None  # the first settle waits for it
    settled: list[Settlement] = field(default_factory=list)
    released: list[tuple[list[Delivery], bool]] = field(default_factory=list)
    claims: int = 0
    claimed_at: list[float] = field(default_factory=list)  # when each claim was asked for
    unstarted_claims: int = 0  # claims that found more than could start at once
    stopped: set[uuid.UUID] = field(default_factory=set)  # paused or cancelled since
    marked: list[list[Delivery]] = field(default_factory=list)  # each start mark's
    skipped: list[list[str]] = field(default_factory=list)  # each claim's destinations to skip

    async def claim(
        self,
        *,
        limit: int,
        lease: float,
        owner: str,
        backoff: Callable[[int], float],
        ahead: float = 0.0,  # what is scripted is due: nothing to hold
        start: int | None = None,
        skip: Sequence[str] = (),
    ) -> Claimed:
        self.claims += 1
        self.skipped.append(list(skip))
        self.claimed_at.append(time.monotonic())
        if self.fail_claims:
            self.fail_claims -= 1
            raise StoreUnavailableError("the database is down")
        if not self.batches:
            return Claimed([], None)
        delay, batch = self.batches.pop(0)
        await asyncio.sleep(delay)
        batch = batch[:limit]
        # As the store does: more than may start at once, and none starts with the claim.
        unstarted = start is not None and len(batch) > start
        self.unstarted_claims += unstarted
        return Claimed(batch, unstarted=frozenset(d.occurrence_id for d in batch if unstarted))

    async def settle(self, settlements: Sequence[Settlement]) -> Settled:
        gate, self.settle_gate = self.settle_gate, None
        if gate is not None:
            await gate.wait()
        self.settled.extend(settlements)
        return Settled()

    async def release(
        self, deliveries: Sequence[Delivery], *, started: bool, unsent: Any = None
    ) -> None:
        self.released.append((list(deliveries), started))

    async def start_ahead(self, deliveries: Sequence[Delivery]) -> set[uuid.UUID]:
        self.marked.append(list(deliveries))
        return {d.occurrence_id for d in deliveries} - self.stopped

    @asynccontextmanager
    async def listening(self) -> AsyncIterator[None]:
        yield

    def weight_of(self, tenant: str) -> int:
        return 1


@dataclass
class FakeSink:
    delay: float = 0.0
    block: bool = False
    started: list[tuple[float, Delivery]] = field(default_factory=list)
    cancelled: list[Delivery] = field(default_factory=list)

    async def deliver(self, d: Delivery) -> Outcome:
        self.started.append((time.monotonic(), d))
        try:
            if self.block:
                await asyncio.Event().wait()
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled.append(d)
            raise
        return Delivered()


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": "sqlite:///unused.db",
        "poll_interval": 0.05,
        "min_cycle_delay": 0.0,
        "lease": 5.0,
        "dispatch_timeout": 1.0,
        "retry_base_delay": 0.05,
        "retry_max_delay": 0.2,
        "concurrency": 8,
        "batch_size": 10,
    }
    values.update(overrides)
    return Settings(**values)


def dispatcher(queue: FakeQueue, sink: FakeSink, **overrides: Any) -> Dispatcher:
    return Dispatcher(None, Sinks({"webhook": sink}), settings(**overrides), queue=queue)


async def test_the_loop_delivers_and_settles_every_claimed_occurrence_once() -> None:
    batch = [delivery() for _ in range(30)]
    queue = FakeQueue(batches=[(0.0, batch[:10]), (0.0, batch[10:20]), (0.0, batch[20:])])
    sink = FakeSink(delay=0.01)
    async with dispatcher(queue, sink).started():
        await eventually(lambda: len(queue.settled) == 30, every=0.01)
    assert sorted(s.delivery.occurrence_id for s in queue.settled) == sorted(
        d.occurrence_id for d in batch
    )
    assert len(sink.started) == 30
    assert queue.released == []


async def test_ticks_split_between_two_claims_in_flight_go_out_in_tick_order() -> None:
    """The first claim holds ticks 1 and 3 and answers late; the second holds tick 2 and
    answers at once. Tick 2 must not go out first."""
    schedule = uuid.uuid4()
    one, two, three = (delivery(schedule, tick) for tick in (1, 2, 3))
    queue = FakeQueue(batches=[(0.3, [one, three]), (0.0, [two])])
    sink = FakeSink()
    async with dispatcher(queue, sink).started():
        await eventually(lambda: len(queue.settled) == 3, every=0.01)
    assert [d.fire_at for _, d in sink.started] == [one.fire_at, two.fire_at, three.fire_at]


async def test_nothing_starts_once_its_lease_is_too_short_to_finish() -> None:
    """One delivery at a time, each taking most of a second, under a 3 s lease that needs
    2 s left to start: the first two at most start, the rest are handed back unstarted."""
    config = {"lease": 3.0, "dispatch_timeout": 1.0, "concurrency": 1}
    delay = 0.8
    batch = [delivery() for _ in range(5)]
    queue = FakeQueue(batches=[(0.0, batch)])
    sink = FakeSink(delay=delay)
    loop = dispatcher(queue, sink, **config)
    async with loop.started():
        await eventually(
            lambda: sum(len(r[0]) for r in queue.released) + len(sink.started) >= 5, every=0.01
        )
        await eventually(lambda: len(queue.settled) == len(sink.started), every=0.01)
    need = min_lease(settings(**config))
    # The lease began no earlier than the claim was asked for: each start had `need` left
    # of it, however slowly this machine ran.
    claimed_at = queue.claimed_at[0]
    for started, _ in sink.started:
        assert started - claimed_at <= 3.0 - need
    handed_back = [d for deliveries, started in queue.released for d in deliveries]
    assert all(not started for _, started in queue.released)  # not counted as attempts
    assert {d.occurrence_id for d in handed_back} | {d.occurrence_id for _, d in sink.started} == {
        d.occurrence_id for d in batch
    }
    # One at a time, each at least `delay` long: no more than this many fit before the
    # lease is too short (a loop that ignored the lease would start all five).
    assert len(sink.started) <= int((3.0 - need) / delay) + 1 == 2
    assert handed_back, "the rest were handed back"


async def test_what_waits_unstarted_is_marked_as_it_starts_and_a_stopped_one_goes_back() -> None:
    """Two slots and a claim of eight: more than may start at once, so none starts with
    the claim. Each is sent only once its start is marked; those stopped since the claim
    (paused, cancelled) are handed back uncharged and never reach the sink."""
    batch = [delivery() for _ in range(8)]
    stopped = {batch[3].occurrence_id, batch[6].occurrence_id}
    queue = FakeQueue(batches=[(0.0, batch)], stopped=stopped)
    sink = FakeSink(delay=0.02)
    async with dispatcher(queue, sink, concurrency=2).started():
        await eventually(lambda: len(queue.settled) == 6, every=0.01)
    assert queue.unstarted_claims == 1
    sent = [d.occurrence_id for _, d in sink.started]
    assert sorted(sent) == sorted(d.occurrence_id for d in batch if d.occurrence_id not in stopped)
    marked = [d.occurrence_id for deliveries in queue.marked for d in deliveries]
    assert sorted(marked) == sorted(d.occurrence_id for d in batch), "each marked once"
    handed_back = [(d.occurrence_id, started) for ds, started in queue.released for d in ds]
    assert sorted(handed_back) == sorted((i, False) for i in stopped)


async def test_a_stop_cancelled_part_way_leaves_no_delivery_or_settler_running() -> None:
    queue = FakeQueue(batches=[(0.0, [delivery()])])
    sink = FakeSink(block=True)
    loop = dispatcher(queue, sink, dispatch_timeout=3.0, lease=10.0)
    async with asyncio.timeout(10):
        loop._task = asyncio.create_task(loop.run())
        await eventually(lambda: loop.in_flight == 1, every=0.01)
        stopping = asyncio.create_task(loop.stop())
        # The drain is waiting for the blocked delivery.
        await eventually(lambda: suspended_in(loop._task, "drain"), every=0.01)
        stopping.cancel()
        await asyncio.wait({stopping})
    assert not loop.running
    assert len(sink.cancelled) == 1  # ended before the sinks could close
    ((released, started),) = queue.released
    assert started
    assert [d.occurrence_id for d in released] == [d.occurrence_id for _, d in sink.started]
    names = {task.get_name() for task in asyncio.all_tasks()}
    assert "chronoq-settler" not in names


async def test_a_batch_being_written_when_the_stop_comes_is_still_written() -> None:
    gate = asyncio.Event()  # the first settle hangs until the stop cancels it
    batch = [delivery() for _ in range(3)]
    queue = FakeQueue(batches=[(0.0, batch)], settle_gate=gate)
    loop = dispatcher(queue, FakeSink())
    async with loop.started():
        # The write has begun and hangs.
        await eventually(lambda: queue.settle_gate is None, every=0.01)
    assert sorted(s.delivery.occurrence_id for s in queue.settled) == sorted(
        d.occurrence_id for d in batch
    )
    assert queue.released == []


async def test_readiness_reports_failing_claims_and_recovers_by_itself() -> None:
    queue = FakeQueue(fail_claims=1_000_000)
    loop = dispatcher(queue, FakeSink(), poll_interval=0.05)
    async with loop.started():
        assert loop.health() == "ok"
        await eventually(lambda: loop.health() != "ok", every=0.01)
        assert loop.health().startswith("claims failing for ")
        assert loop.health().endswith(": StoreUnavailableError")
        queue.fail_claims = 0
        await eventually(lambda: loop.health() == "ok", every=0.01)
    assert loop.health() == "stopped"


async def test_a_step_delivers_every_batch_due_settles_them_and_stops_at_rest() -> None:
    batch = [delivery() for _ in range(25)]
    queue = FakeQueue(batches=[(0.0, batch[:10]), (0.0, batch[10:20]), (0.0, batch[20:])])
    sink = FakeSink(delay=0.01)
    loop = dispatcher(queue, sink)

    assert await step(loop) == 25

    assert sorted(s.delivery.occurrence_id for s in queue.settled) == sorted(
        d.occurrence_id for d in batch
    )
    assert queue.released == []
    assert not loop.running
    assert loop.in_flight == 0
    assert loop.waiting == 0
    claims = queue.claims
    assert await step(loop) == 0  # again: nothing is due
    assert queue.claims > claims
    assert "chronoq-settler" not in {task.get_name() for task in asyncio.all_tasks()}


async def test_a_claim_that_found_nothing_beside_another_is_no_sign_of_rest() -> None:
    # The first claim finds nothing, as one that skipped the rows the second had locked
    # would; the second, beside it, takes its time and finds the one due row.
    due = delivery()
    queue = FakeQueue(batches=[(0.1, []), (0.3, [due])])
    loop = dispatcher(queue, FakeSink())
    assert await step(loop) == 1
    assert queue.claimed_at[1] - queue.claimed_at[0] < 0.1, "the claims did not overlap"
    assert [s.delivery.occurrence_id for s in queue.settled] == [due.occurrence_id]
    assert queue.released == []


async def test_a_step_ends_with_the_error_of_a_failed_claim() -> None:
    queue = FakeQueue(fail_claims=1)
    loop = dispatcher(queue, FakeSink())
    with pytest.raises(StoreUnavailableError):
        await step(loop)
    assert not loop.running
    assert await step(loop) == 0  # the store is back


async def test_a_step_raises_when_settlements_cannot_be_written() -> None:
    class Refusing(FakeQueue):
        async def settle(self, settlements: Sequence[Settlement]) -> Settled:
            raise StoreUnavailableError("the database is down")

    queue = Refusing(batches=[(0.0, [delivery()])])
    loop = dispatcher(queue, FakeSink())
    with pytest.raises(RuntimeError, match="settling failed"):
        await step(loop, timeout=0.5)


async def test_a_store_slower_than_the_targets_holds_starts_back_at_its_bound() -> None:
    # What a crash would send again is what was sent and not yet recorded: in flight, or
    # finished and waiting for a settle write. While the write hangs, starts stop at
    # UNRECORDED_WINDOWS windows; once it lands, the rest goes out.
    gate = asyncio.Event()
    concurrency = 2
    bound = UNRECORDED_WINDOWS * concurrency
    batch = [delivery() for _ in range(bound + 10)]
    queue = FakeQueue(
        batches=[(0.0, batch[i : i + 10]) for i in range(0, len(batch), 10)], settle_gate=gate
    )
    sink = FakeSink()
    loop = dispatcher(queue, sink, concurrency=concurrency, batch_size=10)
    async with loop.started():
        await eventually(lambda: queue.settle_gate is None, every=0.01)  # a write hangs
        # Everything is claimed and in hand, and every delivery started has finished: each
        # finish and each claim looked for more to start, and there is nothing left that
        # would look again until the write lands.
        await eventually(
            lambda: (
                not queue.batches
                and loop.waiting + len(sink.started) == len(batch)
                and loop.in_flight == 0
                and not loop._claims
            ),
            every=0.01,
        )
        assert len(sink.started) == bound
        assert queue.settled == []
        gate.set()
        await eventually(lambda: len(queue.settled) == len(batch), every=0.01)
    assert len(sink.started) == len(batch)
