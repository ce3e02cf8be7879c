"""Wake-ups across threads: a listener hears announcements on the event loop it subscribed from."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from app.store.wakeups import Wakeups
from app.worker.thread import LoopThread


class Heard:
    """A listener that records what it heard, and on which thread."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.threads: list[threading.Thread] = []
        self.event = threading.Event()

    def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)
        self.threads.append(threading.current_thread())
        self.event.set()


def subscribed(wakeups: Wakeups, heard: Heard) -> LoopThread[threading.Thread]:
    @asynccontextmanager
    async def listening() -> AsyncIterator[threading.Thread]:
        wakeups.subscribe(heard)
        try:
            yield threading.current_thread()
        finally:
            wakeups.unsubscribe(heard)

    return LoopThread(listening)


async def test_an_announcement_reaches_a_listener_of_another_loop_on_its_thread() -> None:
    wakeups, heard = Wakeups(), Heard()
    runner = subscribed(wakeups, heard)
    listener_thread = await runner.start()
    try:
        wakeups.due_in(1.5)  # from this loop, as an API write announces
        assert await asyncio.to_thread(heard.event.wait, 10)
    finally:
        await runner.stop()

    assert heard.seconds == [1.5]
    assert heard.threads == [listener_thread]


async def test_an_announcement_from_a_thread_without_a_loop_reaches_the_listener() -> None:
    wakeups, heard = Wakeups(), Heard()
    runner = subscribed(wakeups, heard)
    listener_thread = await runner.start()
    try:
        await asyncio.to_thread(wakeups.due_in, 0.0)
        assert await asyncio.to_thread(heard.event.wait, 10)
    finally:
        await runner.stop()

    assert heard.threads == [listener_thread]


async def test_a_listener_of_the_announcing_loop_hears_at_once() -> None:
    wakeups, heard = Wakeups(), Heard()
    wakeups.subscribe(heard)

    wakeups.due_in(-0.2)

    assert heard.seconds == [-0.2]
    assert heard.threads == [threading.current_thread()]


async def test_a_listener_whose_loop_has_closed_is_skipped() -> None:
    wakeups, gone, here = Wakeups(), Heard(), Heard()
    # Subscribed on a loop of another thread, which has ended and closed since.
    await asyncio.to_thread(asyncio.run, _subscribe(wakeups, gone))
    wakeups.subscribe(here)

    wakeups.due_in(2.0)

    assert gone.seconds == []
    assert here.seconds == [2.0]


async def test_an_unsubscribed_listener_hears_nothing() -> None:
    wakeups, heard = Wakeups(), Heard()
    wakeups.subscribe(heard)
    wakeups.unsubscribe(heard)

    wakeups.due_in(0.0)

    assert heard.seconds == []


async def _subscribe(wakeups: Wakeups, heard: Heard) -> None:
    wakeups.subscribe(heard)
