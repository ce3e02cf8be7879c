"""The console header's numbers: read from the metrics registry, each over the window it
can vouch for, and said so."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from app.ui.live import LiveNumbers
from tests.conftest import STORES
from tests.integration.conftest import Harness


class Replica:
    """A registry with the instruments the header reads, and a clock the test moves."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.deliveries = Counter(
            "chronoq_deliveries", "", ["outcome", "target_type"], registry=self.registry
        )
        self.lateness = Histogram(
            "chronoq_delivery_lateness_seconds",
            "",
            ["origin", "target_type"],
            buckets=(0.01, 0.1, 1, 10),
            registry=self.registry,
        )
        self.in_flight = Gauge("chronoq_deliveries_in_flight", "", registry=self.registry)
        self.dead = Counter("chronoq_dead_letters", "", registry=self.registry)
        self.now = 1000.0
        self.live = LiveNumbers(self.registry, clock=lambda: self.now)

    def deliver(self, count: int, lateness: float) -> None:
        self.deliveries.labels("delivered", "webhook").inc(count)
        self.deliveries.labels("retry", "webhook").inc(count)  # not deliveries
        for _ in range(count):
            self.lateness.labels("schedule", "webhook").observe(lateness)


async def test_before_a_minute_has_passed_the_figures_are_since_start() -> None:
    replica = Replica()
    replica.now += 10
    replica.deliver(50, 0.05)
    replica.in_flight.set(3)
    replica.dead.inc(2)
    numbers = await replica.live.read()
    assert numbers.delivered_per_second.value == "5.0"
    assert numbers.delivered_per_second.window == "since start (10 s)"
    assert numbers.lag_p99.value == "≤ 100 ms"
    assert numbers.in_flight.value == "3"
    assert numbers.dead_letters.value == "2"
    assert numbers.dead_letters.window == "since start (10 s)"


async def test_the_rate_and_the_lag_cover_the_last_minute_once_a_reading_is_that_old() -> None:
    replica = Replica()
    replica.deliver(1000, 5.0)  # an old, slow burst
    await replica.live.read()
    replica.now += 60
    replica.deliver(120, 0.005)
    numbers = await replica.live.read()
    assert numbers.delivered_per_second.value == "2.0"
    assert numbers.delivered_per_second.window == "last 60 s"
    # The burst before the window does not count toward the lag.
    assert numbers.lag_p99.value == "≤ 10 ms"


async def test_dead_letters_count_the_last_hour_once_a_reading_is_that_old() -> None:
    replica = Replica()
    replica.dead.inc(7)
    await replica.live.read()
    replica.now += 3600
    replica.dead.inc(2)
    numbers = await replica.live.read()
    assert numbers.dead_letters.value == "2"
    assert numbers.dead_letters.window == "last 60 min"


async def test_no_delivery_yet_shows_no_lag() -> None:
    numbers = await Replica().live.read()
    assert numbers.lag_p99.value == "-"
    assert numbers.pending_due is None


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
async def test_the_numbers_alone_are_served_for_the_page_to_refresh(harness: Harness) -> None:
    response = await harness.client.get("/ui/live")
    assert response.status_code == 200
    assert response.text.startswith('<dl class="live" id="live"')
    assert "<dt>delivered/s</dt>" in response.text
