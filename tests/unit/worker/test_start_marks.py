"""Start marks of what waited unstarted: shared statements, every start answered once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

from app.domain.occurrence import Delivery
from app.worker.start_marks import StartMarks
from tests import factories


def delivery() -> Delivery:
    return factories.make_delivery(occurrence_id=uuid.uuid4(), lease_token=uuid.uuid4())


class Store:
    def __init__(self, stopped: set[uuid.UUID] | None = None, failing: bool = False) -> None:
        self.stopped = stopped or set()
        self.failing = failing
        self.marks: list[list[Delivery]] = []
        self.errors = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def mark(self, deliveries: Sequence[Delivery]) -> set[uuid.UUID]:
        self.marks.append(list(deliveries))
        await self.gate.wait()
        if self.failing:
            raise ConnectionError("the database is down")
        return {d.occurrence_id for d in deliveries} - self.stopped

    def error(self) -> None:
        self.errors += 1


async def test_starts_asked_together_or_during_a_mark_share_one_statement_each() -> None:
    store = Store()
    store.gate.clear()
    marks = StartMarks(store.mark, store.error)
    first = [delivery(), delivery()]
    later = [delivery(), delivery(), delivery()]

    asked = [marks.start(d) for d in first]
    await asyncio.sleep(0.01)  # the first statement is on its way
    asked += [marks.start(d) for d in later]
    store.gate.set()

    assert await asyncio.gather(*asked) == [True] * 5
    assert store.marks == [first, later]
    assert not marks.busy


async def test_a_stopped_start_is_refused_and_a_failed_mark_refuses_all_of_its_starts() -> None:
    paused = delivery()
    store = Store(stopped={paused.occurrence_id})
    marks = StartMarks(store.mark, store.error)
    other = delivery()
    assert list(await asyncio.gather(marks.start(paused), marks.start(other))) == [False, True]

    store.failing = True
    refused = await asyncio.gather(marks.start(delivery()), marks.start(delivery()))
    assert list(refused) == [False, False]
    assert store.errors == 1


async def test_the_spare_is_what_finished_during_the_last_mark_at_most_its_bound() -> None:
    store = Store()
    finished = 0
    marks = StartMarks(store.mark, store.error, finished=lambda: finished, most=3)
    store.gate.clear()
    answer = marks.start(delivery())
    await asyncio.sleep(0.01)
    finished += 5  # five deliveries finished while the mark was on its way
    store.gate.set()
    assert await answer
    assert marks.spare == 3

    assert await marks.start(delivery())
    assert marks.spare == 0, "nothing finished during that one: nothing marked ahead"


async def test_statements_of_a_stream_of_starts_begin_a_gather_apart() -> None:
    gather = 0.1
    store = Store()
    began: list[float] = []
    mark = store.mark

    async def timed(deliveries: Sequence[Delivery]) -> set[uuid.UUID]:
        began.append(asyncio.get_running_loop().time())
        return await mark(deliveries)

    marks = StartMarks(timed, store.error, most=10, gather=gather)
    store.gate.clear()
    first = marks.start(delivery())
    await asyncio.sleep(0.01)  # the first statement is on its way
    second = [marks.start(delivery()), marks.start(delivery())]
    store.gate.set()

    assert await first
    assert list(await asyncio.gather(*second)) == [True, True]
    assert [len(m) for m in store.marks] == [1, 2]
    assert began[1] - began[0] >= gather - 0.01
