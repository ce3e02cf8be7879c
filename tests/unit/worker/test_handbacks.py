"""Hand-backs: releases that never raise, and background ones the loop's stop waits for."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from app.domain.errors import StoreUnavailableError
from app.domain.occurrence import Delivery, Unsent
from app.domain.target import WebhookTarget
from app.worker.handbacks import HandBacks
from tests import factories

TARGET = WebhookTarget(type="webhook", url="http://127.0.0.1:9/x")
WAIT = 1.0


class FakeQueue:
    """The store's release: records each call; fails while `down`; holds while `gate`."""

    def __init__(self) -> None:
        self.released: list[tuple[list[Delivery], bool, Unsent | None]] = []
        self.down = False
        self.gate: asyncio.Event | None = None

    async def release(
        self, deliveries: Sequence[Delivery], *, started: bool, unsent: Unsent | None = None
    ) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            raise StoreUnavailableError("the database is down")
        self.released.append((list(deliveries), started, unsent))


class Counts:
    def __init__(self) -> None:
        self.errors = 0
        self.done = 0


def hand_backs(queue: FakeQueue, counts: Counts) -> HandBacks:
    def error() -> None:
        counts.errors += 1

    def done() -> None:
        counts.done += 1

    return HandBacks(queue, on_error=error, on_done=done)  # type: ignore[arg-type]


def deliveries(n: int) -> list[Delivery]:
    return [factories.make_delivery(target=TARGET) for _ in range(n)]


async def test_a_release_the_store_refuses_is_logged_and_counted_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="app.worker.handbacks")
    queue, counts = FakeQueue(), Counts()
    queue.down = True

    await hand_backs(queue, counts).release(deliveries(3), True)

    assert counts.errors == 1
    assert queue.released == []
    (record,) = [r for r in caplog.records if "releasing 3 occurrences failed" in r.getMessage()]
    # An unreachable database is an outage to wait out (the leases bring the rows back),
    # said in one line, not a traceback.
    assert record.levelno == logging.WARNING
    assert record.exc_info is None


async def test_a_release_of_nothing_asks_the_store_nothing() -> None:
    queue, counts = FakeQueue(), Counts()
    queue.down = True  # it would fail if asked

    await hand_backs(queue, counts).release([], False)

    assert counts.errors == 0


async def test_a_background_hand_back_is_known_until_it_ends_and_is_unstarted() -> None:
    queue, counts = FakeQueue(), Counts()
    queue.gate = asyncio.Event()
    backs = hand_backs(queue, counts)
    held = deliveries(2)

    backs.short_leases(held)
    assert backs.busy
    await asyncio.sleep(0)
    assert counts.done == 0
    queue.gate.set()
    async with asyncio.timeout(WAIT):
        await backs.wait()

    assert not backs.busy
    assert counts.done == 1
    assert queue.released == [(held, False, None)]


async def test_short_leases_with_nothing_to_hand_back_start_nothing() -> None:
    queue, counts = FakeQueue(), Counts()
    backs = hand_backs(queue, counts)

    backs.short_leases([])

    assert not backs.busy
    await backs.wait()
    assert queue.released == []
