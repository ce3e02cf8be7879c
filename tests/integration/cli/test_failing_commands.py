"""`chronoq list --failing / --name-prefix / --due-before / --sort` and dead letters by
schedule name, on the database (break-glass mode): the same rows as the API answers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.integration.cli.test_operator_commands import as_json, assert_aligned, columns, ok
from tests.integration.conftest import Harness


async def test_list_finds_failing_schedules_by_prefix_and_in_each_order(
    harness: Harness, database_url: str
) -> None:
    broken = await harness.failing(name="report-nightly")
    soon = datetime.now(UTC) + timedelta(minutes=10)
    healthy = await harness.create(
        name="report-weekly", trigger={"type": "once", "at": soon.isoformat()}
    )
    other = await harness.create(name="ping", trigger={"type": "interval", "every_seconds": 60})

    failing = await as_json("list", "--failing", database_url=database_url)
    assert [s["id"] for s in failing] == [broken["id"]]
    assert failing == (await harness.get("/v1/schedules?failing=true"))["items"]

    reports = await as_json("list", "--name-prefix", "report-", database_url=database_url)
    assert {s["id"] for s in reports} == {broken["id"], healthy["id"]}

    by_failures = await as_json("list", "--sort", "failures", "--all", database_url=database_url)
    assert by_failures[0]["id"] == broken["id"]
    assert len(by_failures) == 3
    by_next_fire = await as_json(
        "list", "--sort", "next_fire_at", "--all", database_url=database_url
    )
    assert [s["id"] for s in by_next_fire] == [other["id"], healthy["id"], broken["id"]]
    due = await as_json(
        "list",
        "--sort",
        "next_fire_at",
        "--due-before",
        (soon + timedelta(seconds=1)).isoformat(),
        database_url=database_url,
    )
    assert [s["id"] for s in due] == [other["id"], healthy["id"]]

    text = await ok("list", "--failing", database_url=database_url)
    titles, _, _ = columns(text)
    (row,) = assert_aligned(text)
    shown = dict(zip(titles, row, strict=True))
    assert (shown["STATUS"], shown["FAILURES"]) == ("pending", "1")
    assert shown["LAST ERROR"].startswith("HTTP 503")


async def test_a_naive_due_before_or_an_unknown_sort_is_a_usage_error(database_url: str) -> None:
    from tests.integration.cli.test_operator_commands import chronoq

    naive = await chronoq("list", "--due-before", "2026-01-01T00:00:00", database_url=database_url)
    assert naive.returncode == 2
    assert "offset" in naive.stderr
    unknown = await chronoq("list", "--sort", "oldest", database_url=database_url)
    assert unknown.returncode == 2
    assert "--sort" in unknown.stderr
    no_key = await chronoq("list", "--flow-key", "no key", database_url=database_url)
    assert no_key.returncode == 2
    assert "--flow-key" in no_key.stderr
    assert "is not a flow key" in no_key.stderr


async def test_dead_letters_show_their_schedule_s_name(harness: Harness, database_url: str) -> None:
    broken = await harness.failing(name="report-nightly")

    text = await ok("dead-letter", "list", database_url=database_url)

    titles, _, _ = columns(text)
    (row,) = assert_aligned(text)
    shown = dict(zip(titles, row, strict=True))
    assert (shown["SCHEDULE ID"], shown["SCHEDULE NAME"]) == (broken["id"], "report-nightly")
