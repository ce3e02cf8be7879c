"""The settle batcher: batched writes that drop nothing and are not held back by one."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence

import pytest

from app.domain.errors import StoreUnavailableError
from app.domain.occurrence import OccurrenceStatus, Settlement
from app.domain.target import WebhookTarget
from app.worker.settler import MAX_STRIKES, SettleBatcher
from tests import factories

TARGET = WebhookTarget(type="webhook", url="http://127.0.0.1:9/x")
WAIT = 1.0  # how long a test waits for something that should happen at once


def settlement(occurrence_id: uuid.UUID | None = None, attempt: int = 1) -> Settlement:
    delivery = factories.make_delivery(
        occurrence_id=occurrence_id or uuid.uuid4(),
        lease_token=uuid.uuid4(),
        attempt=attempt,
        target=TARGET,
    )
    return Settlement(delivery, OccurrenceStatus.DELIVERED)


def never(batch: Sequence[Settlement]) -> bool:
    return False


def holding(settlement: Settlement) -> Callable[[Sequence[Settlement]], bool]:
    occurrence_id = settlement.delivery.occurrence_id
    return lambda batch: any(s.delivery.occurrence_id == occurrence_id for s in batch)


class FakeWrite:
    """A store's settle write: records every call and each batch it accepts."""

    def __init__(self) -> None:
        self.calls: list[list[Settlement]] = []
        self.written: list[list[Settlement]] = []
        self.unavailable = 0  # this many next calls find the store unreachable
        self.refuses: Callable[[Sequence[Settlement]], bool] = never  # the statement fails
        self.stalls: Callable[[Sequence[Settlement]], bool] = never  # the call never returns
        self.stalled = asyncio.Event()
        self.wrote = asyncio.Event()

    async def __call__(self, batch: Sequence[Settlement]) -> None:
        self.calls.append(list(batch))
        if self.stalls(batch):
            self.stalled.set()
            await asyncio.Event().wait()
        if self.unavailable:
            self.unavailable -= 1
            raise StoreUnavailableError()
        if self.refuses(batch):
            raise ValueError("the statement failed")
        self.written.append(list(batch))
        self.wrote.set()

    def settled(self) -> list[Settlement]:
        return [s for batch in self.written for s in batch]


class ErrorCount:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def make_batcher(
    write: FakeWrite, *, gather: float = 0.01, on_error: ErrorCount | None = None
) -> SettleBatcher:
    return SettleBatcher(
        write, gather=gather, backoff=0.01, max_backoff=0.02, on_error=on_error or ErrorCount()
    )


def settler_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == "chronoq-settler" and not t.done()]


async def test_settlements_added_within_the_gather_window_are_written_in_one_batch() -> None:
    write = FakeWrite()
    batcher = make_batcher(write, gather=0.05)
    batcher.start()
    settlements = [settlement() for _ in range(3)]

    for each in settlements:
        batcher.add(each)
    async with asyncio.timeout(WAIT):
        await write.wrote.wait()

    assert write.written == [settlements]
    assert batcher.pending == 0
    await batcher.close()


async def test_flush_with_nothing_pending_writes_nothing() -> None:
    write = FakeWrite()
    batcher = make_batcher(write)

    assert await batcher.flush()
    assert write.calls == []


async def test_a_batch_kept_while_the_store_is_unreachable_is_written_by_a_later_flush() -> None:
    write = FakeWrite()
    errors = ErrorCount()
    batcher = make_batcher(write, on_error=errors)
    settlements = [settlement() for _ in range(3)]
    for each in settlements:
        batcher.add(each)
    write.unavailable = 1

    first = await batcher.flush()
    pending_after_failure = batcher.pending
    second = await batcher.flush()

    assert first is False
    assert pending_after_failure == 3
    assert second is True
    assert write.settled() == settlements  # each once: nothing lost, nothing duplicated
    assert batcher.pending == 0
    assert errors.count == 1


async def test_settlements_added_during_an_outage_are_written_after_the_kept_ones() -> None:
    write = FakeWrite()
    batcher = make_batcher(write)
    early, late = settlement(), settlement()
    batcher.add(early)
    write.unavailable = 1
    assert not await batcher.flush()

    batcher.add(late)

    assert await batcher.flush()
    assert write.written == [[early, late]]


async def test_the_background_writer_retries_a_batch_until_the_store_is_back() -> None:
    write = FakeWrite()
    errors = ErrorCount()
    batcher = make_batcher(write, on_error=errors)
    write.unavailable = 2
    batcher.start()
    only = settlement()

    batcher.add(only)
    async with asyncio.timeout(WAIT):
        await write.wrote.wait()

    assert write.written == [[only]]
    assert errors.count == 2
    await batcher.close()


async def test_one_refused_settlement_does_not_hold_back_the_others() -> None:
    write = FakeWrite()
    errors = ErrorCount()
    batcher = make_batcher(write, on_error=errors)
    first, bad, last = settlement(), settlement(), settlement()
    write.refuses = holding(bad)
    for each in (first, bad, last):
        batcher.add(each)

    done = await batcher.flush()

    assert done is False
    assert write.written == [[first], [last]]
    assert batcher.pending == 1
    assert errors.count == 1
    write.refuses = never
    assert await batcher.flush()
    assert write.settled() == [first, last, bad]


async def test_a_settlement_refused_max_strikes_times_is_given_up_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="app.worker.settler")
    write = FakeWrite()
    batcher = make_batcher(write)
    good, bad = settlement(), settlement()
    write.refuses = holding(bad)
    batcher.add(good)
    batcher.add(bad)

    results = [await batcher.flush() for _ in range(MAX_STRIKES - 1)]
    still_pending = batcher.pending
    gave_up_logs_before = [r for r in caplog.records if r.levelno >= logging.ERROR]
    last = await batcher.flush()

    assert results == [False] * (MAX_STRIKES - 1)
    assert still_pending == 1
    assert gave_up_logs_before == []
    assert last is True
    assert batcher.pending == 0
    assert write.settled() == [good]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert str(bad.delivery.occurrence_id) in errors[0].getMessage()


async def test_a_refused_settlement_that_is_written_later_leaves_no_strikes_behind() -> None:
    # The next attempt of the same occurrence is a settlement of its own: it gets
    # MAX_STRIKES refusals, whatever happened to the settlement before it.
    write = FakeWrite()
    batcher = make_batcher(write)
    occurrence_id = uuid.uuid4()
    first_attempt = settlement(occurrence_id, attempt=1)
    write.refuses = holding(first_attempt)
    batcher.add(settlement())
    batcher.add(first_attempt)
    assert not await batcher.flush()  # refused once on its own
    write.refuses = never
    assert await batcher.flush()  # then written, in a batch of its own
    next_attempt = settlement(occurrence_id, attempt=2)
    write.refuses = holding(next_attempt)
    batcher.add(next_attempt)

    flushes = 0
    while batcher.pending and flushes < 2 * MAX_STRIKES:
        await batcher.flush()
        flushes += 1

    assert flushes == MAX_STRIKES


async def test_a_write_cancelled_mid_way_puts_its_batch_back() -> None:
    write = FakeWrite()
    batcher = make_batcher(write)
    settlements = [settlement() for _ in range(3)]
    for each in settlements:
        batcher.add(each)
    write.stalls = lambda batch: True
    flush = asyncio.create_task(batcher.flush())
    async with asyncio.timeout(WAIT):
        await write.stalled.wait()

    flush.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flush

    assert batcher.pending == 3
    write.stalls = never
    assert await batcher.flush()
    assert write.written == [settlements]


async def test_a_write_cancelled_while_writing_one_by_one_keeps_only_what_is_unwritten() -> None:
    write = FakeWrite()
    batcher = make_batcher(write)
    first, stuck, last = settlement(), settlement(), settlement()
    write.refuses = lambda batch: len(batch) > 1
    write.stalls = lambda batch: list(batch) == [stuck]
    for each in (first, stuck, last):
        batcher.add(each)
    flush = asyncio.create_task(batcher.flush())
    async with asyncio.timeout(WAIT):
        await write.stalled.wait()

    flush.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flush

    assert batcher.pending == 2
    write.refuses = never
    write.stalls = never
    assert await batcher.flush()
    assert write.settled() == [first, stuck, last]


async def test_close_writes_what_is_left_and_stops_the_background_writer() -> None:
    write = FakeWrite()
    batcher = make_batcher(write, gather=10.0)  # the writer would not get to it by itself
    batcher.start()
    only = settlement()
    batcher.add(only)
    await asyncio.sleep(0)
    running_before = settler_tasks()

    closed = await batcher.close()

    assert len(running_before) == 1
    assert closed is True
    assert write.written == [[only]]
    assert batcher.pending == 0
    assert settler_tasks() == []


async def test_close_reports_what_it_could_not_write() -> None:
    write = FakeWrite()
    errors = ErrorCount()
    batcher = make_batcher(write, on_error=errors)
    batcher.add(settlement())
    write.unavailable = 2

    closed = await batcher.close(attempts=2, pause=0.01)

    assert closed is False
    assert batcher.pending == 1
    assert errors.count == 2


async def test_close_is_safe_when_the_writer_never_started() -> None:
    write = FakeWrite()
    batcher = make_batcher(write)

    assert await batcher.close()
    assert write.calls == []


async def test_stop_cancelled_while_the_writer_winds_down_is_not_swallowed() -> None:
    # The store's write, once cancelled, still has cleanup to await (a rollback): stop()
    # waits for it. Whoever called stop() and is cancelled meanwhile must see it.
    writing = asyncio.Event()
    cleanup_started = asyncio.Event()

    async def write(batch: Sequence[Settlement]) -> None:
        writing.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cleanup_started.set()
            await asyncio.sleep(0.2)
            raise

    batcher = SettleBatcher(write, gather=0.0, backoff=0.01, max_backoff=0.02)
    batcher.start()
    batcher.add(settlement())
    async with asyncio.timeout(WAIT):
        await writing.wait()
    stopping = asyncio.create_task(batcher.stop())
    async with asyncio.timeout(WAIT):
        await cleanup_started.wait()

    stopping.cancel()

    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(WAIT):
            await stopping


def counting_batcher(write: FakeWrite) -> tuple[SettleBatcher, list[int]]:
    """A batcher that records, after each write that lands, how many it still holds."""
    seen: list[int] = []
    batcher = SettleBatcher(
        write,
        gather=0.0,
        backoff=0.01,
        max_backoff=0.02,
        on_written=lambda: seen.append(batcher.unsettled),
    )
    return batcher, seen


async def test_unsettled_counts_what_is_pending_and_in_a_write_until_the_write_lands() -> None:
    write = FakeWrite()
    batcher, seen = counting_batcher(write)
    held = settlement()
    write.stalls = holding(held)
    batcher.add(held)
    batcher.add(settlement())
    assert batcher.unsettled == 2

    flushing = asyncio.create_task(batcher.flush())
    async with asyncio.timeout(WAIT):
        await write.stalled.wait()
    batcher.add(settlement())
    assert batcher.pending == 1
    assert batcher.unsettled == 3  # the two in the hanging write still count
    assert seen == []
    flushing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flushing
    assert batcher.unsettled == 3  # put back, not lost from the count

    write.stalls = never
    assert await batcher.flush()
    assert seen == [0]
    assert batcher.unsettled == 0


async def test_writing_one_by_one_counts_each_landed_or_given_up_settlement_off() -> None:
    write = FakeWrite()
    batcher, seen = counting_batcher(write)
    first, bad, last = settlement(), settlement(), settlement()
    write.refuses = holding(bad)
    for each in (first, bad, last):
        batcher.add(each)

    assert not await batcher.flush()
    assert seen == [2, 1]  # each landed write counted off at once; the refused one stays
    assert batcher.unsettled == 1
    for _ in range(MAX_STRIKES - 1):
        await batcher.flush()
    assert batcher.unsettled == 0  # given up to its lease: no longer held here
