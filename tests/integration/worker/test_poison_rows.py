"""A row that cannot be planned or read fails alone: every other schedule keeps firing."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from app.store.schema.tables import occurrences, schedules
from tests.integration.conftest import Harness
from tests.store import ports


async def _plant(harness: Harness, schedule_id: str, trigger: dict[str, Any]) -> None:
    """Write a trigger the API would refuse, as an older version or a bug could have."""
    async with harness.database.engine.begin() as conn:
        await conn.execute(
            schedules.update().where(schedules.c.id == sa.bindparam("sid")).values(trigger=trigger),
            {"sid": uuid.UUID(schedule_id)},
        )


async def _row(harness: Harness, schedule_id: str) -> tuple[str, int]:
    async with harness.database.engine.connect() as conn:
        row = (
            await conn.execute(
                sa.select(schedules.c.status, schedules.c.fire_count).where(
                    schedules.c.id == uuid.UUID(schedule_id)
                )
            )
        ).one()
    return row.status, row.fire_count


async def test_poisoned_rows_are_settled_alone_and_every_other_schedule_is_delivered(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(max_attempts=2) as h:
        # Recurring, its first tick still ahead when it is made (one whose start had passed
        # would first fire a whole interval later), and then due: the clock is moved past it.
        # The claim plans its next tick.
        at = datetime.now(UTC) + timedelta(hours=1)
        start = at.isoformat()
        huge = await h.create(
            target=h.webhook("/huge"),
            trigger={"type": "interval", "every_seconds": 60, "start_at": start},
        )
        unknown = await h.create(target=h.webhook("/unknown"))
        healthy = [await h.create(target=h.webhook("/ok")) for _ in range(5)]
        await _plant(h, huge["id"], {"type": "interval", "every_seconds": 1e18, "start_at": start})
        await _plant(h, unknown["id"], {"type": "lunar", "phase": "full"})
        await ports.move_clock_past(h.database, at)

        async def settled() -> bool:
            dead = (await h.get("/v1/dead-letters"))["items"]
            return len(h.receiver.on("/ok")) == 5 and len(dead) == 2

        await h.step_until(settled)

        delivered = {r.headers["X-Schedule-Id"] for r in h.receiver.on("/ok")}
        assert delivered == {s["id"] for s in healthy}
        assert h.receiver.on("/huge") == []
        assert h.receiver.on("/unknown") == []
        for created in healthy:
            assert await h.schedule_status(created["id"]) == "completed"

        dead = {d["schedule_id"]: d for d in (await h.get("/v1/dead-letters"))["items"]}
        assert dead.keys() == {huge["id"], unknown["id"]}
        for letter in dead.values():
            assert letter["attempts"] == 2  # retried once, then dead-lettered
            assert letter["last_error"].startswith("cannot plan this occurrence: ")
        assert "OverflowError" in dead[huge["id"]]["last_error"]
        assert "ValidationError" in dead[unknown["id"]]["last_error"]
        for planted in (huge, unknown):
            # Read from the table: the planted trigger is not one the API would show.
            status, fire_count = await _row(h, planted["id"])
            assert fire_count == 0  # it never fired
            assert status == "failed"  # nothing is left pending


async def test_a_poisoned_row_does_not_delay_the_others_in_its_batch(harness: Harness) -> None:
    poisoned = await harness.create(target=harness.webhook("/poison"))
    await _plant(harness, poisoned["id"], {"type": "once"})
    others = [await harness.create() for _ in range(3)]

    assert await harness.step() == 3  # the poisoned row is settled inside the claim
    await harness.receiver.wait_for(3, "/hook")

    async with harness.database.engine.connect() as conn:
        occurrence = (
            await conn.execute(
                sa.select(occurrences).where(occurrences.c.schedule_id == uuid.UUID(poisoned["id"]))
            )
        ).one()
    assert occurrence.status == "pending"  # retried later
    assert occurrence.attempts == 1
    assert occurrence.lease_token is None
    assert occurrence.last_error.startswith("cannot plan this occurrence: ")
    for created in others:
        assert await harness.schedule_status(created["id"]) == "completed"
