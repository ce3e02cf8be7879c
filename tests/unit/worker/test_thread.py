"""LoopThread: a context entered and exited on an event loop of its own, in its own thread."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

import pytest

from app.worker.thread import LoopThread


@dataclass
class Trace:
    """What a context saw of where it ran, and how far it got."""

    entered_on: threading.Thread | None = None
    loop: asyncio.AbstractEventLoop | None = None
    exited: bool = False
    exit_cancelled: bool = False
    events: list[str] = field(default_factory=list)


def context(
    trace: Trace, *, exit_takes: float = 0.0, exit_raises: bool = False
) -> Callable[[], AbstractAsyncContextManager[str]]:
    @asynccontextmanager
    async def run() -> AsyncIterator[str]:
        trace.entered_on = threading.current_thread()
        trace.loop = asyncio.get_running_loop()
        try:
            yield "value"
        finally:
            try:
                await asyncio.sleep(exit_takes)  # a drain: work still finishing on exit
            except asyncio.CancelledError:
                trace.exit_cancelled = True
                raise
            finally:
                trace.exited = True
            if exit_raises:
                raise ValueError("exit failed")

    return run


async def test_start_enters_the_context_on_a_thread_and_loop_of_its_own() -> None:
    trace = Trace()
    runner = LoopThread(context(trace))

    value = await runner.start()
    try:
        assert value == "value"
        assert trace.entered_on is not threading.current_thread()
        assert trace.loop is not asyncio.get_running_loop()
        # The same kind of event loop as the caller's (uvloop under `chronoq serve`).
        assert type(trace.loop) is type(asyncio.get_running_loop())
        assert trace.loop is runner.loop
        assert runner.thread is not None
        assert runner.thread.is_alive()
    finally:
        await runner.stop()


async def test_a_failing_start_raises_its_error_and_ends_the_thread() -> None:
    @asynccontextmanager
    async def failing() -> AsyncIterator[None]:
        raise ConnectionRefusedError("no database")
        yield

    runner = LoopThread(failing)

    with pytest.raises(ConnectionRefusedError, match="no database"):
        await runner.start()

    assert runner.thread is not None
    assert not runner.thread.is_alive()
    assert runner.loop.is_closed()


async def test_stop_returns_once_the_context_has_exited_and_the_thread_ended() -> None:
    trace = Trace()
    runner = LoopThread(context(trace, exit_takes=0.3))
    await runner.start()

    await runner.stop()

    assert trace.exited
    assert not trace.exit_cancelled
    assert runner.thread is not None
    assert not runner.thread.is_alive()


async def test_the_callers_loop_keeps_running_while_the_context_exits() -> None:
    trace = Trace()
    runner = LoopThread(context(trace, exit_takes=0.5))
    await runner.start()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        await runner.stop()
    finally:
        ticker.cancel()

    assert trace.exited
    assert ticks >= 5  # the stop waited without blocking this loop


async def test_an_error_on_exit_is_raised_by_stop() -> None:
    trace = Trace()
    runner = LoopThread(context(trace, exit_raises=True))
    await runner.start()

    with pytest.raises(ValueError, match="exit failed"):
        await runner.stop()

    assert runner.thread is not None
    assert not runner.thread.is_alive()


async def test_a_cancelled_stop_cancels_the_exit_and_still_waits_for_the_thread() -> None:
    trace = Trace()
    runner = LoopThread(context(trace, exit_takes=60.0))
    await runner.start()
    stop = asyncio.create_task(runner.stop())
    await asyncio.sleep(0.2)  # the exit has begun and waits

    stop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stop

    assert trace.exit_cancelled
    assert trace.exited
    assert runner.thread is not None
    assert not runner.thread.is_alive()


async def test_a_cancelled_start_ends_the_thread() -> None:
    entering = threading.Event()

    @asynccontextmanager
    async def slow() -> AsyncIterator[None]:
        entering.set()
        await asyncio.sleep(60)
        yield

    runner = LoopThread(slow)
    start = asyncio.create_task(runner.start())
    await asyncio.to_thread(entering.wait, 10)

    start.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start

    assert runner.thread is not None
    assert not runner.thread.is_alive()


async def test_the_switch_interval_holds_while_it_runs_and_is_restored_after() -> None:
    before = sys.getswitchinterval()
    runner = LoopThread(context(Trace()), switch_interval=0.001)

    await runner.start()
    try:
        assert sys.getswitchinterval() == pytest.approx(0.001)
    finally:
        await runner.stop()

    assert sys.getswitchinterval() == pytest.approx(before)
