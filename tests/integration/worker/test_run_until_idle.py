"""`Dispatcher.run_until_idle`: the production loop, stopped once what is due is delivered."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.factories import iso
from tests.integration.conftest import Harness
from tests.receiver import Reply
from tests.store import ports


async def test_a_retry_made_by_a_run_waits_for_the_next_run_even_when_due_at_once(
    make_harness: Any,
) -> None:
    async with make_harness(retry_base_delay=0.001, retry_max_delay=0.001, jitter=False) as h:
        h.receiver.script("/hook", Reply(503))
        created = await h.create()

        assert await h.dispatcher.run_until_idle() == 1
        (occurrence,) = await h.occurrences(created["id"])
        assert (occurrence["status"], occurrence["attempts"]) == ("pending", 1)

        assert await h.dispatcher.run_until_idle() == 1
        assert await h.schedule_status(created["id"]) == "completed"
        assert [r.headers["X-Attempt"] for r in h.receiver.requests] == ["1", "2"]


async def test_what_falls_due_within_the_window_given_is_held_and_delivered_at_its_instant(
    harness: Harness,
) -> None:
    due = datetime.now(UTC) + timedelta(hours=1)
    created = await harness.create(trigger={"type": "once", "at": iso(due)})

    assert await harness.dispatcher.run_until_idle() == 0  # not due yet: not this run's
    assert harness.receiver.requests == []

    # The clock moved to just before it: the run holds it until then (the real time left).
    await ports.move_clock_past(harness.database, due - timedelta(seconds=0.3))
    assert await harness.dispatcher.run_until_idle(within=1.0) == 1
    (request,) = harness.receiver.requests
    arrived = request.at + harness.database.clock.shift.total_seconds()
    assert arrived >= due.timestamp(), "delivered before its instant"
    assert await harness.schedule_status(created["id"]) == "completed"
    (occurrence,) = await harness.occurrences(created["id"])
    assert occurrence["attempts"] == 1
