"""Flow keys through the HTTP API: schedules naming a key, and the keys' own resource."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from app.store.tables import occurrences
from tests.integration.conftest import Harness


async def pending_keys(harness: Harness, schedule_id: str) -> list[str | None]:
    async with harness.database.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(occurrences.c.flow_key).where(
                occurrences.c.schedule_id == uuid.UUID(schedule_id),
                occurrences.c.status == "pending",
            )
        )
        return [row.flow_key for row in rows]


async def test_a_schedule_names_its_flow_key_and_its_occurrences_carry_it(
    harness: Harness,
) -> None:
    created = await harness.create(
        flow_key="customer-42", trigger={"type": "interval", "every_seconds": 3600}
    )

    assert created["flow_key"] == "customer-42"
    assert (await harness.get(f"/v1/schedules/{created['id']}"))["flow_key"] == "customer-42"
    assert await pending_keys(harness, created["id"]) == ["customer-42"]


async def test_a_schedule_without_a_flow_key_shows_null(harness: Harness) -> None:
    created = await harness.create(trigger={"type": "interval", "every_seconds": 3600})

    assert created["flow_key"] is None
    assert await pending_keys(harness, created["id"]) == [None]


async def test_patching_the_flow_key_moves_the_waiting_occurrence_to_the_new_key(
    harness: Harness,
) -> None:
    created = await harness.create(
        flow_key="customer-42", trigger={"type": "cron", "expression": "0 9 * * *"}
    )
    path = f"/v1/schedules/{created['id']}"

    moved = await harness.client.patch(path, json={"flow_key": "customer-43"})
    assert moved.status_code == 200, moved.text
    assert moved.json()["flow_key"] == "customer-43"
    assert moved.json()["next_occurrence_id"] == created["next_occurrence_id"]
    assert await pending_keys(harness, created["id"]) == ["customer-43"]

    cleared = await harness.client.patch(path, json={"flow_key": None})
    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["flow_key"] is None
    assert await pending_keys(harness, created["id"]) == [None]


async def test_an_occurrence_of_a_keyed_schedule_is_delivered(harness: Harness) -> None:
    created = await harness.create(flow_key="customer-42")

    assert await harness.step() == 1
    assert await harness.schedule_status(created["id"]) == "completed"
