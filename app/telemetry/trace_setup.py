"""What the two halves of tracing share (`tracing`, which decides from the environment,
and `otel`, which the SDK is loaded for): the service name spans carry, and how a
configuration that this installation cannot serve is refused."""

from __future__ import annotations

from app.settings.errors import UsageError

# The name spans carry unless OTEL_SERVICE_NAME says otherwise.
SERVICE_NAME = "chronoq"

MISSING = (
    "traces are configured (OTEL_TRACES_EXPORTER or OTEL_EXPORTER_OTLP_*ENDPOINT) but "
    "OpenTelemetry is not installed: pip install 'chronoq[otel]'"
)


class TracingError(UsageError):
    """Traces are configured in a way this installation cannot serve (`chronoq` exits 2)."""
