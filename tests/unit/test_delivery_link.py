"""An API process's link to its delivery processes: their health and metrics over each one's
Unix socket, a missing or silent one reported as such (and logged once, not on every ask),
and their metrics merged into the API process's answer with each series labelled."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.process.delivery_link import NOT_ANSWERING, DeliveryLink
from app.telemetry import process_metrics


@asynccontextmanager
async def delivery_process(
    socket: Path, worker: str = "ok", broker: str | None = None, metrics_text: str = ""
) -> AsyncIterator[None]:
    """A stand-in answering on `socket` as a delivery process does (`broker`: what it says
    of its broker connection, None for none configured)."""

    async def health(_: web.Request) -> web.Response:
        checks = {"worker": worker} if broker is None else {"broker": broker, "worker": worker}
        return web.json_response(checks)

    async def exposition(_: web.Request) -> web.Response:
        return web.Response(text=metrics_text)

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", exposition)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.UnixSite(runner, str(socket)).start()
    try:
        yield
    finally:
        await runner.cleanup()


@asynccontextmanager
async def linked(*sockets: Path) -> AsyncIterator[DeliveryLink]:
    link = DeliveryLink([str(s) for s in sockets], timeout=2.0)
    await link.open()
    try:
        yield link
    finally:
        await link.close()


def delivery_metrics(delivered: int) -> str:
    """What a delivery process's /metrics says after `delivered` deliveries."""
    registry = CollectorRegistry()
    Counter(
        "chronoq_deliveries_total",
        "Delivery attempts",
        ["outcome", "target_type"],
        registry=registry,
    ).labels("delivered", "webhook").inc(delivered)
    return generate_latest(registry).decode()


async def test_checks_are_what_each_process_says(tmp_path: Path) -> None:
    one, two = tmp_path / "one.sock", tmp_path / "two.sock"
    async with delivery_process(one), linked(one) as link:
        assert await link.checks() == {"worker": "ok"}
    async with delivery_process(one, broker="unreachable"), linked(one) as link:
        assert await link.checks() == {"broker": "unreachable", "worker": "ok"}
    async with (
        delivery_process(one, broker="ok"),
        delivery_process(
            two, worker="claims failing for 12 s: StoreUnavailableError", broker="unreachable"
        ),
        linked(one, two) as link,
    ):
        assert await link.checks() == {
            "broker": "delivery process 2: unreachable",
            "worker": "delivery process 2: claims failing for 12 s: StoreUnavailableError",
        }


def linked_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the link logged (not what other loggers the suite configured did)."""
    return [r.getMessage() for r in caplog.records if r.name == "app.process.delivery_link"]


async def test_a_process_that_does_not_answer_is_reported_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    socket = tmp_path / "delivery.sock"
    caplog.set_level(logging.INFO, logger="app.process.delivery_link")
    async with linked(socket) as link:
        # Before its first answer (starting): reported, not logged.
        assert await link.checks() == {"worker": NOT_ANSWERING}
        assert await link.metrics() == [None]
        assert linked_lines(caplog) == []
        async with delivery_process(socket):
            assert await link.checks() == {"worker": "ok"}
        for _ in range(3):
            assert await link.checks() == {"worker": NOT_ANSWERING}
    messages = linked_lines(caplog)
    assert len(messages) == 2, messages
    assert messages[0] == f"delivery process at {socket} answers"
    assert messages[1].startswith(f"delivery process at {socket} is not answering")


async def test_a_garbled_answer_is_not_taken_for_health(tmp_path: Path) -> None:
    socket = tmp_path / "delivery.sock"

    async def garbled(_: web.Request) -> web.Response:
        return web.Response(text="not json", content_type="application/json")

    app = web.Application()
    app.router.add_get("/health", garbled)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, str(socket)).start()
    try:
        async with linked(socket) as link:
            assert await link.checks() == {"worker": NOT_ANSWERING}
    finally:
        await runner.cleanup()


@pytest.fixture
def watched() -> Iterator[Callable[[list[str | None]], None]]:
    def watch(texts: list[str | None]) -> None:
        async def read() -> list[str | None]:
            return texts

        process_metrics.DELIVERY.watch(read)

    try:
        yield watch
    finally:
        process_metrics.DELIVERY.forget()


async def test_metrics_merge_the_delivery_processes_series_labelled(
    watched: Callable[[list[str | None]], None],
) -> None:
    watched([delivery_metrics(7)])
    text = (await process_metrics.DELIVERY.exposition()).decode()

    families = {f.name: f for f in text_string_to_metric_families(text)}
    deliveries = families["chronoq_deliveries"].samples
    assert [(s.labels, s.value) for s in deliveries if s.labels.get("process")] == [
        ({"outcome": "delivered", "target_type": "webhook", "process": "delivery"}, 7.0)
    ]
    # Written once, with the API process's series and the delivery process's.
    types = [line for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types))
    assert "chronoq_http_request_duration_seconds" in families


async def test_metrics_name_each_of_several_processes_and_skip_a_silent_one(
    watched: Callable[[list[str | None]], None],
) -> None:
    watched([delivery_metrics(3), None, delivery_metrics(5)])
    text = (await process_metrics.DELIVERY.exposition()).decode()

    families = {f.name: f for f in text_string_to_metric_families(text)}
    by_process = {
        s.labels["process"]: s.value
        for s in families["chronoq_deliveries"].samples
        if "process" in s.labels
    }
    assert by_process == {"delivery-1": 3.0, "delivery-3": 5.0}


async def test_without_delivery_processes_metrics_are_this_process_alone() -> None:
    text = (await process_metrics.DELIVERY.exposition()).decode()

    names = [f.name for f in text_string_to_metric_families(text)]
    assert names == [f.name for f in text_string_to_metric_families(generate_latest().decode())]
    assert 'process="delivery' not in text
