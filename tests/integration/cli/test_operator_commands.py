"""The operator commands (`list`, `inspect`, `pause`, `resume`, `cancel`, `dead-letter
list|replay`) run as the `chronoq` command against both databases, and agree with the HTTP
API on the same data. They run in-process (commands.in_process); the command as a process of
its own is here for a DATABASE_URL of its environment, and in test_pipes_and_version.py."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EMBEDDED_ONLY
from tests.integration.cli import commands
from tests.integration.conftest import Harness
from tests.receiver import Reply

UNREACHABLE = "postgresql://user:secret@127.0.0.1:1/x"


async def chronoq(*args: str, database_url: str | None) -> subprocess.CompletedProcess[str]:
    """Run the command in-process, in a thread, so that the test's own event loop (and the
    harness's database connections on it) stay responsive meanwhile."""
    variables = {} if database_url is None else {"DATABASE_URL": database_url}
    return await commands.in_process_async(*args, timeout=60, **variables)


async def ok(*args: str, database_url: str) -> str:
    result = await chronoq(*args, database_url=database_url)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


async def as_json(*args: str, database_url: str) -> Any:
    return json.loads(await ok(*args, "--format", "json", database_url=database_url))


def one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("chronoq: ")
    return lines[0]


def columns(text: str) -> tuple[list[str], list[int], list[str]]:
    """The header's titles, where each starts, and the rows under it."""
    header, *rows = text.splitlines()
    titles = [title.strip() for title in header.split("  ") if title.strip()]
    starts: list[int] = []
    for title in titles:
        starts.append(header.index(title, starts[-1] + 1 if starts else 0))
    return titles, starts, rows


def assert_aligned(text: str) -> list[list[str]]:
    """Every row has a cell starting exactly under each header title (after a two-space gap);
    returns the rows' cells."""
    _, starts, rows = columns(text)
    assert rows
    cells = []
    for row in rows:
        for start in starts[1:]:
            assert row[start - 2 : start] == "  ", (row, start)
            assert row[start] != " ", (row, start)
        bounds = [*starts, len(row)]
        cells.append([row[a:b].strip() for a, b in itertools.pairwise(bounds)])
    return cells


async def dead_letter(harness: Harness, path: str = "/gone", **spec: Any) -> dict[str, Any]:
    harness.receiver.always(path, Reply(410))
    created = await harness.create(target=harness.webhook(path), **spec)
    assert await harness.step() == 1
    return created


# -- list --------------------------------------------------------------------------------


@EMBEDDED_ONLY
async def test_list_prints_aligned_columns_under_a_header(
    harness: Harness, database_url: str
) -> None:
    first = await harness.create(
        name="nightly-report",
        event_type="report.due",
        trigger={"type": "cron", "expression": "0 3 * * *", "timezone": "Europe/Paris"},
        labels={"team": "billing"},
    )
    second = await harness.create(
        event_type="ping", trigger={"type": "interval", "every_seconds": 60}
    )

    text = await ok("list", database_url=database_url)

    titles, _, _ = columns(text)
    assert titles[:4] == ["ID", "STATUS", "NAME", "EVENT TYPE"]
    assert {"TRIGGER", "TARGET", "NEXT FIRE AT", "LABELS"} <= set(titles)
    cells = assert_aligned(text)
    assert [row[0] for row in cells] == [second["id"], first["id"]]  # newest first
    by_id = {row[0]: dict(zip(titles, row, strict=True)) for row in cells}
    assert by_id[first["id"]]["NAME"] == "nightly-report"
    assert by_id[first["id"]]["TRIGGER"] == "cron 0 3 * * * (Europe/Paris)"
    assert by_id[first["id"]]["LABELS"] == "team:billing"
    assert by_id[second["id"]]["NAME"] == "-"
    assert by_id[second["id"]]["STATUS"] == "pending"


async def test_list_json_is_what_the_http_api_lists(harness: Harness, database_url: str) -> None:
    for n in range(3):
        await harness.create(payload={"n": n}, trigger={"type": "interval", "every_seconds": 60})

    listed = await as_json("list", database_url=database_url)

    assert listed == (await harness.get("/v1/schedules"))["items"]
    assert len(listed) == 3


@pytest.mark.parametrize(
    ("options", "query"),
    [
        (["--status", "paused"], "status=paused"),
        (["--event-type", "invoice.due"], "event_type=invoice.due"),
        (["--label", "team:billing"], "label=team:billing"),
        (["--label", "team:billing", "--label", "tier:gold"], "label=team:billing&label=tier:gold"),
        (["--name", "nightly"], "name=nightly"),
        (
            ["--target-type", "webhook", "--event-type", "ping"],
            "target_type=webhook&event_type=ping",
        ),
    ],
)
async def test_list_filters_as_the_http_api_does(
    harness: Harness, database_url: str, options: list[str], query: str
) -> None:
    await harness.create(name="nightly", event_type="invoice.due", labels={"team": "billing"})
    gold = await harness.create(
        event_type="invoice.due",
        labels={"team": "billing", "tier": "gold"},
        trigger={"type": "interval", "every_seconds": 60},
    )
    await harness.create(event_type="ping", labels={"team": "ops"})
    response = await harness.client.post(f"/v1/schedules/{gold['id']}/pause")
    assert response.status_code == 200, response.text

    listed = await as_json("list", *options, database_url=database_url)

    expected = (await harness.get(f"/v1/schedules?{query}"))["items"]
    assert listed == expected
    assert 0 < len(listed) < 3


async def test_list_limit_keeps_the_newest(harness: Harness, database_url: str) -> None:
    created = [await harness.create() for _ in range(3)]

    listed = await as_json("list", "--limit", "2", database_url=database_url)
    text = await ok("list", "--limit", "2", database_url=database_url)

    assert [s["id"] for s in listed] == [created[2]["id"], created[1]["id"]]
    table, note = text.split("\n\n")
    assert len(table.splitlines()) == 3  # header and two rows
    assert "raise --limit" in note


@EMBEDDED_ONLY
async def test_list_says_so_when_nothing_matches(database_url: str) -> None:
    assert await ok("list", database_url=database_url) == "no schedules match\n"
    assert await as_json("list", database_url=database_url) == []


# -- inspect -----------------------------------------------------------------------------


async def test_inspect_shows_the_snapshot_and_the_latest_occurrences(
    harness: Harness, database_url: str
) -> None:
    harness.receiver.script("/hook", Reply(503))
    created = await harness.create(
        name="flaky", event_type="order.paid", payload={"order": 42}, max_attempts=3
    )
    await harness.step()

    text = await ok("inspect", created["id"], database_url=database_url)

    snapshot, occurrences = text.split("\n\n")
    lines = snapshot.splitlines()
    assert f"id               {created['id']}" in lines
    assert "name             flaky" in lines
    assert "status           pending" in lines
    assert "event type       order.paid" in lines
    assert "attempts         1" in lines
    assert 'payload          {"order":42}' in lines
    assert any(line.startswith("last error       HTTP 503") for line in lines)
    title, table = occurrences.split("\n", 1)
    assert title == "occurrences, latest first:"
    cells = assert_aligned(table)
    assert cells[0][0] == created["next_occurrence_id"]
    assert cells[0][2] == "pending"
    assert cells[0][4] == "1"


async def test_inspect_json_is_the_snapshot_and_the_history_of_the_http_api(
    harness: Harness, database_url: str
) -> None:
    created = await harness.create(trigger={"type": "interval", "every_seconds": 1})
    for _ in range(3):
        await harness.client.post(f"/v1/schedules/{created['id']}/trigger")

    inspected = await as_json("inspect", created["id"], "--limit", "3", database_url=database_url)

    assert set(inspected) == {"schedule", "paused_by", "occurrences"}
    assert inspected["paused_by"] is None, "not paused"
    assert inspected["schedule"] == await harness.get(f"/v1/schedules/{created['id']}")
    history = await harness.get(f"/v1/schedules/{created['id']}/occurrences?limit=3")
    assert inspected["occurrences"] == history["items"]
    assert len(inspected["occurrences"]) == 3


# -- pause, resume, cancel ---------------------------------------------------------------


async def test_pause_resume_and_cancel_change_the_schedule_as_the_http_api_would(
    harness: Harness, database_url: str
) -> None:
    created = await harness.create(trigger={"type": "interval", "every_seconds": 60})
    path = f"/v1/schedules/{created['id']}"

    paused = await as_json("pause", created["id"], database_url=database_url)
    assert paused["status"] == "paused"
    assert paused == await harness.get(path)

    resumed = await as_json("resume", created["id"], database_url=database_url)
    assert resumed["status"] == "pending"
    assert resumed == await harness.get(path)
    assert resumed["next_fire_at"] is not None

    cancelled = await as_json("cancel", created["id"], database_url=database_url)
    assert cancelled["status"] == "cancelled"
    assert cancelled == await harness.get(path)
    assert all(o["status"] != "pending" for o in await harness.occurrences(created["id"]))


@EMBEDDED_ONLY
async def test_pause_prints_the_resulting_snapshot(harness: Harness, database_url: str) -> None:
    created = await harness.create(trigger={"type": "interval", "every_seconds": 60})

    text = await ok("pause", created["id"], database_url=database_url)

    assert f"id               {created['id']}" in text.splitlines()
    assert "status           paused" in text.splitlines()


async def test_resuming_a_cancelled_schedule_is_refused_with_the_api_rule(
    harness: Harness, database_url: str
) -> None:
    created = await harness.create(trigger={"type": "interval", "every_seconds": 60})
    await harness.client.delete(f"/v1/schedules/{created['id']}")

    result = await chronoq("resume", created["id"], database_url=database_url)

    assert result.returncode == 1
    assert one_line(result.stderr) == "chronoq: a cancelled schedule cannot be resumed"
    assert await harness.schedule_status(created["id"]) == "cancelled"


# -- dead letters ------------------------------------------------------------------------


async def test_dead_letters_list_most_recent_first_and_filter(
    harness: Harness, database_url: str
) -> None:
    first = await dead_letter(harness, event_type="a.one")
    second = await dead_letter(harness, event_type="b.two")
    third = await dead_letter(harness, event_type="a.one")

    listed = await as_json("dead-letter", "list", database_url=database_url)
    by_schedule = await as_json(
        "dead-letter", "list", "--schedule-id", first["id"], database_url=database_url
    )
    by_type = await as_json(
        "dead-letter", "list", "--event-type", "a.one", "--limit", "1", database_url=database_url
    )
    text = await ok("dead-letter", "list", database_url=database_url)

    assert [d["schedule_id"] for d in listed] == [third["id"], second["id"], first["id"]]
    assert listed == (await harness.get("/v1/dead-letters"))["items"]
    assert [d["schedule_id"] for d in by_schedule] == [first["id"]]
    assert [d["schedule_id"] for d in by_type] == [third["id"]]
    titles, _, _ = columns(text)
    assert titles[:4] == ["OCCURRENCE ID", "SCHEDULE ID", "SCHEDULE NAME", "EVENT TYPE"]
    cells = assert_aligned(text)
    assert [row[1] for row in cells] == [third["id"], second["id"], first["id"]]
    assert cells[0][-1].startswith("HTTP 410")


async def test_replay_resets_attempts_and_makes_the_dead_letter_due_now(
    make_harness: Any, database_url: str
) -> None:
    async with make_harness(max_attempts=2) as harness:
        harness.receiver.always("/down", Reply(503))
        created = await harness.create(target=harness.webhook("/down"))

        async def dead() -> bool:
            return bool((await harness.get("/v1/dead-letters"))["items"])

        await harness.step_until(dead)
        occurrence_id = created["next_occurrence_id"]
        [before] = await harness.occurrences(created["id"])
        assert before["attempts"] == 2

        text = await ok("dead-letter", "replay", occurrence_id, database_url=database_url)

        assert text.startswith(f"replayed occurrence {occurrence_id}: attempts reset to 0")
        assert "after 2 attempt(s): HTTP 503" in text
        [after] = await harness.occurrences(created["id"])
        assert after["occurrence_id"] == occurrence_id
        assert after["status"] == "pending"
        assert after["attempts"] == 0
        due = datetime.fromisoformat(after["available_at"])
        assert abs(due - datetime.now(UTC)) < timedelta(seconds=30)
        assert (await harness.get("/v1/dead-letters"))["items"] == []

        again = await chronoq("dead-letter", "replay", occurrence_id, database_url=database_url)

        assert again.returncode == 1
        assert "not replayable" in one_line(again.stderr)
        assert "pending" in again.stderr


async def test_replay_json_is_the_http_api_answer(harness: Harness, database_url: str) -> None:
    created = await dead_letter(harness)
    occurrence_id = created["next_occurrence_id"]

    replayed = await as_json("dead-letter", "replay", occurrence_id, database_url=database_url)

    assert replayed == {"occurrence_id": occurrence_id, "status": "pending"}


# -- errors ------------------------------------------------------------------------------

ID_COMMANDS = [
    ["inspect"],
    ["pause"],
    ["resume"],
    ["cancel"],
    ["dead-letter", "replay"],
]


@pytest.mark.parametrize("command", ID_COMMANDS, ids=" ".join)
async def test_an_unknown_id_exits_1_with_one_line(database_url: str, command: list[str]) -> None:
    unknown = str(uuid.uuid4())

    result = await chronoq(*command, unknown, database_url=database_url)

    assert result.returncode == 1
    line = one_line(result.stderr)
    assert unknown in line
    assert "does not exist" in line
    assert result.stdout == ""


@EMBEDDED_ONLY
@pytest.mark.parametrize("command", ID_COMMANDS, ids=" ".join)
async def test_a_malformed_id_exits_2_with_one_line(database_url: str, command: list[str]) -> None:
    result = await chronoq(*command, "not-a-uuid", database_url=database_url)

    assert result.returncode == 2
    assert "'not-a-uuid' is not a UUID" in one_line(result.stderr)


@EMBEDDED_ONLY
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["list", "--label", "team"], "'team' is not key:value"),
        (["list", "--label", ":billing"], "is not key:value"),
        (["list", "--limit", "0"], "between 1 and 500"),
        (["list", "--status", "sleeping"], "invalid choice: 'sleeping'"),
        (["list", "--format", "xml"], "invalid choice: 'xml'"),
        (["list", "--bogus"], "unrecognized arguments: --bogus"),
        (["dead-letter", "list", "--schedule-id", "42"], "'42' is not a UUID"),
        (["dead-letter"], "required"),
        (["inspect"], "required: ID"),
    ],
)
async def test_usage_errors_exit_2_with_one_line(
    database_url: str, args: list[str], message: str
) -> None:
    result = await chronoq(*args, database_url=database_url)

    assert result.returncode == 2
    assert message in one_line(result.stderr)


@pytest.mark.parametrize(
    "command",
    [["list"], ["dead-letter", "list"], ["pause", "0190c0de-7b1a-7c3e-9f00-1a2b3c4d5e6f"]],
    ids=" ".join,
)
async def test_an_unreachable_database_exits_1_without_showing_its_password(
    command: list[str],
) -> None:
    result = await chronoq(*command, "--conn", UNREACHABLE, database_url=None)

    assert result.returncode == 1
    line = one_line(result.stderr)
    assert "cannot reach postgresql://user:***@127.0.0.1:1/x" in line
    assert "secret" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


async def test_an_unreachable_database_url_from_the_environment_is_redacted_too() -> None:
    # A process of its own: the URL is the one its environment holds, and nothing else it
    # prints on its way out (a traceback, a warning at exit) may show the password either.
    result = await asyncio.to_thread(commands.chronoq, "list", DATABASE_URL=UNREACHABLE)

    assert result.returncode == 1
    assert "user:***@" in one_line(result.stderr)
    assert "secret" not in result.stderr


async def test_a_missing_sqlite_file_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"

    result = await chronoq("list", database_url=f"sqlite:///{path}")

    assert result.returncode == 1
    assert f"no database file at {path}" in one_line(result.stderr)
    assert not path.exists()


async def test_conn_overrides_database_url(harness: Harness, database_url: str) -> None:
    created = await harness.create()

    listed = await chronoq(
        "list", "--format", "json", "--conn", database_url, database_url=UNREACHABLE
    )

    assert listed.returncode == 0, listed.stderr
    assert [s["id"] for s in json.loads(listed.stdout)] == [created["id"]]
