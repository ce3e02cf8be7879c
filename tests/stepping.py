"""Stepping a replica's delivery loop: the production loop (`Dispatcher.started`, its
claims, LISTEN, lanes, start marks and settle batcher), on a database clock frozen for the
step, stopped once it is at rest (`Dispatcher.at_rest`).

On the frozen clock, what is due by the step's instant is due and what comes due after it
is not yet: a retry the step makes waits for the next step, as a tick of a recurring
schedule does; what its work makes due at once (a failure callback) is this step's."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from app.store.engine.clock import DatabaseClock
from app.worker.dispatcher import Dispatcher

# How long a step waits for a sign of change before it looks again, and wakes the loop
# to claim once nothing is in hand (an idle loop would otherwise sleep a poll interval).
LOOK_EVERY = 0.02


async def step(
    dispatcher: Dispatcher,
    clock: DatabaseClock | None = None,
    *,
    within: float = 0.0,
    timeout: float = 30.0,
) -> int:
    """Run the loop until everything due by now, or `within` seconds from now, has been
    delivered once and its settlement written; then stop it. Returns how many deliveries
    it handed to the sinks. `clock`: the database clock, frozen at that instant for the
    step (it runs on until then); without one (a loop on a scripted queue) time runs.

    Raises the error of a claim that failed during the step (the loop would retry it),
    RuntimeError when settlements could not be written, and AssertionError when the loop
    has not come to rest within `timeout` seconds."""
    loop = asyncio.get_running_loop()
    started, failed = dispatcher.started_deliveries, dispatcher.claim_error
    if clock is not None:
        clock.freeze(clock.host_now() + timedelta(seconds=within))
    try:
        async with dispatcher.started():
            if within:
                await asyncio.sleep(within)  # the clock runs until the step's instant
            deadline = loop.time() + timeout
            while not dispatcher.at_rest():
                if (error := dispatcher.claim_error) is not failed and error is not None:
                    raise error
                if loop.time() > deadline:
                    if dispatcher.unsettled:
                        break  # the stop tries the write once more
                    raise AssertionError(
                        f"the loop did not come to rest in {timeout}s: {dispatcher.in_flight} "
                        f"in flight, {dispatcher.waiting} waiting"
                    )
                if not (dispatcher.in_flight or dispatcher.waiting or dispatcher.unsettled):
                    dispatcher.wake_in(0.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(dispatcher.changed(), LOOK_EVERY)
    finally:
        if clock is not None:
            clock.unfreeze()
    if dispatcher.unsettled:
        raise RuntimeError("settling failed; see the log")
    return dispatcher.started_deliveries - started
