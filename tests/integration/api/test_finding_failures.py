"""Finding what fails through the API: the failing filter, name prefixes, sorts with their
own cursors, what is due, and dead letters that name their schedule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from tests.integration.conftest import Harness

PROBLEM = "application/problem+json"


async def _every(harness: Harness, query: str, limit: int = 2) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = await harness.get(
            f"/v1/schedules?{query}&limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        )
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


async def test_the_failing_filter_lists_a_pending_schedule_whose_occurrences_dead_letter(
    harness: Harness,
) -> None:
    broken = await harness.failing(name="nightly-report")
    healthy = await harness.create(
        name="nightly-ok", trigger={"type": "interval", "every_seconds": 3600}
    )

    (listed,) = (await harness.get("/v1/schedules?failing=true"))["items"]

    assert listed["id"] == broken["id"]
    assert listed["status"] == "pending"
    assert listed["consecutive_failures"] == 1
    assert listed["last_error"].startswith("HTTP 503")
    every = (await harness.get("/v1/schedules?failing=false"))["items"]
    assert {s["id"] for s in every} == {broken["id"], healthy["id"]}


async def test_a_name_prefix_matches_the_start_of_names_literally(harness: Harness) -> None:
    for name in ("report-daily", "report-weekly", "reports_all", "report%x", "other-report"):
        await harness.create(name=name, trigger={"type": "interval", "every_seconds": 60})

    async def named(prefix: str) -> set[str]:
        page = await harness.get(f"/v1/schedules?name_prefix={quote(prefix)}")
        return {s["name"] for s in page["items"]}

    assert await named("report-") == {"report-daily", "report-weekly"}
    assert await named("report") == {"report-daily", "report-weekly", "reports_all", "report%x"}
    assert await named("report%") == {"report%x"}
    assert await named("report_") == set()
    assert await named("reports_") == {"reports_all"}
    exact = (await harness.get("/v1/schedules?name=report"))["items"]
    assert exact == [], "name stays an exact match"


async def test_sorts_page_in_their_order_and_refuse_each_others_cursors(
    harness: Harness,
) -> None:
    soon = datetime.now(UTC) + timedelta(hours=1)
    made = [
        await harness.create(
            trigger={"type": "once", "at": (soon + timedelta(minutes=m)).isoformat()}
        )
        for m in (30, 10, 20, 10)
    ]
    broken = await harness.failing(name="broken")

    by_next_fire = await _every(harness, "sort=next_fire_at")
    fire_times = [s["next_fire_at"] for s in by_next_fire]
    assert by_next_fire[0]["id"] == broken["id"], "its next tick is in an hour, before the rest"
    assert [datetime.fromisoformat(t) for t in fire_times] == sorted(
        datetime.fromisoformat(t) for t in fire_times
    )
    assert {s["id"] for s in by_next_fire} == {s["id"] for s in [*made, broken]}

    by_failures = await _every(harness, "sort=failures")
    assert by_failures[0]["id"] == broken["id"]
    assert [s["id"] for s in by_failures[1:]] == sorted((s["id"] for s in made), reverse=True)

    newest = await _every(harness, "sort=created", limit=1)
    assert [s["id"] for s in newest] == sorted((s["id"] for s in [*made, broken]), reverse=True)

    for issued, other in (
        ("sort=created", "sort=failures"),
        ("sort=failures", "sort=next_fire_at"),
        ("sort=next_fire_at", "sort=created"),
        ("sort=next_fire_at", ""),
    ):
        cursor = (await harness.get(f"/v1/schedules?{issued}&limit=1"))["next_cursor"]
        refused = await harness.client.get(f"/v1/schedules?{other}&cursor={cursor}")
        assert refused.status_code == 422, (issued, other)
        assert refused.headers["content-type"].startswith(PROBLEM)
        assert "cursor" in refused.text


async def test_due_before_lists_what_fires_by_then(harness: Harness) -> None:
    soon = datetime.now(UTC) + timedelta(hours=1)
    early = await harness.create(trigger={"type": "once", "at": soon.isoformat()})
    await harness.create(trigger={"type": "once", "at": (soon + timedelta(days=1)).isoformat()})
    by = quote((soon + timedelta(minutes=1)).isoformat())

    due = (await harness.get(f"/v1/schedules?sort=next_fire_at&due_before={by}"))["items"]

    assert [s["id"] for s in due] == [early["id"]]
    naive = await harness.client.get("/v1/schedules?due_before=2026-01-01T00:00:00")
    assert naive.status_code == 422
    assert "due_before" in naive.text


async def test_bad_list_parameters_are_refused_naming_them(harness: Harness) -> None:
    for query, name in (
        ("sort=oldest", "sort"),
        ("failing=perhaps", "failing"),
        ("name_prefix=", "name_prefix"),
        ("name_prefix=a%00b", "name_prefix"),
        ("name_prefix=" + "x" * 201, "name_prefix"),
        ("sort=failures&cursor=WyJmYWlsdXJlcyIsIi0xIiwieCJd", "cursor"),
    ):
        refused = await harness.client.get(f"/v1/schedules?{query}")
        assert refused.status_code == 422, query
        assert name in refused.text, query


async def test_dead_letters_name_their_schedule(harness: Harness) -> None:
    broken = await harness.failing(name="nightly-report")

    (listed,) = (await harness.get("/v1/dead-letters"))["items"]
    one = await harness.get(f"/v1/dead-letters/{listed['occurrence_id']}")

    assert listed["schedule_id"] == broken["id"]
    assert listed["schedule_name"] == one["schedule_name"] == "nightly-report"
