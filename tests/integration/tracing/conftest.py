"""Traces on, in-process: an SDK tracer provider whose spans land in the in-memory
exporter, made this process's tracer (`app.telemetry.tracing.use`) for the case and its harness."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.telemetry import tracing
from app.telemetry.otel import OtelTracer
from tests.integration.conftest import running_harness
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


@pytest.fixture
def traced_harness(
    spans: InMemorySpanExporter, database_url: str, receiver: Receiver
) -> Callable[..., Any]:
    """`async with traced_harness(**settings) as harness:` with traces on: its app is made
    with this case's tracer, which `spans` made this process's."""

    def build(**overrides: Any) -> Any:
        return running_harness(database_url, receiver, **overrides)

    return build
