"""Waiting on a condition, for the cases whose state changes in the background (a loop
running, a lease running out): one helper, polling with a deadline, never a fixed sleep."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable


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
