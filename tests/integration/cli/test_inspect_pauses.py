"""`chronoq inspect` of a paused schedule says why it is paused: by itself after failures in
a row, or by whom and when, as its audit events have it; `--format json` carries that event
as `paused_by`. Over a running service, with a key's name as actor:
tests/e2e/test_cli_over_http.py."""

from __future__ import annotations

import re

from tests.conftest import EMBEDDED_ONLY
from tests.integration.api.test_auto_pause import failing, fire
from tests.integration.cli.test_operator_commands import as_json, ok
from tests.integration.conftest import Harness

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def paused_line(text: str) -> str:
    (line,) = [line for line in text.splitlines() if line.startswith("paused ")]
    return line


@EMBEDDED_ONLY
async def test_a_schedule_that_paused_itself_says_so_with_when(
    harness: Harness, database_url: str
) -> None:
    created = await failing(harness, threshold=2)
    await fire(harness, created["id"], times=2)
    assert (await harness.get(f"/v1/schedules/{created['id']}"))["status"] == "paused"

    text = await ok("inspect", created["id"], database_url=database_url)

    assert re.fullmatch(
        rf"paused\s+by itself at {STAMP}, after 2 occurrence\(s\) dead-lettered in a row "
        r"\(pause_after_failures\); resume to fire again",
        paused_line(text),
    ), text
    document = await as_json("inspect", created["id"], database_url=database_url)
    assert (document["paused_by"]["kind"], document["paused_by"]["actor"]) == (
        "auto_paused",
        "system",
    )


@EMBEDDED_ONLY
async def test_a_paused_schedule_names_who_paused_it_and_when(
    harness: Harness, database_url: str
) -> None:
    created = await harness.create(trigger={"type": "interval", "every_seconds": 3600})
    await ok("pause", created["id"], database_url=database_url)

    text = await ok("inspect", created["id"], database_url=database_url)

    assert re.fullmatch(rf"paused\s+by cli at {STAMP}", paused_line(text)), text
    document = await as_json("inspect", created["id"], database_url=database_url)
    assert (document["paused_by"]["kind"], document["paused_by"]["actor"]) == ("paused", "cli")

    await ok("resume", created["id"], database_url=database_url)
    resumed = await ok("inspect", created["id"], database_url=database_url)
    assert not [line for line in resumed.splitlines() if line.startswith("paused ")]
    assert (await as_json("inspect", created["id"], database_url=database_url))["paused_by"] is None
