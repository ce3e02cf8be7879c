"""Pacing: when the loop claims next, and how much.

Invariants:
- what is claimed and not finished (in flight, waiting in the lanes, asked for by claims
  still running) stays within the window: `concurrency` plus two batches;
- at most MAX_CLAIMS claims run at once (one, after a claim that found nothing: two would
  only contend for what there is), and a claim is issued only once a batch's worth
  of the window is free, so that it fills the window in one statement rather than one
  round trip per freed slot;
- the pause before the next claim follows what the last one found: a backlog is claimed
  again at once (`min_cycle_delay`), a window claimed ahead in full after AHEAD_PAUSE, an
  idle store at the next known due instant or the poll interval, whichever is sooner;
  claims that fail back off exponentially, up to MAX_ERROR_BACKOFF;
- a wait for room ends at the next signal, and within the poll interval without one.
"""

from __future__ import annotations

import asyncio

from app.worker.alarm import WAKE_MARGIN

MAX_ERROR_BACKOFF = 5.0
MAX_CLAIMS = 2
# A claim ahead takes up to this many times CHRONOQ_BATCH_SIZE.
AHEAD_BATCHES = 3
# How long the loop waits after a claim that took everything due in the window it looked
# ahead: the next claim then comes while the window's end is still that much less away.
AHEAD_PAUSE = 0.2


class Pacing:
    def __init__(
        self, *, concurrency: int, batch_size: int, poll_interval: float, min_cycle_delay: float
    ) -> None:
        self._concurrency = concurrency
        self._batch_size = batch_size
        self._poll = poll_interval
        self._min_delay = min_cycle_delay
        # At most `concurrency` in flight plus two batches waiting behind them, claimed a
        # full batch at a time: the next claim is on its way before the lanes run dry.
        self.capacity = concurrency + 2 * batch_size
        self._refill_at = batch_size
        self._room = asyncio.Event()
        self.next_pause = min_cycle_delay
        self._consecutive_errors = 0

    def batch(self, ahead: float) -> int:
        """How many one claim asks for: a claim ahead takes larger batches, since what it
        takes is not due yet and waits off the lanes; a claim's round trips are then shared
        by more ticks (a steady stream is claimed at a multiple of its rate)."""
        return self._batch_size * (AHEAD_BATCHES if ahead else 1)

    def room(self, batch: int, taken: int) -> int:
        """How many the next claim may ask for, when `taken` are claimed (or being claimed)
        and not finished; none when it must wait (`wait_for_room`)."""
        room = self._concurrency + 2 * batch - taken
        return room if room >= self._refill_at else 0

    def may_claim(self, claims: int, *, alone: bool = False) -> bool:
        """Whether another claim may join the `claims` running; `alone`: one at a time."""
        return claims < (1 if alone else MAX_CLAIMS)

    def freed(self, unfinished: int) -> None:
        """A delivery finished, `unfinished` are left: signal the wait once a batch fits."""
        if self.capacity - unfinished >= self._refill_at:
            self._room.set()

    def claim_ended(self) -> None:
        self._room.set()

    async def wait_for_room(self, stopping: asyncio.Event) -> None:
        """Until a claim or a finished delivery frees room; the poll interval bounds the
        wait, so a missed signal costs a poll, never the loop."""
        self._room.clear()
        stop = asyncio.ensure_future(stopping.wait())
        room = asyncio.ensure_future(self._room.wait())
        try:
            await asyncio.wait(
                {stop, room}, timeout=self._poll, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stop.cancel()
            room.cancel()

    def claimed(
        self, found: int, limit: int, ahead: float, due_in: float | None, more: bool = False
    ) -> float:
        """The pause after a claim that asked for `limit` (looking `ahead` seconds ahead)
        and found `found`; `due_in` says how soon more may be claimed, if known (with none
        found, the next due instant); `more`: it stopped at a limit with more due."""
        self._consecutive_errors = 0
        if found >= limit or more or (found and not ahead):
            self.next_pause = self._min_delay  # a backlog: claim again soon
        elif found:
            # Everything due within the window is claimed: the next claim can wait a while,
            # but not past the instant a key held back may start more.
            pause = max(self._min_delay, AHEAD_PAUSE)
            if due_in is not None:
                pause = min(pause, max(due_in, self._min_delay) + WAKE_MARGIN)
            self.next_pause = min(self._poll, pause)
        elif due_in is None:
            self.next_pause = self._poll
        else:
            # Idle: sleep until the next known due instant (less the window, when that
            # instant is beyond it: a lease ending sooner cannot be claimed ahead), polling
            # at least this often.
            wait = due_in - ahead if due_in > ahead else due_in
            self.next_pause = min(self._poll, max(wait, 0.0) + WAKE_MARGIN)
        return self.next_pause

    def failed(self) -> float:
        """The pause after a failed claim: doubling with each failure in a row."""
        self._consecutive_errors += 1
        self.next_pause = min(
            self._poll * 2 ** min(self._consecutive_errors, 10),
            max(MAX_ERROR_BACKOFF, self._poll),
        )
        return self.next_pause
