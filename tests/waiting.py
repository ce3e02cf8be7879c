"""Waiting on a condition, for the cases whose state changes in the background (a loop
running, a lease running out): polling with a deadline, never a fixed sleep. Every case
waits through these, not a loop of its own."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def eventually(
    condition: Callable[[], Awaitable[bool] | bool],
    *,
    within: float = 10.0,
    every: float = 0.02,
    what: str | None = None,
    details: Callable[[], str] | None = None,
) -> float:
    """Wait until `condition()` holds (it may be a coroutine function); returns how many
    seconds that took. Raises AssertionError naming what it waited for (`what`, or the
    condition's own name) when `within` seconds pass first, followed by `details()` when
    given (what the processes involved logged, say)."""
    started = time.monotonic()
    await eventually_found(
        lambda: _true_or_none(condition),
        within=within,
        every=every,
        what=what or getattr(condition, "__qualname__", repr(condition)),
        details=details,
    )
    return time.monotonic() - started


async def eventually_found(
    find: Callable[[], Awaitable[T | None]],
    *,
    within: float = 10.0,
    every: float = 0.02,
    what: str | None = None,
    details: Callable[[], str] | None = None,
) -> T:
    """Wait until `find()` (a coroutine function) finds something, anything but None, and
    return it; fails as `eventually` does when `within` seconds pass first."""
    deadline = time.monotonic() + within
    while True:
        result = await find()
        if result is not None:
            return result
        if time.monotonic() >= deadline:
            name = what or getattr(find, "__qualname__", repr(find))
            message = f"{name}: not reached within {within:g}s"
            if details is not None:
                message += "\n" + details()
            raise AssertionError(message)
        await asyncio.sleep(every)


async def _true_or_none(condition: Callable[[], Awaitable[bool] | bool]) -> bool | None:
    result = condition()
    if inspect.isawaitable(result):
        result = await result
    return True if result else None


def suspended_in(task: asyncio.Task[Any] | None, function: str) -> bool:
    """Whether `task` is waiting somewhere inside a call of the coroutine `function` (its
    name or qualified name, `Alarm.sleep`): how a case knows a loop has reached a state
    it does not report."""
    coro: Any = task.get_coro() if task is not None else None
    while coro is not None and hasattr(coro, "cr_code"):
        if function in (coro.cr_code.co_name, coro.cr_code.co_qualname):
            return True
        coro = coro.cr_await
    return False
