"""`tests.stepping.step`: the production loop on a frozen database clock, stopped once it
is at rest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.factories import iso
from tests.integration.conftest import Harness
from tests.receiver import Reply
from tests.stepping import step
from tests.store import ports


async def test_a_retry_made_by_a_step_waits_for_the_next_step_even_when_due_at_once(
    make_harness: Any,
) -> None:
    async with make_harness(retry_base_delay=0.001, retry_max_delay=0.001, jitter=False) as h:
        h.receiver.script("/hook", Reply(503))
        created = await h.create()

        assert await h.step() == 1
        (occurrence,) = await h.occurrences(created["id"])
        assert (occurrence["status"], occurrence["attempts"]) == ("pending", 1)

        assert await h.step() == 1
        assert await h.schedule_status(created["id"]) == "completed"
        assert [r.headers["X-Attempt"] for r in h.receiver.requests] == ["1", "2"]


async def test_a_step_given_a_window_delivers_what_falls_due_within_it_at_its_instant(
    harness: Harness,
) -> None:
    due = datetime.now(UTC) + timedelta(hours=1)
    created = await harness.create(trigger={"type": "once", "at": iso(due)})

    assert await harness.step() == 0  # not due yet: not this step's
    assert harness.receiver.requests == []

    # The clock moved to just before it: the step's clock runs on until then (the real
    # time left), and the loop delivers it once it is due.
    await ports.move_clock_past(harness.database, due - timedelta(seconds=0.3))
    assert await step(harness.dispatcher, harness.database.clock, within=1.0) == 1
    (request,) = harness.receiver.requests
    arrived = request.at + harness.database.clock.shift.total_seconds()
    assert arrived >= due.timestamp(), "delivered before its instant"
    assert await harness.schedule_status(created["id"]) == "completed"
    (occurrence,) = await harness.occurrences(created["id"])
    assert occurrence["attempts"] == 1


async def test_the_clock_stands_still_for_a_step_and_runs_on_after_it(harness: Harness) -> None:
    # The delivery takes 0.3 s; the settle that ends it reads the step's instant, from
    # before it began, and the clock reads the time gone by once the step is over.
    harness.receiver.script("/hook", Reply(delay=0.3))
    created = await harness.create()
    before = await ports.database_now(harness.database)
    assert await harness.step() == 1
    after = await ports.database_now(harness.database)
    (occurrence,) = await harness.occurrences(created["id"])
    delivered = datetime.fromisoformat(occurrence["delivered_at"])
    assert before <= delivered < before + timedelta(seconds=0.3)
    assert after >= before + timedelta(seconds=0.3)


async def test_a_failure_callback_written_by_a_step_is_delivered_by_it(
    harness: Harness,
) -> None:
    # Due at the dead letter's instant, which is the step's: this step's work.
    harness.receiver.always("/broken", Reply(503))
    created = await harness.create(
        target=harness.webhook("/broken"),
        max_attempts=1,
        on_failure={"type": "webhook", "url": harness.receiver.url("/callback")},
    )
    assert await harness.step() == 2
    assert [r.path for r in harness.receiver.requests] == ["/broken", "/callback"]
    statuses = {o["origin"]: o["status"] for o in await harness.occurrences(created["id"])}
    assert statuses == {"schedule": "dead_lettered", "callback": "delivered"}
