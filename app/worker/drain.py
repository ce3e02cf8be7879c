"""The drain: how a stopping loop lets go of what it holds.

Invariants, whether the drain runs to its end or is cancelled part-way:
- what was claimed but not started is handed back at once, its attempt not counted;
- a delivery that finished is settled (its settlement is in the batcher before its task
  ends), never handed back, so it is not delivered again;
- a delivery still running after the grace period is cancelled and handed back;
- when the drain returns or is cancelled, no delivery task of the loop is still running
  (the sinks may be closed right after) and the batcher has made its last write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from app.domain.occurrence import Delivery
from app.worker.lanes import Lanes
from app.worker.settler import SettleBatcher

log = logging.getLogger(__name__)

Release = Callable[[Sequence[Delivery], bool], Awaitable[None]]

# A cancelled drain still tries to hand back and settle what it holds, this long at most.
LAST_WRITE = 1.0


async def drain(
    *,
    lanes: Lanes,
    in_flight: Mapping[asyncio.Task[None], Delivery],
    release: Release,
    settler: SettleBatcher,
    grace: float,
) -> None:
    """Graceful stop. `release(deliveries, started)` hands occurrences back and never
    raises; `in_flight` maps each running delivery task to its delivery."""
    try:
        await release(lanes.take_all(), False)
        if in_flight:
            await asyncio.wait(set(in_flight), timeout=grace)
        # Only tasks still running: a finished one has put its settlement in the batcher,
        # even if its done-callback has not run yet.
        stragglers = {task: d for task, d in in_flight.items() if not task.done()}
        await _cancel(stragglers)
        await release(list(stragglers.values()), True)
        await settler.close()
    finally:
        # Cancelled part-way: end what still runs, then hand back and write what we can.
        stragglers = {task: d for task, d in in_flight.items() if not task.done()}
        await _cancel(stragglers)
        await settler.stop()
        if stragglers or settler.pending:
            await _last_writes(release, list(stragglers.values()), settler)


async def _cancel(tasks: Mapping[asyncio.Task[None], Delivery]) -> None:
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(set(tasks))


async def _last_writes(
    release: Release, stragglers: list[Delivery], settler: SettleBatcher
) -> None:
    try:
        async with asyncio.timeout(LAST_WRITE):
            await release(stragglers, True)
            await settler.flush()
    except Exception:  # timed out or failed: their leases cover them
        log.debug("the last writes of a cancelled stop failed", exc_info=True)
    if settler.pending:
        log.warning(
            "stopped with %d finished deliveries unsettled; their leases will run out and "
            "they will be delivered again",
            settler.pending,
        )
