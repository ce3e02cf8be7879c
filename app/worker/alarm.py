"""The wake-up alarm: an idle loop sleeps until its set instant, or less.

Invariant: `sleep` returns no later than the end it was given, earlier when `wake_in`
names an instant before that end, and at once when the loop is stopping. A wake-up that
names a later instant changes nothing. A wake-up asked for between two sleeps (a claim that
ends while the loop waits for room, say) is kept for the next sleep, never lost: that sleep
ends by then too.
"""

from __future__ import annotations

import asyncio
import math

# Wake this long after an occurrence's instant, so that the claim's clock has passed it.
WAKE_MARGIN = 0.001


class Alarm:
    def __init__(self, stopping: asyncio.Event) -> None:
        self._stopping = stopping
        self._wake_at = 0.0  # loop time
        self._rewake = asyncio.Event()
        self._sleeping = False
        # The soonest wake-up asked for while not sleeping (loop time; inf: none).
        self._early = math.inf

    def remaining(self) -> float:
        return self._wake_at - asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        self._wake_at = min(loop.time() + seconds, self._early)
        self._early = math.inf
        self._sleeping = True
        try:
            await self._until_woken(loop)
        finally:
            self._sleeping = False

    async def _until_woken(self, loop: asyncio.AbstractEventLoop) -> None:
        while not self._stopping.is_set():
            remaining = self._wake_at - loop.time()
            if remaining <= 0:
                return
            self._rewake.clear()
            woken = asyncio.ensure_future(self._rewake.wait())
            stop = asyncio.ensure_future(self._stopping.wait())
            try:
                await asyncio.wait({woken, stop}, timeout=remaining, return_when="FIRST_COMPLETED")
            finally:
                woken.cancel()
                stop.cancel()

    def wake_in(self, seconds: float) -> None:
        """Something is due in `seconds`: end the current sleep by then, if it lasts longer."""
        at = asyncio.get_running_loop().time() + max(seconds, 0.0) + WAKE_MARGIN
        if not self._sleeping:
            self._early = min(self._early, at)
        elif at < self._wake_at:
            self._wake_at = at
            self._rewake.set()
