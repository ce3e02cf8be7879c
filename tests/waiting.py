"""Waiting on a condition, for the cases whose state changes in the background (a loop
running, a lease running out): one helper, polling with a deadline, never a fixed sleep."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def eventually(
    condition: Callable[[], Awaitable[bool] | bool],
    *,
    within: float = 10.0,
    every: float = 0.02,
    what: str | None = None,
) -> float:
    """Wait until `condition()` holds (it may be a coroutine function); returns how many
    seconds that took. Raises AssertionError naming what it waited for (`what`, or the
    condition's own name) when `within` seconds pass first."""
    started = time.monotonic()
    deadline = started + within
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return time.monotonic() - started
        if time.monotonic() >= deadline:
            name = what or getattr(condition, "__qualname__", repr(condition))
            raise AssertionError(f"{name}: not reached within {within:g}s")
        await asyncio.sleep(every)


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
