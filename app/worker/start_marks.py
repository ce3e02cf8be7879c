"""Start marks of deliveries that waited unstarted in the lanes: one statement for all the
starts asked for while the last one was on its way.

A claim that finds more due occurrences than the loop has free slots starts none of them
(`Claimed.unstarted`): they wait in the lanes uncharged, so a replica that dies with them
there costs them no attempt, and each is marked started as it leaves the lanes. The mark is
also where a pause or cancel committed since the claim stops it.

Invariants:
- every start asked for is answered exactly once: whether it may be sent (marked started
  now), or not (stopped since its claim, its lease taken over, or its mark failed: then
  every start of that statement is refused, and its caller hands them back unstarted);
- at most one statement is on its way; starts asked for meanwhile wait for the next one,
  which begins no sooner than `gather` after the last one began (unless a full `most` is
  asked for): a saturated loop marks a group of starts per statement rather than a few each
  time a quick database answers;
- `spare` is how many starts may be marked ahead of a free slot, so that a busy window does
  not wait a round trip for each: as many deliveries as finished while the last statement
  was on its way, at most `most`. With slow targets that is none, and what waits stays
  unmarked, free to be stopped by a pause, until a slot is free for it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence

from app.domain.occurrence import Delivery
from app.worker.ahead import Mark
from app.worker.outcomes import log


class StartMarks:
    """`mark` is the store's start mark; `on_error` counts a failed one; `finished` counts
    the loop's finished deliveries, `most` bounds `spare`."""

    def __init__(
        self,
        mark: Mark,
        on_error: Callable[[], None],
        *,
        finished: Callable[[], int] = lambda: 0,
        most: int = 0,
        gather: float = 0.0,
    ) -> None:
        self._mark = mark
        self._on_error = on_error
        self._finished = finished
        self._most = most
        self._gather = gather
        self.spare = 0
        self._asked: list[tuple[Delivery, asyncio.Future[bool]]] = []
        self._task: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        return self._task is not None

    def start(self, delivery: Delivery) -> Awaitable[bool]:
        """Whether `delivery` may be sent: True once its start is marked."""
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._asked.append((delivery, answer))
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="chronoq-start-marks")
        return answer

    async def _run(self) -> None:
        asked: list[tuple[Delivery, asyncio.Future[bool]]] = []
        try:
            # The starts that one pass of the lanes makes share the first statement.
            await asyncio.sleep(0)
            loop = asyncio.get_running_loop()
            while self._asked:
                began, before = loop.time(), self._finished()
                asked, self._asked = self._asked, []
                may_start = await self._marked([delivery for delivery, _ in asked])
                if stopped := len(asked) - len(may_start):
                    log.info(
                        "%d occurrences waiting to start were paused or cancelled since their "
                        "claim (or their start mark failed); not starting them",
                        stopped,
                    )
                for delivery, answer in asked:
                    if not answer.done():  # its delivery may have been cancelled (a stop)
                        answer.set_result(delivery.occurrence_id in may_start)
                asked = []
                wait = self._gather - (loop.time() - began)
                if wait > 0 and self._asked and len(self._asked) < self._most:
                    await asyncio.sleep(wait)
                # What finished in a whole cycle, statement and gathering, is marked ahead.
                self.spare = min(self._most, self._finished() - before)
        finally:
            self._task = None
            # Cut off (the loop's own end): what is left unanswered is not started.
            for _, answer in asked + self._asked:
                if not answer.done():
                    answer.set_result(False)
            self._asked = []

    async def _marked(self, deliveries: Sequence[Delivery]) -> set[uuid.UUID]:
        try:
            return await self._mark(deliveries)
        except Exception:
            self._on_error()
            log.exception("marking %d occurrences started failed", len(deliveries))
            return set()
