"""The wake-up alarm: an idle sleep ends at its end, at an earlier wake-up, or at a stop."""

from __future__ import annotations

import asyncio

from app.worker.alarm import Alarm

LONG_SLEEP = 60.0  # a sleep the tests never wait out
# How long "at once" may take: generous for a machine whose every core is busy, and still far
# below LONG_SLEEP, so a sleep that ended within it was ended early.
WAIT = 10.0


async def timed(alarm: Alarm, seconds: float) -> float:
    loop = asyncio.get_running_loop()
    began = loop.time()
    await alarm.sleep(seconds)
    return loop.time() - began


async def sleeping(alarm: Alarm, seconds: float) -> asyncio.Task[float]:
    """Start a sleep and let it begin waiting."""
    task = asyncio.create_task(timed(alarm, seconds))
    await asyncio.sleep(0)
    return task


async def test_sleep_returns_after_about_its_duration() -> None:
    alarm = Alarm(asyncio.Event())

    elapsed = await timed(alarm, 0.2)

    assert 0.15 <= elapsed < WAIT


async def test_a_shorter_wake_up_ends_the_sleep_early() -> None:
    alarm = Alarm(asyncio.Event())
    task = await sleeping(alarm, LONG_SLEEP)

    alarm.wake_in(0.05)
    async with asyncio.timeout(WAIT):
        elapsed = await task

    assert 0.04 <= elapsed < WAIT


async def test_a_wake_up_in_the_past_ends_the_sleep_at_once() -> None:
    alarm = Alarm(asyncio.Event())
    task = await sleeping(alarm, LONG_SLEEP)

    alarm.wake_in(-1.0)
    async with asyncio.timeout(WAIT):
        elapsed = await task

    assert elapsed < WAIT


async def test_a_longer_wake_up_does_not_change_the_sleep() -> None:
    alarm = Alarm(asyncio.Event())
    task = await sleeping(alarm, 0.2)

    alarm.wake_in(LONG_SLEEP)
    async with asyncio.timeout(WAIT):
        elapsed = await task

    assert 0.15 <= elapsed < WAIT


async def test_a_later_wake_up_after_an_earlier_one_keeps_the_earlier() -> None:
    alarm = Alarm(asyncio.Event())
    task = await sleeping(alarm, LONG_SLEEP)

    alarm.wake_in(0.05)
    alarm.wake_in(LONG_SLEEP - 1.0)
    async with asyncio.timeout(WAIT):
        elapsed = await task

    assert elapsed < WAIT


async def test_remaining_counts_down_to_the_current_end() -> None:
    alarm = Alarm(asyncio.Event())
    task = await sleeping(alarm, LONG_SLEEP)

    before = alarm.remaining()
    alarm.wake_in(0.05)
    after = alarm.remaining()
    async with asyncio.timeout(WAIT):
        await task

    assert LONG_SLEEP - 1.0 < before <= LONG_SLEEP
    assert 0.0 < after <= 0.1


async def test_stopping_ends_the_sleep_at_once() -> None:
    stopping = asyncio.Event()
    alarm = Alarm(stopping)
    task = await sleeping(alarm, LONG_SLEEP)

    stopping.set()
    async with asyncio.timeout(WAIT):
        elapsed = await task

    assert elapsed < WAIT


async def test_a_sleep_begun_while_stopping_returns_at_once() -> None:
    stopping = asyncio.Event()
    stopping.set()
    alarm = Alarm(stopping)

    async with asyncio.timeout(WAIT):
        elapsed = await timed(alarm, LONG_SLEEP)

    assert elapsed < WAIT


async def test_a_wake_up_asked_for_between_sleeps_ends_the_next_one() -> None:
    # A claim that ends while the loop waits for room asks for a wake-up with no sleep
    # running: the next sleep, however long, ends by then.
    alarm = Alarm(asyncio.Event())
    await timed(alarm, 0.01)  # a sleep that ended: its end is in the past now
    alarm.wake_in(0.0)

    assert await timed(alarm, LONG_SLEEP) < WAIT
    # Kept once: the sleep after it runs its own length again.
    task = await sleeping(alarm, LONG_SLEEP)
    await asyncio.sleep(0.05)
    assert not task.done()
    alarm.wake_in(0.0)
    assert await task < WAIT


async def test_a_later_wake_up_between_sleeps_leaves_a_shorter_sleep_alone() -> None:
    alarm = Alarm(asyncio.Event())
    alarm.wake_in(LONG_SLEEP)

    elapsed = await timed(alarm, 0.1)

    assert 0.05 <= elapsed < WAIT
