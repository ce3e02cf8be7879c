"""The console header's figures: the fleet's deliveries, lateness and dead letters from the
attempt log as the charts read it, each with the window it covers; what is in flight from
this replica's registry; what is due from the database."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry, Gauge

from app.domain.activity import (
    BUCKETS,
    MINUTE,
    Activity,
    Minute,
    Scope,
    Window,
    bucket_of,
    every_minute,
)
from app.ui.live import LiveNumbers
from app.worker.activity import ActivityRollup
from tests.conftest import STORES
from tests.integration.conftest import Harness
from tests.receiver import Reply

SINCE = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _late(seconds: float, count: int) -> tuple[int, ...]:
    counts = [0] * BUCKETS
    counts[bucket_of(seconds)] = count
    return tuple(counts)


def _hour(found: list[Minute], current_to: datetime | None) -> Activity:
    until = SINCE + timedelta(hours=1)
    return Activity(
        scope=Scope.FLEET,
        subject=None,
        window=Window.HOUR,
        since=SINCE,
        until=until,
        minutes=every_minute(SINCE, until, found),
        current_to=current_to,
    )


def _live() -> tuple[LiveNumbers, Gauge]:
    registry = CollectorRegistry()
    in_flight = Gauge("chronoq_deliveries_in_flight", "", registry=registry)
    return LiveNumbers(registry), in_flight


async def test_the_rate_is_over_the_last_minutes_rolled_up_and_the_rest_over_the_hour() -> None:
    live, in_flight = _live()
    in_flight.set(3)
    early = Minute(at=SINCE, delivered=1000, lateness=_late(5.0, 1000), dead_lettered=7)
    recent = [
        Minute(at=SINCE + 50 * MINUTE + n * MINUTE, delivered=60, lateness=_late(0.005, 60))
        for n in range(5)
    ]
    # Rolled up to 30 s into the last of those minutes: 4.5 minutes, 300 deliveries.
    current_to = SINCE + 54 * MINUTE + timedelta(seconds=30)

    numbers = await live.read(_hour([early, *recent], current_to))

    assert numbers.delivered_per_second.value == f"{300 / 270:.2f}"
    assert numbers.delivered_per_second.window == "last 5 min"
    # The hour's p99 holds the early, slow burst.
    assert numbers.lag_p99.value == "≤ 5 s"
    assert numbers.lag_p99.window == "last hour"
    assert numbers.dead_letters.value == "7"
    assert numbers.dead_letters.window == "last hour"
    assert numbers.in_flight.value == "3"
    assert numbers.in_flight.window == "this replica"
    assert numbers.current_to == current_to


async def test_nothing_rolled_up_yet_says_so() -> None:
    live, _ = _live()
    numbers = await live.read(_hour([], None))
    assert numbers.delivered_per_second.value == numbers.lag_p99.value == "-"
    assert numbers.dead_letters.window == "not rolled up yet"
    assert (await live.read(None)).lag_p99.value == "-"


@pytest.mark.parametrize("database_url", STORES[:1], indirect=True)
async def test_the_header_shows_the_backlog_of_due_occurrences(harness: Harness) -> None:
    for _ in range(3):
        await harness.create()  # immediate: due now, nobody claims in this harness
    html = (await harness.client.get("/ui/schedules")).text
    header = html[html.index('<dl class="live"') : html.index("</dl>")]
    assert re.search(r"<dt>pending due</dt><dd>3</dd>", header)
    assert "<dt>delivered/s</dt>" in header
    assert "<dt>lag p99</dt>" in header
    assert "<dt>in flight</dt>" in header
    assert "<dt>dead letters</dt>" in header


@pytest.mark.parametrize("database_url", STORES[:1], indirect=True)
async def test_the_header_shows_what_the_attempt_log_says_once_rolled_up(
    harness: Harness,
) -> None:
    harness.receiver.always("/gone", Reply(410))
    await harness.create()
    for _ in range(2):
        await harness.create(target=harness.webhook("/gone"))
    assert await harness.step() == 3
    await ActivityRollup(harness.database, harness.settings).run_once()

    live = (await harness.client.get("/ui/live")).text
    figures = dict(re.findall(r"<dt>([^<]+)</dt><dd>([^<]+)</dd>", live))
    totals = (await harness.get("/v1/activity"))["totals"]

    assert figures["dead letters"] == str(totals["dead_lettered"]) == "2"
    assert figures["delivered/s"] not in ("0", "-")
    assert figures["lag p99"] != "-"
    assert "up to" in live


@pytest.mark.parametrize("database_url", STORES[:1], indirect=True)
async def test_the_numbers_alone_are_served_for_the_page_to_refresh(harness: Harness) -> None:
    response = await harness.client.get("/ui/live")
    assert response.status_code == 200
    assert response.text.startswith('<dl class="live" id="live"')
    assert "<dt>delivered/s</dt>" in response.text
