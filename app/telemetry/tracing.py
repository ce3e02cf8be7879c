"""OpenTelemetry traces: optional, off by default, on when the operator configures them the
way the OpenTelemetry SDK reads its environment (docs/tracing.md).

This module never imports OpenTelemetry: it decides from the environment whether traces
are on, and only then loads `app.telemetry.otel`, which does. Off, the API and the delivery loop
run the code they run without tracing; what they pay is a check of `active()`'s result, made
once per claim and once per delivery. A schedule's stored `traceparent` is sent on its
deliveries either way (`Delivery.traceparent`): propagation costs nothing to turn on.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from app.domain.occurrence import Delivery, Settlement, Unsent
from app.domain.traces import valid_traceparent
from app.telemetry.trace_setup import MISSING, TracingError


class ClaimSpan(Protocol):
    """The span of one claim, open while it runs."""

    def claimed(self, deliveries: list[Delivery]) -> list[Delivery]:
        """Record what the claim leased; the deliveries as the attempts are to continue
        them (those whose schedule stored no traceparent continue the claim's trace)."""


class Tracer(Protocol):
    """What the service asks of tracing once it is on (`app.telemetry.otel.OtelTracer`)."""

    def telemetry(self) -> dict[str, Any]:
        """FastAPI's `telemetry` settings: its server span per request, on this tracer."""

    def hide(self, secrets: Iterable[str]) -> None:
        """Show `secrets` (the API keys) as *** wherever a span's query string holds one."""

    def current_traceparent(self) -> str | None:
        """The traceparent of the span current in this context (a request's server span)."""

    def claim(self, limit: int) -> AbstractContextManager[ClaimSpan]:
        """The span of one claim of up to `limit` occurrences, made when it leased
        something or failed."""

    async def attempt(
        self,
        delivery: Delivery,
        run: Callable[[Delivery], Awaitable[Settlement | Unsent]],
    ) -> Settlement | Unsent:
        """`run(delivery)` inside the attempt's span, given the delivery with that span's
        traceparent."""

    def shutdown(self) -> None:
        """Export what is left and stop; logging's record factory is the previous one."""


def configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces: OTEL_SDK_DISABLED is not true, and
    OTEL_TRACES_EXPORTER names an exporter other than `none`, or (it unset) an OTLP
    endpoint is set, for traces or for every signal."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip()
    if exporters:
        return any(name.strip() not in ("", "none") for name in exporters.split(","))
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    )


_active: Tracer | None = None


def active() -> Tracer | None:
    """This process's tracer; None while traces are off."""
    return _active


def start(environ: Mapping[str, str] = os.environ) -> Tracer | None:
    """Turn traces on in this process when the environment asks for them (once: later
    calls return the same tracer). Raises TracingError when they are asked for and cannot
    be had: OpenTelemetry missing, or an exporter no installed package provides."""
    global _active
    if _active is None and configured(environ):
        use(_load().OtelTracer.from_environment(environ))
    return _active


def check(environ: Mapping[str, str] = os.environ) -> None:
    """Refuse a configuration `start` would refuse, without starting anything (`chronoq
    serve`, before it binds the port)."""
    if configured(environ):
        _load().exporters(environ)


def use(tracer: Tracer | None) -> Tracer | None:
    """Make `tracer` this process's (None: traces off), shutting down the one before it;
    returns `tracer`. For `start`, and for tests with an in-memory exporter."""
    global _active
    previous, _active = _active, tracer
    if previous is not None and previous is not tracer:
        previous.shutdown()
    return tracer


def _load() -> Any:
    try:
        from app.telemetry import otel
    except ImportError:
        raise TracingError(MISSING) from None
    return otel


def request_traceparent(headers: Mapping[str, str]) -> str | None:
    """The traceparent a create stores: with traces on, the request's server span's (a
    child of the request's own, or a new trace); off, the request's own when it is valid.
    Garbage is no traceparent."""
    tracer = _active
    if tracer is not None:
        return tracer.current_traceparent()
    return valid_traceparent(headers.get("traceparent"))
