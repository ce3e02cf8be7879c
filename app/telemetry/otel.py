"""Traces with the OpenTelemetry SDK: the tracer `app.telemetry.tracing` loads once traces
are on.

Imported only then (it imports the SDK): `app.telemetry.tracing` decides from the
environment, and a service with traces off never loads this module. Spans (docs/tracing.md):

- `POST /v1/schedules` and every other request: FastAPI's own server span, which joins
  the request's `traceparent` (`telemetry`);
- `chronoq claim`: one claim of the delivery loop that leased something (or failed), with
  how many occurrences it asked for and leased; it links to the traces its rows' schedules
  were created in;
- `chronoq deliver <target type>`: one delivery attempt (a client span), the child of the
  schedule's stored traceparent (so the target's own spans join the creator's trace), or
  of the claim's span when the schedule stored none. Its own context is what the sinks
  send as `traceparent`.

Log records made while a span is current carry its trace id as `record.trace_id`. A server
span's `url.query` is redacted as answers redact a URL's query and logs an API key (values
of secret-named parameters and the configured keys shown as `***`), before any exporter
sees the span.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from importlib.metadata import entry_points
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.domain.occurrence import Delivery, OccurrenceStatus, Settlement, Unsent
from app.domain.secrets import redacted_query
from app.telemetry.trace_setup import MISSING, SERVICE_NAME, TracingError

_PROPAGATOR = TraceContextTextMapPropagator()
# The context of a span that starts a trace of its own, whatever is current.
_ROOT = trace.set_span_in_context(trace.INVALID_SPAN)
# Probes and scrapes: a span each would bury the requests worth reading.
UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
_OTLP = ("otlp", "otlp_proto_http")


def traceparent(context: SpanContext) -> str:
    """`context` written as a W3C traceparent."""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def exporters(environ: Mapping[str, str]) -> list[Callable[[], SpanExporter]]:
    """What makes each exporter OTEL_TRACES_EXPORTER names (`otlp` when unset): OTLP over
    HTTP/protobuf, `console`, or one an installed package provides under the SDK's entry
    point group. Raises TracingError for a name or an OTLP protocol this cannot serve."""
    names = [
        name.strip()
        for name in (environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(",")
        if name.strip() not in ("", "none")
    ]
    made: list[Callable[[], SpanExporter]] = []
    for name in names:
        if name in _OTLP:
            protocol = (
                environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf"
            )
            if protocol != "http/protobuf":
                raise TracingError(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r}: traces are exported over "
                    "OTLP http/protobuf only"
                )
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
            except ImportError:
                raise TracingError(MISSING) from None
            made.append(OTLPSpanExporter)
        elif name == "console":
            made.append(ConsoleSpanExporter)
        else:
            found = entry_points(group="opentelemetry_traces_exporter", name=name)
            if not found:
                raise TracingError(
                    f"OTEL_TRACES_EXPORTER names {name!r}, which no installed package "
                    "provides: use otlp, console or none"
                )
            made.append(next(iter(found)).load())
    return made


def _resource() -> Resource:
    """The SDK's resource from the environment (OTEL_RESOURCE_ATTRIBUTES,
    OTEL_SERVICE_NAME), named `chronoq` when neither names the service."""
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    return resource


class _ClaimSpan:
    """One claim's span, made once the claim has leased something (or failed), from the
    instant it began: the claims of an idle loop, which lease nothing, make no span."""

    def __init__(self, tracer: trace.Tracer, limit: int) -> None:
        self._tracer = tracer
        self._limit = limit
        self._started = time.time_ns()

    def _span(self, links: list[Link], attributes: dict[str, Any]) -> Span:
        return self._tracer.start_span(
            "chronoq claim",
            context=_ROOT,  # a trace of its own: its rows are of many traces
            links=links,
            attributes={"chronoq.claim.limit": self._limit, **attributes},
            start_time=self._started,
        )

    def claimed(self, deliveries: list[Delivery]) -> list[Delivery]:
        if not deliveries:
            return deliveries
        stored = (_span_context(d.traceparent) for d in deliveries if d.traceparent is not None)
        span = self._span(
            [Link(context) for context in stored if context is not None],
            {"chronoq.claim.size": len(deliveries)},
        )
        own = traceparent(span.get_span_context())
        span.end()
        return [d if d.traceparent is not None else replace(d, traceparent=own) for d in deliveries]

    def failed(self, error: BaseException) -> None:
        span = self._span([], {})
        span.record_exception(error)
        span.set_status(StatusCode.ERROR, type(error).__name__)
        span.end()


def _span_context(value: str) -> SpanContext | None:
    context = trace.get_current_span(_PROPAGATOR.extract({"traceparent": value}))
    found = context.get_span_context()
    return found if found.is_valid else None


class _QueryRedaction(SpanProcessor):
    """Redacts a span's `url.query` as it starts: the server span FastAPI makes for each
    request holds the query string as the client sent it."""

    def __init__(self) -> None:
        self.secrets: tuple[str, ...] = ()

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        query = (span.attributes or {}).get("url.query")
        if isinstance(query, str):
            shown = redacted_query(query, self.secrets)
            if shown != query:
                span.set_attribute("url.query", shown)


class OtelTracer:
    """`app.telemetry.tracing.Tracer` on an SDK tracer provider."""

    def __init__(self, provider: TracerProvider) -> None:
        # Before any exporter's processor is called with a span that has ended.
        self._redaction = _QueryRedaction()
        provider.add_span_processor(self._redaction)
        self._provider = provider
        self._tracer = provider.get_tracer("chronoq")
        self._previous_factory = logging.getLogRecordFactory()
        logging.setLogRecordFactory(self._record)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> OtelTracer:
        """The provider the OTEL_* environment describes: its sampler and limits (the
        SDK reads them), its resource, a batch processor per exporter."""
        made = exporters(environ)
        provider = TracerProvider(resource=_resource())
        for make in made:
            provider.add_span_processor(BatchSpanProcessor(make()))
        return cls(provider)

    def _record(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self._previous_factory(*args, **kwargs)
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = f"{context.trace_id:032x}"
        return record

    def telemetry(self) -> dict[str, Any]:
        return {
            "tracer_provider": self._provider,
            "tracing": True,
            "metrics": False,  # the service has its own (/metrics)
            "logs": False,
            "operation_spans": False,
            "auto_configure": False,
            "exclude": _untraced,
        }

    def hide(self, secrets: Iterable[str]) -> None:
        self._redaction.secrets = tuple(sorted(set(secrets), key=len, reverse=True))

    def current_traceparent(self) -> str | None:
        context = trace.get_current_span().get_span_context()
        return traceparent(context) if context.is_valid else None

    @contextmanager
    def claim(self, limit: int) -> Iterator[_ClaimSpan]:
        span = _ClaimSpan(self._tracer, limit)
        try:
            yield span
        except Exception as error:
            span.failed(error)
            raise

    async def attempt(
        self,
        delivery: Delivery,
        run: Callable[[Delivery], Awaitable[Settlement | Unsent]],
    ) -> Settlement | Unsent:
        parent = (
            _PROPAGATOR.extract({"traceparent": delivery.traceparent})
            if delivery.traceparent is not None
            else _ROOT
        )
        target_type = delivery.target.type
        with self._tracer.start_as_current_span(
            f"chronoq deliver {target_type}",
            context=parent,
            kind=SpanKind.CLIENT,
            attributes={
                "chronoq.occurrence.id": str(delivery.occurrence_id),
                "chronoq.schedule.id": str(delivery.schedule_id),
                "chronoq.attempt": delivery.attempt,
                "chronoq.target.type": target_type,
            },
        ) as span:
            done = await run(replace(delivery, traceparent=traceparent(span.get_span_context())))
            _outcome(span, done)
            return done

    def shutdown(self) -> None:
        if logging.getLogRecordFactory() == self._record:
            logging.setLogRecordFactory(self._previous_factory)
        self._provider.shutdown()


def _outcome(span: Span, done: Settlement | Unsent) -> None:
    if isinstance(done, Unsent):
        span.set_attribute("chronoq.outcome", "unsent")
        span.set_status(StatusCode.ERROR, "not sent: this replica ran short")
        return
    span.set_attribute("chronoq.outcome", done.outcome.value)
    if done.status_code is not None:
        span.set_attribute("http.response.status_code", done.status_code)
    if done.status is not OccurrenceStatus.DELIVERED:
        span.set_attribute("error.type", done.reason or "other")
        span.set_status(StatusCode.ERROR, done.reason or "other")


def _untraced(scope: Any) -> bool:
    return scope.get("path") in UNTRACED_PATHS
