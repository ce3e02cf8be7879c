"""The delivery loop on an event loop of its own, in a dedicated thread of the replica.

Request handling (parsing, validation, rendering) runs in steps of a few milliseconds each;
on a shared event loop every due delivery waits behind all those that are ready, so that a
light mixed load alone put a healthy one-shot's p99 at 174 ms (docs/performance.md). On its
own loop the delivery path only waits for the GIL.

Invariant: what the thread builds (database engines, sinks, the dispatcher and its tasks)
is used on its loop only; other threads read plain state from it (health, counts) and reach
into it through `call_soon_threadsafe`. A start that fails fails the caller's start with the
same error; a stop returns once the context has exited on its loop (the dispatcher's drain:
nothing claimed is lost) and the thread has ended.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import (
    AbstractAsyncContextManager,
    AsyncExitStack,
    asynccontextmanager,
    suppress,
)
from dataclasses import dataclass
from typing import Generic, TypeVar

from app import metrics
from app.settings import Settings
from app.sinks import open_sinks
from app.sinks.base import Sinks
from app.store import dialects
from app.store.database import Database
from app.store.queue import DeliveryQueue
from app.store.wakeups import Wakeups
from app.worker.dispatcher import Dispatcher
from app.worker.pruner import Pruner

T = TypeVar("T")

# How long a thread that wants the GIL waits before the holder must hand it over (Python's
# default: 5 ms). A due delivery wakes its thread a few times on its way out (the timer, the
# start mark's reply, the connection to the target), and each wake-up waits for the GIL
# while the API thread is busy; a shorter interval bounds each of those waits. It costs
# nothing while one thread runs alone, and a few more switches while both want to run.
SWITCH_INTERVAL = 0.0005

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


class LoopThread(Generic[T]):
    """Enters an async context on a new event loop in a thread of its own (`start`), keeps
    that loop running until `stop`, then exits the context there and ends the thread."""

    def __init__(
        self,
        context: Callable[[], AbstractAsyncContextManager[T]],
        *,
        name: str = "chronoq-loop",
        loop_factory: LoopFactory | None = None,
        switch_interval: float | None = None,
    ) -> None:
        self._context = context
        self._name = name
        self._loop_factory = loop_factory
        self._switch_interval = switch_interval
        self._previous_interval: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # Set by the thread: the context's value once entered (or why it was not), and
        # the end of the thread's loop (or the error the context's exit raised).
        self._entered: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._ended: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stopping = asyncio.Event()  # waited on and set on the thread's loop only
        self._main: asyncio.Task[None] | None = None
        self._cancelled = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The thread's event loop (after `start`)."""
        assert self._loop is not None, "not started"
        return self._loop

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    async def start(self) -> T:
        """Start the thread and enter the context there; its value, or the error entering it
        raised. A caller cancelled meanwhile cancels the entering, and waits for the thread."""
        assert self._thread is None, "started twice"
        factory = self._loop_factory or type(asyncio.get_running_loop())
        loop = self._loop = factory()
        if self._switch_interval is not None:
            self._previous_interval = sys.getswitchinterval()
            sys.setswitchinterval(self._switch_interval)
        # A daemon: a process that ends without stopping it ends its deliveries as a crash
        # would (their leases run out), rather than never ending.
        self._thread = threading.Thread(
            target=self._run, args=(loop,), name=self._name, daemon=True
        )
        self._thread.start()
        entered = asyncio.wrap_future(self._entered)
        try:
            # asyncio.wait: a cancelled caller must not cancel the thread's own future.
            await asyncio.wait({entered})
        except BaseException:
            await self._end(cancel=True)
            if entered.done() and not entered.cancelled():
                entered.exception()  # superseded by what is raised here
            raise
        if entered.exception() is not None:
            await self._end(cancel=False)
        return entered.result()

    async def stop(self) -> None:
        """Exit the context on its loop, then end the thread; an error of the exit is raised
        here. If this is cancelled, the context's task is cancelled too (a dispatcher then
        ends its deliveries at once) and still waited for."""
        if self._thread is None:
            return
        self._call(self._stopping.set)
        await self._end(cancel=False)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[T]:
        value = await self.start()
        try:
            yield value
        finally:
            await self.stop()

    async def _end(self, *, cancel: bool) -> None:
        """Wait for the thread's loop to end (cancelling the context's task first with
        `cancel`, or when this wait is cancelled), then for the thread."""
        thread = self._thread
        assert thread is not None
        ended = asyncio.wrap_future(self._ended)
        if cancel:
            self._call(self._cancel)
        try:
            await asyncio.wait({ended})
        except asyncio.CancelledError:
            self._call(self._cancel)
            await asyncio.wait({ended})
            await self._join(thread)
            ended.exception()  # the caller's cancellation is what it raises
            raise
        await self._join(thread)
        if cancel:
            ended.exception()
        else:
            ended.result()

    async def _join(self, thread: threading.Thread) -> None:
        # The loop has closed: only the thread's last few instructions are left.
        await asyncio.to_thread(thread.join)
        if self._previous_interval is not None:
            sys.setswitchinterval(self._previous_interval)
            self._previous_interval = None

    def _call(self, callback: Callable[[], object]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        # Closed in between: the thread is ending anyway.
        with suppress(RuntimeError):
            loop.call_soon_threadsafe(callback)

    def _cancel(self) -> None:
        # On the thread's loop.
        self._cancelled = True
        if self._main is not None:
            self._main.cancel()

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            with asyncio.Runner(loop_factory=lambda: loop) as runner:
                runner.run(self._serve())
        except asyncio.CancelledError:
            # Cancelled at the caller's request (`_cancel`), which raises it there.
            if not self._entered.done():
                self._entered.set_exception(RuntimeError("the loop was cancelled"))
            self._ended.set_result(None)
        except BaseException as exc:
            if not self._entered.done():
                self._entered.set_exception(exc)
            self._ended.set_exception(exc)
        else:
            if not self._entered.done():
                self._entered.set_exception(RuntimeError("the loop ended before it started"))
            self._ended.set_result(None)

    async def _serve(self) -> None:
        self._main = asyncio.current_task()
        if self._cancelled:
            return
        try:
            async with self._context() as value:
                self._entered.set_result(value)
                await self._stopping.wait()
        except BaseException as exc:
            if self._entered.done():
                raise
            # It never started: the caller's start raises this; nothing is left to stop.
            self._entered.set_exception(exc)


@dataclass(frozen=True)
class DeliveryLoop:
    """What the thread's side of a replica hands the API: readable from any thread."""

    dispatcher: Dispatcher
    sinks: Sinks


@asynccontextmanager
async def delivery_parts(settings: Settings, wakeups: Wakeups) -> AsyncIterator[DeliveryLoop]:
    """The delivery loop with everything it uses, built on the running event loop: its
    database pools, its sinks, the dispatcher and the pruner; stopped in reverse order."""
    async with AsyncExitStack() as stack:
        # The loop's own pool: its claims and settles never queue behind API requests for
        # a connection, and skip the per-checkout ping.
        database = Database(
            settings.database_url, schema=settings.db_schema, pool_size=4, pre_ping=False
        )
        stack.push_async_callback(database.close)
        metrics.POOLS.watch("worker", database)
        stack.callback(metrics.POOLS.forget, "worker")
        starts = None
        if database.dialect.multi_replica:
            # SQLite has one writer per process: its starts share the loop's pool.
            starts = Database(
                settings.database_url, schema=settings.db_schema, pool_size=1, pre_ping=False
            )
            stack.push_async_callback(starts.close)
        sinks = await stack.enter_async_context(open_sinks(settings))
        queue = DeliveryQueue(database, wakeups, starts=starts)
        dispatcher = Dispatcher(database, sinks, settings, wakeups=wakeups, queue=queue)
        await stack.enter_async_context(dispatcher.started())
        # Retention runs beside the loop; an advisory lock keeps it to one replica at a
        # time, and API-only replicas leave it to the workers.
        await stack.enter_async_context(Pruner(database, settings).started())
        yield DeliveryLoop(dispatcher, sinks)


def delivery_thread(settings: Settings, wakeups: Wakeups) -> LoopThread[DeliveryLoop]:
    """The delivery loop on a thread of its own, on an event loop of the caller's kind."""
    return LoopThread(
        lambda: delivery_parts(settings, wakeups),
        name="chronoq-delivery",
        switch_interval=SWITCH_INTERVAL,
    )


def delivery_loop(
    settings: Settings, wakeups: Wakeups
) -> AbstractAsyncContextManager[DeliveryLoop]:
    """Where this replica's delivery loop runs: on a thread of its own on a database that
    several replicas share; on the caller's event loop on SQLite, as before. SQLite has one
    writer per file, which the API's writes and the loop's take in turn whichever thread
    they come from, and a stop that met a settle waiting for that lock from the loop's
    thread was seen to hang until its grace ran out (docs/performance.md)."""
    if dialects.for_url(settings.database_url).multi_replica:
        return delivery_thread(settings, wakeups).running()
    return delivery_parts(settings, wakeups)
