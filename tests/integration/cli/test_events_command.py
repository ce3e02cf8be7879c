"""`chronoq events`: a schedule's audit events from the operator CLI, whose own changes are
recorded with the actor "cli"."""

from __future__ import annotations

import uuid

from tests.conftest import EMBEDDED_ONLY
from tests.integration.api.test_events import events
from tests.integration.cli.test_operator_commands import as_json, assert_aligned, chronoq, ok
from tests.integration.conftest import Harness
from tests.receiver import Reply


async def test_changes_from_the_cli_are_recorded_as_cli(
    harness: Harness, database_url: str
) -> None:
    created = await harness.create(trigger={"type": "interval", "every_seconds": 60})

    await ok("pause", created["id"], database_url=database_url)
    await ok("resume", created["id"], database_url=database_url)
    await ok("cancel", created["id"], database_url=database_url)

    assert [
        (e["kind"], e["version"], e["actor"]) for e in await events(harness, created["id"])
    ] == [
        ("created", 1, None),
        ("paused", 2, "cli"),
        ("resumed", 3, "cli"),
        ("cancelled", 4, "cli"),
    ]


async def test_events_json_is_what_the_http_api_lists(harness: Harness, database_url: str) -> None:
    created = await harness.create(trigger={"type": "once", "delay_seconds": 3600})
    path = f"/v1/schedules/{created['id']}"
    await harness.client.patch(path, json={"labels": {"team": "ops"}})
    await harness.client.post(f"{path}/pause")

    listed = await as_json("events", created["id"], database_url=database_url)

    assert listed == await events(harness, created["id"])
    assert [e["kind"] for e in listed] == ["created", "updated", "paused"]


@EMBEDDED_ONLY
async def test_events_text_is_a_table_oldest_first(harness: Harness, database_url: str) -> None:
    created = await harness.create(trigger={"type": "once", "delay_seconds": 3600})
    await harness.client.patch(f"/v1/schedules/{created['id']}", json={"max_attempts": 2})

    text = await ok("events", created["id"], database_url=database_url)

    rows = assert_aligned(text)
    assert [row[1] for row in rows] == ["created", "updated"]
    assert rows[1][2:] == ["2", "-", "max_attempts"]


async def test_a_dead_letter_replayed_from_the_cli_is_recorded_as_cli(
    harness: Harness, database_url: str
) -> None:
    harness.receiver.script("/once", Reply(410))
    created = await harness.create(target=harness.webhook("/once"))
    await harness.step()

    await ok("dead-letter", "replay", created["next_occurrence_id"], database_url=database_url)

    assert (await events(harness, created["id"]))[-1]["kind"] == "dead_letter_replayed"
    assert (await events(harness, created["id"]))[-1]["actor"] == "cli"


@EMBEDDED_ONLY
async def test_events_of_an_unknown_schedule_fail(database_url: str, harness: Harness) -> None:
    result = await chronoq("events", str(uuid.uuid4()), database_url=database_url)

    assert result.returncode == 1
    assert "does not exist" in result.stderr
