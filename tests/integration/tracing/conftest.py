"""Traces on, in-process: an SDK tracer provider whose spans land in the in-memory
exporter, made this process's tracer (`app.telemetry.tracing.use`) for the case and its harness."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.main import create_app
from app.sinks import open_sinks
from app.store.engine.database import Database
from app.store.engine.wakeups import Wakeups
from app.telemetry import tracing
from app.telemetry.otel import OtelTracer
from app.worker.dispatcher import Dispatcher
from tests.conftest import make_settings
from tests.dns import FakeDNS
from tests.integration.conftest import SHUTDOWN_TIMEOUT, Harness
from tests.receiver import Receiver


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Traces on for the case; what it exported."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(OtelTracer(provider))
    try:
        yield exporter
    finally:
        tracing.use(None)


@asynccontextmanager
async def _harness(
    database_url: str, receiver: Receiver, **overrides: Any
) -> AsyncIterator[Harness]:
    """The integration harness, with an app of its own: the shared harness hands out apps
    built before, without this case's tracer."""
    settings = make_settings(database_url, **overrides)
    wakeups = Wakeups()
    dns = FakeDNS()
    database = Database(settings.database_url)
    try:
        app = create_app(settings, wakeups, resolver=dns)
        async with (
            open_sinks(settings, resolver=dns) as sinks,
            LifespanManager(app, shutdown_timeout=SHUTDOWN_TIMEOUT) as manager,
        ):
            dispatcher = Dispatcher(database, sinks, settings, rng=random.Random(7), owner="test")
            transport = httpx.ASGITransport(app=manager.app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://localhost"
            ) as client:
                yield Harness(
                    client, dispatcher, database, settings, receiver, sinks, wakeups, dns, transport
                )
    finally:
        await database.close()


@pytest.fixture
def traced_harness(
    spans: InMemorySpanExporter, database_url: str, receiver: Receiver
) -> Callable[..., Any]:
    """`async with traced_harness(**settings) as harness:` with traces on."""

    def build(**overrides: Any) -> Any:
        return _harness(database_url, receiver, **overrides)

    return build
