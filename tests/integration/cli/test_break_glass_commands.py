"""The commands that change a schedule on demand (trigger, patch, backfill) and handle dead
letters in bulk (replay by filter, discard), on the database itself (`--conn`, the
break-glass mode): what they do is what the HTTP API does, recorded as the actor "cli"."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.conftest import EMBEDDED_ONLY
from tests.integration.cli import commands
from tests.integration.conftest import Harness
from tests.receiver import Reply


async def chronoq(*args: str, database_url: str) -> subprocess.CompletedProcess[str]:
    return await commands.in_process_async(*args, "--conn", database_url, timeout=60)


async def as_json(*args: str, database_url: str) -> Any:
    result = await chronoq(*args, "--format", "json", database_url=database_url)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


async def test_trigger_patch_and_backfill_do_what_the_api_does(
    harness: Harness, database_url: str
) -> None:
    created = await harness.create(trigger={"type": "cron", "expression": "0 * * * *"})
    sid = created["id"]

    fired = await as_json("trigger", sid, database_url=database_url)
    assert fired["origin"] == "trigger"
    assert fired == await harness.get(f"/v1/occurrences/{fired['occurrence_id']}")

    patched = await as_json(
        "patch", sid, "--max-attempts", "2", "--label", "team:ops", database_url=database_url
    )
    assert (patched["max_attempts"], patched["labels"]) == (2, {"team": "ops"})
    assert patched == await harness.get(f"/v1/schedules/{sid}")

    end = datetime.now(UTC) - timedelta(seconds=1)
    filled = await as_json(
        "backfill",
        sid,
        "--from",
        (end - timedelta(hours=2)).isoformat(),
        "--to",
        end.isoformat(),
        database_url=database_url,
    )
    assert filled["created"] == 2
    events = (await harness.get(f"/v1/schedules/{sid}/events"))["items"]
    assert [(e["kind"], e["actor"]) for e in events[1:]] == [
        ("triggered", "cli"),
        ("updated", "cli"),
        ("backfilled", "cli"),
    ]


async def test_dead_letters_replay_by_filter_and_discard(
    harness: Harness, database_url: str
) -> None:
    harness.receiver.always("/gone", Reply(410))
    first = await harness.create(target=harness.webhook("/gone"), event_type="a.one")
    second = await harness.create(target=harness.webhook("/gone"), event_type="b.two")
    assert await harness.step() == 2

    replayed = await as_json(
        "dead-letter", "replay", "--event-type", "a.one", database_url=database_url
    )
    assert replayed["occurrence_ids"] == [first["next_occurrence_id"]]
    await as_json("dead-letter", "discard", second["next_occurrence_id"], database_url=database_url)
    assert (await harness.get("/v1/dead-letters"))["items"] == []
    none = await chronoq("dead-letter", "replay", database_url=database_url)
    assert none.returncode == 2
    assert "name the dead letters" in none.stderr


@EMBEDDED_ONLY
async def test_a_patch_the_model_refuses_names_the_option_and_changes_nothing(
    harness: Harness, database_url: str
) -> None:
    created = await harness.create(trigger={"type": "cron", "expression": "@daily"})
    for option, value in [("--max-attempts", "0"), ("--payload", "{"), ("--label", "nocolon")]:
        refused = await chronoq("patch", created["id"], option, value, database_url=database_url)
        assert refused.returncode == 2, refused.stdout
        assert f"argument {option}" in refused.stderr
    nothing = await chronoq("patch", created["id"], database_url=database_url)
    assert nothing.returncode == 2
    assert "nothing to change" in nothing.stderr
    assert (await harness.get(f"/v1/schedules/{created['id']}"))["version"] == created["version"]


@EMBEDDED_ONLY
async def test_all_lists_every_schedule_page_after_page(
    harness: Harness, database_url: str
) -> None:
    made = (
        await harness.client.post(
            "/v1/schedules/batch",
            json={
                "items": [
                    {
                        "event_type": "e",
                        "target": harness.webhook(),
                        "trigger": {"type": "cron", "expression": "@daily"},
                    }
                ]
                * 510
            },
        )
    ).json()["items"]
    listed = await as_json("list", "--all", database_url=database_url)
    assert sorted(s["id"] for s in listed) == sorted(s["id"] for s in made)
